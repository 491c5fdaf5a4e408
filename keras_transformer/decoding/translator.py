"""`Translator`: strings in, strings out."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
from keras import ops

from keras_transformer.decoding import scoring
from keras_transformer.decoding.batching import (
    best_ids,
    detokenize,
    ladder_length,
    length_order,
    nbest_lists,
    pad_batch,
    real_hypotheses,
    strip_pad,
    unsearched,
)
from keras_transformer.decoding.generator import SequenceGenerator, padded_batch_size
from keras_transformer.decoding.sampling import SamplingSettings, uniform_numbers
from keras_transformer.decoding.settings import SearchSettings, search_settings


class Translator:
    """Tokenize, decode (greedy or beam search), detokenize, in batches.

    Sentences are sorted by length and padded to `batching.ladder_length`
    (8, 16, 32, 64, ...), and every batch has `batch_size` rows, or for a
    short last batch of a `batch_size` over 8 that divided by a power of 4
    (completed with empty rows: `generator.padded_batch_size`), so the
    compiled search sees a small fixed set of shapes.

    Args:
        model: a `Transformer`.
        tokenizer: the run's `SubwordTokenizer`.
        settings: the `SearchSettings`. Defaults to the paper's: beam 4,
            alpha 0.6, source + 50 (§6.1); UNK (shown as the tokenizer's
            unknown piece) suppressed; PAD and BOS are never generated.
        batch_size: sentences per decoding batch. Defaults to 64.
        jit: compile the search. Defaults to True.
        drop_finished: sentences that are done leave the batch as the search
            goes (see `SequenceGenerator`); the translations are the same.
            Defaults to True.
        sampling: `SamplingSettings` to draw translations at random (top-k,
            top-p) instead of searching; each text then gets
            `num_samples` samples in place of the beam's hypotheses.
            Defaults to None: the search.
        grammar: a `tree_grammar.TreeGrammar`: the search writes only
            trees over the source's words (the parsing task). Defaults to
            None.
        **changes: `SearchSettings` fields to change (`beam_size=1`).

    Examples:
        >>> translator = Translator(model, tokenizer, beam_size=1)
        >>> translator(["The dog sleeps."])
        ['Der Hund schläft.']
    """

    def __init__(
        self,
        model,
        tokenizer,
        settings: SearchSettings | None = None,
        *,
        batch_size: int = 64,
        jit: bool = True,
        drop_finished: bool = True,
        sampling: SamplingSettings | None = None,
        grammar=None,
        **changes,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"batch_size must be an int >= 1. Received: {batch_size!r}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.generator = SequenceGenerator(
            model,
            search_settings(settings, **changes),
            jit=jit,
            drop_finished=drop_finished,
            sampling=sampling,
            grammar=grammar,
        )
        # The generator's, or `resampled`'s: the seed and samples differ.
        self._sampling = self.generator.sampling
        self._alpha: float | None = None  # `with_alpha`'s; None: the generator's.
        self._alphas: dict[float, Translator] = {}  # `with_alpha`'s, kept.
        self._constrained = None  # Made on first use (`generate`).
        # Teacher-forced scores and alignments (`generate`), compiled.
        self.scorer = scoring.ForcedScorer(model, batch_size, jit=jit)

    @property
    def settings(self) -> SearchSettings:
        if self._alpha is None:
            return self.generator.settings
        return self.generator.settings.replace(alpha=self._alpha)

    @property
    def sampling(self) -> SamplingSettings | None:
        return self._sampling

    def resampled(self, seed: int | None, num_samples: int | None) -> Translator:
        """This translator drawing with another seed and number of samples,
        on the same compiled search: those two change no program (the seed
        is read on the host, the samples are rows), so a server can take
        them from each request."""
        if self._sampling is None:
            raise ValueError("resampled: this Translator does not sample.")
        other = copy.copy(self)
        other._sampling = self._sampling.replace(seed=seed, num_samples=num_samples)
        return other

    def with_alpha(self, alpha: float) -> Translator:
        """This translator with the length penalty's exponent `alpha`, on
        the same compiled search: alpha is a value the programs take, not a
        program each, so a server can allow several without compiling more
        (the constrained search, in NumPy around compiled steps, keeps one
        per alpha). Kept: the same alpha gives the same translator."""
        if alpha == self.settings.alpha:
            return self
        if alpha not in self._alphas:
            self.settings.replace(alpha=alpha)  # Checks it, as SearchSettings does.
            other = copy.copy(self)
            other._alpha, other._alphas, other._constrained = alpha, {}, None
            self._alphas[alpha] = other
        return self._alphas[alpha]

    @property
    def hypotheses_per_text(self) -> int:
        """The beam's k, or with sampling the samples per text."""
        if self.sampling is not None:
            return self.sampling.samples
        return self.settings.beam_size

    def __call__(self, texts: Sequence[str], given_tags=None) -> list[str]:
        return self.translate(texts, given_tags)

    def search(
        self, texts: Sequence[str], abandoned=None, given_tags=None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every hypothesis of the search per text, in input order: (ids
        (k, L) int32, up to and including EOS then PAD; scores (k,)
        float32), best first. A blank text gets (k, 0) ids and zero
        scores: it is not searched. `abandoned`: a callable giving a bool
        per text, read as the search goes: a text it marks True stops
        being searched (see `SequenceGenerator`), its result unfinished.
        `given_tags`: parsing, a sequence of tags (str, or None for any)
        per text, one per word, that the tree grammar makes the search
        write (`TreeGrammar.start`)."""
        texts = list(texts)
        encoded = self.tokenizer.encode(texts)
        given = self._given_tag_ids(given_tags, encoded)
        results = unsearched(len(texts), self.hypotheses_per_text)
        samples = 1 if self.sampling is None else self.sampling.samples
        # Sampling searches each text `samples` times, a row each.
        units = [(i, n) for i in length_order(texts, encoded) for n in range(samples)]
        found: dict[int, list] = {}
        for start in range(0, len(units), self.batch_size):
            chunk = units[start : start + self.batch_size]
            rows = [encoded[i] for i, _ in chunk]
            # A short last batch is completed to a size the search also
            # shrinks to, so no extra shape compiles.
            size = padded_batch_size(self.batch_size, len(rows))
            rows += [[]] * (size - len(rows))
            indices = [i for i, _ in chunk]
            gone = None if abandoned is None else _rows_of(abandoned, indices, size)
            source = pad_batch(rows, ladder_length(max(map(len, rows))))
            uniform = self._uniform(source, chunk, size)
            tags = None
            if given is not None:
                tags = np.full(source.shape, -1, np.int32)
                for row, index in enumerate(indices):
                    tags[row, : len(given[index])] = given[index]
            sequences, scores = self.generator(source, gone, uniform, self._alpha, tags)
            for row, index in enumerate(indices):
                found.setdefault(index, []).append((sequences[row], scores[row]))
        for index, parts in found.items():
            results[index] = _joined(parts)
        return results

    def _given_tag_ids(self, given_tags, encoded) -> list[list[int]] | None:
        """Each text's given tags as target ids (`search`), checked: a tag
        per word, each one the model can write."""
        if given_tags is None:
            return None
        grammar = self.generator.grammar
        if grammar is None:
            raise ValueError("Given tags need the tree grammar (a parsing search).")
        given_tags = list(given_tags)
        if len(given_tags) != len(encoded):
            raise ValueError(
                f"Given tags for {len(given_tags)} sentences; there are {len(encoded)}."
            )
        ids = []
        for number, (tags, words) in enumerate(zip(given_tags, encoded), start=1):
            if len(tags) != len(words):
                raise ValueError(
                    f"sentence {number}: {len(tags)} given tags for "
                    f"{len(words)} words; expected one tag per word."
                )
            ids.append(grammar.given_tag_ids(tags, f"sentence {number}"))
        return ids

    def _uniform(self, source: np.ndarray, chunk, size: int):
        """The numbers the batch's rows draw with (None without sampling)."""
        if self.sampling is None:
            return None
        filler = [(-1, 0)] * (size - len(chunk))
        sentences, samples = zip(*(list(chunk) + filler))
        length = source.shape[1] + self.settings.max_extra_length
        return uniform_numbers(
            self.sampling.draw_seed, list(sentences), list(samples), length
        )

    def translate_ids(self, texts: Sequence[str], given_tags=None) -> list[np.ndarray]:
        """Best output ids per text (up to and including EOS); `given_tags`
        as `search`'s."""
        return best_ids(self.search(texts, given_tags=given_tags))

    def translate(self, texts: Sequence[str], given_tags=None) -> list[str]:
        """One translation per input, in input order; "" for a blank input.
        `given_tags` as `search`'s."""
        return self._detokenize(self.translate_ids(texts, given_tags))

    def nbest(
        self, texts: Sequence[str], abandoned=None
    ) -> list[list[tuple[str, float]]]:
        """The k hypotheses of the search per text, best first, as
        (translation, score) pairs; the score is what the search ranks by
        (length-normalised log-probability in beam search, total
        log-probability in greedy search). A blank text gets [("", 0.0)];
        a sentence that finished fewer than k hypotheses lists only those."""
        return nbest_lists(self.search(texts, abandoned), self._detokenize)

    def generate(
        self,
        texts: Sequence[str],
        *,
        n_best: bool = False,
        alignment_layer: int | None = None,
        constraints: Sequence[Sequence[Sequence[int]]] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
        abandoned=None,
    ) -> list[dict]:
        """Translations with their details, one dict per text, in order:

        - "translation", "score" (what the search ranks by) and
          "normalization" (how that score is normalised);
        - "tokens" (the output's pieces, EOS included) and "token_scores"
          (the model's log-probability of each; they sum to the sentence's
          unnormalised log-probability);
        - "alignment": "i-j" pairs, source word i to target word j, 0-based
          over whitespace-separated words (`decoding.scoring`), from the
          cross-attention of `alignment_layer` (default the last);
        - with `n_best`, "n_best": every hypothesis of the search as
          {"translation", "score"}, best first;
        - with sampling and `num_samples` > 1, "samples": each sample as a
          dict of the fields above; the top-level fields are the first's.

        `constraints` (per text, phrases as token ids) and `prefixes` (per
        text, token ids) run the constrained beam search instead
        (`decoding.constraints`, scores GNMT-normalised at every beam size,
        `n_best` its best hypothesis only); each text's record then has
        "constraints": {"satisfied", "unmet"} (the unmet phrases' text, and
        "prefix" when the prefix did not fit). A text whose constraints no
        hypothesis met within the length limit gets the best one found,
        reported so, never an error. `abandoned`: as `search`'s.
        """
        texts = list(texts)
        layer = scoring.alignment_layer(
            self.model.config.num_decoder_layers, alignment_layer
        )
        guided = constraints is not None or prefixes is not None
        if guided:
            results, reports = self._guided_search(texts, constraints, prefixes)
        else:
            results, reports = self.search(texts, abandoned), None
        sources = self.tokenizer.encode(texts)
        normalization = self._normalization(guided)
        shown = self.hypotheses_per_text if self.sampling is not None else 1
        wanted = [
            (index, rank)
            for index, (ids, _) in enumerate(results)
            for rank in range(min(shown, len(ids)))
            if ids.shape[1]
        ]
        details = self._details(sources, results, wanted, layer)
        records = []
        for index, (ids, scores) in enumerate(results):
            hypotheses = [
                details.get((index, rank), _blank_details())
                | {"score": float(scores[rank]), "normalization": normalization}
                for rank in range(shown)
            ]
            record = dict(hypotheses[0])
            if n_best:
                record["n_best"] = [
                    {"translation": text, "score": score}
                    for text, score in self._hypotheses(ids, scores)
                ]
            if shown > 1:
                record["samples"] = hypotheses
            if reports is not None:
                record["constraints"] = reports[index]
            records.append(record)
        return records

    def _guided_search(self, texts, constraints, prefixes):
        """`search`'s results by the constrained beam search (its best
        hypothesis per text), and per text {"satisfied", "unmet"}."""
        if self.sampling is not None:
            raise ValueError(
                "Constraints and prefixes work with the search, not sampling: "
                "use a Translator without `sampling` for them."
            )
        for name, given in (("constraints", constraints), ("prefixes", prefixes)):
            if given is not None and len(given) != len(texts):
                raise ValueError(
                    f"{name} holds {len(given)} entries for {len(texts)} texts: "
                    "give one per text (empty for none)."
                )
        texts = list(texts)
        constraints = constraints or [[] for _ in texts]
        prefixes = prefixes or [[] for _ in texts]
        encoded = self.tokenizer.encode(texts)
        results = unsearched(len(texts), 1)
        reports = [self._report(phrases, [], False) for phrases in constraints]
        order = length_order(texts, encoded)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            size = padded_batch_size(self.batch_size, len(chunk))
            filler = [[]] * (size - len(chunk))
            rows = [encoded[i] for i in chunk] + filler
            found = self.constrained_generator()(
                pad_batch(rows, ladder_length(max(map(len, rows)))),
                [constraints[i] for i in chunk] + filler,
                [prefixes[i] for i in chunk] + filler,
            )
            for index, result in zip(chunk, found):
                ids = np.asarray(result.ids, np.int32)[None]
                results[index] = (ids, np.asarray([result.score], np.float32))
                reports[index] = self._report(
                    constraints[index], result.unmet, not result.prefix_complete
                )
        for index in range(len(texts)):  # A blank text meets nothing.
            if not results[index][0].shape[1] and (
                constraints[index] or prefixes[index]
            ):
                reports[index] = self._report(
                    constraints[index],
                    range(len(constraints[index])),
                    bool(prefixes[index]),
                )
        return results, reports

    def constrained_generator(self):
        """The `ConstrainedGenerator` of `generate`'s constraints and
        prefixes, made on first use (one per Translator: its programs)."""
        from keras_transformer.decoding.constraints import ConstrainedGenerator

        if self._constrained is None:
            self._constrained = ConstrainedGenerator(self.model, self.settings)
        return self._constrained

    def _report(self, phrases, unmet, prefix_unmet: bool) -> dict:
        """{"satisfied", "unmet"}: the unmet phrases as text, and "prefix"
        when the forced prefix did not fit."""
        unmet = sorted(set(unmet))
        texts = self._detokenize([np.asarray(phrases[i], np.int32) for i in unmet])
        report = {"satisfied": not unmet and not prefix_unmet, "unmet": texts}
        if prefix_unmet:
            report["prefix"] = "unmet"
        return report

    def _normalization(self, guided: bool) -> str:
        """How the search's score is normalised, in words (the constrained
        search normalises at every beam size)."""
        if guided or (self.sampling is None and not self.settings.is_greedy):
            alpha = self.settings.alpha
            return f"log-probability / ((5 + length) / 6) ** {alpha} (GNMT)"
        return "log-probability (none)"

    def _hypotheses(self, ids: np.ndarray, scores: np.ndarray):
        if not ids.shape[1]:
            return [("", 0.0)]
        texts = self._detokenize([strip_pad(row) for row in ids])
        return real_hypotheses([(t, float(s)) for t, s in zip(texts, scores)])

    def _details(self, sources, results, wanted, layer) -> dict:
        """Translation, tokens, token scores and alignment of each (text,
        hypothesis rank) in `wanted`, teacher-forced in batches."""
        details = {}
        pieces = self.tokenizer.id_to_piece
        for start in range(0, len(wanted), self.batch_size):
            chunk = wanted[start : start + self.batch_size]
            outputs = [strip_pad(results[i][0][rank]).tolist() for i, rank in chunk]
            source_rows = [sources[i] for i, _ in chunk]
            forced = self.scorer(source_rows, outputs, layer)
            strings = self._detokenize([np.asarray(o, np.int32) for o in outputs])
            words = scoring.pieces_words(
                self.tokenizer, source_rows + [scoring.strip_eos(o) for o in outputs]
            )
            for n, (key, output, text, (log_probs, attention)) in enumerate(
                zip(chunk, outputs, strings, forced)
            ):
                details[key] = {
                    "translation": text,
                    "tokens": [pieces(i) for i in output],
                    "token_scores": [float(x) for x in log_probs],
                    "alignment": scoring.word_alignment(
                        attention, words[n], words[len(chunk) + n]
                    ),
                }
        return details

    def _detokenize(self, outputs: list[np.ndarray]) -> list[str]:
        """Output ids -> strings; "" for an empty output."""
        return detokenize(self.tokenizer, outputs)

    def attention_weights(self, source: str, target: str | None = None):
        """Attention weights of every layer and head, for plots.

        Translates `source` unless `target` is given, then runs the model
        once with teacher forcing. Returns a dict with "source_tokens",
        "target_tokens" (the pieces as strings) and "encoder_self_attention",
        "decoder_self_attention", "cross_attention": lists (one per layer)
        of (H, query, key) float32 arrays.
        """
        if target is None:
            target = self.translate([source])[0]
        source_ids = np.asarray([self.tokenizer.encode([source])[0]], np.int32)
        target_ids = self.tokenizer.encode_target([target])[0]
        decoder_input = np.asarray([[self.tokenizer.bos_id, *target_ids]], np.int32)
        weights = self.model.attention_weights(source_ids, decoder_input)
        pieces = self.tokenizer.id_to_piece
        weights = {
            name: [ops.convert_to_numpy(w)[0] for w in layers]
            for name, layers in weights.items()
        }
        weights["source_tokens"] = [pieces(i) for i in source_ids[0]]
        weights["target_tokens"] = ["<s>"] + [pieces(i) for i in target_ids]
        return weights


def _rows_of(abandoned, chunk: list[int], size: int):
    """`abandoned` (a bool per text) for the `size` rows of a batch holding
    the texts `chunk` (the padding rows: False)."""

    def gone() -> np.ndarray:
        flags = np.zeros(size, bool)
        flags[: len(chunk)] = np.asarray(abandoned(), bool)[chunk]
        return flags

    return gone


def _blank_details() -> dict:
    """The details of a blank text's (unsearched) translation."""
    return {"translation": "", "tokens": [], "token_scores": [], "alignment": []}


def _joined(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """One text's results from its rows, (ids (1, L_i), scores (1,)) each,
    as (ids (n, max L_i), scores (n,)): a beam search gives one part, a
    sampling search one per sample (batches of other lengths)."""
    if len(parts) == 1:
        return parts[0]
    width = max(ids.shape[1] for ids, _ in parts)
    ids = np.zeros((len(parts), width), np.int32)
    for row, (part, _) in enumerate(parts):
        ids[row, : part.shape[1]] = part[0]
    return ids, np.concatenate([scores for _, scores in parts])
