"""Per-token scores and word alignments of finished translations.

The search keeps one number per hypothesis. To say how sure the model was
of each token, and which source word each target word came from, the
chosen output is run once more through the model with teacher forcing
(`token_details`): its log-probability at each position (the search's own
numbers, up to float rounding: the cached decoder step equals the whole
decoder, a property the tests hold) and the cross-attention weights.

Alignments follow fairseq's `--print-alignment` and CTranslate2's
`return_attention`: each target word is aligned to the source word it
attends to most, averaged over the heads of one decoder layer, by default
the last (fairseq's default). On the copy model of the tests (two decoder
layers, 16 sentences copied whole) the last layer aligned 87 of 87 words
with themselves and the first 66; Garg et al. (2019, "Jointly Learning to
Align and Translate with Transformer Models") found the penultimate layer
the better aligner of a six-layer model, `alignment_layer=-2`. A
subword's attention is summed over the pieces of each source word and
averaged over the pieces of each target word; the end-of-sentence token
is not aligned. Word indices count the whitespace-separated words of the
text as the tokenizer gives it back (with SentencePiece, the input's own
words).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
from keras import ops

from keras_transformer.config import BOS_ID, EOS_ID


def alignment_layer(num_decoder_layers: int, layer: int | None = None) -> int:
    """The decoder layer whose cross-attention aligns: `layer` (negative
    counts from the last), else the last one (module docstring)."""
    if layer is None:
        return num_decoder_layers - 1
    if not -num_decoder_layers <= layer < num_decoder_layers:
        raise ValueError(
            f"alignment_layer must be in [{-num_decoder_layers}, "
            f"{num_decoder_layers - 1}] for a decoder of {num_decoder_layers} "
            f"layers. Received: {layer}"
        )
    return layer % num_decoder_layers


def token_details(
    model, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], layer
):
    """Teacher-forced log-probabilities and cross-attention of `outputs`,
    uncompiled (`ForcedScorer` compiles the same pass).

    Args:
        model: a `Transformer` (or an ensemble with its interface).
        sources: source ids per sentence, without padding.
        outputs: the output ids per sentence, up to and including EOS.
        layer: the decoder layer for the attention (`alignment_layer`).

    Returns:
        Per sentence (log_probs (T,) float32, attention (T, S) float32 mean
        over heads), T = len(output), S = len(source).
    """
    if not len(sources):
        return []
    width_s = max(1, max(len(s) for s in sources))
    width_t = max(1, max(len(o) for o in outputs))
    arrays = forced_arrays(sources, outputs, len(sources), width_s, width_t)
    chosen, attention = _forced_pass(model, *arrays)
    chosen, cross = ops.convert_to_numpy(chosen), ops.convert_to_numpy(attention[layer])
    return _per_sentence(chosen, cross, sources, outputs)


def forced_arrays(sources, outputs, rows: int, width_s: int, width_t: int):
    """(source, decoder input, target) int32 arrays of `rows` rows (past
    the sentences, padding), `width_s` and `width_t` wide."""
    source = np.zeros((rows, width_s), np.int32)
    decoder_input = np.zeros((rows, width_t), np.int32)
    target = np.zeros((rows, width_t), np.int32)
    for row, (src, out) in enumerate(zip(sources, outputs)):
        source[row, : len(src)] = src
        decoder_input[row, : len(out)] = [BOS_ID, *out[:-1]][: len(out)]
        target[row, : len(out)] = out
    return source, decoder_input, target


def _forced_pass(model, source, decoder_input, target):
    """((B, T) float32 log-probability of each target id, (layers, B, T, S)
    float32 cross-attention averaged over heads). One pass through a
    `Transformer` (`teacher_forced`); an ensemble's mean log-probabilities
    and mean attention otherwise."""
    if hasattr(model, "teacher_forced"):
        logits, cross = model.teacher_forced(source, decoder_input)
    else:
        logits = model.decode(decoder_input, model.encode(source), source)
        cross = model.attention_weights(source, decoder_input)["cross_attention"]
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    target = ops.expand_dims(ops.cast(ops.convert_to_tensor(target), "int32"), -1)
    chosen = ops.squeeze(ops.take_along_axis(log_probs, target, axis=-1), -1)
    heads = [ops.mean(ops.cast(weights, "float32"), axis=1) for weights in cross]
    return chosen, ops.stack(heads)


def _per_sentence(chosen, cross, sources, outputs) -> list:
    return [
        (chosen[row, : len(out)], cross[row, : len(out), : len(src)])
        for row, (src, out) in enumerate(zip(sources, outputs))
    ]


class ForcedScorer:
    """`token_details`, compiled, for a server or a long run: the rows are
    padded to the batch sizes the search runs at
    (`generator.padded_batch_size`: a `batch_size` of at most 8 rows, the
    server's default, always to `batch_size`) and both sides
    to one length of `padded_length`'s few (8, 16, 32, ...), so a handful
    of programs serve every request; padding changes no value (the masks
    give it no weight, and it is cut off again). All layers' attention
    comes back, so the alignment layer compiles nothing either.

    Args:
        model: a `Transformer` or an ensemble.
        batch_size: rows per pass, at most (longer lists run in parts).
        jit: compile the pass. Defaults to True.
    """

    def __init__(self, model, batch_size: int, jit: bool = True):
        from keras_transformer.decoding.compile import compile_function

        self.model = model
        self.batch_size = batch_size
        self.limit: int | None = None  # Lengths up to this pad to it at most.
        fn = lambda s, d, t: _forced_pass(model, s, d, t)  # noqa: E731
        self._pass = compile_function(fn, model) if jit else fn

    def __call__(self, sources, outputs, layer: int) -> list:
        """As `token_details(model, sources, outputs, layer)`."""
        found = []
        for start in range(0, len(sources), self.batch_size):
            part_s = sources[start : start + self.batch_size]
            part_o = outputs[start : start + self.batch_size]
            rows = self._rows(len(part_s))
            longest = max([1, *map(len, part_s), *map(len, part_o)])
            width = padded_length(longest, self.limit)
            arrays = forced_arrays(part_s, part_o, rows, width, width)
            chosen, attention = self._pass(*arrays)
            chosen = ops.convert_to_numpy(chosen)
            cross = ops.convert_to_numpy(attention[layer])
            found += _per_sentence(chosen, cross, part_s, part_o)
        return found

    def _rows(self, sentences: int) -> int:
        """The rows a pass of `sentences` sentences is padded to."""
        from keras_transformer.decoding.generator import padded_batch_size

        return padded_batch_size(self.batch_size, sentences)

    def warm_up_steps(self, max_tokens: int) -> list[Callable[[], None]]:
        """The steps that compile every shape a pass of sides up to
        `max_tokens` tokens can take, one per shape, for the caller to run
        (a server, before it says it is ready)."""
        self.limit = max_tokens
        rows = sorted({self._rows(n) for n in range(1, self.batch_size + 1)})
        token = min(8, self.model.config.vocab_size - 1)

        def step(size: int, width: int) -> None:
            ids = np.full((size, width), token, np.int32)
            arrays = forced_arrays([], [], size, width, width)
            ops.convert_to_numpy(self._pass(ids, *arrays[1:])[0])

        return [
            functools.partial(step, size, width)
            for size in rows
            for width in padded_lengths(max_tokens)
        ]


def padded_length(tokens: int, limit: int | None = None) -> int:
    """The length a pass over `tokens` tokens (its longer side) is padded
    to: the first of 8, 16, 32, ... (doubling) that holds them, but at most
    `limit` rounded up to a multiple of 8 when they fit in that (a server's
    longest side: 256 tokens pad to 256, 257 to 264, not 512)."""
    length = 8
    while length < tokens:
        length *= 2
    if limit is not None:
        top = max(8, -(-limit // 8) * 8)
        if tokens <= top:
            length = min(length, top)
    return length


def padded_lengths(limit: int) -> list[int]:
    """Every length `padded_length` pads to for up to `limit` tokens:
    8, 16, 32, 64, 128, 256, 264 for 257."""
    return sorted({padded_length(n, limit) for n in range(1, limit + 1)})


def piece_words(tokenizer, ids: Sequence[int]) -> list[int]:
    """The word index of each piece of `ids` (no EOS): the pieces up to it,
    detokenized, split at whitespace. A piece that only opens a word (a
    text ending in a space) belongs to the word that follows."""
    return pieces_words(tokenizer, [ids])[0]


def pieces_words(tokenizer, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
    """`piece_words` of each sequence, with one call of the tokenizer for
    all their prefixes (a call per sequence cost more than the search)."""
    sequences = [list(ids) for ids in sequences]
    width = max((len(ids) for ids in sequences), default=0)
    count = sum(len(ids) for ids in sequences)
    if not count:
        return [[] for _ in sequences]
    prefixes = np.zeros((count, width), np.int32)
    row = 0
    for ids in sequences:
        for end in range(len(ids)):
            prefixes[row, : end + 1] = ids[: end + 1]
            row += 1
    texts = iter(tokenizer.detokenize(prefixes))
    found = []
    for ids in sequences:
        mine = [next(texts) for _ in ids]
        total = max(len(mine[-1].split()), 1) if mine else 1
        words = []
        for text in mine:
            index = len(text.split()) - (0 if text[-1:].isspace() else 1)
            words.append(min(max(index, 0), total - 1))
        found.append(words)
    return found


def word_alignment(
    attention: np.ndarray, source_words: list[int], target_words: list[int]
) -> list[str]:
    """ "i-j" pairs (source word i, target word j, 0-based), one per target
    word, from a (T, S) attention over pieces (rows past the target
    pieces, such as EOS's, are ignored)."""
    if not source_words or not target_words:
        return []
    attention = attention[: len(target_words), : len(source_words)]
    by_source = np.zeros((attention.shape[0], max(source_words) + 1))
    np.add.at(by_source.T, np.asarray(source_words), attention.T)
    pairs = []
    targets = np.asarray(target_words)
    for word in range(max(target_words) + 1):
        rows = by_source[targets == word]
        if len(rows):
            pairs.append(f"{int(np.argmax(rows.mean(axis=0)))}-{word}")
    return pairs


def strip_eos(ids: Sequence[int]) -> list[int]:
    """The output's pieces before EOS."""
    ids = list(ids)
    return ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
