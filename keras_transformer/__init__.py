"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3.

Importing the package registers its layers, model, losses, metrics and
schedules with Keras, so `keras.saving.load_model("model.keras")` works after
`import keras_transformer` (`registry`). The other public names load on
first use. In the `keras-transformer` command the registration waits until
a command runs, so that `--help` answers without starting Keras.
"""

from __future__ import annotations

from keras_transformer.registry import register_keras_objects
from keras_transformer.utils import console
from keras_transformer.utils.lazy import lazy_exports
from keras_transformer.utils.version import __version__  # noqa: F401 - in __all__

if console.is_command_line():
    # Before Keras prints its native start-up. A command that starts Keras
    # checks its backend first (`cli.needs_keras`); the others, and `--help`,
    # run without one.
    console.quiet_native_start_up()
else:
    register_keras_objects()

_EXPORTS = {
    "LabelSmoothedCrossEntropy": ".losses",
    "MaskedTokenAccuracy": ".metrics",
    "PAD_ID": ".config",
    "PRESETS": ".config",
    "PerUpdateSchedule": ".schedules",
    "SequenceGenerator": ".decoding.generator",
    "TokenCrossEntropy": ".metrics",
    "TokenPerplexity": ".metrics",
    "Transformer": ".model",
    "TransformerConfig": ".config",
    "TransformerPreprocessor": ".task.preprocessor",
    "TransformerSchedule": ".schedules",
    "TransformerSeq2SeqLM": ".task.seq2seq_lm",
    "Translator": ".decoding.translator",
    "average_checkpoints": ".run.averaging",
    "build_transformer": ".model",
    "corpus_scores": ".decoding.evaluation",
    "export_ctranslate2": ".export.ctranslate2",
    "export_translator": ".export.savedmodel",
    "load_tokenizer": ".data.tokenizer",
    "train_tokenizer": ".data.tokenizer",
    "transformer_optimizer": ".schedules",
}
# Submodules `from keras_transformer import *` brings.
_SUBMODULES = ("layers", "masks")

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
