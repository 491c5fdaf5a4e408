"""Export a trained run for serving, one module per target.

- `savedmodel`: a text-in, text-out TensorFlow SavedModel
  (`export_translator`); `savedmodel_graph` builds its TensorFlow graph.
- `ctranslate2`: a CTranslate2 model directory (`export_ctranslate2`).
- `preset`: a preset directory in keras-hub's layout (`export_preset`),
  which `TransformerSeq2SeqLM.from_preset` and `--preset` load.
- `onnx`: an ONNX directory, the encoder and a cached decoder step
  (`export_onnx`); `onnx_graphs` builds its graphs under torch.
  `onnx_translator` translates with it (`OnnxTranslator`) without Keras,
  searching with `decoding.numpy_search`.
- `common`: what the targets share: opening the run, the output
  directory, the record each export writes beside its files, the child
  process an export runs in under another backend.
- `options`: the export flags (`ExportOptions`, light: the command line
  reads them at start-up); `targets`: `export_run`, which runs the
  exporter of the format they name.

Every exporter takes the run directory, the output directory and one
`SearchSettings`. Importing this package loads nothing heavy: each public
name below loads its module on first use.
"""

from __future__ import annotations

from keras_transformer.utils.lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_MAX_POSITIONS": ".options",
    "ExportOptions": ".options",
    "QUANTIZATIONS": ".options",
    "export_run": ".targets",
    "export_ctranslate2": ".ctranslate2",
    "EXPORT_INFO": ".savedmodel",
    "IDS_ONLY": ".savedmodel",
    "SIGNATURES": ".savedmodel",
    "export_translator": ".savedmodel",
    "export_preset": ".preset",
    "export_onnx": ".onnx",
    "OnnxTranslator": ".onnx_translator",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
