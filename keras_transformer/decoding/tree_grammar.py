"""A search that can only write trees: the parsing task's step mask.

A parsing model writes a linearized tree (`parsing.linearize`): ``(X``
opens a phrase, ``)X`` closes it, any other atom is a part-of-speech tag
over the next word, and with the words in the targets each tag is followed
by a copy of its word. `TreeGrammar` masks, at every step of greedy, sampled
or beam search, each token that cannot lead to a tree over exactly the
sentence's n words (Vinyals et al. 2015 repaired such outputs afterwards;
here they cannot be written):

- ``(X`` only while words remain, inside the root once it is open (one
  root), and only if the length limit still leaves room for the rest;
- ``)X`` only for the innermost open phrase, X its own label, once it has
  a child; the root only when every word has its tag;
- a tag only inside the root and while words remain (never ``<unk>`` or
  another junk token, which `delinearize` would drop);
- after a tag, with the words, only that word's id (the source's, so an
  unknown word's ``<unk>``);
- EOS only once the root is closed over all n words;
- with given tags (a tagged sentence, or the treebank's own tags to parse
  as its oracle-tag baselines do), at word k only its tag.

"Room" counts what the tree still needs: a tag (and copy) per word left, a
close per open phrase, the root's two brackets if not yet written, and EOS.
A row for which no token is allowed (a length limit too short for its
sentence) decodes unmasked, and `delinearize` repairs it as before.

The masked tokens get the suppressed ids' score (`search.SUPPRESSED`), so
the search ranks the allowed ones by the model's probabilities renormalised
over them. The grammar's state (n, tags written, the stack of open labels,
...) rides in the search's step state, so beams reorder it and finished rows
leave with it like the key/value caches; everything is `keras.ops`, inside
the compiled loop, on every backend.

Legend: N rows (batch x beams), S source length, V vocabulary, D the
deepest nesting allowed (`max_depth`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from keras import ops

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.decoding.search import SUPPRESSED
from keras_transformer.parsing.linearize import token_role

_RESERVED = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
# Deeper than any Penn Treebank sentence (whose deepest is about 30).
MAX_DEPTH = 64


class TreeGrammar:
    """The step mask of a linearized-tree target vocabulary.

    Args:
        vocabulary: the target tokens by id (a `words` tokenizer's
            `target_vocabulary`; the first four are the reserved ones).
        with_words: the targets hold each tag's word after it
            (``--linearization tags+words``).
        max_depth: D, the deepest nesting of phrases allowed.
    """

    def __init__(
        self,
        vocabulary: Sequence[str],
        *,
        with_words: bool = False,
        max_depth: int = MAX_DEPTH,
    ):
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be an int >= 1. Received: {max_depth!r}")
        self.with_words = with_words
        self.max_depth = max_depth
        labels: dict[str, int] = {}
        size = len(vocabulary)
        self._opens = np.full(size, -1, np.int32)  # label index of "(X", else -1
        self._closes = np.full(size, -1, np.int32)  # label index of ")X", else -1
        self._tags = np.zeros(size, bool)
        self._tag_ids: dict[str, int] = {}
        for token_id, token in enumerate(vocabulary):
            if token_id in _RESERVED:
                continue  # Never a bracket or a tag (EOS is allowed apart).
            role, label = token_role(token)
            if role in ("open", "close"):
                table = self._opens if role == "open" else self._closes
                table[token_id] = labels.setdefault(label, len(labels))
            elif role == "tag":
                self._tags[token_id] = True
                self._tag_ids[token] = token_id
        if not (self._opens >= 0).any() or not self._tags.any():
            raise ValueError(
                "The vocabulary holds no phrase bracket ('(X') or no tag: it is "
                "not a parsing model's (train with --task parsing)."
            )

    @classmethod
    def for_tokenizer(cls, tokenizer, *, with_words: bool = False) -> TreeGrammar:
        """The grammar of a parsing run's tokenizer (the `words` kind)."""
        vocabulary = getattr(tokenizer, "target_vocabulary", None)
        if getattr(tokenizer, "kind", None) != "words" or vocabulary is None:
            raise ValueError(
                "Tree constraints need the parsing task's word-level tokenizer "
                f"(one id per tree symbol); this model's is "
                f"{getattr(tokenizer, 'kind', type(tokenizer).__name__)!r}. "
                "Pass --no-tree-constraints."
            )
        return cls(vocabulary, with_words=with_words)

    def given_tag_ids(self, tags: Sequence[str | None], where: str) -> list[int]:
        """The target ids of a sentence's given tags, -1 for None (any tag).
        A tag the vocabulary does not hold is refused, naming `where` (the
        sentence) and the word."""
        ids = []
        for number, tag in enumerate(tags, start=1):
            if tag is None:
                ids.append(-1)
            elif tag in self._tag_ids:
                ids.append(self._tag_ids[tag])
            else:
                raise ValueError(
                    f"{where}, word {number}: the tag {tag!r} is not in the "
                    "model's vocabulary (it never saw it in training), so the "
                    "search cannot write it."
                )
        return ids

    def start(self, source_ids, limits, given_tags=None):
        """The state before the first step: source_ids (N, S) (pad 0),
        limits (N,) each row's output length limit, given_tags (N, S) the
        target id of each word's tag, -1 where any tag may go (or None: any
        tag everywhere). A dict of tensors whose leading axis is N."""
        rows = ops.shape(source_ids)[0]
        zeros = ops.zeros((rows,), "int32")
        given = {} if given_tags is None else {"given": ops.cast(given_tags, "int32")}
        return {
            **given,
            "words": ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), 1),
            "limits": ops.cast(limits, "int32"),
            "tags": zeros,
            "depth": zeros,
            "labels": ops.zeros((rows, self.max_depth), "int32"),
            "filled": ops.zeros((rows, self.max_depth), "bool"),
            "rooted": ops.zeros((rows,), "bool"),
            "pending": ops.zeros((rows,), "bool"),
        }

    def wrap(self, step_fn, source_ids):
        """`step_fn` with the mask: its state becomes {"model": the model's
        state, "grammar": `start`'s}; source_ids (N, S) give the copies."""

        def constrained(tokens, step, state):
            # The first step's input is BOS, which changes nothing.
            grammar = self.update(state["grammar"], tokens[:, 0])
            logits, model_state = step_fn(tokens, step, state["model"])
            logits = self.mask(grammar, logits, step, source_ids)
            return logits, {"model": model_state, "grammar": grammar}

        return constrained

    def update(self, state, tokens):
        """The state after each row wrote `tokens` (N,); PAD, EOS and BOS
        (a finished row's filler, the first step's input) change nothing."""
        opens = ops.take(ops.convert_to_tensor(self._opens), tokens)
        closes = ops.take(ops.convert_to_tensor(self._closes), tokens)
        tags = ops.take(ops.convert_to_tensor(self._tags), tokens)
        copy = state["pending"]
        is_open = ops.logical_and(opens >= 0, ops.logical_not(copy))
        is_close = ops.logical_and(closes >= 0, ops.logical_not(copy))
        is_tag = ops.logical_and(tags, ops.logical_not(copy))
        depth = state["depth"]
        levels = ops.arange(self.max_depth, dtype="int32")[None, :]
        here = ops.equal(levels, depth[:, None])  # (N, D): the level an open fills
        parent = ops.equal(levels, depth[:, None] - 1)  # its parent's level
        opening = ops.logical_and(here, is_open[:, None])
        child = ops.logical_and(parent, ops.logical_or(is_open, is_tag)[:, None])
        filled = ops.logical_and(state["filled"], ops.logical_not(opening))
        one = ops.ones_like(depth)
        return {
            **state,
            "tags": state["tags"] + ops.where(is_tag, one, 0),
            "depth": depth + ops.where(is_open, one, 0) - ops.where(is_close, one, 0),
            "labels": ops.where(opening, opens[:, None], state["labels"]),
            "filled": ops.logical_or(filled, child),
            "rooted": ops.logical_or(state["rooted"], is_open),
            "pending": ops.logical_and(is_tag, self.with_words),
        }

    def needed(self, tags, depth, rooted, pending, words):
        """Tokens still to write, EOS included, to finish a tree from a
        state: a tag (and copy) per word left, a close per open phrase, the
        root's two brackets if it is not open yet. (N,) int32."""
        per_word = 2 if self.with_words else 1
        return (
            per_word * (words - tags)
            + ops.cast(pending, "int32")
            + depth
            + ops.where(rooted, 0, 2)
            + 1
        )

    def allowed(self, state, step, source_ids):
        """(N, V) bool: the tokens each row may write at step `step`."""
        words, tags, depth = state["words"], state["tags"], state["depth"]
        rooted, pending = state["rooted"], state["pending"]
        free = ops.logical_not(pending)
        room = state["limits"] - step - 1  # positions after this one
        left = words > tags
        inside = depth > 0

        def fits(tags_after, depth_after, rooted_after, pending_after):
            needed = self.needed(
                tags_after, depth_after, rooted_after, pending_after, words
            )
            return needed <= room

        one_root = ops.logical_or(inside, ops.logical_not(rooted))
        open_ok = _all(free, left, depth < self.max_depth, one_root)
        open_ok = ops.logical_and(open_ok, fits(tags, depth + 1, True, False))
        tag_fits = fits(tags + 1, depth, rooted, self.with_words)
        tag_ok = _all(free, left, inside, tag_fits)
        levels = ops.arange(self.max_depth, dtype="int32")[None, :]
        innermost = ops.equal(levels, depth[:, None] - 1)
        label = ops.sum(ops.where(innermost, state["labels"], 0), axis=1)
        has_child = ops.any(ops.logical_and(innermost, state["filled"]), axis=1)
        root_last = ops.logical_or(depth > 1, ops.logical_not(left))
        close_ok = _all(free, inside, has_child, root_last)
        eos_ok = _all(free, rooted, ops.logical_not(inside), ops.logical_not(left))
        where = ops.clip(tags - 1, 0, ops.shape(source_ids)[1] - 1)
        copy_id = ops.take_along_axis(source_ids, where[:, None], axis=1)
        vocab = ops.arange(self._tags.shape[0], dtype="int32")[None, :]
        opens = ops.convert_to_tensor(self._opens)[None, :]
        closes = ops.convert_to_tensor(self._closes)[None, :]
        tags_row = ops.convert_to_tensor(self._tags)[None, :]
        if "given" in state:  # Word k's tag only, where one is given.
            given = self._given_tag(state, source_ids)
            tags_row = ops.logical_and(
                tags_row, ops.logical_or(given < 0, ops.equal(vocab, given))
            )
        return _any(
            ops.logical_and(open_ok[:, None], opens >= 0),
            _all(close_ok[:, None], closes >= 0, ops.equal(closes, label[:, None])),
            ops.logical_and(tag_ok[:, None], tags_row),
            ops.logical_and(pending[:, None], ops.equal(vocab, copy_id)),
            ops.logical_and(eos_ok[:, None], ops.equal(vocab, EOS_ID)),
        )

    def _given_tag(self, state, source_ids):
        """(N, 1) the given tag of each row's next word (-1: any)."""
        word = ops.clip(state["tags"], 0, ops.shape(source_ids)[1] - 1)[:, None]
        return ops.take_along_axis(state["given"], word, axis=1)

    def mask(self, state, logits, step, source_ids):
        """logits (N, V) with what the grammar forbids at SUPPRESSED; a row
        with nothing allowed keeps its logits (it is repaired later). A
        given tag is scored as the model's own choice would be: what the
        model thought of it stays in the hypothesis's score."""
        allowed = self.allowed(state, step, source_ids)
        logits = ops.cast(logits, "float32")
        masked = ops.where(allowed, logits, SUPPRESSED)
        stuck = ops.logical_not(ops.any(allowed, axis=1, keepdims=True))
        return ops.where(stuck, logits, masked)


def _all(*conditions):
    result = conditions[0]
    for condition in conditions[1:]:
        result = ops.logical_and(result, condition)
    return result


def _any(*conditions):
    result = conditions[0]
    for condition in conditions[1:]:
        result = ops.logical_or(result, condition)
    return result
