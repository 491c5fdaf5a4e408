"""Export a trained run as a CTranslate2 model, for fast serving on CPU or GPU.

The model is described with CTranslate2's own model-spec API (a
`TransformerSpec` with this run's sizes: post-norm or pre-norm as trained,
its feed-forward activation (ReLU, or an imported checkpoint's swish or
GELU) and logits bias if it has one, the shared embedding matrix as source,
target and output projection, and this run's positional table given row by
row, since the paper's
interleaved sinusoids are not CTranslate2's default layout), then saved next
to the run's tokenizer. The attention `translate_batch(return_attention=True)`
returns is the last decoder layer's cross-attention averaged over all heads,
the same as `translate --format jsonl`'s alignments (CTranslate2's default is
the first head only). Weights are read from the `.keras` file with NumPy,
so any backend exports without TensorFlow. The directory it writes::

    model.bin, config.json, shared_vocabulary.json   # CTranslate2's files
    tokenizer/                                       # the run's tokenizer
    sentencepiece.model                              # (SentencePiece runs)
    export.json                                      # settings, how to call

Translate with it (pieces in, pieces out; no BOS/EOS on the source), with
the `translate_batch` arguments that `export.json` records::

    import json, ctranslate2, sentencepiece
    info = json.load(open("out/export.json"))
    sp = sentencepiece.SentencePieceProcessor(model_file="out/sentencepiece.model")
    translator = ctranslate2.Translator("out", intra_threads=2)
    source = sp.encode(["A dog runs."], out_type=str)
    results = translator.translate_batch(
        source, **info["translate_batch"],
        max_decoding_length=max(map(len, source)) + info["max_extra_length"])
    print(sp.decode(results[0].hypotheses[0]))

With those arguments, greedy search is `Translator`'s greedy search: the
outputs match token for token. The differences (also in `export.json`):

- Beam search normalises scores by ``length ** length_penalty``; this
  package uses GNMT's ``((5 + length) / 6) ** alpha`` (Wu et al. 2016), as the
  paper did, so with a penalty they can rank finished hypotheses differently.
- CTranslate2 removes the suppressed tokens (PAD, BOS, UNK) before the
  softmax, renormalising over the rest; this package removes them after, so
  a hypothesis scores its true log-probability under the model. Greedy
  choices are the same either way; beam search can keep a different k-th
  hypothesis when the suppressed tokens hold probability (mostly in barely
  trained models).
- ``max_decoding_length`` is one number per batch, where `Translator` allows
  each sentence its own length + ``max_extra_length``.
- The positional table has ``max_positions`` rows (1,280 by default); a
  longer source or output is an error in CTranslate2 ("No position encodings
  are defined for positions >= ..."), never a silent truncation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from keras_transformer.decoding.settings import SearchSettings, search_settings
from keras_transformer.export.common import export_record, open_run, write_export
from keras_transformer.export.options import DEFAULT_MAX_POSITIONS, QUANTIZATIONS
from keras_transformer.export.reading import (
    EXPORT_INFO,
    tokenizer_path,
    translate_batch_options,
)
from keras_transformer.run.directory import InferenceRun
from keras_transformer.utils.optional_imports import install_command

DIFFERENCES = [
    "Beam scores are normalised by length ** length_penalty, not by GNMT's "
    "((5 + length) / 6) ** alpha.",
    "Suppressed tokens (PAD, BOS, UNK) are removed before the softmax, not "
    "after: beam scores are renormalised over the allowed tokens, so beam "
    "search can rank hypotheses differently; greedy search is unaffected.",
    "max_decoding_length is one limit per batch; Translator gives each "
    "sentence its own length + max_extra_length.",
    "A source or output longer than max_positions tokens fails in CTranslate2 "
    "(Translator has no limit).",
    "CTranslate2's beam search always ends a sentence once beam_size "
    "hypotheses are finished (patience 1), the rule of --early-stopping; "
    "without it, Translator searches on while a live hypothesis can still "
    "beat them.",
]


def export_ctranslate2(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    settings: SearchSettings | None = None,
    *,
    model: str | os.PathLike | None = None,
    quantization: str | None = None,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    **changes,
) -> Path:
    """Export the run in `run_dir` as a CTranslate2 model directory at `out`.

    Args:
        run_dir: A trained run directory (any backend).
        out: The directory to create; must not exist, or be empty.
        settings: The `SearchSettings` to record. CTranslate2 takes its
            search settings per call, so they are only written to
            `export.json`, as the `translate_batch` arguments to use.
            Defaults to the paper's.
        model: A `.keras` file to export instead of the run's final model.
        quantization: One of `QUANTIZATIONS` (e.g. "int8"), or None for
            float32 weights.
        max_positions: Rows of the sinusoidal table: the longest source,
            and the longest output, CTranslate2 can then encode (it fails
            with a clear error beyond). Learned positions export their own.
        **changes: `SearchSettings` fields to change (`beam_size=1`).

    Returns:
        The model directory's path.

    Raises:
        ImportError: ctranslate2 is not installed.
        FileNotFoundError: The run has no model.
        FileExistsError: `out` exists and is not empty.
        ValueError: A bad argument, a tokenizer that does not belong to the
            model, or a model CTranslate2 cannot represent.
    """
    settings = search_settings(settings, **changes)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"--quantization must be one of {', '.join(QUANTIZATIONS)}. "
            f"Received: {quantization!r}"
        )
    if not isinstance(max_positions, int) or max_positions < 1:
        raise ValueError(
            f"max_positions must be an integer >= 1. Received: {max_positions!r}"
        )
    _import_ctranslate2()
    out = Path(out)
    run = open_run(run_dir, out, model, load_model=True)

    def write(staging: Path) -> None:
        _write_model(run, staging, quantization, max_positions, settings)

    write_export(
        run, out, write, what="the CTranslate2 export", quantization=quantization
    )
    return out


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(
            "--format ctranslate2 needs the ctranslate2 package: "
            f"{install_command('serve')} (or pip install ctranslate2)."
        ) from error
    return ctranslate2


def _write_model(
    run: InferenceRun,
    out: Path,
    quantization: str | None,
    max_positions: int,
    settings: SearchSettings,
) -> None:
    tokenizer = run.tokenizer
    spec = build_spec(run.model, tokenizer, max_positions)
    rows = spec.encoder.position_encodings.encodings.shape[0]  # Before aliasing.
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(out))
    tokenizer.save(tokenizer_path(out, "ctranslate2"))
    if tokenizer.kind == "sentencepiece":
        (out / "sentencepiece.model").write_bytes(tokenizer.model_proto)
    info = export_record(
        run,
        settings,
        format="ctranslate2",
        quantization=quantization or "float32",
        max_positions=int(rows),
        translate_batch=translate_batch_options(tokenizer, settings),
        differences_from_translator=DIFFERENCES,
    )
    (out / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")


def build_spec(model, tokenizer, max_positions: int = DEFAULT_MAX_POSITIONS):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights.

    Args:
        model: A `keras_transformer.model.Transformer`.
        tokenizer: The run's tokenizer (its pieces are the vocabulary).
        max_positions: Rows of the sinusoidal table.

    Raises:
        ValueError: For a model CTranslate2's Transformer cannot represent.
    """
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    _check_representable(config, tokenizer)
    spec = transformer_spec.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=config.norm_first,
        activation=getattr(common_spec.Activation, _CT2_ACTIVATIONS[config.activation]),
        # return_attention: last layer, mean of all heads (0), as scoring aligns.
        alignment_layer=-1,
        alignment_heads=0,
    )
    parts = model._parts
    source_table = _numpy(parts.source_embedding.embeddings)
    target_table = _numpy(parts.target_embedding.embeddings)
    source_positions, target_positions = model.position_tables(max_positions)
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = source_table
    encoder.position_encodings.encodings = source_positions
    decoder.embeddings.weight = target_table
    decoder.position_encodings.encodings = target_positions
    for block_spec, block in zip(encoder.layer, model.encoder_blocks):
        _set_self_attention(block_spec.self_attention, block)
        _set_feed_forward(block_spec.ffn, block)
    for block_spec, block in zip(decoder.layer, model.decoder_blocks):
        _set_self_attention(block_spec.self_attention, block)
        _set_cross_attention(block_spec.attention, block)
        _set_feed_forward(block_spec.ffn, block)
    if config.norm_first:
        _set_norm(encoder.layer_norm, parts.encoder_norm)
        _set_norm(decoder.layer_norm, parts.decoder_norm)
    if parts.output_projection is None:
        decoder.projection.weight = target_table
    else:
        _set_linear(decoder.projection, parts.output_projection)
    if parts.output_bias is not None:  # An imported MarianMT's logits bias.
        bias = _numpy(parts.output_bias.bias)
        projection_bias = getattr(decoder.projection, "bias", None)
        if isinstance(projection_bias, np.ndarray):  # An untied projection's own.
            bias = bias + projection_bias
        decoder.projection.bias = bias
    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    spec.config.unk_token = tokenizer.id_to_piece(tokenizer.unk_id)
    spec.config.bos_token = tokenizer.id_to_piece(tokenizer.bos_id)
    spec.config.eos_token = tokenizer.id_to_piece(tokenizer.eos_id)
    spec.config.decoder_start_token = spec.config.bos_token
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


