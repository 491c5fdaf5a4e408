"""The TensorFlow graph of an exported translator (TensorFlow backend only).

`build_archive` wires tokenization, the compiled search and detokenization
into `keras.export.ExportArchive` endpoints; `keras_transformer.export`
decides where and how they are written. See that module for the signatures.

Legend: B batch, S source length, k beam size, L output length.
"""

from __future__ import annotations

import keras
import tensorflow as tf  # noqa: TID251 - export is TensorFlow's job

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding.generator import SequenceGenerator

# Python's str.isspace() set, which `Translator` uses to find blank inputs.
_BLANK = r"[\s\p{Z}\x{1c}-\x{1f}\x{85}]*"


def _next_power_of_two(n):
    """Smallest power of two >= max(n, 1), for an int32 scalar tensor."""
    n = tf.maximum(n, 1) - 1
    for shift in (1, 2, 4, 8, 16):
        n = tf.bitwise.bitwise_or(n, tf.bitwise.right_shift(n, shift))
    return n + 1


class _TextOps:
    """In-graph tokenize (texts -> ragged ids) and detokenize (ids -> texts)."""

    def __init__(self, tokenizer):
        if tokenizer.kind == "sentencepiece":
            import tensorflow_text as text  # noqa: TID251 - in-graph SentencePiece

            self.resource = text.SentencepieceTokenizer(
                model=tokenizer.model_proto, out_type=tf.int32
            )
            self._tokenize = self.resource.tokenize
            self._detokenize = self.resource.detokenize
        elif tokenizer.kind == "wordpiece":
            # keras-hub's layer runs tensorflow-text's WordPiece ops over a
            # vocabulary held as graph constants: nothing to track.
            self.resource = None
            self._tokenize = tokenizer.layer.tokenize
            self._detokenize = tokenizer.layer.detokenize
        else:
            raise ValueError(f"Cannot export a {tokenizer.kind!r} tokenizer.")

    def tokenize(self, texts):
        """(B,) strings -> (B, S) int32 ids padded with PAD; blank -> all PAD."""
        ids = tf.cast(self._tokenize(texts), tf.int32)
        dense = ids.to_tensor(default_value=PAD_ID)
        blank = tf.strings.regex_full_match(texts, _BLANK)
        return tf.where(blank[:, None], PAD_ID, dense)

    def detokenize(self, ids):
        """(N, L) ids up to EOS then PAD -> (N,) strings."""
        keep = tf.logical_not(
            tf.logical_or(
                tf.logical_or(tf.equal(ids, PAD_ID), tf.equal(ids, EOS_ID)),
                tf.equal(ids, BOS_ID),
            )
        )
        ragged = tf.ragged.boolean_mask(ids, keep)
        texts = self._detokenize(ragged)
        return tf.reshape(tf.convert_to_tensor(texts), [-1])


class _PaddedSearch:
    """The compiled search at a small set of shapes: sources padded to a
    multiple of 8 tokens (as `Translator` pads) and batches to a power of
    two; padding rows are empty sources, which finish at once."""

    def __init__(self, model, settings):
        generator = SequenceGenerator(model, settings, jit=False)
        self._search = tf.function(generator.search, jit_compile=True)

    def __call__(self, source_ids):
        """(B, S) ids -> (sequences (B, k, L), scores (B, k), empty (B,))."""
        source_ids = tf.cast(source_ids, tf.int32)
        batch = tf.shape(source_ids)[0]
        length = tf.shape(source_ids)[1]
        width = tf.maximum(8, (length + 7) // 8 * 8)
        rows = _next_power_of_two(batch)
        padded = tf.pad(source_ids, [[0, rows - batch], [0, width - length]])
        sequences, scores = self._search(padded)
        sequences, scores = sequences[:batch], scores[:batch]
        # As `Translator`: a source with no tokens translates to nothing.
        empty = tf.reduce_all(tf.equal(source_ids, PAD_ID), axis=1)
        sequences = tf.where(empty[:, None, None], PAD_ID, sequences)
        scores = tf.where(empty[:, None], 0.0, scores)
        return sequences, scores


def _trim(ids):
    """Drop the columns that are PAD in every row. (N, L) -> (N, L')."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)
    return ids[:, : tf.reduce_max(tf.concat([lengths, [0]], 0))]


def _info_endpoint(info: dict):
    constants = {
        "beam_size": tf.constant(info["beam_size"], tf.int32),
        "alpha": tf.constant(info["alpha"], tf.float32),
        "max_extra_length": tf.constant(info["max_extra_length"], tf.int32),
        "allow_unk": tf.constant(info["allow_unk"]),
        "early_stopping": tf.constant(info["early_stopping"]),
        "vocab_size": tf.constant(info["vocab_size"], tf.int32),
        "tokenizer": tf.constant(info["tokenizer"]),
        "package_version": tf.constant(info["package_version"]),
        # "float32", or the --quantization the weights were exported with.
        "quantization": tf.constant(info.get("quantization") or "float32"),
    }

    def fn():
        return {name: tf.identity(value) for name, value in constants.items()}

    return fn


def _ids_endpoint(search: _PaddedSearch):
    def translate_ids(source_ids):
        sequences, scores = search(source_ids)
        return {"target_ids": _trim(sequences[:, 0]), "score": scores[:, 0]}

    return translate_ids


def build_archive(model, tokenizer, settings, info: dict):
    """Two `ExportArchive`s: every signature, and `translate_ids` + `info`
    alone (no tensorflow-text ops, for servers without them)."""
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError("build_archive needs KERAS_BACKEND=tensorflow.")
    search = _PaddedSearch(model, settings)
    text_ops = _TextOps(tokenizer)
    texts_spec = [tf.TensorSpec([None], tf.string, name="text")]
    ids_spec = [tf.TensorSpec([None, None], tf.int32, name="source_ids")]
    k = settings.beam_size

    def translate(text):
        sequences, scores = search(text_ops.tokenize(text))
        return {
            "translation": text_ops.detokenize(sequences[:, 0]),
            "score": scores[:, 0],
        }

    def nbest(text):
        sequences, scores = search(text_ops.tokenize(text))
        flat = tf.reshape(sequences, [-1, tf.shape(sequences)[-1]])
        texts = tf.reshape(text_ops.detokenize(flat), [-1, k])
        return {"translations": texts, "scores": scores}

    # The model's variables are tracked through the endpoints that use them.
    # Tracking the Keras objects themselves would make TensorFlow import
    # Keras to revive them when the SavedModel is loaded.
    archive = keras.export.ExportArchive()
    if text_ops.resource is not None:
        archive.track(text_ops.resource)
    archive.add_endpoint("translate", translate, texts_spec)
    archive.add_endpoint("translate_ids", _ids_endpoint(search), ids_spec)
    if k > 1:
        archive.add_endpoint("nbest", nbest, texts_spec)
    archive.add_endpoint("info", _info_endpoint(info), [])

    ids_archive = keras.export.ExportArchive()
    ids_archive.add_endpoint("translate_ids", _ids_endpoint(search), ids_spec)
    ids_archive.add_endpoint("info", _info_endpoint(info), [])
    return archive, ids_archive
