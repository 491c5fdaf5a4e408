"""keras-hub's view of the task: `keras_hub.models.Seq2SeqLM.from_preset` returns it.

keras-hub builds a preset's task from the class its `task.json` names,
and only if that class is a subclass of the `Seq2SeqLM` it was asked for.
`TransformerSeq2SeqLM` itself must not need keras-hub (which requires
TensorFlow), so this module, imported only where keras-hub is installed,
defines the subclass that is one and registers it under the name the
presets' `task.json` uses:

    import keras_hub
    import keras_transformer.task.hub  # noqa: F401
    task = keras_hub.models.Seq2SeqLM.from_preset("presets/mine")
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from keras_transformer.model import Transformer
from keras_transformer.task.preprocessor import TransformerPreprocessor
from keras_transformer.task.seq2seq_lm import TransformerSeq2SeqLM

_REGISTERED_NAME = "keras_transformer>TransformerSeq2SeqLM"


class HubTransformerSeq2SeqLM(TransformerSeq2SeqLM, keras_hub.models.Seq2SeqLM):
    """`TransformerSeq2SeqLM` that keras-hub recognises as a `Seq2SeqLM`.

    Everything is `TransformerSeq2SeqLM`'s (its methods come first in the
    method order); keras-hub's `Task` only takes part in construction."""

    backbone_cls = Transformer
    preprocessor_cls = TransformerPreprocessor

    def compile(self, *args: Any, **kwargs: Any) -> None:
        # keras-hub's Task compiles with its defaults while Keras builds the
        # functional graph, before the backbone is attached: nothing to
        # compile yet (compile() is the paper's once the model exists).
        if self.backbone is None:
            return
        super().compile(*args, **kwargs)


# The name a preset's task.json gives: keras-hub looks it up and finds this
# subclass; `TransformerSeq2SeqLM.from_preset` does not read it.
keras.saving.get_custom_objects()[_REGISTERED_NAME] = HubTransformerSeq2SeqLM
