"""Terminology constraints and forced target prefixes for the beam search.

Lexically constrained decoding with dynamic beam allocation (DBA; Post &
Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam
Allocation", as in Sockeye): each sentence may name phrases (token ids) that
must appear contiguously in its output, in any order, and a prefix its
output must start with.

The search runs on the host in NumPy (`decoding.numpy_search`'s helpers, the
same float32 arithmetic as `decoding.search`) over a step callable

    step(tokens (N, 1) int32, step: int, state) -> (logits (N, V), state)
    reorder(state, rows (N,) int) -> state

with N = B * k rows, fixed for the whole search: every sentence keeps its k
rows (a done sentence's rows idle), so one compiled program runs each step.

Each hypothesis carries its constraint progress (`PhraseTracker`): the
phrases it has met, and the longest end of its output that starts an unmet
phrase. A phrase left midway loses its progress, but the token that broke it
may start (or continue) another, so "a a b" still meets the phrase "a b".

One step of a sentence, from its k live hypotheses:

1. Candidates: the 2k best extensions by total log-probability (as
   `decoding.search`), then for each live hypothesis every token that
   would start or continue one of its unmet phrases, and its own best
   token. EOS is only a candidate of a hypothesis that met every phrase.
   While the prefix lasts (step t < len(prefix)) the prefix token is the
   only candidate.
2. Banks: a candidate's bank is the number of constraint tokens its
   hypothesis has met (0 ... C). The k slots are split evenly over the
   C + 1 banks, the remainder to the top bank; a bank with fewer
   candidates than slots passes the rest down (Sockeye's rule), and any
   slot still empty takes the best candidate left. Each bank keeps its
   best candidates.
3. The banked selection over all candidates picks which ended candidates
   finish (EOS, or the output limit), as `decoding.search` finishes only an
   EOS ranked among the top k; the selection over the candidates that did
   not end gives the next k live hypotheses.

With no constraint and no prefix there is one bank and the extra candidates
rank below the 2k best, so every step is `decoding.search`'s: the same
outputs and scores as `SequenceGenerator`'s beam search. Beam size 1 is
greedy search as there: a sentence stops at its first finished hypothesis.

Why DBA and not grid beam search (Hokamp & Liu 2017): a grid keeps a whole
beam per number of constraint tokens met, k * (C + 1) hypotheses a step,
so its cost grows with the constraints. DBA keeps k hypotheses in all and
only moves their slots between banks: the cost stays k rows per step (one
compiled shape, B * k rows), however many phrases a sentence has.

Finished hypotheses join a pool of k (score log P / lp(|Y|), the GNMT
penalty, as `decoding.search`) and a sentence stops when no live hypothesis
can still beat its worst finished one, or at its limit (real source length +
max_extra_length). A sentence whose constraints cannot be met by then (its
phrases and prefix are longer than the limit, or no hypothesis met them in
time) is reported, not raised: its result is the hypothesis that met the
most constraint tokens, then scored best, with `satisfied=False` and the
phrases it left unmet. Other sentences of the batch are not affected.

The files of constraints and prefixes are `decoding.constraint_files`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from keras import ops, tree

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.decoding.compile import compile_function
from keras_transformer.decoding.numpy_search import (
    ALWAYS_SUPPRESSED,
    NEG_INF,
    length_penalty,
    log_softmax,
    output_limits,
    suppress,
    top_k,
)
from keras_transformer.decoding.settings import SearchSettings, search_settings

StepFn = Callable[[np.ndarray, int, Any], tuple[np.ndarray, Any]]
ReorderFn = Callable[[Any, np.ndarray], Any]

# A live slot with no hypothesis: below every real one (as decoding.search's
# ended candidates), so it never wins a slot against a real candidate.
_DEAD = np.float32(2) * NEG_INF
# Hypotheses whose score is below this descend from a dead slot.
_REAL = NEG_INF / 2


@dataclasses.dataclass(frozen=True)
class ConstrainedResult:
    """The output of one sentence.

    Attributes:
        ids: (T,) int32 output tokens, up to and including EOS (no EOS when
            the output ran to its limit).
        score: log P(ids) / lp(T), the GNMT-normalised score the search
            ranks by (as `decoding.search`'s beam scores).
        satisfied: every phrase appears in `ids` and `ids` starts with the
            whole prefix.
        unmet: the indices of the phrases that do not appear in `ids`.
        prefix_complete: `ids` starts with the whole prefix (False when the
            prefix is longer than the output limit).
    """

    ids: np.ndarray
    score: float
    satisfied: bool
    unmet: list[int]
    prefix_complete: bool = True


class Progress(NamedTuple):
    """A hypothesis's constraint progress: `met`, a bit per phrase met, and
    `tail`, the longest end of the output that is a proper start of a
    phrase not met yet."""

    met: int
    tail: tuple[int, ...]


class PhraseTracker:
    """The constraint phrases of one sentence and how a hypothesis meets
    them, token by token (Aho-Corasick over the unmet phrases: a phrase is
    found wherever it ends, even when a broken one overlaps its start)."""

    def __init__(self, phrases: Sequence[Sequence[int]]):
        self.phrases = tuple(tuple(int(t) for t in phrase) for phrase in phrases)
        self.all_met = (1 << len(self.phrases)) - 1
        self.total = sum(len(phrase) for phrase in self.phrases)
        self._advanced: dict[tuple[Progress, int], Progress] = {}
        self.start = Progress(0, ())

    def _unmet(self, met: int) -> list[tuple[int, ...]]:
        return [p for i, p in enumerate(self.phrases) if not met >> i & 1]

    def advance(self, progress: Progress, token: int) -> Progress:
        """The progress after `token` (memoised: beams share states)."""
        key = (progress, token)
        if key not in self._advanced:
            self._advanced[key] = self._advance(progress, token)
        return self._advanced[key]

    def _advance(self, progress: Progress, token: int) -> Progress:
        # Every unmet phrase's start that ends the output is within `tail`
        # (the longest), so `tail` + token is all the output that matters.
        text = (*progress.tail, token)
        met = progress.met
        for i, phrase in enumerate(self.phrases):
            if not met >> i & 1 and text[len(text) - len(phrase) :] == phrase:
                met |= 1 << i
        unmet = self._unmet(met)
        for size in range(len(text), 0, -1):
            tail = text[len(text) - size :]
            if any(len(p) > size and p[:size] == tail for p in unmet):
                return Progress(met, tail)
        return Progress(met, ())

    def next_tokens(self, progress: Progress) -> set[int]:
        """The tokens that would start or continue an unmet phrase."""
        tail = progress.tail
        tokens = set()
        for phrase in self._unmet(progress.met):
            for size in range(min(len(tail), len(phrase) - 1) + 1):
                if tail[len(tail) - size :] == phrase[:size]:
                    tokens.add(phrase[size])
        return tokens

    def tokens_met(self, progress: Progress) -> int:
        """The DBA bank: tokens of met phrases, plus the started one's."""
        done = sum(len(p) for i, p in enumerate(self.phrases) if progress.met >> i & 1)
        return done + len(progress.tail)

    def is_met(self, progress: Progress) -> bool:
        return progress.met == self.all_met

    def unmet(self, progress: Progress) -> list[int]:
        return [i for i in range(len(self.phrases)) if not progress.met >> i & 1]


def bank_sizes(num_banks: int, beam_size: int, counts: Sequence[int]) -> list[int]:
    """Slots per bank (Sockeye's `get_bank_sizes`): k split evenly, the
    remainder to the top bank, then, from the top down, what a bank cannot
    fill (fewer candidates than slots) passes to the bank below (bank 0's to
    the top: with C >= k most banks start with no slot)."""
    size = beam_size // num_banks
    sizes = [size] * num_banks
    sizes[-1] += beam_size - size * num_banks
    for bank in reversed(range(num_banks)):
        overfill = sizes[bank] - counts[bank]
        if overfill > 0:
            sizes[bank] -= overfill
            sizes[(bank - 1) % num_banks] += overfill
    return sizes


def allocate(banks: Sequence[int], num_banks: int, beam_size: int) -> list[int]:
    """Indices of the candidates (given best first, by bank) that win the
    k slots, best first: each bank's best up to its size (`bank_sizes`),
    then the best left for any slot still empty."""
    counts = np.bincount(np.asarray(banks, np.int64), minlength=num_banks)
    sizes = bank_sizes(num_banks, beam_size, counts.tolist())
    chosen, left = [], []
    for index, bank in enumerate(banks):
        if sizes[bank] > 0:
            sizes[bank] -= 1
            chosen.append(index)
        else:
            left.append(index)
    chosen += left[: max(beam_size - len(chosen), 0)]
    return sorted(chosen)


class _Candidate(NamedTuple):
    score: np.float32  # Total log-probability.
    beam: int
    token: int
    progress: Progress


class _Finished(NamedTuple):
    score: np.float32  # Normalised: log P / lp(length).
    ids: np.ndarray
    progress: Progress


class _SentenceSearch:
    """The beam of one sentence: k live hypotheses, the pool of finished
    ones that met every constraint, and the best one that did not."""

    def __init__(self, phrases, prefix, limit: int, k: int, settings: dict):
        self.tracker = PhraseTracker(phrases)
        self.prefix = tuple(int(t) for t in prefix)
        self.limit, self.k = int(limit), k
        self.alpha = settings["alpha"]
        self.eos_id = settings["eos_id"]
        self.early_stopping = settings["early_stopping"] or k == 1
        # Only beam 0 is live at first: the k copies of BOS are one prefix.
        self.scores = np.array([0.0] + [NEG_INF] * (k - 1), np.float32)
        self.ids = np.zeros((k, 0), np.int32)
        self.progress = [self.tracker.start] * k
        self.pool: list[_Finished] = []
        self.partial: tuple | None = None  # (rank key, _Finished)
        self.done = False

    def step(self, log_probs: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Advance by one token: (k, V) log-probs of the live beams ->
        the beam each new live hypothesis grew from, and its token."""
        candidates = self._candidates(log_probs, step)
        at_limit = step + 1 >= self.limit
        ends = [at_limit or c.token == self.eos_id for c in candidates]
        banks = [self.tracker.tokens_met(c.progress) for c in candidates]
        num_banks = self.tracker.total + 1
        finishing = allocate(banks, num_banks, self.k)
        self._finish([candidates[i] for i in finishing if ends[i]], step)
        if at_limit:
            self._keep_partial([c for c, end in zip(candidates, ends) if end], step)
        going = [i for i, end in enumerate(ends) if not end]
        live = allocate([banks[i] for i in going], num_banks, self.k)
        beams, tokens = self._advance([candidates[going[i]] for i in live])
        self.done = at_limit or not self._active()
        return beams, tokens

    def _candidates(self, log_probs: np.ndarray, step: int) -> list[_Candidate]:
        totals = self.scores[:, None] + log_probs  # float32, as decoding.search
        real = np.flatnonzero(self.scores > _REAL)
        if step < len(self.prefix):  # Forced: the prefix token alone.
            return self._make(totals, [(b, self.prefix[step]) for b in real])
        for beam in range(self.k):  # EOS only once every phrase is met.
            if not self.tracker.is_met(self.progress[beam]):
                totals[beam, self.eos_id] = -np.inf
        _, flat = top_k(totals.reshape(1, -1), 2 * self.k)
        vocab_size = totals.shape[1]
        pairs = [(int(i) // vocab_size, int(i) % vocab_size) for i in flat[0]]
        for beam in real:
            extra = self.tracker.next_tokens(self.progress[beam])
            pairs += [(beam, t) for t in sorted(extra)]
            pairs.append((beam, int(np.argmax(totals[beam]))))
        pairs = [p for p in dict.fromkeys(pairs) if np.isfinite(totals[p])]
        candidates = self._make(totals, pairs)
        # Stable: the 2k best keep decoding.search's order (ties included).
        return sorted(candidates, key=lambda c: -c.score)

    def _make(self, totals, pairs) -> list[_Candidate]:
        advance = self.tracker.advance
        return [
            _Candidate(totals[b, t], int(b), int(t), advance(self.progress[b], t))
            for b, t in pairs
        ]

    def _ids(self, candidate: _Candidate) -> np.ndarray:
        return np.append(self.ids[candidate.beam], np.int32(candidate.token))

    def _normalised(self, candidate: _Candidate, step: int) -> _Finished:
        score = candidate.score / length_penalty(step + 1, self.alpha)
        return _Finished(np.float32(score), self._ids(candidate), candidate.progress)

    def _satisfied(self, candidate: _Candidate, step: int) -> bool:
        complete = step + 1 >= len(self.prefix)
        return complete and self.tracker.is_met(candidate.progress)

    def _finish(self, ended: list[_Candidate], step: int) -> None:
        """Merge the finishing candidates that met everything into the pool
        (the best k stay; on equal scores the older entry first)."""
        new = [
            self._normalised(c, step)
            for c in ended
            if c.score > _REAL and self._satisfied(c, step)
        ]
        merged = sorted([*self.pool, *new], key=lambda f: -f.score)
        self.pool = merged[: self.k]

    def _keep_partial(self, ended: list[_Candidate], step: int) -> None:
        """At the limit: the best unsatisfied output, for the report (most
        constraint tokens met, then score)."""
        for candidate in ended:
            if candidate.score <= _REAL or self._satisfied(candidate, step):
                continue
            finished = self._normalised(candidate, step)
            key = (self.tracker.tokens_met(candidate.progress), finished.score)
            if self.partial is None or key > self.partial[0]:
                self.partial = (key, finished)

    def _advance(self, live: list[_Candidate]) -> tuple[np.ndarray, np.ndarray]:
        """The new live hypotheses; empty slots (too few candidates) become
        dead copies of beam 0."""
        dead = self.k - len(live)
        beams = np.array([c.beam for c in live] + [0] * dead, np.int64)
        tokens = np.array([c.token for c in live] + [PAD_ID] * dead, np.int32)
        scores = [c.score for c in live] + [_DEAD] * dead
        self.ids = np.concatenate([self.ids[beams], tokens[:, None]], axis=1)
        self.scores = np.array(scores, np.float32)
        start = self.tracker.start
        self.progress = [c.progress for c in live] + [start] * dead
        return beams, tokens

    def _active(self) -> bool:
        """`decoding.search.beam_active`: the best live hypothesis can still
        beat the worst finished one (or, early stopping, the pool is not
        full). The live scores are sorted, best first."""
        full = len(self.pool) == self.k
        if self.early_stopping and full:
            return False
        best_alive = self.scores[0] / length_penalty(self.limit, self.alpha)
        worst_finished = self.pool[-1].score if full else NEG_INF
        return bool(best_alive > worst_finished)

    def result(self) -> ConstrainedResult:
        if self.pool:
            best = self.pool[0]
            return ConstrainedResult(best.ids, float(best.score), True, [])
        _, best = self.partial
        return ConstrainedResult(
            best.ids,
            float(best.score),
            False,
            self.tracker.unmet(best.progress),
            prefix_complete=len(best.ids) >= len(self.prefix),
        )


def check_requests(
    constraints: Sequence | None,
    prefixes: Sequence | None,
    batch_size: int,
    suppressed_ids: Sequence[int],
    eos_id: int = EOS_ID,
) -> tuple[list, list]:
    """The constraints and prefixes of a batch (None: none), checked: one
    entry per sentence, no empty phrase, no id the search never generates
    (PAD, BOS, EOS, the suppressed ones) or below 0. Raises ValueError
    naming the sentence and phrase."""
    constraints = [[]] * batch_size if constraints is None else list(constraints)
    prefixes = [[]] * batch_size if prefixes is None else list(prefixes)
    for name, values in (("constraints", constraints), ("prefixes", prefixes)):
        if len(values) != batch_size:
            raise ValueError(
                f"{name} has {len(values)} entries for {batch_size} sentences: "
                "give one per sentence (an empty list for none)."
            )
    never = {PAD_ID, BOS_ID, eos_id, *suppressed_ids}
    for row, (phrases, prefix) in enumerate(zip(constraints, prefixes)):
        for index, phrase in enumerate(phrases):
            _check_ids(phrase, never, f"sentence {row}, phrase {index}")
        if len(prefix):
            _check_ids(prefix, never, f"sentence {row}, prefix")
    return constraints, prefixes


def _check_ids(ids: Sequence[int], never: set[int], what: str) -> None:
    if not len(ids):
        raise ValueError(f"{what} is empty: a phrase needs at least one token.")
    bad = sorted({int(i) for i in ids if int(i) in never or int(i) < 0})
    if bad:
        raise ValueError(
            f"{what} holds ids {bad} that the search never generates (PAD, BOS, "
            f"EOS, suppressed or negative ids {sorted(never)}). Received: "
            f"{[int(i) for i in ids]}"
        )


def constrained_search(
    step: StepFn,
    reorder: ReorderFn,
    state: Any,
    limits: np.ndarray,
    *,
    constraints: Sequence[Sequence[Sequence[int]]] | None = None,
    prefixes: Sequence[Sequence[int]] | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    early_stopping: bool = False,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[ConstrainedResult]:
    """Lexically constrained beam search with DBA (see the module docstring).

    Args:
        step: the step callable; `state` has N = B * k rows, beam-major
            within each sentence.
        reorder: `reorder(state, rows)`: row i of the new state is row
            `rows[i]` of the old one (N rows each).
        limits: (B,) int maximum output length of each sentence.
        constraints: per sentence, its phrases (lists of token ids).
        prefixes: per sentence, the ids its output must start with.
        beam_size: k; 1 is greedy search (stop at the first finished).
        alpha: GNMT length-penalty exponent.
        early_stopping: stop a sentence once it has k finished hypotheses.
        suppressed_ids: ids never generated (PAD and BOS; UNK unless allowed).

    Returns:
        One `ConstrainedResult` per sentence.

    Raises:
        ValueError: for malformed constraints or prefixes (`check_requests`,
            or an id outside the vocabulary); never for unsatisfiable ones.
    """
    limits = np.asarray(limits, np.int32)
    k, batch_size = beam_size, len(limits)
    constraints, prefixes = check_requests(
        constraints, prefixes, batch_size, suppressed_ids, eos_id
    )
    settings = {"alpha": alpha, "eos_id": eos_id, "early_stopping": early_stopping}
    sentences = [
        _SentenceSearch(phrases, prefix, limit, k, settings)
        for phrases, prefix, limit in zip(constraints, prefixes, limits)
    ]
    tokens = np.full((batch_size * k, 1), bos_id, np.int32)
    for t in range(int(limits.max(initial=0))):
        logits, state = step(tokens, t, state)
        log_probs = suppress(log_softmax(logits), suppressed_ids)
        if t == 0:
            _check_vocabulary(constraints, prefixes, log_probs.shape[-1])
        rows, tokens = _step_sentences(sentences, log_probs, t, k)
        if all(s.done for s in sentences):
            break
        state = reorder(state, rows)
    return [s.result() for s in sentences]


def _step_sentences(sentences, log_probs, step: int, k: int):
    """Step every sentence still searching; a done sentence's rows stay
    where they are and are fed PAD."""
    rows = np.arange(len(sentences) * k)
    tokens = np.full((len(sentences) * k, 1), PAD_ID, np.int32)
    for index, sentence in enumerate(sentences):
        if sentence.done:
            continue
        own = slice(index * k, index * k + k)
        beams, new = sentence.step(log_probs[own], step)
        rows[own], tokens[own, 0] = index * k + beams, new
    return rows, tokens


def _check_vocabulary(constraints, prefixes, vocab_size: int) -> None:
    for row, (phrases, prefix) in enumerate(zip(constraints, prefixes)):
        for ids in [*phrases, prefix]:
            if len(ids) and max(int(i) for i in ids) >= vocab_size:
                raise ValueError(
                    f"Sentence {row}: constraint or prefix ids {list(ids)} go "
                    f"past the vocabulary of {vocab_size} ids."
                )


class _Cache(NamedTuple):
    """The KV caches on the device, and the row order they wait for: the
    reordering runs inside the next compiled step, not as a call of its own."""

    values: Any
    rows: np.ndarray


class ConstrainedGenerator:
    """Constrained beam search (`constrained_search`) bound to a model.

    Encodes a batch once, builds KV caches as long as the output limit
    (source length + max_extra_length), and runs the model's `decode_step`
    compiled by `compile_function`: one program per batch shape for the
    start, one for every step (B * k rows and the cache length never
    change during a search).

    Args:
        model: a `Transformer`, or any object with its decoding interface
            (`encode`, `cross_key_values`, `init_decode_cache`,
            `decode_step`, `variables`), such as an ensemble.
        settings: the `SearchSettings` (beam size, alpha, limit, UNK, early
            stopping). Defaults to the paper's.
        jit: compile the start and the step. Defaults to True.
        **changes: `SearchSettings` fields to change (`beam_size=1`).
    """

    def __init__(
        self,
        model,
        settings: SearchSettings | None = None,
        *,
        jit: bool = True,
        **changes,
    ):
        settings = search_settings(settings, **changes)
        config = getattr(model, "config", None)
        if config is not None:  # The output side's vocabulary.
            settings.check_vocabulary(config.target_vocab_size or config.vocab_size)
        self.model = model
        self.settings = settings
        self.suppressed_ids = ALWAYS_SUPPRESSED + (
            () if settings.allow_unk else (UNK_ID,)
        )
        compile_ = (lambda fn: compile_function(fn, model)) if jit else (lambda f: f)
        self._start = compile_(self._start_fn)
        self._step = compile_(self._step_fn)

    def _start_fn(self, source_ids):
        """(B, S) ids -> cross-attention keys/values (B rows), empty caches
        (B * k rows, S + max_extra_length positions), source ids per row."""
        k = self.settings.beam_size
        batch_size, source_length = ops.shape(source_ids)
        memory = self.model.encode(source_ids)
        cross_key_values = self.model.cross_key_values(memory)
        cache = self.model.init_decode_cache(
            batch_size * k, source_length + self.settings.max_extra_length
        )
        rows = ops.repeat(source_ids, k, axis=0) if k > 1 else source_ids
        return cross_key_values, cache, rows

    def _step_fn(self, tokens, step, cache, rows, cross_key_values, source_rows):
        cache = tree.map_structure(lambda t: ops.take(t, rows, axis=0), cache)
        logits, cache = self.model.decode_step(
            tokens,
            step,
            cache,
            cross_key_values,
            source_rows,
            self.settings.beam_size,
        )
        return logits[:, -1], cache

    def warm_up(self, source_ids: np.ndarray) -> None:
        """Compile the start and the step for batches shaped as (B, S)
        `source_ids`, without searching (a server, before it is ready)."""
        source_ids = np.asarray(source_ids, np.int32)
        rows = len(source_ids) * self.settings.beam_size
        cross_key_values, cache, source_rows = self._start(
            ops.convert_to_tensor(source_ids)
        )
        logits, _ = self._step(
            ops.convert_to_tensor(np.full((rows, 1), BOS_ID, np.int32)),
            ops.convert_to_tensor(np.int32(0)),
            cache,
            ops.convert_to_tensor(np.arange(rows, dtype=np.int32)),
            cross_key_values,
            source_rows,
        )
        ops.convert_to_numpy(logits)  # Run to the end.

    def __call__(
        self,
        source_ids: np.ndarray,
        constraints: Sequence[Sequence[Sequence[int]]] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[ConstrainedResult]:
        """One `ConstrainedResult` per row of (B, S) int32 `source_ids`
        (pad 0), with per sentence its phrases and its prefix (None or an
        empty list: none)."""
        source_ids = np.asarray(source_ids, np.int32)
        settings = self.settings
        k = settings.beam_size
        cross_key_values, cache, source_rows = self._start(
            ops.convert_to_tensor(source_ids)
        )

        def step(tokens, t, state: _Cache):
            logits, values = self._step(
                ops.convert_to_tensor(tokens),
                ops.convert_to_tensor(np.int32(t)),
                state.values,
                ops.convert_to_tensor(state.rows.astype(np.int32)),
                cross_key_values,
                source_rows,
            )
            rows = np.arange(len(state.rows))
            return ops.convert_to_numpy(logits), _Cache(values, rows)

        def reorder(state: _Cache, rows: np.ndarray) -> _Cache:
            return _Cache(state.values, state.rows[rows])

        return constrained_search(
            step,
            reorder,
            _Cache(cache, np.arange(len(source_ids) * k)),
            output_limits(source_ids, settings.max_extra_length),
            constraints=constraints,
            prefixes=prefixes,
            beam_size=k,
            alpha=settings.alpha,
            early_stopping=settings.early_stopping,
            suppressed_ids=self.suppressed_ids,
        )
