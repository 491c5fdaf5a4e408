"""Decoding: from a trained model to text, and its scores.

- `search`: greedy and beam search as pure functions over a step function.
- `generator`: `SequenceGenerator`, the search bound to a `Transformer`
  (cached or uncached steps, compiled once per input shape).
- `translator`: `Translator`, strings in, strings out, in batches.
- `settings`: `SearchSettings`, what a search is asked to do (the flags of
  `translate`, `evaluate`, `export` and `serve`).
- `compile`: each backend's compiler for the search, and the persistent
  compilation caches.
- `evaluation`: sacreBLEU and chrF, and the paper's tokenized BLEU.
- `batching`: which texts a search gets, in what order (NumPy only: the
  ONNX export's translator shares it).
- `numpy_search`: the same greedy and beam search in NumPy, for what runs
  without Keras (the ONNX export's translator, the constrained search).
- `opening`: `open_model`, the one way the command line and the server
  open a run, a preset or a `.keras` file for decoding.
- `quantization`: int8 weights for inference (`--quantize`), applied by
  the opener and by the SavedModel export.

Importing this package loads nothing heavy; each public name below loads its
module on first use.
"""

from __future__ import annotations

from keras_transformer.utils.lazy import lazy_exports

_EXPORTS = {
    "beam_search": ".search",
    "greedy_search": ".search",
    "SequenceGenerator": ".generator",
    "Translator": ".translator",
    "open_model": ".opening",
    "SearchSettings": ".settings",
    "compile_function": ".compile",
    "enable_compilation_cache": ".compile",
    "BleuResult": ".evaluation",
    "corpus_scores": ".evaluation",
    "evaluate_split": ".evaluation",
    "paper_bleu": ".evaluation",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
