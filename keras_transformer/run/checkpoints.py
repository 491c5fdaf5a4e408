"""Step checkpoints a run resumes from exactly.

A checkpoint is two files in the run's `checkpoints/` directory:

- `ckpt-00000500.keras`: the whole model with its optimizer state (Adam's
  moments, the update counter, a float16 loss scale), loadable on its own
  by `translate`, `evaluate`, `average` and `export`;
- `ckpt-00000500.json`: what Keras does not save, written after the model
  file: the step, the run it belongs to, the data position (the next batch
  to feed), the dropout seed-generator states (on torch also the process's
  random generators, which Keras's torch dropout draws from; see
  `random_state`), the running sums of the
  epoch's training metrics (so a run resumed mid-epoch reports the whole
  epoch), and the model file's size and SHA-256 (and the sidecar's);
- `ckpt-00000500.lora.npz`, in a LoRA fine-tune only: each LoRA layer's
  base kernel and two factors by variable path. Keras saves such a layer's
  merged kernel (what `translate` needs) but not its parts, and loading it
  zeroes the factors; the sidecar, applied after `load_weights`, makes the
  resume exact.

Each is written under a temporary name, flushed to disk and renamed, so a
crash leaves either the old state or the new one; a failed write (a full
disk) removes what it wrote and raises `RunWriteError` naming the
file and the step. Temporary files a killed process left behind are
removed by `remove_partials` and by pruning. On resume the newest
checkpoint whose metadata parses, whose model file matches its recorded size
and digest, and which loads, wins; each one skipped is named in a warning.
Checkpoints are ordered by the step recorded in them and belong to one run
(its id is in the run's manifest), so nothing another run wrote is taken.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import json
import os
import re
import time
import warnings
from pathlib import Path

import keras
import numpy as np

from keras_transformer.data.pipeline import DataPosition
from keras_transformer.data.text_files import sha256_file
from keras_transformer.utils.atomic_files import (
    PARTIAL_MARK,
    atomic_write_text,
    atomic_write_with,
)

_STEM = "ckpt-{step:08d}"
_NAME = re.compile(r"ckpt-(\d+)\.(keras|json|lora\.npz)")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One checkpoint's metadata; `path` is its `.keras` model file."""

    path: Path
    step: int
    run_id: str
    position: DataPosition
    optimizer_iterations: int
    seed_states: list[list[int]]  # In model order (names vary per instance).
    size: int
    sha256: str
    # `model.metrics_variables` values; None when not saved inside an epoch.
    metric_states: list[list[float]] | None = None
    # The backend's process-wide random state (`random_state`), or None.
    random_state: dict[str, list[str]] | None = None
    # SHA-256 of the LoRA sidecar (`lora_path`); None when there is none.
    lora_sha256: str | None = None

    @property
    def metadata_path(self) -> Path:
        return self.path.with_suffix(".json")

    @property
    def lora_path(self) -> Path:
        return self.path.with_suffix(".lora.npz")


def lora_layers(model: keras.Model) -> list:
    """The model's layers with LoRA enabled (`Dense.enable_lora`,
    `ScaledEmbedding.enable_lora`)."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if getattr(layer, "lora_enabled", False)
    ]


def lora_variables(layer) -> tuple:
    """A LoRA layer's (frozen base, factor A, factor B) variables, then a
    table's trained rows' (ids, update) when it has them."""
    if hasattr(layer, "lora_embeddings_a"):  # ScaledEmbedding, as Embedding.
        table = (layer._embeddings, layer.lora_embeddings_a, layer.lora_embeddings_b)
        if layer.lora_rows is None:
            return table
        return (*table, layer.lora_row_ids, layer.lora_rows)
    return layer._kernel, layer.lora_kernel_a, layer.lora_kernel_b


def adapted_weight(layer):
    """The weight LoRA adapts in `layer` (a `Dense` kernel or an embedding
    table), with its factors merged when LoRA is enabled, as Keras saves it."""
    return layer.embeddings if hasattr(layer, "embeddings") else layer.kernel


def lora_state(model: keras.Model) -> dict[str, np.ndarray]:
    """What Keras does not save of the LoRA layers: each one's base kernel
    and factors, by variable path (empty without LoRA)."""
    state = {}
    for layer in lora_layers(model):
        for variable in lora_variables(layer):
            state[variable.path] = variable_value(variable)
    return state


def restore_lora_state(model: keras.Model, state: dict[str, np.ndarray], where) -> None:
    """Put `lora_state`'s arrays back; ValueError naming `where` when they
    are not this model's LoRA variables."""
    variables = {
        variable.path: variable
        for layer in lora_layers(model)
        for variable in lora_variables(layer)
    }
    if set(variables) != set(state):
        raise ValueError(
            f"{where} holds the LoRA state of {len(state)} variables, this "
            f"model has {len(variables)} (another --lora-targets or --lora-token-rows?)"
        )
    for path, variable in variables.items():
        if tuple(state[path].shape) != tuple(variable.shape):
            raise ValueError(
                f"{where}: {path} has shape {state[path].shape}, the model's "
                f"is {tuple(variable.shape)} (another --lora-rank, "
                "--lora-embedding-rank or --lora-token-rows?)"
            )
        variable.assign(state[path])


