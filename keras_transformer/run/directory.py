"""The run directory and its one owner.

Everything that reads or writes a run goes through `RunDirectory`: training
(which creates, resumes or sets aside a run), and the CLI's `translate`,
`evaluate`, `average` and `export`, which load a run's model and tokenizer.

Layout:

    manifest.json        run id, package version, and the settings and data
                         fingerprint that produced the run (`identity`)
    config.json          the model's TransformerConfig
    tokenizer/           the joint subword tokenizer
    checkpoints/         ckpt-<step>.keras + .json (see `checkpoints`)
    model.keras          the final model
    history.json         per-epoch metrics, with the step of each epoch end
    training_curve.png, logs/ (TensorBoard), dev_bleu.jsonl
    test.hyp.txt, test_scores.json

Training into an existing run resumes it when the stored identity equals the
requested one. Otherwise it refuses before touching anything and names each
differing setting with both values; `overwrite=True` first moves the whole
directory aside to `<run>.backup-<time>`, so nothing is lost.

A training process holds `lock()` for the life of its run: an exclusive
`flock` on `.<run>.lock` beside the directory (beside, so that it also
guards a run not yet created, and stays with the name when `--overwrite`
moves the old directory aside). The operating system releases it when the
process ends, however it ends; the file holds the holder's pid, which a
second `train` on the same directory names when it is refused.

Every file is written atomically (see `atomic_files`); a write that fails
raises `RunWriteError` naming the file.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import socket
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

from keras_transformer.config import TransformerConfig
from keras_transformer.run import checkpoints
from keras_transformer.run.checkpoints import RunWriteError, is_intact, list_checkpoints
from keras_transformer.utils.atomic_files import (
    atomic_write_text,
    atomic_write_with,
    backup_path,
)
from keras_transformer.utils.version import __version__

MANIFEST = "manifest.json"

__all__ = [
    "MANIFEST",
    "RunBusy",
    "RunConflict",
    "RunDirectory",
    "RunLock",
    "RunWriteError",
    "identity_conflicts",
]


def append_json_line(path: Path, entry: dict) -> None:
    """Append `entry` to a JSON-lines log."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


class RunConflict(ValueError):
    """A run directory holds another run than the one requested."""


class RunBusy(RunConflict):
    """Another process holds the run directory's lock."""


class RunLock:
    """An exclusive `flock` on `path`, which holds the holder's pid.

    The OS releases it when the process ends, however it ends; `release`
    (or leaving the `with` block) releases it sooner. The file stays: a
    lock file removed while another process waits on it would let a third
    lock a new file of the same name.
    """

    def __init__(self, path: Path, run_path: Path):
        self.path = path
        self.run_path = run_path
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, or raise RunBusy naming the holder's pid."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise RunBusy(
                f"{self.run_path} is in use by another training process "
                f"({holder or 'pid unknown'}; lock file {self.path}). Wait for "
                "it to finish or stop it, or choose another --run-dir."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # Closing the descriptor releases the flock.
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def identity_conflicts(stored: dict[str, Any], requested: dict[str, Any]) -> list[str]:
    """`key: stored X, requested Y` for every setting that differs."""
    lines = []
    for key in sorted(set(stored) | set(requested)):
        old, new = stored.get(key), requested.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            lines += [f"{key}.{line}" for line in identity_conflicts(old, new)]
        elif old != new:
            lines.append(f"{key}: stored {old!r}, requested {new!r}")
    return lines


def check_vocabulary(tokenizer, vocab_size: int, model_source, run) -> None:
    """The one check that a run's tokenizer belongs to its model."""
    if tokenizer.vocab_size != vocab_size:
        raise ValueError(
            f"{model_source} says vocab_size={vocab_size} but the tokenizer in "
            f"{run.tokenizer_dir} has {tokenizer.vocab_size} pieces: the tokenizer "
            "does not belong to this model."
        )


