"""Export a trained run as ONNX graphs that translate with onnxruntime, no Keras.

`export_onnx` writes the encoder and one cached decoder step as two ONNX
graphs (built in `onnx_graphs` from the model's own layers), the run's
tokenizer and ``export.json``; `onnx_translator` describes the directory and
the graphs' inputs and outputs, and its `OnnxTranslator` translates with
them (NumPy's search, `Translator`'s results) with any search settings.
``export.json`` records the ones given here as its defaults, the format and
its version, the sizes and the special ids. Before the directory is moved
into place, onnxruntime runs both graphs on a sample of 2 sentences x 2
beams for 3 steps and their logits are checked against the model's
(`Transformer.decode` on the whole prefix); a failure leaves nothing.
With `quantization="int8"` (`export --format onnx --quantization int8`)
the checked graphs are then rewritten with int8 weights
(`onnx_quantization`: onnxruntime's MatMulInteger, the int8 that is fast
on a CPU) and checked again, to a tolerance that int8 rounding meets.

Not through Keras's exporter: `keras.export.export_onnx` (Keras 3.15 on
torch 2.13) cannot write these graphs, for four reasons.

1. Dynamic dimensions. Keras marks an input dimension given as None dynamic
   and then exports with torch's TorchScript exporter (``dynamo=False``,
   deprecated since torch 2.9), which fails on Keras's own layer norm under
   torch: ``F.layer_norm(x, normalized_shape=(x.shape[-1],))`` takes a
   traced size it cannot hold constant ("Failed to export a node ...
   because it is not constant"). Both graphs need dynamic sizes: the batch,
   the source length, the rows of the step and the caches' slots.
2. Without a None, Keras uses torch's dynamo exporter, but with every
   dimension fixed to the sample's: a graph per batch, length and step.
3. Keras traces a sample whose None dimensions are 1, and torch.export takes
   a size of 0 or 1 for a constant: the graph would be specialised to one
   sentence and a past of one position.
4. Keras names the inputs only: the step's outputs (the logits and each
   layer's new keys and values) would carry torch's node names ("add_12").

So `onnx_graphs` calls ``torch.onnx.export(dynamo=True)`` itself, as Keras
does for static shapes, with a `torch.export.Dim` for each dynamic size,
samples of sizes 2 and more, and names for inputs and outputs. One thing of
Keras's still needs help there: `ops.arange` of a traced length (the
positional encoding's positions) asks the dtype of a `torch.SymInt`, which
Keras 3.15 does not know; for the export only, Keras's table of Python
types maps it to int32 as it maps `int`. The graphs are traced under torch:
from another backend the export runs in a child process with
KERAS_BACKEND=torch (a run's `.keras` weights load on any backend).

The step's past grows from empty: a (N, H, 0, K) past is a valid input and
the graph concatenates the new position's keys/values to it, so the first
step is no special case. (The model's `decode_step` writes into a
preallocated cache at the step index with `slice_update` instead, which
keeps shapes fixed for XLA; onnxruntime compiles nothing per shape, and a
past as long as the output so far attends over no empty slots.)

Exporting needs torch, onnx and onnxscript (``pip install -e
'.[onnx-export]'``); translating only onnxruntime (``[onnx]``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.decoding.settings import SearchSettings, search_settings
from keras_transformer.export.common import (
    child_main,
    export_in_child,
    export_record,
    open_run,
    write_export,
)
from keras_transformer.export.onnx_quantization import (
    ONNX_QUANTIZATIONS,
    quantize_graph,
)
from keras_transformer.export.onnx_translator import (
    DECODER_STEP,
    ENCODER,
    FORMAT,
    FORMAT_VERSION,
    OnnxTranslator,
)
from keras_transformer.export.reading import EXPORT_INFO, tokenizer_path
from keras_transformer.run.directory import InferenceRun
from keras_transformer.utils.optional_imports import (
    MissingExtraError,
    install_command,
    is_installed,
)

#: What an export needs, and the extra that installs it.
# int8 weights move a logit by a few percent of the largest (on the sample,
# the quick start's trained tiny model: up to 7.3%, with the same test-set
# BLEU within 0.1); a graph quantized wrongly moves them by far more.
INT8_TOLERANCE = 0.2
EXPORT_PACKAGES = {
    "torch": "onnx-export",
    "onnx": "onnx-export",
    "onnxscript": "onnx-export",
    "onnxruntime": "onnx",  # Checks the graphs before they are kept.
}
GRAPHS = {
    ENCODER: "source_ids int32 (B, S), pad 0, no BOS/EOS -> cross_keys_i "
    "(B, H, S, d_k), cross_values_i (B, H, S, d_v) per decoder layer i",
    DECODER_STEP: "token_ids int32 (N, 1), source_ids (B, S), position int32 "
    "(1,) = T, past_keys_i (N, H, C, d_k), past_values_i (N, H, C, d_v) whose "
    "first T of C slots hold positions 0..T-1, cross_keys_i, cross_values_i "
    "-> logits float32 (N, V) of position T, new_keys_i (N, H, 1, d_k), "
    "new_values_i (N, H, 1, d_v): position T's, for slot T; N = B * beams, "
    "a sentence's beams in consecutive rows",
}


def export_onnx(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    settings: SearchSettings | None = None,
    *,
    model: str | os.PathLike | None = None,
    quantization: str | None = None,
    **changes,
) -> Path:
    """Export the run in `run_dir` as an ONNX directory at `out` (see the
    module docstring).

    Args:
        run_dir: A trained run directory (any backend).
        out: The directory to create; must not exist, or be empty.
        settings: The `SearchSettings` recorded as the export's defaults
            (`OnnxTranslator` takes any). Defaults to the paper's.
        model: A `.keras` file to export instead of the run's final model.
        quantization: "int8" for int8 weights (`onnx_quantization`: checked
            against the model too); None or "float32" keeps float32.
        **changes: `SearchSettings` fields to change (`beam_size=1`).

    Returns:
        The directory's path.

    Raises:
        ImportError: torch, onnx, onnxscript or onnxruntime is missing (the
            message names the extra).
        FileNotFoundError: The run has no model.
        FileExistsError: `out` exists and is not empty.
        ValueError: A bad setting, or a tokenizer that does not belong to
            the model.
        RuntimeError: The graphs failed to export, or do not compute the
            model's logits (nothing is written).
    """
    import keras

    settings = search_settings(settings, **changes)
    if quantization not in (None, *ONNX_QUANTIZATIONS):
        raise ValueError(
            f"--quantization {quantization!r} is not one of an ONNX export's: "
            f"{', '.join(ONNX_QUANTIZATIONS)}."
        )
    quantization = None if quantization == "float32" else quantization
    _check_packages()
    out = Path(out)
    in_process = keras.backend.backend() == "torch"
    run = open_run(run_dir, out, model, load_model=in_process)
    settings.check_vocabulary(run.tokenizer.vocab_size)
    if in_process:
        _write_export(run, out, settings, quantization)
    else:
        request = {
            "run_dir": str(run.run.path),
            "model": str(run.model_path),
            "out": str(out),
            "settings": settings.to_dict(),
            "quantization": quantization,
        }
        export_in_child("keras_transformer.export.onnx", request, "torch")
    return out


def _check_packages() -> None:
    missing = [name for name in EXPORT_PACKAGES if not is_installed(name)]
    if missing:
        raise MissingExtraError(
            f"--format onnx needs {', '.join(missing)} (not installed). Install "
            f"them with: {install_command('onnx-export')}"
        )


def _write(
    run: InferenceRun, out: Path, settings: SearchSettings, quantization: str | None
) -> None:
    from keras_transformer.export.onnx_graphs import write_graphs

    graphs = write_graphs(run.model, out)
    run.tokenizer.save(tokenizer_path(out, FORMAT))
    info = _record(run, settings, graphs, quantization)
    (out / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")
    verify(run.model, out)
    if quantization == "int8":
        for graph in (ENCODER, DECODER_STEP):
            quantize_graph(out / graph)
        verify(run.model, out, tolerance=INT8_TOLERANCE, what="int8 ONNX graphs")


def _record(
    run: InferenceRun, settings: SearchSettings, graphs: dict, quantization
) -> dict:
    config = run.model.config
    heads = config.num_heads
    return export_record(
        run,
        settings,
        format=FORMAT,
        format_version=FORMAT_VERSION,
        quantization=quantization or "float32",
        opset=graphs["opset"],
        encoder_layers=config.num_encoder_layers,
        decoder_layers=config.num_decoder_layers,
        heads=heads,
        d_model=config.d_model,
        key_dim=config.key_dim or config.d_model // heads,
        value_dim=config.d_model // heads,
        output_vocab_size=config.output_vocab_size,
        ids={"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        graphs=GRAPHS,
        translate="keras-transformer translate --onnx DIR, or "
        "keras_transformer.export.onnx_translator.OnnxTranslator(DIR)",
    )


def verify(
    model,
    directory: Path,
    steps: int = 3,
    tolerance: float = 1e-3,
    what: str = "exported ONNX graphs",
) -> None:
    """Run the export in `directory` on a sample (2 sentences, one padded,
    x 2 beams, `steps` steps) and compare each step's logits with the
    model's own on the whole prefix: they may differ by `tolerance` times
    the largest logit (at least 1), float32 noise by default.

    Raises:
        RuntimeError: A difference beyond the tolerance.
    """
    from keras import ops

    translator = OnnxTranslator(directory, threads=1)
    vocab_size = model.config.vocab_size
    rng = np.random.default_rng(0)
    source_ids = rng.integers(4, vocab_size, (2, 7)).astype(np.int32)
    source_ids[1, 4:] = PAD_ID
    beams = 2
    prefix = rng.integers(4, vocab_size, (2 * beams, steps)).astype(np.int32)
    prefix[:, 0] = BOS_ID
    memory = ops.repeat(model.encode(source_ids), beams, axis=0)
    expected = ops.convert_to_numpy(
        model.decode(prefix, memory, np.repeat(source_ids, beams, axis=0))
    )
    context = translator.encode(source_ids)
    past = translator.empty_past(len(prefix))
    for step in range(steps):
        tokens = prefix[:, step : step + 1]
        logits, past = translator.decode_step(tokens, step, past, context)
        difference = float(np.max(np.abs(logits - expected[:, step])))
        if difference > tolerance * max(1.0, float(np.max(np.abs(expected)))):
            raise RuntimeError(
                f"The {what} do not compute the model's logits "
                f"(step {step}: they differ by up to {difference:.3g}); nothing "
                "was written."
            )


def _export_request(request: dict[str, Any]) -> None:
    out = Path(request["out"])
    run = open_run(request["run_dir"], out, request["model"], load_model=True)
    settings = SearchSettings.from_dict(request["settings"])
    _write_export(run, out, settings, request["quantization"])


def _write_export(
    run: InferenceRun, out: Path, settings: SearchSettings, quantization
) -> None:
    write_export(
        run,
        out,
        lambda staging: _write(run, staging, settings, quantization),
        what="the ONNX export",  # float32 graphs first, even for int8.
    )


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:], _export_request))