def _seed_state_variables(model: keras.Model) -> list:
    """The variables Keras keeps but does not save: dropout seed states."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def random_state() -> dict[str, list[str]] | None:
    """The backend's process-wide random generators, where dropout draws
    from them: on torch, Keras's dropout without an explicit seed (every
    layer here) uses torch's global generators, not the layer's seed
    generator, so an exact resume needs their state. None on TensorFlow
    and JAX, whose dropout draws from the seed-generator variables alone.

    Returns {"torch_cpu": [base64 state], "torch_cuda": [one per GPU]}.
    """
    if keras.backend.backend() != "torch":
        return None
    import torch  # noqa: TID251 - torch's own generators, torch backend only

    def encode(state) -> str:
        return base64.b64encode(state.numpy().tobytes()).decode("ascii")

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {
        "torch_cpu": [encode(torch.get_rng_state())],
        "torch_cuda": [encode(state) for state in cuda],
    }


def restore_random_state(checkpoint: Checkpoint) -> None:
    """Put back the random generators `random_state` saved with
    `checkpoint` (nothing where it saved none, or on another backend)."""
    saved = checkpoint.random_state
    if not saved or keras.backend.backend() != "torch":
        return
    import torch  # noqa: TID251 - torch's own generators, torch backend only

    def decode(text: str):
        return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

    torch.set_rng_state(decode(saved["torch_cpu"][0]))
    cuda = saved.get("torch_cuda", [])
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cuda and len(cuda) == visible:
        torch.cuda.set_rng_state_all([decode(state) for state in cuda])
    elif cuda:
        warnings.warn(
            f"{checkpoint.path}: saved the random state of {len(cuda)} CUDA "
            f"device(s), {visible} visible now; the GPU's dropout draws start "
            "afresh, so this resume is not bit-identical to an uninterrupted run.",
            stacklevel=2,
        )


def _iterations(model: keras.Model) -> int:
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class CheckpointSkipped(UserWarning):
    """`restore_latest` passed over an unusable checkpoint (named)."""


class RunWriteError(OSError):
    """A file of a run could not be written (a full disk, most often). What
    the failed write made is removed; the earlier checkpoints are intact.

    `what` names the file's role ("the checkpoint", "the final model");
    `step` is the update it was written at (the trainer sets it when the
    writer does not know it).
    """

    def __init__(self, path: Path, error: OSError, what: str, step: int | None = None):
        super().__init__(error.errno, error.strerror or str(error))
        self.path = Path(path)
        self.what = what
        self.step = step

    def __str__(self) -> str:
        reason = self.strerror
        if self.errno == errno.ENOSPC:
            reason += " (the disk is full)"
        at = "" if self.step is None else f" at step {self.step}"
        return (
            f"could not write {self.what} {self.path}{at}: {reason}. Nothing "
            "partial was left behind and the earlier checkpoints are intact; "
            "free some space and run the same command again to resume from "
            "the last one."
        )


def variable_value(variable) -> np.ndarray:
    """A variable's value as NumPy. Through a tensor: a metric variable of a
    MirroredStrategy is a distributed variable that NumPy cannot read, but
    read as a tensor outside the replicas it gives its aggregated value."""
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(variable)))


def metric_states(model: keras.Model) -> list[list[float]]:
    """The values of the model's metric variables (sums and counts)."""
    return [variable_value(v).tolist() for v in model.metrics_variables]


