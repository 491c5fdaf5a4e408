"""Choose a parallel dataset by name: builtin, multi30k, files or tfds:NAME."""

from __future__ import annotations

import dataclasses

from keras_transformer.data.multi30k import load_multi30k
from keras_transformer.data.text_files import (
    DataError,
    ParallelCorpus,
    read_parallel_files,
    read_tsv,
)
from keras_transformer.data.tfds_source import load_tfds

DATASETS = ("builtin", "multi30k", "files", "tfds:NAME")


@dataclasses.dataclass
class DatasetSpec:
    """Where the train / valid / test pairs come from.

    name: "builtin" (generated offline), "multi30k" (from `data_dir` or
    downloaded into the cache), "files" (local text files or TSVs), or
    "tfds:NAME" (TensorFlow Datasets, e.g. "tfds:wmt14_translate/de-en").
    """

    name: str = "builtin"
    builtin_size: int = 20000
    builtin_seed: int = 1234
    data_dir: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    # For name="files": {"train": (src, tgt) or (tsv,), "valid": ..., "test": ...}
    files: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    lenient_utf8: bool = False

    def __post_init__(self) -> None:
        # A setting that the chosen dataset does not read would be ignored
        # without a word: refuse it instead. (An unknown name is
        # load_dataset's error.)
        downloaded = self.name == "multi30k" or self.name.startswith("tfds:")
        if not downloaded and self.name not in ("builtin", "files"):
            return
        if self.files and self.name != "files":
            splits = ", ".join(f"--{split}-src/tgt/tsv" for split in self.files)
            self._refuse_unread(f"{splits} (files=)", "files")
        for field in ("data_dir", "source_lang", "target_lang"):
            if getattr(self, field) and not downloaded:
                flag = "--" + field.replace("_", "-")
                self._refuse_unread(f"{flag} ({field}=)", "multi30k or tfds:NAME")

    def _refuse_unread(self, setting: str, datasets: str) -> None:
        raise DataError(
            f"{setting} is read only with --dataset {datasets}; --dataset "
            f"{self.name} would ignore it. Drop it, or choose a dataset that "
            "reads it."
        )


def _builtin(spec: DatasetSpec) -> dict[str, ParallelCorpus]:
    from keras_transformer.data.builtin_corpus import generate_corpus

    size = spec.builtin_size
    # 500 held-out pairs at the default size; fewer for small corpora, whose
    # vocabulary cannot cover many novel combinations.
    held_out = max(10, min(500, size // 40))
    splits = generate_corpus(
        num_train=size, num_valid=held_out, num_test=held_out, seed=spec.builtin_seed
    )
    return {
        name: ParallelCorpus(
            source=[en for en, _ in pairs],
            target=[de for _, de in pairs],
            origin=f"builtin corpus ({name}, seed {spec.builtin_seed})",
            line_numbers=list(range(1, len(pairs) + 1)),
        )
        for name, pairs in splits.items()
    }


def _files(spec: DatasetSpec) -> dict[str, ParallelCorpus]:
    if "train" not in spec.files:
        raise DataError(
            "--dataset files needs --train-src and --train-tgt (or --train-tsv)."
        )
    splits = {}
    for name, paths in spec.files.items():
        if len(paths) == 1:
            splits[name] = read_tsv(paths[0], lenient_utf8=spec.lenient_utf8)
        else:
            splits[name] = read_parallel_files(*paths, lenient_utf8=spec.lenient_utf8)
    return splits


def _multi30k(spec: DatasetSpec) -> dict[str, ParallelCorpus]:
    languages = {
        "source_lang": spec.source_lang or "en",
        "target_lang": spec.target_lang or "de",
    }
    return {
        name: load_multi30k(name, data_dir=spec.data_dir, **languages)
        for name in ("train", "valid", "test")
    }


def _tfds(spec: DatasetSpec) -> dict[str, ParallelCorpus]:
    name = spec.name.split(":", 1)[1]
    if not name:
        raise DataError("--dataset tfds:NAME needs a dataset name after 'tfds:'.")
    splits = {}
    for ours, theirs in (("train", "train"), ("valid", "validation"), ("test", "test")):
        splits[ours] = load_tfds(
            name,
            theirs,
            source_lang=spec.source_lang,
            target_lang=spec.target_lang,
            data_dir=spec.data_dir,
        )
    return splits


def load_dataset(spec: DatasetSpec) -> dict[str, ParallelCorpus]:
    """The splits of `spec` ("train" always; "valid" and "test" if known)."""
    if spec.name == "builtin":
        return _builtin(spec)
    if spec.name == "multi30k":
        return _multi30k(spec)
    if spec.name == "files":
        return _files(spec)
    if spec.name.startswith("tfds:"):
        return _tfds(spec)
    raise DataError(
        f"Unknown dataset. Expected one of {', '.join(DATASETS)}. "
        f"Received: --dataset {spec.name!r}"
    )
