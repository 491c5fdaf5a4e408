"""Weight quantization of a trained Transformer for inference (`--quantize`).

Keras's own machinery does the work: `keras.Model.quantize("int8")` turns
every `Dense` (the attention and feed-forward projections) into int8
weights with a float32 scale per output unit, and `ScaledEmbedding.quantize`
does the same for the shared embedding and output projection, with a scale
per token. In each projection the activations are quantized per position at
run time too (Keras's int8 mode), so the products are int8 by int8; norms,
biases, softmax and the loss stay float32. The search runs unchanged on the
quantized model, on every backend (TensorFlow, JAX and torch).

Inference only: a quantized model is decoded or exported (SavedModel), never
trained or saved as a `.keras` file.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator

#: The modes `--quantize` accepts (None keeps float32).
QUANTIZE_MODES = ("int8",)


def check_quantize_mode(mode: str | None, flag: str = "--quantize") -> None:
    """Refuse an unknown mode before any model is loaded."""
    if mode is not None and mode not in QUANTIZE_MODES:
        raise ValueError(
            f"{flag} {mode!r} is not a quantization mode: use one of "
            f"{', '.join(QUANTIZE_MODES)} (or leave it out for float32)."
        )


def quantize_model(model, mode: str | None, flag: str = "--quantize"):
    """Quantize `model`'s projections and embeddings in place to `mode`
    (see the module docstring); None leaves it as it is. Returns `model`.
    `flag` is the option errors name."""
    check_quantize_mode(mode, flag)
    if mode is None:
        return model
    from keras_transformer.model import takes_int8  # Keras: only when quantizing.

    if model.dtype_policy.name != "float32":
        raise ValueError(
            f"{flag} {mode} needs a float32 model; this one computes in "
            f"{model.dtype_policy.name}."
        )
    with warnings.catch_warnings(), _one_garbage_collection():
        # NumPy 2 warns once per layer about Keras's __array__ (harmless).
        warnings.filterwarnings("ignore", message=r".*__array__ implementation.*")
        model.quantize(mode, filters=takes_int8)
    return model


@contextlib.contextmanager
def _one_garbage_collection() -> Iterator[None]:
    """One full garbage collection at the end instead of one per replaced
    weight. Keras's `Layer.__delattr__` runs `gc.collect()` each time a
    layer drops a variable (to free its device buffer at once), and
    quantizing drops every kernel: a full collection costs ~0.2 s right
    after importing TensorFlow and grows with the heap, so in a long-lived
    process (a notebook, a test session) quantizing the 33 projections of
    a 2+2-layer model took minutes. Quantizing is done at start-up, before
    a server's threads decode."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        collect()


def quantized_layers(model) -> int:
    """How many of `model`'s layers hold quantized weights."""
    return sum(
        1
        for layer in model._flatten_layers()
        if getattr(layer, "int8", False) or getattr(layer, "_is_quantized", False)
    )