def _archive_damage(path: Path) -> str | None:
    """What is wrong with a `.keras` file as a zip archive, or None."""
    if not zipfile.is_zipfile(path):
        return (
            f"not a complete .keras archive ({path.stat().st_size:,} bytes; "
            "truncated by an interrupted write, or not a Keras model file)"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
    except (zipfile.BadZipFile, OSError) as error:
        return f"an unreadable archive ({error})"
    return None if broken is None else f"its member {broken} is corrupt (bad CRC)"


@dataclasses.dataclass(frozen=True)
class InferenceRun:
    """A run opened for inference by `RunDirectory.open_for_inference`."""

    run: RunDirectory
    model_path: Path
    tokenizer: Any
    model: Any  # A `Transformer`, or None when opened without loading it.


class RunDirectory:
    """The files of one training run (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    # Paths, by role.
    manifest_path = property(lambda self: self.path / MANIFEST)
    config_path = property(lambda self: self.path / "config.json")
    tokenizer_dir = property(lambda self: self.path / "tokenizer")
    checkpoint_dir = property(lambda self: self.path / "checkpoints")
    model_path = property(lambda self: self.path / "model.keras")
    history_path = property(lambda self: self.path / "history.json")
    curve_path = property(lambda self: self.path / "training_curve.png")
    logs_dir = property(lambda self: self.path / "logs")
    dev_bleu_path = property(lambda self: self.path / "dev_bleu.jsonl")
    test_hypotheses_path = property(lambda self: self.path / "test.hyp.txt")
    test_scores_path = property(lambda self: self.path / "test_scores.json")

    @property
    def lock_path(self) -> Path:
        """`.<run>.lock` beside the run directory (see the module docstring)."""
        path = self.path.resolve()
        return path.with_name(f".{path.name}.lock")

    def lock(self) -> RunLock:
        """Take the run's exclusive lock (RunBusy if another process has it);
        hold it, as a context manager or until `release`, while writing."""
        return RunLock(self.lock_path, self.path).acquire()

    def manifest(self) -> dict[str, Any] | None:
        """The manifest, or None if there is none (a new run)."""
        if not self.manifest_path.exists():
            return None
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise RunConflict(
                f"{self.manifest_path}: unreadable ({error}). Pass --overwrite "
                "to move this run aside and start afresh."
            ) from None
        return manifest

    @property
    def run_id(self) -> str:
        manifest = self.manifest()
        if manifest is None:
            raise FileNotFoundError(
                f"{self.path} is not a training run (no {MANIFEST})"
            )
        return manifest["run_id"]

    @property
    def task(self) -> str | None:
        """What the run learned ("translation" or "parsing"); None when it
        has no manifest (a bare model directory)."""
        try:
            manifest = self.manifest()
        except RunConflict:
            return None
        if manifest is None:
            return None
        return manifest.get("identity", {}).get("task", "translation")

    @property
    def tree_words(self) -> bool:
        """A parsing run whose targets hold the words (`--linearization
        tags+words`)."""
        manifest = self.manifest() or {}
        data = manifest.get("identity", {}).get("data", {})
        return data.get("linearization") == "tags+words"

    def is_empty(self) -> bool:
        return not self.path.exists() or not any(self.path.iterdir())

    def check(self, identity: dict[str, Any], *, overwrite: bool = False) -> str:
        """Decide, without writing anything: "new", "resume" or "overwrite".

        Raises RunConflict when the directory holds something else than the
        run `identity` describes and `overwrite` is False.
        """
        if self.is_empty():
            return "new"
        if overwrite:
            return "overwrite"
        manifest = self.manifest()
        if manifest is None:
            raise RunConflict(
                f"{self.path} is not empty but has no {MANIFEST}: it is not a "
                "run of this version. Choose another --run-dir, or pass "
                "--overwrite to move its contents aside and start afresh."
            )
        conflicts = identity_conflicts(manifest["identity"], identity)
        if conflicts:
            raise RunConflict(
                f"{self.path} holds a run with other settings; nothing was "
                "changed. To resume it, repeat its settings; to start afresh, "
                "pass --overwrite (the old run is moved aside) or choose another "
                "--run-dir.\n  " + "\n  ".join(conflicts)
            )
        return "resume"

    def set_aside(self) -> Path:
        """Move the whole directory to `<run>.backup-<time>`; return it."""
        backup = backup_path(self.path)
        self.path.rename(backup)
        return backup

    def create(self, identity: dict[str, Any], options: dict[str, Any]) -> str:
        """Write a fresh manifest for a new run; return its run id."""
        self.path.mkdir(parents=True, exist_ok=True)
        run_id = uuid.uuid4().hex[:12]
        manifest = {
            "run_id": run_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "package_version": __version__,
            "identity": identity,
            "options": options,
        }
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2) + "\n")
        return run_id

    def discard_new_run(self, existed: bool) -> None:
        """Remove a run this process created that never saved a checkpoint,
        leaving the directory as it was: absent (`existed` False) or empty.
        Hold the lock: a new run's directory was empty when it was checked,
        so whatever it holds now is this run's."""
        if not self.path.exists():
            return
        if not existed:
            shutil.rmtree(self.path)
            return
        for child in self.path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def remove_partials(self) -> list[Path]:
        """Delete the temporary files of writes a killed process left (in the
        run, its checkpoints and its tokenizer); return them. Hold the lock."""
        removed = []
        for directory in (self.path, self.checkpoint_dir, self.tokenizer_dir):
            removed += checkpoints.remove_partials(directory)
        return removed

    # Writing a run (training; the chief process alone, holding the lock).
    def write_config(self, config: TransformerConfig) -> None:
        text = json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n"
        self._write(self.config_path, lambda: atomic_write_text(self.config_path, text))

    def save_tokenizer(self, tokenizer) -> None:
        self._write(self.tokenizer_dir, lambda: tokenizer.save(self.tokenizer_dir))

    def save_checkpoint(self, model, *, step: int, position, metrics=None):
        """Write this run's checkpoint of `step` (see `checkpoints`)."""
        return checkpoints.save_checkpoint(
            model,
            self.checkpoint_dir,
            step=step,
            run_id=self.run_id,
            position=position,
            metrics=metrics,
        )

    def prune_checkpoints(self, keep: int) -> None:
        checkpoints.prune_checkpoints(self.checkpoint_dir, self.run_id, keep)

    def save_final_model(self, model, step: int) -> None:
        """Write `model.keras` atomically: a kill leaves the old file or none."""
        try:
            atomic_write_with(self.model_path, model.save)
        except OSError as error:
            raise RunWriteError(
                self.model_path, error, "the final model", step
            ) from error

    def write_history(self, history: dict[str, list]) -> None:
        """`history.json`."""
        text = json.dumps(history, indent=2) + "\n"
        self._write(
            self.history_path, lambda: atomic_write_text(self.history_path, text)
        )

    def write_curve(self, figure) -> None:
        """`training_curve.png` from a matplotlib figure (what
        `training.history.write_training_curve` draws)."""
        self._write(
            self.curve_path,
            lambda: atomic_write_with(
                self.curve_path,
                lambda path: figure.savefig(path, dpi=100, format="png"),
            ),
        )

    def append_dev_bleu(self, entry: dict[str, Any]) -> None:
        self._write(
            self.dev_bleu_path, lambda: append_json_line(self.dev_bleu_path, entry)
        )

    def dev_bleu_entries(self) -> list[dict[str, Any]]:
        if not self.dev_bleu_path.exists():
            return []
        lines = self.dev_bleu_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def write_test_scores(self, scores, search: dict[str, Any] | None = None) -> None:
        """`test_scores.json` from a dataclass such as `BleuResult`, or from
        its `to_dict()` when it has one (a parsing result), with the `search`
        settings that decoded it: the manifest holds the first invocation's
        flags, and a resumed run may score with another beam or alpha."""
        data = scores.to_dict() if hasattr(scores, "to_dict") else None
        data = data or dataclasses.asdict(scores)
        if search is not None:
            data = {**data, "search": search}
        text = json.dumps(data, indent=2) + "\n"
        path = self.test_scores_path
        self._write(path, lambda: atomic_write_text(path, text))

    @staticmethod
    def _write(path: Path, write) -> None:
        try:
            write()
        except RunWriteError:
            raise
        except OSError as error:
            raise RunWriteError(path, error, "the run's file") from error

    def save_model(self, model, tokenizer) -> None:
        """Write a model trained outside `train` (your own `model.fit`) and its
        tokenizer as this run's final model, so `translate`, `evaluate` and
        `export` take the directory. Refuses to replace an existing one."""
        for path in (self.model_path, self.config_path, self.tokenizer_dir):
            if path.exists():
                raise FileExistsError(
                    f"{path} already exists; save into a new run directory."
                )
        if tokenizer.vocab_size != model.config.vocab_size:
            raise ValueError(
                f"The tokenizer has {tokenizer.vocab_size} pieces but the model's "
                f"vocab_size is {model.config.vocab_size}."
            )
        self.path.mkdir(parents=True, exist_ok=True)
        model.config.to_json(self.config_path)
        tokenizer.save(self.tokenizer_dir)
        model.save(self.model_path)

    # Reading a run, for translate / evaluate / average / export.
    def load_config(self) -> TransformerConfig:
        return TransformerConfig.from_json(self.config_path)

    def load_history(self) -> dict[str, list] | None:
        """`history.json`, or None before the first epoch ended."""
        if not self.history_path.exists():
            return None
        return json.loads(self.history_path.read_text(encoding="utf-8"))

    def load_tokenizer(self):
        """The run's tokenizer; a missing or damaged one is a ValueError
        that says where the same tokenizer can be restored from."""
        from keras_transformer.data.tokenizer import load_tokenizer

        try:
            return load_tokenizer(self.tokenizer_dir)
        except (OSError, ValueError) as error:
            raise ValueError(f"{error} {self.tokenizer_source()}") from None

    def evaluation_split(self, split: str):
        """The text of the held-out `split` ("valid" or "test") of the data
        this run trained on, read from its token store (`evaluate --split`):
        a `ParallelCorpus`. Raises FileNotFoundError when the store is not
        on this machine and ValueError when it has no such split, both
        naming what to pass instead."""
        from keras_transformer.data.prepare import locate_store
        from keras_transformer.data.token_store import open_store

        instead = "pass --src and --ref instead"
        try:
            data = (self.manifest() or {})["identity"]["data"]
            fingerprint = data["fingerprint"]
        except (KeyError, TypeError):
            raise ValueError(
                f"{self.path} has no record of the data it trained on "
                f"({self.manifest_path.name}): {instead}."
            ) from None
        store = locate_store(fingerprint, data)
        if store is None:
            raise FileNotFoundError(
                f"{self.path} trained on the token store with fingerprint "
                f"{fingerprint[:12]}, which is not on this machine: prepare the "
                f"same data with the same settings again, or {instead}."
            )
        corpus = open_store(store, check_sources=False).eval_corpus(split)
        if corpus is None or not corpus.source:
            raise ValueError(
                f"the data {self.path} trained on ({store}) has no {split} "
                f"split: {instead}."
            )
        return corpus

    def tokenizer_source(self) -> str:
        """Where the run's tokenizer can be restored from: its token store,
        of which the run keeps a copy (the store with the fingerprint that
        the run's manifest records)."""
        from keras_transformer.data.prepare import locate_store

        try:
            data = (self.manifest() or {})["identity"]["data"]
            fingerprint = data["fingerprint"]
        except (KeyError, TypeError, RunConflict):
            return "This run's tokenizer cannot be restored from its record."
        store = locate_store(fingerprint, data)
        if store is None:
            return (
                "This run's tokenizer is a copy of its token store's (fingerprint "
                f"{fingerprint[:12]}), which is not on this machine: prepare the "
                "same data with the same settings again and copy its tokenizer/ "
                f"into {self.tokenizer_dir}."
            )
        return (
            f"The token store this run trained on, {store}, holds the same "
            f"tokenizer: copy {store / 'tokenizer'} to {self.tokenizer_dir}."
        )

    def resolve_model_path(self, model: str | os.PathLike | None = None) -> Path:
        """`model` if given, else the final model, else the newest checkpoint."""
        if model is not None:
            path = Path(model)
            if not path.exists():
                raise FileNotFoundError(f"--model {path} not found.")
            return path
        if self.model_path.exists():
            return self.model_path
        checkpoints = self.checkpoints()
        if checkpoints:
            return checkpoints[-1].path
        raise FileNotFoundError(
            f"{self.path} has no model: neither {self.model_path.name} nor a "
            f"checkpoint in {self.checkpoint_dir}. Train into it first."
        )

    def load_model(self, model: str | os.PathLike | None = None):
        """The model of `resolve_model_path(model)`; a damaged file is a
        ValueError that names the damage and this run's intact checkpoints."""
        return self._load_model_file(self.resolve_model_path(model))

    def open_for_inference(
        self, model: str | os.PathLike | None = None, *, load_model: bool = True
    ) -> InferenceRun:
        """The one way `translate`, `evaluate`, `export` and `serve` open a
        run: its tokenizer and model (`model`, else the final model, else the
        newest checkpoint), checked once to belong together.

        With `load_model=False` (an export that loads the model in another
        process) the model file is only located, and the tokenizer is
        checked against `config.json`.
        """
        if not self.path.is_dir():
            raise FileNotFoundError(f"--run-dir {self.path} does not exist.")
        model_path = self.resolve_model_path(model)
        if not load_model and not self.config_path.exists():
            raise FileNotFoundError(f"{self.config_path} not found: not a trained run.")
        if not self.tokenizer_dir.is_dir():
            raise FileNotFoundError(
                f"{self.tokenizer_dir} not found: the run has no tokenizer. "
                + self.tokenizer_source()
            )
        tokenizer = self.load_tokenizer()
        if self.config_path.exists():  # The run's own record must agree too.
            config = self.load_config()
            check_vocabulary(tokenizer, config.vocab_size, self.config_path, self)
        loaded = self._load_model_file(model_path) if load_model else None
        if loaded is not None:
            check_vocabulary(tokenizer, loaded.config.vocab_size, model_path, self)
        return InferenceRun(self, model_path, tokenizer, loaded)

    def _load_model_file(self, path: Path):
        import keras

        from keras_transformer.registry import register_keras_objects

        register_keras_objects()  # The file names the package's classes.
        try:
            return keras.saving.load_model(path, compile=False)
        except Exception as error:  # Keras raises many kinds for one cause.
            # Diagnosed only on failure: a healthy load reads the file once.
            damage = _archive_damage(path) or (
                f"it does not load ({type(error).__name__}: {error})"
            )
        raise ValueError(f"{path} is damaged: {damage}. {self._intact_advice(path)}")

    def _intact_advice(self, damaged: Path) -> str:
        intact = [
            checkpoint
            for checkpoint in self.checkpoints()
            if checkpoint.path != damaged and is_intact(checkpoint)
        ]
        if not intact:
            return "This run has no intact checkpoint to use instead."
        newest = intact[-1]
        others = ", ".join(c.path.name for c in intact[:-1])
        return (
            f"The newest intact checkpoint is {newest.path} (step {newest.step}): "
            f"pass --model {newest.path}"
            + (f" (older intact ones: {others})." if others else ".")
        )

    def checkpoints(self):
        """This run's checkpoints, oldest first by step."""
        manifest = self.manifest()
        run_id = None if manifest is None else manifest["run_id"]
        return list_checkpoints(self.checkpoint_dir, run_id)
