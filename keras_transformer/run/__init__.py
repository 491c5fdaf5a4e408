"""A training run on disk: its directory, its checkpoints, their average; presets.

- `directory`: `RunDirectory`, the one owner of a run's files (manifest,
  config, tokenizer, checkpoints, final model, history, scores) and its lock.
- `checkpoints`: step checkpoints a run resumes from exactly.
- `averaging`: the mean of several checkpoints' weights (§6.1).
- `preset_files`: a preset directory in keras-hub's layout (a trained
  model, its tokenizer and search settings), read checked and written whole.

Importing this package loads nothing heavy; each public name below loads its
module on first use.
"""

from __future__ import annotations

from keras_transformer.utils.lazy import lazy_exports

_EXPORTS = {
    "InferenceRun": ".directory",
    "RunBusy": ".directory",
    "RunConflict": ".directory",
    "RunDirectory": ".directory",
    "Checkpoint": ".checkpoints",
    "RunWriteError": ".checkpoints",
    "average_checkpoints": ".averaging",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
