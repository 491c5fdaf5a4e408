"""Translate with an ONNX export: onnxruntime and NumPy, without Keras or the model.

`OnnxTranslator` reads a directory written by ``keras-transformer export
--format onnx`` (`export.onnx`)::

    encoder.onnx        source_ids int32 (B, S), pad 0, no BOS/EOS ->
                        cross_keys_i (B, H, S, d_k), cross_values_i (B, H, S, K)
                        for each decoder layer i
    decoder_step.onnx   token_ids int32 (N, 1), source_ids (B, S),
                        position int32 (1,), past_keys_i (N, H, C, d_k),
                        past_values_i (N, H, C, K), cross_keys_i,
                        cross_values_i ->
                        logits float32 (N, V) of position T,
                        new_keys_i (N, H, 1, d_k), new_values_i (N, H, 1, K)
    tokenizer/          the run's tokenizer
    export.json         format, format_version, settings, sizes, ids

The step decodes position T = `position` for N = B * k rows: the k
consecutive rows of a sentence's beams share its row of the cross-attention
keys/values and source ids. The past caches have C > T slots, of which the
first T hold positions 0..T-1 (the rest are masked); the step returns
position T's keys/values, which the caller writes into slot T in place
(`decode_step`), growing the caches CACHE_SLOTS slots at a time. So the
step reads each cache once and copies none: format version 2 took caches
of exactly T slots and returned them with position T appended, a copy of
every cache at every step (27-31% of an int8 step's kernel time at `base`,
beam 4, batches of 32: docs/benchmarks-decode-engines.md).
Exports of versions 1 (position T's keys/values only, appended by the
caller) and 2 are still read.

The search is `numpy_search`'s, the rules of `decoding.search`; batching
and padding are `Translator`'s (sentences sorted by length, sources padded
to multiples of 8), so the translations equal `translate`'s on the same
weights. Nothing here imports Keras or the model's code: only NumPy,
onnxruntime, the tokenizer and the search settings. (Outside the command
line, ``import keras_transformer`` itself registers the model's classes with
Keras, which imports it: the process that translates without Keras at all is
``keras-transformer translate --onnx DIR``.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.config import UNK_ID
from keras_transformer.decoding import numpy_search
from keras_transformer.decoding.batching import (
    Hypotheses,
    best_ids,
    detokenize,
    length_order,
    nbest_lists,
    pad_batch,
    unsearched,
)
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.export.reading import EXPORT_INFO, read_export_tokenizer
from keras_transformer.export.reading import read_export_info as read_record
from keras_transformer.utils.version import __version__

FORMAT = "onnx"
#: The layout of the directory and of the graphs' inputs and outputs; a
#: change to either is a new version, and a directory of another is refused.
FORMAT_VERSION = 3
#: The versions this package reads: 1 and 2 take no `position` (it is the
#: past's length), and 2 returns the past with the new position appended.
READABLE_VERSIONS = (1, 2, 3)
#: Slots a format 3 cache grows by when the search reaches its end.
CACHE_SLOTS = 16
ENCODER = "encoder.onnx"
DECODER_STEP = "decoder_step.onnx"


def encoder_outputs(layers: int) -> list[str]:
    """The encoder graph's outputs: each decoder layer's cross keys, values."""
    return [f"cross_{kind}_{i}" for i in range(layers) for kind in ("keys", "values")]


def step_inputs(layers: int, version: int = FORMAT_VERSION) -> list[str]:
    """The step graph's inputs, in order, in format `version`."""
    past = [f"past_{kind}_{i}" for i in range(layers) for kind in ("keys", "values")]
    position = ["position"] if version >= 3 else []
    return ["token_ids", "source_ids", *position, *past, *encoder_outputs(layers)]


def step_outputs(layers: int, version: int = FORMAT_VERSION) -> list[str]:
    """The step graph's outputs, in order, in format `version`."""
    cache = "present" if version == 2 else "new"
    kinds = ("keys", "values")
    return ["logits", *(f"{cache}_{kind}_{i}" for i in range(layers) for kind in kinds)]


def read_export_info(directory: str | os.PathLike) -> dict[str, Any]:
    """`directory`'s export.json, checked to be an ONNX export of this
    format version.

    Raises:
        FileNotFoundError: No export.json.
        ValueError: Unreadable, another format or format version, or a
            field missing; the message names the file.
    """
    info = read_record(directory, FORMAT)
    path = Path(directory) / EXPORT_INFO
    _check_version(path, info)
    required = ["decoder_layers", "vocab_size", *SearchSettings().to_dict()]
    missing = [name for name in required if name not in info]
    if missing:
        raise ValueError(f"{path}: {', '.join(missing)} missing. {_AGAIN}")
    return info


_AGAIN = (
    "Export the run again with this version: keras-transformer export --format onnx."
)


