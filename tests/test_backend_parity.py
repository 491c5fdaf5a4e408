"""A model saved under one backend gives the same logits, the same training
steps and, trained, the same translations under every other.

One worker subprocess per installed backend (the backend is fixed when Keras
is imported), all at the same time: each builds a seeded tiny model (with a
word pointer), saves
it with fixed inputs, saves a second one without dropout, trains a third one
briefly on a toy task and saves it, then waits for every other worker's
files and, for every model (its own included), computes the logits on that
model's inputs, trains the dropout-free one a few steps exactly as `train`
compiles it (the warmup schedule, the label-smoothed loss, token weights),
and decodes fixed sources greedily and with beam 4 (all four hypotheses)
with the trained one. The test compares what each backend computed for each
model. It does the same
work whichever backend the pytest session itself uses, so scripts/test.sh
runs it in one suite (tests/conftest.py, BACKEND_NEUTRAL).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from keras_transformer.config import EOS_ID
from keras_transformer.utils.optional_imports import is_installed

pytestmark = [pytest.mark.usefixtures("keras_state"), pytest.mark.backend_neutral]

BACKENDS = tuple(b for b in ("tensorflow", "jax", "torch") if is_installed(b))

WORKER = textwrap.dedent(
    """
    import os
    import sys
    import time

    import keras
    import numpy as np

    from keras_transformer import TransformerConfig, build_transformer, training
    from keras_transformer.config import BOS_ID, EOS_ID
    from keras_transformer.data.pipeline import token_weights
    from keras_transformer.decoding.compile import enable_compilation_cache
    from keras_transformer.decoding.generator import SequenceGenerator

    folder, backend, others = sys.argv[1], sys.argv[2], sys.argv[3:]
    assert keras.backend.backend() == backend, keras.backend.backend()
    # The three models of each backend have the same shapes: their searches
    # compile to the same programs, so the second and third load them from
    # the compilation cache, as the command line does (TensorFlow, JAX).
    enable_compilation_cache(f"{folder}/cache-{backend}")
    VOCAB = 50


    def logits(model, source, target):
        inputs = {"source_ids": source, "target_ids": target}
        if backend == "jax":  # One jit compile beats JAX's per-op eager mode.
            return np.asarray(model.predict_on_batch(inputs))
        return keras.ops.convert_to_numpy(model(inputs, training=False))


    def config(**changes):
        return TransformerConfig.preset(
            "tiny", vocab_size=VOCAB, d_model=32, d_ff=64, num_heads=4,
            num_encoder_layers=1, num_decoder_layers=1, **changes
        )


    def save(model, name):
        model.save(f"{folder}/{name}.partial.keras")
        os.replace(f"{folder}/{name}.partial.keras", f"{folder}/{name}.keras")


    def toy_batch(rng):
        # Target = source: a task learnt in a few steps, ending at the
        # source's length, so the outputs end in EOS.
        lengths = rng.integers(3, 7, size=32)
        source = np.zeros((32, 8), "int32")
        decoder_input = np.zeros((32, 8), "int32")
        labels = np.zeros((32, 8), "int32")
        for row, length in enumerate(lengths):
            words = rng.integers(4, VOCAB, size=length)
            source[row, :length] = words
            decoder_input[row, : length + 1] = [BOS_ID, *words]
            labels[row, : length + 1] = [*words, EOS_ID]
        return {"source_ids": source, "target_ids": decoder_input}, labels


    keras.utils.set_random_seed(2024)
    # With a parsing decoder's word pointer (4-6 are its brackets): its
    # gather and projection are checked here; the other models are plain.
    model = build_transformer(config(pointer_bracket_ids=(4, 5, 6)))
    rng = np.random.default_rng(len(backend))
    source = rng.integers(1, VOCAB, size=(3, 7)).astype("int32")
    target = rng.integers(1, VOCAB, size=(3, 5)).astype("int32")
    source[1, 4:] = 0
    source[2, 2:] = 0
    target[1, 3:] = 0
    np.save(f"{folder}/{backend}_source.npy", source)
    np.save(f"{folder}/{backend}_target.npy", target)
    save(model, f"{backend}_initial")
    save(build_transformer(config(dropout_rate=0.0)), f"{backend}_fresh")

    trained = build_transformer(config(dropout_rate=0.0))
    trained.compile(optimizer=keras.optimizers.Adam(5e-3),
                    loss=keras.losses.SparseCategoricalCrossentropy(
                        from_logits=True, ignore_class=0))
    data = np.random.default_rng(7)
    for _ in range(150):
        trained.train_on_batch(*toy_batch(data))
    save(trained, f"{backend}_trained")

    deadline = time.monotonic() + 600
    for other in others:
        while not os.path.exists(f"{folder}/{other}_trained.keras"):
            assert time.monotonic() < deadline, f"no model from {other}"
            time.sleep(0.2)
    sources = np.random.default_rng(11).integers(4, VOCAB, size=(6, 6))
    sources[3:, 4:] = 0  # Shorter sentences too.
    sources = sources.astype("int32")
    steps = [toy_batch(np.random.default_rng(step)) for step in range(4)]
    for owner in (backend, *others):
        fresh = keras.saving.load_model(f"{folder}/{owner}_fresh.keras")
        training.compile_model(fresh, fresh.config, training.TrainOptions())
        before = [keras.ops.convert_to_numpy(w).ravel() for w in fresh.weights]
        losses = []
        for inputs, labels in steps:
            weights = token_weights(labels, int((labels > 0).sum()))
            logs = fresh.train_on_batch(
                inputs, labels, sample_weight=weights, return_dict=True
            )
            losses.append(float(logs["loss"]))
        np.save(f"{folder}/{owner}_losses_in_{backend}.npy", np.array(losses))
        after = [keras.ops.convert_to_numpy(w).ravel() for w in fresh.weights]
        np.save(
            f"{folder}/{owner}_weights_in_{backend}.npy",
            np.stack([np.concatenate(before), np.concatenate(after)]),
        )
        loaded = keras.saving.load_model(f"{folder}/{owner}_initial.keras")
        inputs = [np.load(f"{folder}/{owner}_{n}.npy") for n in ("source", "target")]
        np.save(f"{folder}/{owner}_logits_in_{backend}.npy", logits(loaded, *inputs))
        loaded = keras.saving.load_model(f"{folder}/{owner}_trained.keras")
        for beam in (1, 4):
            search = SequenceGenerator(loaded, beam_size=beam, max_extra_length=4)
            ids, scores = search(sources)
            np.save(f"{folder}/{owner}_beam{beam}_in_{backend}.npy", ids)
            np.save(f"{folder}/{owner}_beam{beam}_scores_in_{backend}.npy", scores)
    """
)


def run_workers(script, folder):
    """Start one worker per backend; return once all exited, failing on any
    error."""
    processes = {}
    for backend in BACKENDS:
        others = [b for b in BACKENDS if b != backend]
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        processes[backend] = subprocess.Popen(
            [sys.executable, str(script), str(folder), backend, *others],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    deadline = time.monotonic() + 900
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
    failed = {b: p.returncode for b, p in processes.items() if p.returncode != 0}
    # Every failed worker's output: the others were killed once one failed
    # (rc -9), so the one that failed on its own may not be the first.
    assert not failed, "\n".join(
        f"{backend} worker failed (rc {code}):\n{outputs[backend][-3000:]}"
        for backend, code in failed.items()
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if len(BACKENDS) < 2:
        pytest.skip(f"needs two Keras backends installed; found {BACKENDS}")
    folder = tmp_path_factory.mktemp("parity")
    script = folder / "worker.py"
    script.write_text(WORKER)
    run_workers(script, folder)
    return folder


PAIRS = list(itertools.permutations(BACKENDS, 2))


@pytest.mark.parametrize(("saved_by", "loaded_by"), PAIRS)
def test_saved_models_give_the_same_logits_on_every_backend(
    results, saved_by, loaded_by
):
    expected = np.load(results / f"{saved_by}_logits_in_{saved_by}.npy")
    actual = np.load(results / f"{saved_by}_logits_in_{loaded_by}.npy")
    assert expected.shape == actual.shape == (3, 5, 50)
    assert expected.dtype == actual.dtype == np.float32
    assert np.all(np.isfinite(expected))
    assert np.std(expected) > 1e-3  # A real model, not a constant.
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("saved_by", "trained_by"), PAIRS)
def test_training_steps_are_the_same_on_every_backend(results, saved_by, trained_by):
    """Four updates of the same weights on the same batches, dropout off:
    the same per-token losses and the same weights after them."""
    expected = np.load(results / f"{saved_by}_losses_in_{saved_by}.npy")
    actual = np.load(results / f"{saved_by}_losses_in_{trained_by}.npy")
    assert expected.shape == (4,) and np.all(np.isfinite(expected))
    assert len(set(expected.round(4))) == 4  # Four different batches.
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)
    weights = f"{saved_by}_weights_in_"
    expected = np.load(results / f"{weights}{saved_by}.npy")
    assert np.abs(expected[1] - expected[0]).max() > 1e-4  # The updates moved it.
    # Adam divides each gradient by its own root mean square (epsilon 1e-9),
    # so a weight whose gradient is rounding noise moves by up to a learning
    # rate's worth either way, differently on each backend (seen: 0.16% of
    # the weights, by up to 1.7e-4). The losses above, which every weight
    # feeds, agree to 1e-5; so do all the other weights.
    close = np.abs(np.load(results / f"{weights}{trained_by}.npy") - expected) <= 1e-5
    assert close.mean() >= 0.99, f"{close.mean():.4f} of the weights within 1e-5"


@pytest.mark.parametrize(("trained_by", "decoded_by"), PAIRS)
@pytest.mark.parametrize("beam", [1, 4])
def test_a_trained_model_translates_the_same_on_every_backend(
    results, trained_by, decoded_by, beam
):
    """Greedy outputs, and beam 4's whole n-best lists, token for token."""
    expected = np.load(results / f"{trained_by}_beam{beam}_in_{trained_by}.npy")
    actual = np.load(results / f"{trained_by}_beam{beam}_in_{decoded_by}.npy")
    assert expected.shape == (6, beam, 10)
    # Trained: best outputs that end in EOS, and differ between sentences.
    assert sum(EOS_ID in row for row in expected[:, 0]) >= 3
    assert len({tuple(row) for row in expected[:, 0]}) > 3
    np.testing.assert_array_equal(actual, expected)
    # Sums of up to 10 steps' log-probabilities (seen: 1.03e-5 apart).
    scores = f"{trained_by}_beam{beam}_scores_in_"
    np.testing.assert_allclose(
        np.load(results / f"{scores}{decoded_by}.npy"),
        np.load(results / f"{scores}{trained_by}.npy"),
        atol=1e-4,
        rtol=0,
    )
