"""Choose a parallel dataset by name: builtin, multi30k, files, tfds:NAME.

Or treebank (the parsing task's: each tree's words and its linearized form,
`keras_transformer.parsing`), or store:DIR, a store that
`keras-transformer prepare` made: token ids, read by `train` through a
memory map (see `token_store`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from keras_transformer.data.multi30k import multi30k_files, multi30k_origin
from keras_transformer.data.text_files import (
    DataError,
    PairBlock,
    ParallelCorpus,
    collect_pairs,
    iter_parallel_files,
    iter_tsv,
)
from keras_transformer.data.tfds_source import tfds_source

DATASETS = ("builtin", "multi30k", "files", "treebank", "tfds:NAME", "store:DIR")
LINEARIZATIONS = ("tags", "tags+words", "xx")
"""A treebank's target: part-of-speech tags only (the paper's), each tag
followed by its word, or every tag written XX (Vinyals et al. 2015: the
labeled F1 does not score tags) (`parsing.linearize`)."""
XX_TAG = "XX"
"""The one tag of `--linearization xx`."""
TREEBANK_FORMAT = 1
"""Version of the treebank pairs (cleaning and linearization): part of a
store's identity, so a change of either makes a new store."""
STORE_PREFIX = "store:"


@dataclasses.dataclass
class DatasetSpec:
    """Where the train / valid / test pairs come from.

    name: "builtin" (generated offline), "multi30k" (from `data_dir` or
    downloaded into the cache), "files" (local text files or TSVs),
    "treebank" (`files` holds one treebank path per split: `.mrg` files, a
    directory or an archive, `data.treebank`), "tfds:NAME" (TensorFlow
    Datasets, e.g. "tfds:wmt14_translate/de-en"), or
    "store:DIR" (a prepared token store; the text settings here are then
    the store's, and setting them is refused).
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
    # treebank: the target's tokens, "tags" (the paper's), "tags+words", "xx".
    linearization: str = "tags"
    # treebank: new training trees per tree by subtree substitution
    # (`parsing.augment`); 0: the treebank's trees only.
    subtree_substitution: int = 0

    def __post_init__(self) -> None:
        # A setting that the chosen dataset does not read would be ignored
        # without a word: refuse it instead. (An unknown name is
        # load_dataset's error.)
        downloaded = self.name == "multi30k" or self.name.startswith("tfds:")
        store = self.name.startswith(STORE_PREFIX)
        if self.linearization not in LINEARIZATIONS:
            raise DataError(
                f"--linearization must be one of {', '.join(LINEARIZATIONS)}. "
                f"Received: {self.linearization!r}"
            )
        if self.linearization != "tags" and self.name != "treebank":
            self._refuse_unread("--linearization (linearization=)", "treebank")
        if (
            isinstance(self.subtree_substitution, bool)
            or not isinstance(self.subtree_substitution, int)
            or self.subtree_substitution < 0
        ):
            raise DataError(
                "--subtree-substitution must be a whole number of new trees "
                f"per training tree, 0 or more. Received: {self.subtree_substitution!r}"
            )
        if self.subtree_substitution and self.name != "treebank":
            self._refuse_unread(
                "--subtree-substitution (subtree_substitution=)", "treebank"
            )
        local = ("builtin", "files", "treebank")
        if not downloaded and not store and self.name not in local:
            return
        if store and not self.name[len(STORE_PREFIX) :].strip():
            raise DataError(
                f"--dataset {self.name!r} names no directory (it would read the "
                "current one): give store:DIR, the --out of keras-transformer "
                "prepare."
            )
        if store and self.lenient_utf8:
            self._refuse_unread(
                "--lenient-utf8 (lenient_utf8=)",
                "builtin, multi30k, files or tfds:NAME (prepare reads the text)",
            )
        if self.files and self.name not in ("files", "treebank"):
            splits = ", ".join(f"--{split}-src/tgt/tsv" for split in self.files)
            self._refuse_unread(f"{splits} (files=)", "files")
        for field in ("data_dir", "source_lang", "target_lang"):
            if getattr(self, field) and not downloaded:
                flag = "--" + field.replace("_", "-")
                self._refuse_unread(f"{flag} ({field}=)", "multi30k or tfds:NAME")

    @property
    def with_words(self) -> bool:
        """A treebank whose targets hold each tag's word (`LINEARIZATIONS`)."""
        return self.linearization == "tags+words"

    @property
    def target_vocabulary(self) -> bool:
        """A treebank whose targets are tree symbols only (tags or XX, and
        brackets): its tokenizer puts them first, as a target vocabulary of
        their own (`tokenizer.WordTokenizer`), and the model's output layer
        spans them alone (about a hundred rows instead of the vocabulary's
        thousands: most of a small parsing model's training step)."""
        return self.name == "treebank" and not self.with_words

    @property
    def tag_token(self) -> str | None:
        """The token every tag is written as (`--linearization xx`), or None."""
        return XX_TAG if self.linearization == "xx" else None

    def _refuse_unread(self, setting: str, datasets: str) -> None:
        raise DataError(
            f"{setting} is read only with --dataset {datasets}; --dataset "
            f"{self.name} would ignore it. Drop it, or choose a dataset that "
            "reads it."
        )


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """Where one split's pairs come from, read block by block: `blocks()`
    starts a new pass each call (`prepare` makes two: the tokenizer sample,
    then the encoding), so memory is bounded by a block.

    `files`: the files it reads (their size and SHA-256 identify it);
    `identity`: what else identifies it (builtin: size, seed and a digest of
    the generator; TFDS: name, split and version).
    """

    origin: str
    blocks: Callable[[], Iterator[PairBlock]]
    files: tuple[Path, ...] = ()
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)


