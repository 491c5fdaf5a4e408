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

from collections.abc import Sequence

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
    """Teacher-forced log-probabilities and cross-attention of `outputs`.

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
    source = np.zeros((len(sources), width_s), np.int32)
    decoder_input = np.zeros((len(sources), width_t), np.int32)
    target = np.zeros((len(sources), width_t), np.int32)
    for row, (src, out) in enumerate(zip(sources, outputs)):
        source[row, : len(src)] = src
        decoder_input[row, : len(out)] = [BOS_ID, *out[:-1]][: len(out)]
        target[row, : len(out)] = out
    logits = model.decode(decoder_input, model.encode(source), source)
    log_probs = ops.convert_to_numpy(
        ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    )
    chosen = np.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
    cross = model.attention_weights(source, decoder_input)["cross_attention"][layer]
    cross = ops.convert_to_numpy(ops.mean(ops.cast(cross, "float32"), axis=1))
    return [
        (chosen[row, : len(out)], cross[row, : len(out), : len(src)])
        for row, (src, out) in enumerate(zip(sources, outputs))
    ]


def piece_words(tokenizer, ids: Sequence[int]) -> list[int]:
    """The word index of each piece of `ids` (no EOS): the pieces up to it,
    detokenized, split at whitespace. A piece that only opens a word (a
    text ending in a space) belongs to the word that follows."""
    ids = list(ids)
    if not ids:
        return []
    prefixes = np.zeros((len(ids), len(ids)), np.int32)
    for end in range(len(ids)):
        prefixes[end, : end + 1] = ids[: end + 1]
    texts = tokenizer.detokenize(prefixes)
    total = max(len(texts[-1].split()), 1)
    words = []
    for text in texts:
        index = len(text.split()) - (0 if text[-1:].isspace() else 1)
        words.append(min(max(index, 0), total - 1))
    return words


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