# Our activation names -> CTranslate2's `common_spec.Activation` members.
_CT2_ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}


def _check_representable(config, tokenizer) -> None:
    problems = []
    if config.attention_window is not None:
        problems.append(
            f"attention_window={config.attention_window} (CTranslate2 has no "
            "local attention of this kind)"
        )
    if config.pointer_bracket_ids is not None:
        problems.append(
            "its decoder has a word pointer (--word-pointer; CTranslate2's "
            "decoder has no such input)"
        )
    if config.key_dim not in (None, config.d_model // config.num_heads):
        problems.append(
            f"key_dim={config.key_dim} differs from d_model / num_heads = "
            f"{config.d_model // config.num_heads} (CTranslate2 derives it)"
        )
    if config.target_vocab_size not in (None, config.vocab_size):
        problems.append(
            f"target_vocab_size={config.target_vocab_size} differs from "
            f"vocab_size={config.vocab_size} (one joint tokenizer)"
        )
    if tokenizer.vocab_size != config.vocab_size:
        problems.append(
            f"the tokenizer has {tokenizer.vocab_size} pieces but the model "
            f"vocab_size={config.vocab_size}"
        )
    if problems:
        raise ValueError(
            "This model cannot be exported to CTranslate2: " + "; ".join(problems)
        )


def _numpy(variable) -> np.ndarray:
    from keras import ops

    return np.asarray(ops.convert_to_numpy(variable), np.float32)


def _set_linear(spec, dense) -> None:
    """Keras kernels are (in, out); CTranslate2 stores (out, in)."""
    spec.weight = np.ascontiguousarray(_numpy(dense.kernel).T)
    if dense.use_bias:
        spec.bias = _numpy(dense.bias)


def _set_norm(spec, norm) -> None:
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)


