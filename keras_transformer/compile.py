"""Compile a function of Keras layers with the backend's own compiler.

The decoding loop is written once with `keras.ops`; this is the one place that
knows how each backend compiles it: `tf.function(jit_compile=True)` (XLA) on
TensorFlow, `jax.jit` on JAX with the model's variables passed in as
arguments (a Keras `StatelessScope` maps them back onto the layers), so the
weights are inputs of the compiled program rather than baked-in constants.
Other backends run the function as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import keras


def compile_function(fn: Callable, model: keras.Model) -> Callable:
    """Return a compiled version of `fn(*tensors)` that uses `model`'s layers.

    Each distinct input shape compiles once; keep shapes in a small fixed set.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # noqa: TID251 - the TF compiler itself

        return tf.function(fn, jit_compile=True)
    if backend == "jax":
        import jax  # noqa: TID251 - the JAX compiler itself

        variables = model.variables

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args)

        compiled = jax.jit(stateless)
        return lambda *args: compiled([v.value for v in variables], *args)
    return fn
