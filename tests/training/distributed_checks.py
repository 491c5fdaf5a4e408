"""Checks that need simulated devices or several processes, run by
tests/training/test_distribution.py in subprocesses (the device count is fixed when a
backend starts, so they cannot run inside the pytest process).

    python tests/training/distributed_checks.py mirrored OUT_DIR CORPUS_DIR
    python tests/training/distributed_checks.py parity OUT_JSON
    python tests/training/distributed_checks.py resume OUT_JSON CORPUS_DIR
    python tests/training/distributed_checks.py worker OUT_NPZ CORPUS_DIR RUN_DIR STEPS

Each writes its measurements to OUT; the test asserts on them. `mirrored`
is `parity` then `resume` in one process (OUT_DIR/parity.json,
OUT_DIR/resume.json): each process costs an import of the backend and a
start of its runtime, and both checks split the CPU into 2 devices. Not on
TensorFlow, whose second MirroredStrategy in a process reuses the first
one's collective keys.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import keras  # noqa: E402

keras.config.disable_traceback_filtering()
import numpy as np  # noqa: E402

from keras_transformer import (  # noqa: E402
    LabelSmoothedCrossEntropy,
    TokenCrossEntropy,
    TransformerConfig,
)
from keras_transformer.config import BOS_ID, EOS_ID  # noqa: E402
from keras_transformer.data.pipeline import token_weights  # noqa: E402
from keras_transformer.training import (  # noqa: E402
    TrainingInterrupted,
    TrainOptions,
    build_model,
    train,
)
from keras_transformer.training.distribution import (  # noqa: E402
    DistributionPlan,
    setup_distribution,
    simulate_cpu_devices,
)
from tests.helpers import TRAINING_MODEL, training_options  # noqa: E402

# The helpers' small model with one encoder and one decoder layer: the
# checks compare two ways of computing the same updates, which depth does not
# change, and every model traces (TensorFlow) or compiles (JAX) its train
# step anew, at about twice the cost with two layers of each.
SMALL_MODEL = {**TRAINING_MODEL, "num_encoder_layers": 1, "num_decoder_layers": 1}


def _parity_batch():
    """4 rows: the first replica's two are long, the second's short, so the
    replicas hold very different numbers of real target tokens."""
    rng = np.random.default_rng(0)
    rows, length = 4, 10
    source = np.zeros((rows, length), "int32")
    target = np.zeros((rows, length), "int32")
    labels = np.zeros((rows, length), "int32")
    for row, n in enumerate((9, 8, 2, 1)):
        words = rng.integers(4, 60, n)
        source[row, : n + 1] = rng.integers(4, 60, n + 1)
        target[row, : n + 1] = [BOS_ID, *words]
        labels[row, : n + 1] = [*words, EOS_ID]
    weights = token_weights(labels, int((labels != 0).sum()))
    return {"source_ids": source, "target_ids": target}, labels, weights


def _one_step(plan: DistributionPlan, initial, optimizer: str):
    options = TrainOptions(overrides={}, distribute=plan.mode)
    config = TransformerConfig.preset(
        "tiny", vocab_size=60, dropout_rate=0.0, **SMALL_MODEL
    )
    keras.utils.set_random_seed(0)
    model = build_model(options, config, plan)
    if optimizer == "sgd":  # Shows any error of scale, which Adam hides.
        with plan.scope():
            model.compile(
                optimizer=keras.optimizers.SGD(1.0),
                loss=LabelSmoothedCrossEntropy(config.label_smoothing),
                metrics=[TokenCrossEntropy(config.label_smoothing)],
            )
    model.set_weights(initial)
    x, y, w = _parity_batch()
    history = model.fit(x, y, sample_weight=w, batch_size=4, epochs=1, verbose=0)
    return (
        float(history.history["loss"][0]),
        [np.asarray(v) for v in model.get_weights()],
        [v.path for v in model.weights],
    )


def parity(out: str) -> None:
    simulate_cpu_devices(2)
    initial = _initial_weights()
    results = {}
    for optimizer in ("sgd", "adam"):
        results[optimizer] = [_one_step(DistributionPlan("none"), initial, optimizer)]
    plan = setup_distribution("mirrored")
    for optimizer in ("sgd", "adam"):
        results[optimizer].append(_one_step(plan, initial, optimizer))
    report = {"replicas": plan.num_replicas}
    for optimizer, (
        (loss_1, weights_1, paths),
        (loss_2, weights_2, _),
    ) in results.items():
        # Adam turns the rounding noise of gradients that are truly 0 (key
        # biases: softmax ignores a shift shared by all keys) into full
        # steps of either sign; SGD checks those weights.
        compared = [
            i
            for i, path in enumerate(paths)
            if optimizer == "sgd" or not path.endswith("key_projection/bias")
        ]
        report[optimizer] = {
            "single_loss": loss_1,
            "multi_loss": loss_2,
            "max_weight_difference": max(
                float(np.abs(weights_1[i] - weights_2[i]).max()) for i in compared
            ),
            "max_weight_change": max(
                float(np.abs(weights_1[i] - initial[i]).max()) for i in compared
            ),
        }
    Path(out).write_text(json.dumps(report))


def _initial_weights():
    options = TrainOptions(overrides={})
    config = TransformerConfig.preset(
        "tiny", vocab_size=60, dropout_rate=0.0, **SMALL_MODEL
    )
    keras.utils.set_random_seed(0)
    model = build_model(options, config)
    return [np.asarray(v) for v in model.get_weights()]


def _options(run_dir, corpus_dir, splits=("train", "valid"), **changes):
    files = {
        name: (f"{corpus_dir}/{name}.en", f"{corpus_dir}/{name}.de") for name in splits
    }
    return training_options(run_dir, files, overrides=dict(SMALL_MODEL), **changes)


class _SignalAtBatch(keras.callbacks.Callback):
    def __init__(self, batch):
        super().__init__()
        self.batch, self.seen = batch, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


def _final_weights(run_dir):
    model = keras.saving.load_model(Path(run_dir) / "model.keras")
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def resume(out: str, corpus_dir: str) -> None:
    """Uninterrupted vs SIGTERM-then-resumed, both on 2 simulated devices.

    Without a validation split: evaluation does not touch the weights, and
    on TensorFlow each of the four `fit` calls would trace it again (a
    third of this check's time). The worker check validates.
    """
    simulate_cpu_devices(2)  # Again after `parity` (`mirrored`): a no-op.
    work = Path(out).parent
    train_only = dict(splits=("train",), distribute="mirrored")
    reference = train(_options(work / "reference", corpus_dir, **train_only))
    interrupted = work / "interrupted"
    options = _options(interrupted, corpus_dir, **train_only)
    try:
        train(options, callbacks=[_SignalAtBatch(7)])
        stopped_at = None
    except TrainingInterrupted as stop:
        stopped_at = stop.step
    resumed = train(options)
    difference = max(
        float(np.abs(a - b).max())
        for a, b in zip(_final_weights(interrupted), _final_weights(work / "reference"))
    )
    manifest = json.loads((interrupted / "manifest.json").read_text())
    Path(out).write_text(
        json.dumps(
            {
                "replicas": manifest["identity"]["replicas"],
                "stopped_at": stopped_at,
                "reference_steps": reference.steps,
                "resumed_steps": resumed.steps,
                "max_weight_difference": difference,
            }
        )
    )


def mirrored(out_dir: str, corpus_dir: str) -> None:
    """`parity`, then `resume` (parity's single-device models come first:
    on JAX the mirrored plan sets a global distribution)."""
    parity(str(Path(out_dir) / "parity.json"))
    resume(str(Path(out_dir) / "resume.json"), corpus_dir)


class _Capture(keras.callbacks.Callback):
    """The weights this process holds when training ends."""

    def on_train_end(self, logs=None):
        self.weights = [np.asarray(w) for w in self.model.get_weights()]


def _record_epoch_zero(recorded: dict) -> None:
    """Keep the first batch the training data gives for each index of
    epoch 0 (the batches this process reads: its rows of each global one)."""
    from keras_transformer.data import pipeline

    real = pipeline.BucketedBatches._batch

    def record(self, plan, index):
        batch = real(self, plan, index)
        cached = self._cached
        if self.shuffle and cached and cached[0] == 0 and cached[1] is plan:
            # A copy: TensorFlow may wrap an aligned array without copying it
            # and later reuse that buffer for an op's output, so the array
            # handed to fit can change after the step has read it.
            recorded.setdefault(index, copy.deepcopy(batch))
        return batch

    pipeline.BucketedBatches._batch = record


def worker(out: str, corpus_dir: str, run_dir: str, steps: str) -> None:
    """One process of a multi-worker run (cluster from the environment) of
    `steps` updates on the text corpus, with its validation split: the
    chief prepares the token store, every process reads its rows of each
    global batch. Saves the steps trained, the weights this process ends
    with, and the rows it read for each batch of epoch 0."""
    options = _options(
        run_dir, corpus_dir, distribute="multiworker", max_steps=int(steps)
    )
    capture = _Capture()
    recorded: dict = {}
    _record_epoch_zero(recorded)
    result = train(options, callbacks=[capture])
    arrays = {"steps": np.asarray(result.steps)}
    for index, weight in enumerate(capture.weights):
        arrays[f"final_{index}"] = weight
    for index, (inputs, labels, weights) in recorded.items():
        arrays[f"source_{index}"] = inputs["source_ids"]
        arrays[f"target_{index}"] = inputs["target_ids"]
        arrays[f"labels_{index}"] = labels
        arrays[f"weights_{index}"] = weights
    np.savez(out, **arrays)


if __name__ == "__main__":
    if keras.backend.backend() == "jax":
        # As the command line does: JAX compiles each train step once, and
        # a later `train` of the same model and batch shapes (`resume`'s
        # interrupted and resumed runs, after its reference) loads it from
        # disk. Under pytest the cache is the session's
        # (KERAS_TRANSFORMER_CACHE, tests/conftest.py).
        from keras_transformer.decoding.compile import enable_compilation_cache

        enable_compilation_cache()
    command, *arguments = sys.argv[1:]
    checks = {
        "mirrored": mirrored,
        "parity": parity,
        "resume": resume,
        "worker": worker,
    }
    checks[command](*arguments)