def _block_reader(function: Callable[..., Iterator[PairBlock]], *args, **kwargs):
    return lambda: function(*args, **kwargs)


def _in_blocks(corpus: ParallelCorpus, size: int = 50_000) -> Iterator[PairBlock]:
    for start in range(0, len(corpus), size):
        yield PairBlock(
            corpus.line_numbers[start],
            corpus.source[start : start + size],
            corpus.target[start : start + size],
        )


def _builtin(spec: DatasetSpec) -> dict[str, SplitSource]:
    size, seed = spec.builtin_size, spec.builtin_seed
    identity = {"size": size, "seed": seed, "generator": _generator()}
    generated: dict[str, ParallelCorpus] = {}

    def blocks(name: str) -> Iterator[PairBlock]:
        # Generated at the first read, not before: a store found by its key
        # (size, seed, generator) needs none of it.
        if not generated:
            generated.update(_generate(size, seed))
        return _in_blocks(generated[name])

    return {
        name: SplitSource(
            _builtin_origin(name, seed), _block_reader(blocks, name), identity=identity
        )
        for name in ("train", "valid", "test")
    }


def _builtin_origin(split: str, seed: int) -> str:
    return f"builtin corpus ({split}, seed {seed})"


def _generate(size: int, seed: int) -> dict[str, ParallelCorpus]:
    from keras_transformer.data.builtin_corpus import generate_corpus

    # 500 held-out pairs at the default size; fewer for small corpora, whose
    # vocabulary cannot cover many novel combinations.
    held_out = max(10, min(500, size // 40))
    splits = generate_corpus(
        num_train=size, num_valid=held_out, num_test=held_out, seed=seed
    )
    return {
        name: ParallelCorpus(
            source=[en for en, _ in pairs],
            target=[de for _, de in pairs],
            origin=_builtin_origin(name, seed),
            line_numbers=list(range(1, len(pairs) + 1)),
        )
        for name, pairs in splits.items()
    }


def _generator() -> str:
    """SHA-256 of the built-in corpus's code and lexicon: the same digest,
    the same corpus for a size and seed."""
    digest = hashlib.sha256()
    package = resources.files("keras_transformer.data")
    for name in ("builtin_corpus.py", "builtin_lexicon.json"):
        digest.update(package.joinpath(name).read_bytes())
    return digest.hexdigest()


def _files(spec: DatasetSpec) -> dict[str, SplitSource]:
    if "train" not in spec.files:
        raise DataError(
            "--dataset files needs --train-src and --train-tgt (or --train-tsv)."
        )
    splits = {}
    lenient = spec.lenient_utf8
    for name, given in spec.files.items():
        paths = tuple(Path(path) for path in given)
        sides = ("tsv",) if len(paths) == 1 else ("src", "tgt")
        for side, path in zip(sides, paths):
            _check_regular_file(path, f"--{name}-{side}")
        checks = dict(lenient_utf8=lenient, refuse_inner_cr=name == "train")
        if len(paths) == 1:
            blocks = _block_reader(iter_tsv, paths[0], **checks)
            origin = str(paths[0])
        else:
            blocks = _block_reader(iter_parallel_files, *paths, **checks)
            origin = f"{paths[0]} | {paths[1]}"
        splits[name] = SplitSource(origin, blocks, paths)
    return splits


def _check_regular_file(path: Path, flag: str) -> None:
    """Refuse a pipe, FIFO or device (`<(cat a.en)`, /dev/stdin): a corpus
    is read several times (the digest that names its store, the tokenizer's
    sample, the encoding), and a stream only once."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # A missing file is named by the reader.
    if not stat.S_ISREG(mode):
        raise DataError(
            f"{flag} {path} is a pipe or another stream, not a file: a corpus "
            "is read more than once (its digest, the tokenizer's sample, the "
            "encoding), and a stream can be read only once. Save it to a file "
            "first (for example: cat ... > train.en); gzip files are read as "
            "they are."
        )


def _treebank(spec: DatasetSpec) -> dict[str, SplitSource]:
    """Each split's trees as (words, linearized tree) pairs, numbered by
    tree: pair i is the i-th tree of the split."""
    if "train" not in spec.files:
        raise DataError("--task parsing needs --train-trees (a treebank).")
    splits = {}
    for name, paths in spec.files.items():
        if len(paths) != 1:
            raise DataError(
                f"--dataset treebank reads one treebank per split (--{name}-trees); "
                f"received {len(paths)} paths for {name}."
            )
        path = paths[0]
        files = _treebank_files(Path(path), f"--{name}-trees")
        copies = spec.subtree_substitution if name == "train" else 0
        blocks = _block_reader(
            _treebank_blocks, Path(path), spec.with_words, spec.tag_token, copies
        )
        identity = {
            "treebank_format": TREEBANK_FORMAT,
            "linearization": spec.linearization,
        }
        if copies:  # Stores from before it keep their identity.
            identity["subtree_substitution"] = copies
        if spec.target_vocabulary:  # A new tokenizer: a new store.
            identity["target_vocabulary"] = True
        splits[name] = SplitSource(f"{path} (trees)", blocks, files, identity)
    return splits


def _treebank_files(path: Path, flag: str) -> tuple[Path, ...]:
    """The files a treebank path stands for (their digests name the store)."""
    from keras_transformer.data.treebank import treebank_files

    try:
        files = treebank_files(path)
    except DataError as error:
        raise DataError(f"{flag}: {error}") from None
    if not path.is_dir():
        _check_regular_file(path, flag)
    return tuple(files)


def _treebank_blocks(
    path: Path, with_words: bool, tag_token: str | None, copies: int = 0
) -> Iterator[PairBlock]:
    """The treebank's pairs, then (`copies` > 0) the pairs of the trees
    subtree substitution makes from them, numbered after the treebank's."""
    from keras_transformer.data.treebank import read_treebank
    from keras_transformer.parsing.augment import substitute_subtrees
    from keras_transformer.parsing.linearize import linearize_text

    sentences = read_treebank(path)
    targets = []
    for sentence in sentences:
        try:
            targets.append(
                linearize_text(sentence.tree, with_words=with_words, tag=tag_token)
            )
        except ValueError as error:
            raise DataError(
                f"{sentence.source}:{sentence.line}: this tree cannot be a "
                f"parser's target: {error}"
            ) from None
    yield PairBlock(1, [" ".join(s.tree.words()) for s in sentences], targets)
    if copies:
        # Built from trees that linearized above, so they linearize too.
        new_trees = substitute_subtrees([s.tree for s in sentences], copies)
        yield PairBlock(
            len(sentences) + 1,
            [" ".join(tree.words()) for tree in new_trees],
            [
                linearize_text(t, with_words=with_words, tag=tag_token)
                for t in new_trees
            ],
        )


def _multi30k(spec: DatasetSpec) -> dict[str, SplitSource]:
    languages = (spec.source_lang or "en", spec.target_lang or "de")
    splits = {}
    for name in ("train", "valid", "test"):
        paths = multi30k_files(
            name,
            source_lang=languages[0],
            target_lang=languages[1],
            data_dir=spec.data_dir,
        )
        origin = multi30k_origin(name, *languages, f"{paths[0]} | {paths[1]}")
        blocks = _block_reader(
            iter_parallel_files, *paths, refuse_inner_cr=name == "train"
        )
        splits[name] = SplitSource(origin, blocks, paths)
    return splits


def _tfds(spec: DatasetSpec) -> dict[str, SplitSource]:
    name = spec.name.split(":", 1)[1]
    if not name:
        raise DataError("--dataset tfds:NAME needs a dataset name after 'tfds:'.")
    splits = {}
    for ours, theirs in (("train", "train"), ("valid", "validation"), ("test", "test")):
        split = tfds_source(
            name,
            theirs,
            source_lang=spec.source_lang,
            target_lang=spec.target_lang,
            data_dir=spec.data_dir,
        )
        # The direction too: de-en and en-de of one dataset are two corpora.
        identity = {
            "tfds": name,
            "split": theirs,
            "version": split.version,
            "languages": list(split.languages),
        }
        splits[ours] = SplitSource(split.origin, split.blocks, identity=identity)
    return splits


def dataset_sources(spec: DatasetSpec) -> dict[str, SplitSource]:
    """The splits of `spec` ("train" always; "valid" and "test" if known),
    not read yet (Multi30k's files are downloaded if missing)."""
    if spec.name == "builtin":
        return _builtin(spec)
    if spec.name == "multi30k":
        return _multi30k(spec)
    if spec.name == "files":
        return _files(spec)
    if spec.name == "treebank":
        return _treebank(spec)
    if spec.name.startswith("tfds:"):
        return _tfds(spec)
    if spec.name.startswith(STORE_PREFIX):
        raise DataError(
            f"--dataset {spec.name} is a prepared store of token ids, not text: "
            "train reads it (keras_transformer.data.token_store.open_store)."
        )
    raise DataError(
        f"Unknown dataset. Expected one of {', '.join(DATASETS)}. "
        f"Received: --dataset {spec.name!r}"
    )


def load_dataset(spec: DatasetSpec) -> dict[str, ParallelCorpus]:
    """The splits of `spec` ("train" always; "valid" and "test" if known),
    read into memory."""
    return {
        name: collect_pairs(source.blocks(), source.origin)
        for name, source in dataset_sources(spec).items()
    }