def _check_version(path: Path, info: dict[str, Any]) -> None:
    found = info.get("format_version")
    if found not in READABLE_VERSIONS:
        *earlier, last = (str(version) for version in READABLE_VERSIONS)
        readable = f"{', '.join(earlier)} and {last}" if earlier else last
        raise ValueError(
            f"{path}: format_version {found!r} (written by keras-transformer "
            f"{info.get('package_version', '?')}), but keras-transformer "
            f"{__version__} reads format_version {readable}. {_AGAIN}"
        )


def export_settings(info: dict[str, Any]) -> SearchSettings:
    """The `SearchSettings` an export recorded."""
    return SearchSettings.from_dict(
        {name: info[name] for name in SearchSettings().to_dict()}
    )


class OnnxTranslator:
    """An ONNX export loaded for translation: strings in, strings (or n-best
    lists) out, with any `SearchSettings` (see the module docstring).

    Args:
        directory: The export's directory.
        threads: onnxruntime's intra-op threads (None: its default, every
            core).
        batch_size: Sentences per search, as `Translator`'s. Defaults to 64.

    Raises:
        MissingExtraError: onnxruntime is not installed.
        FileNotFoundError: A file of the export is missing.
        ValueError: The export is of another format or format version, or
            its graphs are not the ones its export.json describes.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        threads: int | None = None,
        batch_size: int = 64,
    ):
        from keras_transformer.utils.optional_imports import require

        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"batch_size must be an int >= 1. Received: {batch_size!r}"
            )
        self.directory = Path(directory)
        self.info = read_export_info(self.directory)
        reuse_freed_memory()
        onnxruntime = require("onnxruntime", "onnx", "An ONNX export")
        layers = self.info["decoder_layers"]
        self._version = version = self.info["format_version"]
        self._step_inputs = step_inputs(layers, version)
        self.encoder = _session(
            onnxruntime, self.directory / ENCODER, threads, ["source_ids"], version
        )
        self.decoder_step = _session(
            onnxruntime,
            self.directory / DECODER_STEP,
            threads,
            self._step_inputs,
            version,
        )
        _check_outputs(
            self.encoder, self.directory / ENCODER, encoder_outputs(layers), version
        )
        _check_outputs(
            self.decoder_step,
            self.directory / DECODER_STEP,
            step_outputs(layers, version),
            version,
        )
        self.tokenizer = read_export_tokenizer(self.directory, self.info, FORMAT)
        self.settings = export_settings(self.info)
        self.batch_size = batch_size
        past = self._step_inputs.index("past_keys_0")
        self._past_shapes = [
            tuple(graph_input.shape[1::2])  # (H, d_k) of (N, H, T, d_k).
            for graph_input in self.decoder_step.get_inputs()[past : past + 2 * layers]
        ]

    def translate(
        self, texts: Sequence[str], settings: SearchSettings | None = None
    ) -> list[str]:
        """One translation per text, in order; "" for a blank text.
        `settings` defaults to the export's."""
        return self._detokenize(best_ids(self.search(texts, settings)))

    __call__ = translate

    def nbest(
        self, texts: Sequence[str], settings: SearchSettings | None = None
    ) -> list[Hypotheses]:
        """The search's hypotheses per text, best first, as (translation,
        score) pairs, as `Translator.nbest` gives them: the score is the
        length-normalised log-probability (beam) or the total one (greedy);
        a blank text gets [("", 0.0)]."""
        return nbest_lists(self.search(texts, settings), self._detokenize)

    def search(
        self, texts: Sequence[str], settings: SearchSettings | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every hypothesis per text (`Translator.search`): (ids (k, L)
        int32, up to and including EOS then PAD; scores (k,) float32), best
        first; a blank text gets (k, 0) ids and zero scores."""
        settings = self.settings if settings is None else settings
        settings.check_vocabulary(self.tokenizer.vocab_size)
        texts = list(texts)
        encoded = self.tokenizer.encode(texts)
        results = unsearched(len(texts), settings.beam_size)
        order = length_order(texts, encoded)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            sequences, scores = self._search(
                pad_batch([encoded[i] for i in chunk]), settings
            )
            for row, index in enumerate(chunk):
                results[index] = (sequences[row], scores[row])
        return results

    def _search(self, source_ids: np.ndarray, settings: SearchSettings):
        """(sequences (B, k, L), scores (B, k)) of (B, S) source ids."""
        k = settings.beam_size
        limits = numpy_search.output_limits(source_ids, settings.max_extra_length)
        max_length = source_ids.shape[1] + settings.max_extra_length
        suppressed = numpy_search.ALWAYS_SUPPRESSED + (
            () if settings.allow_unk else (UNK_ID,)
        )
        past = self.empty_past(len(source_ids) * k)
        context = self.encode(source_ids)
        arguments = (self.decode_step, past, context, limits, max_length)
        if k == 1:
            return numpy_search.greedy_search(*arguments, suppressed_ids=suppressed)
        return numpy_search.beam_search(
            *arguments,
            beam_size=k,
            alpha=settings.alpha,
            early_stopping=settings.early_stopping,
            suppressed_ids=suppressed,
        )

    def encode(self, source_ids: np.ndarray) -> list[np.ndarray]:
        """The decoder steps' context of (B, S) int32 source ids: the ids
        and each layer's cross-attention keys and values."""
        return [source_ids, *self.encoder.run(None, {"source_ids": source_ids})]

    def empty_past(self, rows: int) -> list[np.ndarray]:
        """Each layer's self-attention keys and values before the first
        step: (rows, H, C, d) zeros, C = CACHE_SLOTS (0 before format 3)."""
        slots = CACHE_SLOTS if self._version >= 3 else 0
        return [
            np.zeros((rows, heads, slots, size), np.float32)
            for heads, size in self._past_shapes
        ]

    def decode_step(
        self,
        tokens: np.ndarray,
        position: int,
        past: list[np.ndarray],
        context: list[np.ndarray],
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits (N, V) of (N, 1) new tokens at `position`, and the past
        with their keys/values; N is B times the beams, a sentence's beams
        in consecutive rows.

        Format 3: the past's caches hold positions 0..position-1 in their
        first slots (`empty_past`'s, as this returns them); the new keys and
        values go into slot `position` in place, the caches grown by
        CACHE_SLOTS first when it is past their end. Before format 3 the
        past holds exactly the positions before `position` and the step
        returns new arrays."""
        if self._version < 3:
            return self._decode_step_v1_v2(tokens, past, context)
        past = _with_room(past, position)
        feeds = [tokens, context[0], np.array([position], np.int32), *past]
        feeds.extend(context[1:])
        logits, *new = self.decoder_step.run(None, dict(zip(self._step_inputs, feeds)))
        for cache, entry in zip(past, new):
            cache[:, :, position : position + 1] = entry
        return logits, past

    def _decode_step_v1_v2(self, tokens, past, context):
        feeds = [tokens, context[0], *past, *context[1:]]
        logits, *caches = self.decoder_step.run(
            None, dict(zip(self._step_inputs, feeds))
        )
        if self._version == 1:  # The new position's only.
            caches = [np.concatenate(pair, axis=2) for pair in zip(past, caches)]
        return logits, caches

    def _detokenize(self, outputs: list[np.ndarray]) -> list[str]:
        """Output ids -> strings; "" for an empty output."""
        return detokenize(self.tokenizer, outputs)


#: glibc's mallopt parameters (malloc.h) and the size both are raised to.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _KEEP_BYTES = -1, -3, 1 << 30


def reuse_freed_memory() -> None:
    """Let this process reuse freed memory for large arrays (glibc only).

    Every step's caches are new arrays of tens of MB (N, H, T, K: 10 MB per
    layer's keys at `base`, beam 4, batch 32, T = 40). glibc serves each
    from fresh pages of the kernel, which zeroes them on first touch, and
    returns them when freed: at `base` that doubled the time the search
    spends copying the caches. Above these thresholds freed memory stays in
    the heap for the next step (the process keeps its peak memory).
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)
    except (OSError, AttributeError):  # Not glibc (musl has no mallopt).
        pass


def _with_room(caches: list[np.ndarray], position: int) -> list[np.ndarray]:
    """`caches` (N, H, C, d), or copies CACHE_SLOTS slots longer when slot
    `position` is past their end (the unused slots are zeros: masked, but
    still multiplied, so they must be finite)."""
    slots = caches[0].shape[2]
    if position < slots:
        return caches
    grown = []
    for cache in caches:
        rows, heads, _, size = cache.shape
        larger = np.zeros((rows, heads, slots + CACHE_SLOTS, size), cache.dtype)
        larger[:, :, :slots] = cache
        grown.append(larger)
    return grown


def _session(
    onnxruntime, path: Path, threads: int | None, inputs: list[str], version: int
):
    """An inference session on `path`, refused unless its inputs are `inputs`."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the export is incomplete. {_AGAIN}")
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # Errors only.
    try:
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
    except Exception as error:  # noqa: BLE001 - onnxruntime has its own kinds.
        raise ValueError(
            f"{path}: not a readable ONNX graph ({error}). {_AGAIN}"
        ) from None
    found = [graph_input.name for graph_input in session.get_inputs()]
    if found != inputs:
        raise ValueError(
            f"{path}: inputs {found}, but format_version {version} has "
            f"{inputs}. {_AGAIN}"
        )
    return session


def _check_outputs(session, path: Path, outputs: list[str], version: int) -> None:
    found = [output.name for output in session.get_outputs()]
    if found != outputs:
        raise ValueError(
            f"{path}: outputs {found}, but format_version {version} has "
            f"{outputs}. {_AGAIN}"
        )
