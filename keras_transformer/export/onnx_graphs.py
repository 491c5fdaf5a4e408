"""The two graphs of an ONNX export, traced from the model's own layers under torch.

`EncoderGraph` runs `Transformer.encode` and `cross_key_values`;
`DecoderStepGraph` runs one decoder position through each
`DecoderBlock._forward` with attention closures over caches of any capacity
(`MultiHeadAttention.project_key_value_cache` and `attend_cache` with the
position's own keys and values), the target embedding, positions, norms and
`logits` of the model: every weight and op is the model's, none is written
again here. Their inputs and outputs are `onnx_translator`'s (its module
docstring lists them).

`write_graphs` exports both with ``torch.onnx.export(dynamo=True)``; why not
through Keras's `export_onnx` is said in `export.onnx`'s docstring.
Imported only under the torch backend.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import keras
import numpy as np
import torch
from keras import ops

from keras_transformer.export.onnx_translator import (
    DECODER_STEP,
    ENCODER,
    encoder_outputs,
    step_inputs,
    step_outputs,
)

# Sample sizes to trace with: all different and >= 2, since torch.export
# takes a dimension of size 0 or 1 for a constant (and two of one size may
# be taken for one dimension). 6 rows are 3 sentences of 2 beams.
_ROWS, _SENTENCES, _SOURCE, _PAST = 6, 3, 5, 4


class EncoderGraph(keras.layers.Layer):
    """source_ids (B, S) -> each decoder layer's cross keys and values."""

    def __init__(self, transformer, **kwargs):
        super().__init__(**kwargs)
        self.transformer = transformer

    def build(self, *shapes):
        self.built = True

    def call(self, source_ids):
        memory = self.transformer.encode(source_ids)
        pairs = self.transformer.cross_key_values(memory)
        return tuple(tensor for pair in pairs for tensor in pair)


class DecoderStepGraph(keras.layers.Layer):
    """One new position against the past keys/values (see `onnx_translator`).

    The k = N / B consecutive rows of a sentence attend to its cross keys
    and values as k query positions of one row, as `DecoderBlock.decode_step`
    does with its `beams`: here k is read from the shapes, so one graph
    serves greedy search and any beam size.
    """

    def __init__(self, transformer, **kwargs):
        super().__init__(**kwargs)
        self.transformer = transformer

    def build(self, *shapes):
        self.built = True

    def call(self, token_ids, source_ids, position, *caches):
        parts = self.transformer._parts
        layers = len(parts.decoder_blocks)
        past = [caches[2 * i : 2 * i + 2] for i in range(layers)]
        cross = [caches[2 * (layers + i) : 2 * (layers + i) + 2] for i in range(layers)]
        hidden = parts.target_embedding(token_ids)
        hidden = parts.target_position(hidden, start_index=position)
        # The slots before the new position; it sees its own keys apart.
        capacity = ops.shape(past[0][0])[2]
        self_mask = ops.logical_and(
            self.transformer.step_self_attention_mask(token_ids, position, capacity),
            ops.arange(capacity)[None, None, :] < position,
        )
        rows, sentences = ops.shape(token_ids)[0], ops.shape(source_ids)[0]
        beams = rows // sentences
        # The k beams of a sentence are its k query positions (`_cross_attend`).
        cross_mask = self.transformer.step_cross_attention_mask(
            source_ids, ops.reshape(token_ids, (sentences, beams))
        )
        new = []
        for block, layer_past, layer_cross in zip(parts.decoder_blocks, past, cross):
            hidden, key_value, _ = block._forward(
                hidden,
                _self_attend(block.self_attention, layer_past, self_mask),
                _cross_attend(block.cross_attention, layer_cross, cross_mask),
                False,
            )
            new.extend(key_value)
        return (self.transformer.logits(hidden)[:, -1], *new)


def _self_attend(attention, past, mask):
    """The new position over the caches' slots that `mask` allows and its
    own keys/values, which it returns for the caller to store."""

    def attend(hidden):
        own = attention.project_key_value_cache(hidden)
        return attention.attend_cache(hidden, *past, mask, own=own), own

    return attend


def _cross_attend(attention, keys_values, mask):
    """A sentence's beams as query positions of its one row of keys/values
    (`DecoderBlock.decode_step`'s cross_attend); mask (B, k, S)."""

    def attend(hidden):
        rows, width = ops.shape(hidden)[0], ops.shape(hidden)[2]
        sentences, beams = ops.shape(mask)[0], ops.shape(mask)[1]
        output = attention.attend_cache(
            ops.reshape(hidden, (sentences, beams, width)), *keys_values, mask
        )
        return ops.reshape(output, (rows, 1, width)), None

    return attend


