"""Data-parallel training on TensorFlow and JAX, chosen by one word.

`setup_distribution(mode)` returns a `DistributionPlan`: where the model is
built (`plan.scope()`), how many replicas share each batch, and which share
of every global batch this process feeds.

- `none`: one device.
- `mirrored`: TensorFlow `tf.distribute.MirroredStrategy` over the local GPUs,
  else the (logical) CPU devices; JAX `keras.distribution.DataParallel` over
  the local devices.
- `multiworker`: TensorFlow `tf.distribute.MultiWorkerMirroredStrategy`, the
  cluster read from `TF_CONFIG`; JAX `keras.distribution.initialize()` (that
  is `jax.distributed.initialize`) from `KERAS_DISTRIBUTION_JOB_ADDRESSES`
  (the coordinator's host:port), `KERAS_DISTRIBUTION_NUM_PROCESSES` and
  `KERAS_DISTRIBUTION_PROCESS_ID`, then `DataParallel` over every process's
  devices.
- `auto`: `multiworker` if `TF_CONFIG` is set (TensorFlow) or
  `KERAS_DISTRIBUTION_NUM_PROCESSES` > 1 (JAX); else `mirrored` with more
  than one device; else `none`.

On torch only `none` (and `auto`, which is then `none`) exists:
`TORCH_UNSUPPORTED` says why.

Every process generates its own rows of each global batch (`shard_index` of
`num_shards`, see `BucketedBatches`), and the loss's token weights are
computed on the global batch, so the gradient equals the single-device one.

`simulate_cpu_devices(n)` splits the host CPU into n devices for tests and
laptops; it must run before the backend starts (the CLI's `--cpu-devices`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from typing import Any

import keras

from keras_transformer.training.accelerators import (
    check_mirrored_devices,
    warn_if_gpus_unused,
)
from keras_transformer.training.options import DISTRIBUTE_MODES as MODES

# Why --distribute mirrored|multiworker is refused on torch. Keras 3.15 has
# no data-parallel route for torch inside `fit`: `keras.distribution` has no
# torch implementation (keras/src/backend/__init__.py sets
# distribution_lib = None for torch), and the torch trainer's `train_step`
# hands each process's own gradients straight to `optimizer.apply` (no
# cross-replica reduction, no strategy scope, steps_per_execution 1 only).
# Data parallelism would mean replacing Keras's private train step or
# optimizer in every process.
TORCH_UNSUPPORTED = (
    "--distribute {mode} is not available on the torch backend: Keras 3.15 "
    "has no data-parallel training for torch inside model.fit "
    "(keras.distribution covers JAX, tf.distribute TensorFlow, and the torch "
    "trainer applies each process's gradients without reducing them across "
    "devices). On torch, train on one device: --distribute auto or none (one "
    "GPU where the CUDA build of torch sees one). For several devices or "
    "machines use KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow; a run's "
    "checkpoints load on every backend (docs/distributed.md)."
)


@dataclasses.dataclass
class DistributionPlan:
    """How this process takes part in training.

    num_replicas: devices that share every global batch (all processes).
    shard_index, num_shards: this process's rows of each global batch.
    """

    mode: str
    num_replicas: int = 1
    shard_index: int = 0
    num_shards: int = 1
    strategy: Any = None  # tf.distribute.Strategy on TensorFlow.

    @property
    def is_chief(self) -> bool:
        """The one process that writes the run directory."""
        return self.shard_index == 0

    def scope(self):
        """Build and compile the model inside this."""
        if self.strategy is not None:
            return self.strategy.scope()
        return contextlib.nullcontext()

    def prepare_fit(self, model, sample_batch) -> None:
        """Build the compiled loss and metrics from a local sample batch.

        Keras 3.15's TensorFlow `fit` builds them from a batch it first
        reduces across replicas, which MultiWorkerMirroredStrategy cannot do
        for a nested batch (tensorflow/tensorflow#72388: "Attempt to convert
        a value ({'source_ids': PerReplica...})"). Built here, under the
        strategy's scope, that step has nothing left to do and is skipped.
        """
        if self.mode != "multiworker" or self.strategy is None:
            return
        with self.strategy.scope():
            model._symbolic_build(data_batch=sample_batch)
        model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
        _reduce_scalar_logs_over_workers()

    def local(self):
        """Work of the chief alone (saving, decoding) runs in this.

        Under a JAX distribution every new variable is placed on all
        processes' devices, which each of them must join; the chief saving
        or translating alone would wait for the others forever. Inside,
        new variables stay on this process (the replicated weights are read
        from its own copy).
        """
        if self.num_shards == 1 or keras.backend.backend() != "jax":
            return contextlib.nullcontext()
        return _no_distribution()

    def barrier(self, name: str) -> None:
        """Wait until every process gets here (no-op in one process)."""
        self.all_ok(True, name)

    def all_ok(self, ok: bool, name: str) -> bool:
        """Whether every process says `ok`: a barrier that carries one bit,
        so that work done by the chief alone (preparing the data) can fail
        without leaving the others waiting for it."""
        if self.num_shards == 1:
            return ok
        failed = 0.0 if ok else 1.0
        if self.strategy is not None:
            import tensorflow as tf

            # An all-reduce over every replica returns only when all have
            # joined it.
            flags = self.strategy.run(lambda: tf.constant(failed))
            return float(self.strategy.reduce("SUM", flags, axis=None)) == 0.0
        import numpy as np
        from jax.experimental import multihost_utils

        flags = multihost_utils.process_allgather(np.array([failed], np.float32))
        return not np.asarray(flags).any()

    def describe(self) -> str:
        if self.mode == "none":
            return "one device"
        where = f"{self.num_replicas} replica" + ("s" if self.num_replicas != 1 else "")
        if self.num_shards > 1:
            where += f" in {self.num_shards} processes (this is {self.shard_index})"
        return f"{self.mode}: {where}"


@contextlib.contextmanager
def _no_distribution():
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(previous)


def simulate_cpu_devices(count: int) -> None:
    """Split the host CPU into `count` devices (before the backend starts).

    JAX reads `--xla_force_host_platform_device_count` from XLA_FLAGS when it
    creates its CPU client; TensorFlow takes logical device configurations
    until its runtime initialises. Raises RuntimeError when it is too late.
    """
    if count < 1:
        raise ValueError(f"--cpu-devices must be >= 1. Received: {count}")
    backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        raise ValueError(
            f"--cpu-devices {count}: the {backend} backend cannot split the CPU "
            "into devices, and trains on one device (see --distribute). Leave "
            "--cpu-devices out, or use KERAS_BACKEND=jax or tensorflow."
        )
    if backend == "jax":
        flags = re.sub(
            r"--xla_force_host_platform_device_count=\d+",
            "",
            os.environ.get("XLA_FLAGS", ""),
        )
        flag = f"--xla_force_host_platform_device_count={count}"
        if "collective_call_terminate_timeout" not in flags:
            # The simulated devices share the cores: under load a device
            # thread can miss an all-reduce for XLA's default 40 s, and XLA
            # then aborts the process.
            flags += " --xla_cpu_collective_call_terminate_timeout_seconds=600"
        os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()
        import jax

        if jax.local_device_count("cpu") != count:
            raise RuntimeError(
                f"--cpu-devices {count}: JAX already started with "
                f"{jax.local_device_count('cpu')} CPU device(s); set XLA_FLAGS="
                f"{flag} before the first JAX computation."
            )
    else:
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * count
            )
        except RuntimeError as error:
            if len(tf.config.list_logical_devices("CPU")) != count:
                raise RuntimeError(
                    f"--cpu-devices {count}: TensorFlow has already started "
                    f"({error}); call simulate_cpu_devices before any "
                    "TensorFlow computation."
                ) from None


def _multi_process_launch() -> str:
    """The environment variable that says this process is one of several
    (torchrun's, TensorFlow's or JAX's cluster), or ""."""
    for name in ("WORLD_SIZE", "KERAS_DISTRIBUTION_NUM_PROCESSES"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return f"{name}={value}"
    return "TF_CONFIG set" if os.environ.get("TF_CONFIG") else ""


def setup_distribution(mode: str = "auto") -> DistributionPlan:
    """Choose and start data-parallel training; see the module table."""
    if mode not in MODES:
        raise ValueError(
            f"--distribute must be one of {', '.join(MODES)}. Received: {mode!r}"
        )
    backend = keras.backend.backend()
    if backend in ("tensorflow", "jax"):
        plan = _tensorflow_plan(mode) if backend == "tensorflow" else _jax_plan(mode)
        warn_if_gpus_unused()  # A CPU build on a GPU machine says nothing.
        return plan
    launch = _multi_process_launch()
    if backend == "torch" and mode == "auto" and launch:
        # Each process would train alone on all the data, racing for the run.
        raise ValueError(TORCH_UNSUPPORTED.format(mode=f"auto (with {launch})"))
    if mode in ("auto", "none"):
        warn_if_gpus_unused()
        return DistributionPlan("none")
    if backend == "torch":
        raise ValueError(TORCH_UNSUPPORTED.format(mode=mode))
    raise ValueError(f"--distribute {mode} needs the TensorFlow or JAX backend.")


def _tensorflow_plan(mode: str) -> DistributionPlan:
    import tensorflow as tf

    if mode == "auto":
        devices = _tensorflow_devices()
        if os.environ.get("TF_CONFIG"):
            mode = "multiworker"
        else:
            mode = "mirrored" if len(devices) > 1 else "none"
    if mode == "none":
        return DistributionPlan("none")
    if mode == "mirrored":
        devices = _tensorflow_devices()
        check_mirrored_devices(devices)
        strategy = tf.distribute.MirroredStrategy(devices=devices)
        return DistributionPlan(
            "mirrored", num_replicas=strategy.num_replicas_in_sync, strategy=strategy
        )
    if not os.environ.get("TF_CONFIG"):
        raise ValueError(
            "--distribute multiworker on TensorFlow reads the cluster from the "
            'TF_CONFIG environment variable ({"cluster": {"worker": [...]}, '
            '"task": {"type": "worker", "index": i}}); it is not set.'
        )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    return DistributionPlan(
        "multiworker",
        num_replicas=strategy.num_replicas_in_sync,
        shard_index=resolver.task_id,
        num_shards=len(resolver.cluster_spec().as_dict().get("worker", [None])),
        strategy=strategy,
    )


def _tensorflow_devices() -> list[str]:
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    devices = gpus or tf.config.list_logical_devices("CPU")
    return [device.name for device in devices]


def _jax_plan(mode: str) -> DistributionPlan:
    import jax

    processes = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1"))
    if mode == "auto":
        if processes > 1:
            mode = "multiworker"
        else:
            mode = "mirrored" if jax.local_device_count() > 1 else "none"
    if mode == "none":
        return DistributionPlan("none")
    if mode == "multiworker":
        if processes < 2:
            raise ValueError(
                "--distribute multiworker on JAX reads the processes from "
                "KERAS_DISTRIBUTION_JOB_ADDRESSES (the coordinator's host:port), "
                "KERAS_DISTRIBUTION_NUM_PROCESSES (> 1) and "
                "KERAS_DISTRIBUTION_PROCESS_ID; they are not set."
            )
        # Before anything starts the backend: CPU processes exchange
        # gradients through gloo (GPUs keep their own collectives).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        keras.distribution.initialize()
    devices = keras.distribution.list_devices()
    if mode == "mirrored":
        check_mirrored_devices(devices)
    # Each process already generates its own rows (shard_index): Keras must
    # not shard the data again.
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    )
    return DistributionPlan(
        mode,
        num_replicas=len(devices),
        shard_index=jax.process_index(),
        num_shards=jax.process_count(),
    )


def _reduce_scalar_logs_over_workers() -> None:
    """Keras 3.15's TensorFlow trainer averages each step's logs across
    workers with `strategy.reduce("MEAN", value, axis=0)`, which fails for
    the scalar loss and metrics under MultiWorkerMirroredStrategy ("Invalid
    reduction dimension 0 for input with 0 dimensions",
    tensorflow/tensorflow#72388). Average those scalars over the replicas
    (axis None) instead; everything else goes to Keras unchanged.
    """
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer

    keras_reduce = trainer.reduce_per_replica
    if getattr(keras_reduce, "scalars_over_workers", False):
        return

    def reduce_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy
        ):
            return keras_reduce(values, strategy, reduction)

        def reduce(value):
            local = getattr(value, "values", (value,))[0]
            if getattr(local, "shape", None) is not None and local.shape.rank == 0:
                return strategy.reduce("MEAN", value, axis=None)
            return keras_reduce(value, strategy, reduction)

        return keras.tree.map_structure(reduce, values)

    reduce_per_replica.scalars_over_workers = True
    trainer.reduce_per_replica = reduce_per_replica
