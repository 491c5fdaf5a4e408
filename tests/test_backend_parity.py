"""A model saved under one backend gives the same logits under the other.

Two worker subprocesses, one per backend (the backend is fixed when Keras is
imported), run at the same time: each builds a seeded tiny model, saves it
with fixed inputs and its logits, then waits for the other's `.keras` file,
loads it and computes logits on the other's inputs. The test does the same
work whichever backend the pytest session itself uses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("keras_state")

BACKENDS = ("tensorflow", "jax")

WORKER = textwrap.dedent(
    """
    import os
    import sys
    import time

    import keras
    import numpy as np

    from keras_transformer import TransformerConfig, build_transformer

    folder, other = sys.argv[1], sys.argv[2]
    backend = keras.backend.backend()
    assert backend == sys.argv[3], backend


    def logits(model, source, target):
        inputs = {"source_ids": source, "target_ids": target}
        if backend == "jax":  # One jit compile beats JAX's per-op eager mode.
            return np.asarray(model.predict_on_batch(inputs))
        return keras.ops.convert_to_numpy(model(inputs, training=False))


    keras.utils.set_random_seed(2024)
    config = TransformerConfig.preset(
        "tiny",
        vocab_size=50,
        d_model=32,
        d_ff=64,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    model = build_transformer(config)
    rng = np.random.default_rng(len(backend))
    source = rng.integers(1, 50, size=(3, 7)).astype("int32")
    target = rng.integers(1, 50, size=(3, 5)).astype("int32")
    source[1, 4:] = 0
    source[2, 2:] = 0
    target[1, 3:] = 0
    np.save(f"{folder}/{backend}_source.npy", source)
    np.save(f"{folder}/{backend}_target.npy", target)
    np.save(f"{folder}/{backend}_logits.npy", logits(model, source, target))
    model.save(f"{folder}/{backend}_partial.keras")
    os.replace(f"{folder}/{backend}_partial.keras", f"{folder}/{backend}.keras")

    deadline = time.monotonic() + 240
    while not os.path.exists(f"{folder}/{other}.keras"):
        assert time.monotonic() < deadline, f"no model from {other}"
        time.sleep(0.2)
    loaded = keras.saving.load_model(f"{folder}/{other}.keras")
    np.save(
        f"{folder}/{other}_logits_in_{backend}.npy",
        logits(
            loaded,
            np.load(f"{folder}/{other}_source.npy"),
            np.load(f"{folder}/{other}_target.npy"),
        ),
    )
    """
)


def run_workers(script, folder):
    """Start both workers; return once both exited, failing on any error."""
    processes = {}
    for backend, other in (BACKENDS, BACKENDS[::-1]):
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        processes[backend] = subprocess.Popen(
            [sys.executable, str(script), str(folder), other, backend],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    deadline = time.monotonic() + 300
    try:
        while any(p.poll() is None for p in processes.values()):
            failed = [b for b, p in processes.items() if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        outputs = {b: p.communicate()[0] for b, p in processes.items()}
    for backend, process in processes.items():
        assert process.returncode == 0, (
            f"{backend} worker failed (rc {process.returncode}):\n"
            f"{outputs[backend][-4000:]}"
        )


def test_saved_models_agree_across_backends(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    run_workers(script, tmp_path)

    for saved_by, loaded_by in (BACKENDS, BACKENDS[::-1]):
        expected = np.load(tmp_path / f"{saved_by}_logits.npy")
        actual = np.load(tmp_path / f"{saved_by}_logits_in_{loaded_by}.npy")
        assert expected.shape == actual.shape == (3, 5, 50)
        assert expected.dtype == actual.dtype == np.float32
        assert np.all(np.isfinite(expected))
        assert np.std(expected) > 1e-3  # A real model, not a constant.
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=0)