def _set_fused(spec, denses) -> None:
    """Several projections of one input as one CTranslate2 linear (rows stacked)."""
    spec.weight = np.ascontiguousarray(
        np.concatenate([_numpy(d.kernel).T for d in denses])
    )
    if all(d.use_bias for d in denses):
        spec.bias = np.concatenate([_numpy(d.bias) for d in denses])


def _set_self_attention(spec, block) -> None:
    attention = block.self_attention
    _set_fused(
        spec.linear[0],
        [attention.query_dense, attention.key_dense, attention.value_dense],
    )
    _set_linear(spec.linear[1], attention.output_dense)
    _set_norm(spec.layer_norm, block.self_attention_norm)


def _set_cross_attention(spec, block) -> None:
    attention = block.cross_attention
    _set_linear(spec.linear[0], attention.query_dense)
    _set_fused(spec.linear[1], [attention.key_dense, attention.value_dense])
    _set_linear(spec.linear[2], attention.output_dense)
    _set_norm(spec.layer_norm, block.cross_attention_norm)


def _set_feed_forward(spec, block) -> None:
    _set_linear(spec.linear_0, block.feed_forward.intermediate_dense)
    _set_linear(spec.linear_1, block.feed_forward.output_dense)
    _set_norm(spec.layer_norm, block.feed_forward_norm)
