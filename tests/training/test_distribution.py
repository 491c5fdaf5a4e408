"""Data-parallel training on 2 simulated CPU devices and in 2 processes.

The device count is fixed when a backend starts, so every check runs
`tests/training/distributed_checks.py` in a fresh subprocess on the backend under test:
one process on 2 simulated devices for the mirrored checks (`mirrored`; two
on TensorFlow), and
one run of 2 worker processes for the multi-worker checks (`workers`), each
shared by the tests that read its results. On torch, which has no
data-parallel `fit` in Keras 3.15, the flags are refused with the reason and
what to use instead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from tests.helpers import write_training_corpus

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("distributed_checks.py")
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
BACKEND = keras.backend.backend()
data_parallel = pytest.mark.skipif(
    BACKEND == "torch",
    reason="Keras 3.15 has no data-parallel fit on torch: --distribute "
    "mirrored|multiworker is refused there (test_torch_refuses_...)",
)


def run_check(*arguments, env=None):
    environment = {**os.environ, "KERAS_BACKEND": BACKEND, **(env or {})}
    # The checks set their own device count; other XLA flags (the suites'
    # optimization level, scripts/test.sh) pass through.
    flags = environment.pop("XLA_FLAGS", "").split()
    kept = [f for f in flags if not f.startswith(DEVICE_COUNT_FLAG)]
    if kept:
        environment["XLA_FLAGS"] = " ".join(kept)
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *map(str, arguments)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process, timeout=900):
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-4000:]
    return output


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    write_training_corpus(directory)
    return directory


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory, corpus_dir):
    """The parity and resume checks, run by one process on 2 simulated
    devices: {"parity": its report, "resume": its report}."""
    out = tmp_path_factory.mktemp("mirrored")
    if BACKEND == "tensorflow":
        # One process each: a second MirroredStrategy in a process reuses
        # the first one's collective instance keys, and TensorFlow aborts
        # the all-reduce ("Shape mismatch in the collective instance").
        finish(run_check("parity", out / "parity.json"))
        finish(run_check("resume", out / "resume.json", corpus_dir))
    else:
        finish(run_check("mirrored", out, corpus_dir))
    return {name: json.loads((out / f"{name}.json").read_text()) for name in
            ("parity", "resume")}  # fmt: skip


@data_parallel
def test_one_step_on_two_devices_equals_one_device(mirrored):
    report = mirrored["parity"]
    assert report["replicas"] == 2
    for optimizer in ("sgd", "adam"):
        result = report[optimizer]
        assert result["max_weight_change"] > 1e-4  # The step did something.
        assert result["max_weight_difference"] <= 1e-5, (optimizer, result)
        assert result["multi_loss"] == pytest.approx(result["single_loss"], abs=1e-5)


@data_parallel
def test_sigterm_resume_on_two_devices_equals_uninterrupted(mirrored):
    result = mirrored["resume"]
    assert result["replicas"] == 2
    assert result["stopped_at"] is not None
    assert result["resumed_steps"] == result["reference_steps"] == 12
    assert result["max_weight_difference"] <= 1e-6, result


def free_port():
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def cluster_environments():
    ports = [free_port(), free_port()]
    if BACKEND == "tensorflow":
        workers = [f"localhost:{port}" for port in ports]
        return [
            {
                "TF_CONFIG": json.dumps(
                    {
                        "cluster": {"worker": workers},
                        "task": {"type": "worker", "index": index},
                    }
                )
            }
            for index in range(2)
        ]
    return [
        {
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"localhost:{ports[0]}",
            "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
            "KERAS_DISTRIBUTION_PROCESS_ID": str(index),
        }
        for index in range(2)
    ]


@pytest.fixture(scope="module")
def workers(tmp_path_factory, corpus_dir):
    """One multi-worker run of 2 processes over one epoch of the text corpus
    (with validation), and the store its data comes from, prepared here
    alike: {"run_dir", "store", "whole" (the global batches one process
    with both replicas would feed), "outputs" (each worker's arrays)}."""
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.data.prepare import prepare_store
    from keras_transformer.data.store_options import PrepareOptions
    from keras_transformer.training import store_batches
    from keras_transformer.training.distribution import DistributionPlan
    from tests.helpers import training_options

    tmp_path = tmp_path_factory.mktemp("workers")
    files = {
        name: (str(corpus_dir / f"{name}.en"), str(corpus_dir / f"{name}.de"))
        for name in ("train", "valid")
    }
    prepared = PrepareOptions(
        out=str(tmp_path / "store"),
        data=DatasetSpec(name="files", files=files),
        vocab_size=400,
        max_length=32,
        workers=1,
    )
    store = prepare_store(prepared, log=lambda message: None)
    options = training_options("unused", files)
    whole = store_batches(options, store, DistributionPlan("x", num_replicas=2)).train
    run_dir = tmp_path / "run"
    outputs = [tmp_path / f"worker-{index}.npz" for index in range(2)]
    processes = [
        run_check("worker", out, corpus_dir, run_dir, len(whole), env=env)
        for out, env in zip(outputs, cluster_environments())
    ]
    for process in processes:
        finish(process)
    return {
        "run_dir": run_dir,
        "store": store,
        "whole": whole,
        "outputs": [dict(np.load(path)) for path in outputs],
    }


@data_parallel
def test_two_workers_on_localhost_end_with_identical_weights(workers):
    first, second = workers["outputs"]
    steps = len(workers["whole"])
    assert int(first["steps"]) == int(second["steps"]) == steps
    finals = [name for name in first if name.startswith("final_")]
    assert len(finals) > 10 and finals == [n for n in second if n.startswith("final_")]
    for name in finals:
        np.testing.assert_array_equal(first[name], second[name])
    run_dir = workers["run_dir"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["identity"]["replicas"] == 2
    assert (run_dir / "model.keras").exists()  # Written by the chief alone.


@pytest.mark.skipif(BACKEND != "torch", reason="the torch backend's refusal")
@pytest.mark.parametrize("mode", ["mirrored", "multiworker"])
def test_torch_refuses_data_parallel_saying_why_and_what_works(
    mode, tmp_path, corpus_dir, capsys
):
    from keras_transformer.cli import main
    from keras_transformer.training.distribution import setup_distribution

    assert setup_distribution("auto").mode == setup_distribution("none").mode == "none"
    run_dir = tmp_path / "run"
    status = main(
        ["train", "--distribute", mode, "--run-dir", str(run_dir),
         "--dataset", "files",
         "--train-src", str(corpus_dir / "train.en"),
         "--train-tgt", str(corpus_dir / "train.de")]
    )  # fmt: skip
    error = capsys.readouterr().err
    assert status == 2
    assert f"--distribute {mode} is not available on the torch backend" in error
    assert "--distribute auto or none" in error
    assert "KERAS_BACKEND=jax" in error and "KERAS_BACKEND=tensorflow" in error
    assert not run_dir.exists()  # Refused before anything was written.


@pytest.mark.skipif(BACKEND != "torch", reason="the torch backend's refusal")
@pytest.mark.parametrize(
    "name, value", [("WORLD_SIZE", "2"), ("KERAS_DISTRIBUTION_NUM_PROCESSES", "4")]
)
def test_torch_auto_in_a_multi_process_launch_is_refused(name, value, monkeypatch):
    """Under torchrun every process would train alone on all the data."""
    from keras_transformer.training.distribution import setup_distribution

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"--distribute auto \(with {name}={value}\)"):
        setup_distribution("auto")
    monkeypatch.setenv(name, "1")
    assert setup_distribution("auto").mode == "none"


@pytest.mark.skipif(BACKEND != "torch", reason="the torch backend's refusal")
def test_torch_refuses_cpu_devices_naming_the_flag():
    from keras_transformer.training.distribution import simulate_cpu_devices

    with pytest.raises(ValueError, match="--cpu-devices 2: the torch backend"):
        simulate_cpu_devices(2)


@data_parallel
def test_two_workers_over_one_epoch_of_a_store_read_only_their_rows(workers):
    """Every training pair is read once in the epoch, and each process reads
    its share of each single-process global batch (and its weights). The
    workers train on the text: the store they read is the one the chief
    prepared from it, the same as `store` (its fingerprint)."""
    import collections

    store, whole = workers["store"], workers["whole"]
    manifest = json.loads((workers["run_dir"] / "manifest.json").read_text())
    assert manifest["identity"]["data"]["fingerprint"] == store.fingerprint
    seen = collections.Counter()
    for worker, share in zip(workers["outputs"], range(2)):
        assert int(worker["steps"]) == len(whole) > 3
        for index in range(len(whole)):
            inputs, labels, weights = whole[index]
            rows = labels.shape[0]
            mine = slice(rows * share // 2, rows * (share + 1) // 2)
            for name, expected in (
                ("source", inputs["source_ids"]),
                ("target", inputs["target_ids"]),
                ("labels", labels),
                ("weights", weights),
            ):
                np.testing.assert_array_equal(
                    worker[f"{name}_{index}"], expected[mine], err_msg=(name, index)
                )
            for source, label in zip(
                worker[f"source_{index}"], worker[f"labels_{index}"]
            ):
                if label.any():
                    seen[(tuple(source[source > 0]), tuple(label[label > 0]))] += 1
    pairs = store.pairs()
    every = np.arange(len(pairs))
    expected = collections.Counter()
    for side_ids in zip(*(_rows(pairs, side, every) for side in ("source", "target"))):
        source, target = side_ids
        expected[(tuple(source), (*target, 3))] += 1
    assert seen == expected  # Each pair once, in one process or the other.


def _rows(pairs, side, members):
    lengths, rows, _, ids = pairs.gather(side, members)
    return np.split(ids, np.cumsum(lengths)[:-1])