def write_graphs(model, directory: Path) -> dict:
    """Export `model`'s encoder and decoder step to `directory`; returns
    what export.json records of them (the opset)."""
    if model.config.pointer_bracket_ids is not None:
        raise ValueError(
            "This model cannot be exported to ONNX: its decoder's word pointer "
            "(--word-pointer) has no step graph here. Use the Keras engine "
            "(parse, serve) or --format savedmodel."
        )
    layers = model.config.num_decoder_layers
    source_ids = _sample_source(model.config.vocab_size)
    encoder = EncoderGraph(model)
    cross = [ops.convert_to_numpy(t) for t in encoder(source_ids)]
    batch, length = torch.export.Dim("batch"), torch.export.Dim("source_length")
    rows, capacity = torch.export.Dim("rows"), torch.export.Dim("capacity")
    opset = _to_onnx(
        encoder,
        [source_ids],
        ["source_ids"],
        encoder_outputs(layers),
        [{0: batch, 1: length}],
        directory / ENCODER,
    )
    beams = _ROWS // _SENTENCES
    past = [_sample_past(array, beams) for array in cross]
    tokens = np.arange(_ROWS, dtype=np.int32)[:, None] % model.config.vocab_size
    position = np.array([_PAST - 1], np.int32)
    _to_onnx(
        DecoderStepGraph(model),
        [tokens, source_ids, position, *past, *cross],
        step_inputs(layers),
        step_outputs(layers),
        [{0: rows}, {0: batch, 1: length}, None]
        + [{0: rows, 2: capacity}] * len(past)
        + [{0: batch, 2: length}] * len(cross),
        directory / DECODER_STEP,
    )
    return {"opset": opset}


def _sample_source(vocab_size: int) -> np.ndarray:
    """(3, 5) source ids, one row padded (the masks are traced, not the data)."""
    ids = 4 + np.arange(_SENTENCES * _SOURCE, dtype=np.int32) % (vocab_size - 4)
    ids = ids.reshape(_SENTENCES, _SOURCE)
    ids[0, 3:] = 0
    return ids


def _sample_past(cross: np.ndarray, beams: int) -> np.ndarray:
    """Caches of _PAST slots with a cross array's heads and head size."""
    _, heads, _, size = cross.shape
    return np.zeros((_SENTENCES * beams, heads, _PAST, size), np.float32) + 0.1


def _to_onnx(graph, samples, inputs, outputs, dynamic, path: Path) -> int:
    """Trace `graph` on `samples` and save it as ONNX with the named inputs,
    outputs and dynamic dimensions; returns the opset."""
    samples = tuple(torch.from_numpy(np.ascontiguousarray(s)) for s in samples)
    graph.eval()  # torch's mode (Keras's layers take training=False anyway).
    with _quiet_export(), _symbolic_sizes_as_int32():
        program = torch.onnx.export(
            graph,
            samples,
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes={"args": tuple(dynamic)},
            dynamo=True,
            verbose=False,
        )
    program.save(str(path))
    return next(o.version for o in program.model_proto.opset_import if not o.domain)


@contextlib.contextmanager
def _symbolic_sizes_as_int32():
    """Let Keras's ops take torch.export's symbolic sizes for Python ints.

    `ops.arange(length)` on a traced length (the positional encodings'
    positions, the step's key positions) reads the dtype of a `torch.SymInt`
    and Keras 3.15 knows no such type ("Invalid dtype: SymInt"): it is told,
    for the export only, that one is an int32 as a Python int is.
    """
    from keras.src.backend.common import dtypes

    dtypes.PYTHON_DTYPES_MAP[torch.SymInt] = "int32"
    try:
        yield
    finally:
        dtypes.PYTHON_DTYPES_MAP.pop(torch.SymInt, None)


@contextlib.contextmanager
def _quiet_export():
    """Without the exporter's notes that say nothing about this graph
    (torchvision's missing ops, axis names shared between inputs, pytree
    deprecations)."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.filterwarnings("ignore", message=".*axis name.*")
            warnings.filterwarnings("ignore", message=".*softmax over axis.*")
            yield
    finally:
        registration.setLevel(level)
