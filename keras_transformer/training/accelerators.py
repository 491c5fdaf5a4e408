"""Which devices the backend uses, and why it may not use the GPUs there are.

A GPU machine with a CPU build of the backend (`[jax]` instead of
`[jax-cuda]`, `[tensorflow]` instead of `[tensorflow-cuda]`) trains on the CPU
without a word from the backend. `warn_if_gpus_unused` compares what
`nvidia-smi -L` lists with what the backend sees and names the extra that
would use them; `check_mirrored_devices` refuses data parallelism over one
device, listing the devices found.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence

import keras

from keras_transformer.utils.optional_imports import install_command

CUDA_EXTRAS = {"tensorflow": "tensorflow-cuda", "jax": "jax-cuda", "torch": "torch"}


def nvidia_gpus(timeout: float = 10.0) -> list[str]:
    """The GPUs `nvidia-smi -L` lists ("GPU 0: NVIDIA H200 (UUID: ...)"),
    or [] where it is missing or fails (no driver, no GPU)."""
    command = shutil.which("nvidia-smi")
    if command is None:
        return []
    try:
        listed = subprocess.run(
            [command, "-L"], capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if listed.returncode != 0:
        return []
    lines = listed.stdout.splitlines()
    return [line.strip() for line in lines if line.startswith("GPU")]


def backend_gpus() -> list[str]:
    """The GPUs the running Keras backend sees (starts the backend)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return [str(d) for d in jax.devices() if d.platform != "cpu"]
    if backend == "tensorflow":
        import tensorflow as tf

        return [d.name for d in tf.config.list_physical_devices("GPU")]
    if backend == "torch":
        import torch

        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return []


def unused_gpus_warning() -> str | None:
    """The warning for GPUs that nvidia-smi lists and the backend does not
    see, or None."""
    listed = nvidia_gpus()
    if not listed or backend_gpus():
        return None
    backend = keras.backend.backend()
    extra = CUDA_EXTRAS.get(backend)
    fix = f" Install the CUDA build: {install_command(extra)}" if extra else ""
    if backend == "torch":  # The extra's pin is met by a CPU wheel too.
        fix = (
            " Install a CUDA build of torch 2.13.0: pip install --force-reinstall "
            f"torch==2.13.0 (PyPI's Linux wheel is one; {install_command(extra)} "
            "keeps a CPU build that is already there)."
        )
    return (
        f"warning: nvidia-smi lists {len(listed)} GPU(s) ({listed[0]}"
        f"{', ...' if len(listed) > 1 else ''}) but the {backend} backend sees "
        f"none: this runs on the CPU.{fix} (docs/install.md)."
    )


def warn_if_gpus_unused() -> None:
    """Print `unused_gpus_warning` to stderr, if there is one."""
    warning = unused_gpus_warning()
    if warning:
        print(f"[keras-transformer] {warning}", file=sys.stderr)


def check_mirrored_devices(devices: Sequence[str]) -> None:
    """Refuse `--distribute mirrored` over fewer than two devices.

    Raises:
        ValueError: listing the devices found and how to get more.
    """
    if len(devices) >= 2:
        return
    found = ", ".join(map(str, devices)) or "none"
    raise ValueError(
        f"--distribute mirrored needs 2 or more devices; the "
        f"{keras.backend.backend()} backend found {len(devices)}: {found}. "
        "Use --distribute auto (or none) on one device, --cpu-devices N to "
        "split the CPU, or on GPUs install the backend's CUDA build "
        "(docs/install.md)."
    )