def save_checkpoint(
    model: keras.Model,
    directory: str | os.PathLike,
    *,
    step: int,
    run_id: str,
    position: DataPosition,
    metrics: list[list[float]] | None = None,
) -> Checkpoint:
    """Write the checkpoint of update `step` (see the module docstring).

    `metrics`: `metric_states(model)` taken inside the epoch (None when the
    metrics no longer hold the training epoch's sums).

    Raises:
        RunWriteError: a write failed; nothing of this checkpoint is left
            behind.
    """
    directory = Path(directory)
    path = directory / f"{_STEM.format(step=step)}.keras"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_with(path, model.save)
    except OSError as error:
        raise RunWriteError(path, error, "the checkpoint", step) from error
    sidecar = path.with_suffix(".lora.npz")
    try:
        lora_sha256 = _write_lora_sidecar(model, sidecar)
        return _write_metadata(
            model, path, step, run_id, position, metrics, lora_sha256
        )
    except OSError as error:
        # Without its metadata the model file is no checkpoint: remove it.
        failed = error.filename or path.with_suffix(".json")
        path.unlink(missing_ok=True)
        sidecar.unlink(missing_ok=True)
        raise RunWriteError(Path(failed), error, "the checkpoint", step) from error


def _write_lora_sidecar(model: keras.Model, path: Path) -> str | None:
    """Write `lora_state(model)` to `path` (nothing without LoRA); its SHA-256."""
    state = lora_state(model)
    if not state:
        return None

    def write(partial: Path) -> None:
        try:
            with open(partial, "wb") as handle:
                np.savez(handle, **state)
        except OSError as error:
            error.filename = error.filename or str(path)
            raise

    atomic_write_with(path, write)
    return sha256_file(path)


