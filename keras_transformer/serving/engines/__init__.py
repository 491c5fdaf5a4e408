"""The engines `keras-transformer serve` decodes with, interchangeable.

Each takes a batch of texts and one `SearchSettings` and returns every text's
hypotheses, best first, as (translation, score) pairs:

- `KerasEngine`: the run's model (or with `ensemble`, it and others as an
  `Ensemble`) through `Translator` (any backend), one `Translator` per set
  of settings asked for (a few kept, each compiled once); the only one with
  attention weights, details, sampling and constraints.
- `CTranslate2Engine`: a CTranslate2 export (given, or made at start-up).
  CTranslate2 takes its settings per call; its differences from `Translator`
  are those of the export (`export.ctranslate2.DIFFERENCES`).
- `SavedModelEngine`: an exported SavedModel (given, or made at start-up),
  whose search settings were fixed at export: a request asking for others
  is refused naming the field.
- `OnnxEngine`: an ONNX export (given, or made at start-up), searched by
  `export.onnx_translator.OnnxTranslator` with any settings: NumPy's search
  over onnxruntime, `Translator`'s translations.

A request with details, sampling or constraints is batched under a
`jobs.Decoding` key and goes to `decode`, which only the Keras engine
has: per text `Translator.generate`'s record (or the samples).

Engines are called from the batcher's worker threads only, `workers` of them
side by side where `serving.server.decode_workers` allows more than one.

One engine per module: `base` (the interface), `keras_engine`,
`ctranslate2_engine`, `savedmodel_engine`, `onnx_engine`; `selection` opens
the one `serve` asks for (`open_engine`). Importing this package loads
nothing heavy; each public name below loads its module on first use.
"""

from __future__ import annotations

from keras_transformer.utils.lazy import lazy_exports

_EXPORTS = {
    "AttentionUnavailable": ".base",
    "Engine": ".base",
    "KerasEngine": ".keras_engine",
    "CTranslate2Engine": ".ctranslate2_engine",
    "SavedModelEngine": ".savedmodel_engine",
    "OnnxEngine": ".onnx_engine",
    "open_engine": ".selection",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