def _write_metadata(
    model: keras.Model,
    path: Path,
    step: int,
    run_id: str,
    position: DataPosition,
    metrics: list[list[float]] | None,
    lora_sha256: str | None = None,
) -> Checkpoint:
    checkpoint = Checkpoint(
        path=path,
        step=step,
        run_id=run_id,
        position=position,
        optimizer_iterations=_iterations(model),
        seed_states=[
            np.asarray(keras.ops.convert_to_numpy(v.value)).tolist()
            for v in _seed_state_variables(model)
        ],
        size=path.stat().st_size,
        sha256=sha256_file(path),
        metric_states=metrics,
        random_state=random_state(),
        lora_sha256=lora_sha256,
    )
    record = dataclasses.asdict(checkpoint)
    record["path"] = path.name
    record["saved_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    atomic_write_text(checkpoint.metadata_path, json.dumps(record, indent=1) + "\n")
    return checkpoint


def _read_metadata(path: Path) -> Checkpoint:
    """Parse a checkpoint's `.json`; ValueError naming the file if broken."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return Checkpoint(
            path=path.with_name(record["path"]),
            step=int(record["step"]),
            run_id=str(record["run_id"]),
            position=DataPosition(**record["position"]),
            optimizer_iterations=int(record["optimizer_iterations"]),
            seed_states=list(record["seed_states"]),
            size=int(record["size"]),
            sha256=str(record["sha256"]),
            # Absent from checkpoints written before it was recorded.
            metric_states=record.get("metric_states"),
            random_state=record.get("random_state"),
            lora_sha256=record.get("lora_sha256"),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: unreadable checkpoint metadata ({error})") from None


def _candidate_stems(directory: Path) -> list[tuple[int, Path]]:
    """(step from the name, metadata path) of every checkpoint-like file,
    newest first; a model file without metadata counts too."""
    found: dict[int, Path] = {}
    for path in directory.glob("ckpt-*"):
        match = _NAME.fullmatch(path.name)
        if match:
            step = int(match.group(1))
            found[step] = directory / f"{_STEM.format(step=step)}.json"
    return sorted(found.items(), reverse=True)


def list_checkpoints(
    directory: str | os.PathLike, run_id: str | None = None
) -> list[Checkpoint]:
    """Checkpoints with readable metadata (of run `run_id` if given) whose
    model file exists, oldest first by the step they hold."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for _, metadata in _candidate_stems(directory):
        try:
            checkpoint = _read_metadata(metadata)
        except ValueError:
            continue
        if checkpoint.path.exists() and run_id in (None, checkpoint.run_id):
            found.append(checkpoint)
    return sorted(found, key=lambda c: c.step)


def _check_files(checkpoint: Checkpoint) -> None:
    path = checkpoint.path
    if not path.exists():
        raise ValueError(f"{path} is missing (its metadata is present)")
    size = path.stat().st_size
    if size != checkpoint.size:
        raise ValueError(
            f"{path} has {size} bytes, its metadata says {checkpoint.size} "
            "(truncated or overwritten)"
        )
    if sha256_file(path) != checkpoint.sha256:
        raise ValueError(f"{path} does not match the SHA-256 in its metadata")
    sidecar = checkpoint.lora_path
    if checkpoint.lora_sha256 is not None:
        if not sidecar.exists():
            raise ValueError(f"{sidecar} is missing (its metadata names it)")
        if sha256_file(sidecar) != checkpoint.lora_sha256:
            raise ValueError(f"{sidecar} does not match the SHA-256 in its metadata")


def restore_checkpoint(model: keras.Model, checkpoint: Checkpoint) -> None:
    """Load weights, optimizer state and seed states into a compiled model."""
    _check_files(checkpoint)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    with warnings.catch_warnings():
        # Keras warns and skips mismatched optimizer state; we want to know.
        warnings.simplefilter("error", UserWarning)
        model.load_weights(checkpoint.path)
    _restore_lora(model, checkpoint)
    loaded = _iterations(model)
    if loaded != checkpoint.optimizer_iterations:
        raise ValueError(
            f"{checkpoint.path}: optimizer is at iteration {loaded}, its "
            f"metadata says {checkpoint.optimizer_iterations}"
        )
    variables = _seed_state_variables(model)
    if len(variables) != len(checkpoint.seed_states):
        raise ValueError(
            f"{checkpoint.metadata_path}: {len(checkpoint.seed_states)} seed "
            f"states for a model with {len(variables)} seed generators"
        )
    for variable, state in zip(variables, checkpoint.seed_states):
        variable.assign(np.asarray(state).astype(variable.dtype))
    restore_random_state(checkpoint)


def _restore_lora(model: keras.Model, checkpoint: Checkpoint) -> None:
    """After `load_weights`, which put the merged kernels into the LoRA
    layers' base kernels and zeroed their factors: the parts as they were."""
    if checkpoint.lora_sha256 is None:
        if lora_layers(model):
            raise ValueError(
                f"{checkpoint.path} has no LoRA sidecar, and this model trains "
                "LoRA factors: it is not a checkpoint of this fine-tune"
            )
        return
    if not lora_layers(model):
        raise ValueError(
            f"{checkpoint.lora_path}: a LoRA checkpoint, and this model has no "
            "LoRA layers (was --lora-rank dropped?)"
        )
    with np.load(checkpoint.lora_path) as saved:
        state = {name: saved[name] for name in saved.files}
    restore_lora_state(model, state, checkpoint.lora_path)


def restore_latest(
    model: keras.Model, directory: str | os.PathLike, run_id: str
) -> Checkpoint | None:
    """Restore the newest usable checkpoint of run `run_id` into `model`.

    Returns it, or None when the directory holds no checkpoint at all.
    Each unusable one (unreadable metadata, another run's, missing,
    truncated or corrupted model file, failed load) is skipped with a
    warning naming the file. Raises RuntimeError when checkpoints exist
    but none is usable: starting over silently would lose the run.
    """
    directory = Path(directory)
    candidates = _candidate_stems(directory) if directory.is_dir() else []
    for _, metadata in candidates:
        try:
            checkpoint = _read_metadata(metadata)
            if checkpoint.run_id != run_id:
                raise ValueError(
                    f"{metadata} belongs to run {checkpoint.run_id}, not {run_id}"
                )
            restore_checkpoint(model, checkpoint)
            return checkpoint
        except (ValueError, OSError, UserWarning) as error:
            warnings.warn(
                f"skipping checkpoint: {error}; falling back to the previous one",
                CheckpointSkipped,
                stacklevel=2,
            )
    if candidates:
        raise RuntimeError(
            f"{directory}: no usable checkpoint (see the warnings above). Move "
            "the damaged files away to start over from scratch, or pass "
            "--overwrite to set the whole run aside."
        )
    return None


def prune_checkpoints(directory: str | os.PathLike, run_id: str, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints of run `run_id`, and the
    temporary files of interrupted writes."""
    for checkpoint in list_checkpoints(directory, run_id)[:-keep]:
        checkpoint.metadata_path.unlink(missing_ok=True)
        checkpoint.path.unlink(missing_ok=True)
        checkpoint.lora_path.unlink(missing_ok=True)
    remove_partials(directory)


def remove_partials(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary files (`.ckpt-*.partial.keras`, ...) that a
    killed process left in `directory`; return them. Call it only while no
    other process writes there (the run's lock is held)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for path in directory.glob(f".*{PARTIAL_MARK}*"):
        if path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def is_intact(checkpoint: Checkpoint) -> bool:
    """Whether its model file has the size and SHA-256 its metadata records."""
    try:
        _check_files(checkpoint)
    except (ValueError, OSError):
        return False
    return True
