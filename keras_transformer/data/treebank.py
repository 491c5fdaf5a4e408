"""Penn Treebank reader: bracketed trees from a file, a directory or a tar archive.

`read_treebank` returns each tree of a treebank cleaned for parsing
(`clean_tree`), with the file and 1-based line it starts on, as a
`TreebankSentence`. `write_trees` writes trees back, one bracketed tree per
line, in the form `read_treebank` reads.

What is read:

* A file of bracketed trees: the ``.mrg`` layout (a tree over several lines)
  and one tree per line alike, since trees are delimited by their brackets.
  A file that starts with the gzip magic bytes (``1f 8b``) is decompressed.
* A directory: its regular files, recursively, in sorted path order, hidden
  files and directories (name starting with ``.``) skipped. When it holds
  ``.mrg`` (or ``.mrg.gz``) files, only those are read. A tar archive inside
  it is read as below.
* A tar archive (plain, or gzip and the other compressions `tarfile` knows;
  recognised by `tarfile.is_tarfile`, not by its name): its regular members in
  sorted name order, hidden ones skipped, only the ``.mrg`` ones when there
  are any. A tree's `source` is then ``"<archive>:<member>"``.
* `members`, when given, selects by base name: the files of a directory, the
  members of an archive (not an archive's own name); a single file given as
  `path` is read whatever its name.

Each tree is cleaned (`clean_tree`): ``-NONE-`` empty elements are removed,
with every constituent they leave empty, and, unless
``strip_function_tags=False``, phrase labels lose their function tags and
indices (``NP-SBJ-1`` -> ``NP``). Then the root rule: the treebank's
unlabelled wrapper ``( (S ...) )`` (or one labelled ``ROOT`` or ``TOP``)
holding a single constituent is replaced by that constituent, so a tree's
label is ``S``, ``FRAG``, ``SINV``, ... Any other top-level tree is kept as
it is; a wrapper over several constituents keeps them under its label (the
empty string for ``( (S ...) (. .) )``). Every tree of the WSJ sample has the
single-constituent wrapper.

Text must be UTF-8 (a leading byte-order mark is removed). Every problem with
the input raises `DataError`, a `ValueError`, naming the path: a missing path,
nothing to read, a corrupt archive or gzip file. A problem inside a file's
text starts its message with ``source:line:`` (file or archive member, the
1-based line): a NUL byte or other control character (binary data), invalid
UTF-8, unbalanced brackets, a word beside other children (a word stands alone
under its part-of-speech tag), a constituent with no children or, below the
root, no label, and a tree with no words, or none once its empty elements
are removed (the line of a tree's error is the one its ``(`` is on).

Only the standard library is imported here.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import os
import re
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from keras_transformer.data.text_files import DataError
from keras_transformer.parsing.tree import Tree, TreeError, iter_trees

__all__ = [
    "TreebankSentence",
    "clean_tree",
    "read_treebank",
    "treebank_files",
    "write_trees",
]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = "\ufeff"
_EMPTY_ELEMENT = "-NONE-"
_WRAPPER_LABELS = frozenset({"", "ROOT", "TOP"})
_TREEBANK_SUFFIXES = (".mrg", ".mrg.gz")
# What a label or word cannot hold and still be read back from one line.
_UNWRITABLE = re.compile(r"[\s()]")


@dataclass(frozen=True)
class TreebankSentence:
    """One tree of a treebank, cleaned, and where it came from.

    Attributes:
        tree: The cleaned tree, its wrapper removed (see the module notes):
            its label is the sentence's, e.g. ``S``.
        source: The file it came from, or ``"<archive>:<member>"``.
        line: The 1-based line of that file where the tree's ``(`` is.
    """

    tree: Tree
    source: str
    line: int


def clean_tree(tree: Tree, *, strip_function_tags: bool = True) -> Tree | None:
    """`tree` without its ``-NONE-`` empty elements, or None if nothing is left.

    Every ``-NONE-`` node goes, then every constituent left without children,
    up the tree (``(VP (NP-SBJ (-NONE- *)))`` goes entirely). With
    `strip_function_tags`, phrase labels lose function tags and indices: the
    label ends before its first ``-`` or ``=`` (``NP-SBJ-1``, ``NP=2`` and
    ``PP-LOC-CLR`` become ``NP``, ``NP`` and ``PP``). Labels that start with
    ``-`` (``-LRB-``), part-of-speech tags and words are never changed.
    """
    return _clean(tree, strip_function_tags)


def _clean(tree: Tree, strip: bool) -> Tree | None:
    """`clean_tree`; a subtree that does not change is returned as it is."""
    if tree.label == _EMPTY_ELEMENT:
        return None
    if tree.is_preterminal:
        return tree
    kept: list[Tree | str] = []
    changed = False
    for child in tree.children:
        new = child if isinstance(child, str) else _clean(child, strip)
        if new is not None:
            kept.append(new)
        changed = changed or new is not child
    if not kept:
        return None
    label = _strip_function_tags(tree.label) if strip else tree.label
    if not changed and label == tree.label:
        return tree
    return Tree(label, tuple(kept))


def _strip_function_tags(label: str) -> str:
    if label.startswith("-") or ("-" not in label and "=" not in label):
        return label
    cuts = [cut for cut in (label.find("-"), label.find("=")) if cut > 0]
    return label[: min(cuts)] if cuts else label


def read_treebank(
    path: str | os.PathLike[str],
    *,
    strip_function_tags: bool = True,
    members: Callable[[str], bool] | None = None,
) -> list[TreebankSentence]:
    """Every tree of a treebank file, directory or tar archive, cleaned.

    Args:
        path: A file of bracketed trees (plain or gzip), a directory of such
            files, or a tar archive of them (see the module notes).
        strip_function_tags: Strip function tags and indices from phrase
            labels (`clean_tree`). ``-NONE-`` elements are removed either way.
        members: Reads only the directory files or archive members whose
            base name it accepts, e.g.
            ``lambda name: name <= "wsj_0159.mrg"``.

    Returns:
        The trees in file order, then in order within each file.

    Raises:
        DataError: For any problem with the input; the message names the
            file (or archive member) and the line.
    """
    sentences: list[TreebankSentence] = []
    with _collector_paused():
        for source, data in _sources(Path(path), members):
            text = _decode(source, data)
            sentences += _sentences(source, text, strip_function_tags)
    return sentences


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the duration (back on after, if it
    was on). Reading a treebank makes hundreds of thousands of objects, all
    kept, and the collector would walk them again and again: it took two
    thirds of the time of reading the WSJ sample (1.6 s instead of 0.55).
    Trees hold no cycles, so no garbage waits for the collector meanwhile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def write_trees(trees: Iterable[Tree], path: str | os.PathLike[str]) -> None:
    """Write `trees` to `path` in UTF-8, one bracketed tree per line.

    Raises:
        ValueError: A label or word holds a space, line break or bracket (it
            could not be read back); nothing is written past the tree before.
    """
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for number, tree in enumerate(trees, start=1):
            _check_writable(tree, number)
            handle.write(tree.to_string() + "\n")


def _check_writable(tree: Tree, number: int) -> None:
    stack: list[Tree] = [tree]
    while stack:
        node = stack.pop()
        words = [child for child in node.children if isinstance(child, str)]
        bad = [atom for atom in (node.label, *words) if _UNWRITABLE.search(atom)]
        bad += [word for word in words if not word]
        if bad:
            raise ValueError(
                f"Tree {number}: {bad[0]!r} is an empty word or holds a space, "
                "line break or bracket; it cannot be written on one line."
            )
        stack += [child for child in node.children if isinstance(child, Tree)]


# --------------------------------------------------------------------------
# Files, directories and archives
# --------------------------------------------------------------------------


def treebank_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files `read_treebank(path)` reads (a directory's, by its rules;
    an archive or a file is itself); their digests identify a corpus."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or directory.")
    return _directory_files(path, None) if path.is_dir() else [path]


def _sources(
    path: Path, members: Callable[[str], bool] | None
) -> Iterator[tuple[str, bytes]]:
    """`(source, bytes)` of each file to read under `path`."""
    if path.is_dir():
        files = _directory_files(path, members)
        for file in files:
            if _is_tar(file):
                yield from _archive_sources(file, members, required=False)
            else:
                yield str(file), _read_bytes(file)
    elif _is_tar(path):
        yield from _archive_sources(path, members, required=True)
    else:
        yield str(path), _read_bytes(path)


def _directory_files(root: Path, members: Callable[[str], bool] | None) -> list[Path]:
    files: list[Path] = []
    for folder, folders, names in os.walk(root):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in names:
            file = Path(folder, name)
            if not name.startswith(".") and file.is_file():
                files.append(file)
    treebank = [file for file in files if file.name.endswith(_TREEBANK_SUFFIXES)]
    selected = sorted(treebank or files)
    if members is not None:
        # An archive is opened whatever its name: `members` picks its members.
        selected = [f for f in selected if _is_tar(f) or members(f.name)]
    if not selected:
        raise DataError(
            f"{root}: no file to read in this directory{_filtered(members)}."
        )
    return selected


def _filtered(members: Callable[[str], bool] | None) -> str:
    return "" if members is None else " that the members filter accepts"


def _is_tar(path: Path) -> bool:
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except (OSError, EOFError, zlib.error):
        return False  # Unreadable: `_read_bytes` says why.


def _archive_sources(
    path: Path, members: Callable[[str], bool] | None, *, required: bool
) -> Iterator[tuple[str, bytes]]:
    try:
        with tarfile.open(path) as archive:
            for member in _archive_members(path, archive, members, required):
                handle = archive.extractfile(member)
                yield f"{path}:{member.name}", handle.read() if handle else b""
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path}: cannot read the tar archive: {error}") from error


def _archive_members(
    path: Path,
    archive: tarfile.TarFile,
    members: Callable[[str], bool] | None,
    required: bool,
) -> list[tarfile.TarInfo]:
    files = [
        member
        for member in archive.getmembers()
        if member.isfile()
        and not any(part.startswith(".") for part in PurePosixPath(member.name).parts)
    ]
    treebank = [m for m in files if m.name.endswith(_TREEBANK_SUFFIXES)]
    selected = sorted(treebank or files, key=lambda member: member.name)
    if members is not None:
        selected = [m for m in selected if members(PurePosixPath(m.name).name)]
    if required and not selected:
        raise DataError(f"{path}: no file to read in this archive{_filtered(members)}.")
    return selected


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as error:
        raise DataError(f"Treebank not found: {path}") from error
    except OSError as error:
        raise DataError(f"Cannot read {path}: {error}") from error


# --------------------------------------------------------------------------
# Text and trees
# --------------------------------------------------------------------------


def _decode(source: str, data: bytes) -> str:
    """The UTF-8 text of `data` (gunzipped if it starts with the magic)."""
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as error:
            raise DataError(
                f"{source}: starts with the gzip signature but is not a valid "
                f"gzip file (corrupt or truncated?): {error}"
            ) from error
    nul = data.find(b"\x00")
    if nul != -1:
        raise DataError(
            f"{source}:{_line(data, nul)}: NUL byte (\\x00) at byte offset {nul}: "
            "binary data, not bracketed trees."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{source}:{_line(data, error.start)}: invalid UTF-8 at byte offset "
            f"{error.start}: {error.reason}."
        ) from error
    return text[1:] if text.startswith(_UTF8_BOM) else text


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _sentences(source: str, text: str, strip: bool) -> list[TreebankSentence]:
    try:
        return [
            _sentence(tree, source, line, strip)
            for tree, line in iter_trees(text, source)
        ]
    except TreeError as error:
        raise DataError(str(error)) from error


def _sentence(tree: Tree, source: str, line: int, strip: bool) -> TreebankSentence:
    problem = _problem(tree)
    if problem:
        raise DataError(f"{source}:{line}: {problem}")
    try:
        cleaned = clean_tree(tree, strip_function_tags=strip)
    except RecursionError as error:
        raise DataError(f"{source}:{line}: the tree is nested too deeply.") from error
    if cleaned is None:
        raise DataError(
            f"{source}:{line}: the tree holds only empty elements (-NONE-): no "
            "word is left once they are removed."
        )
    return TreebankSentence(_unwrap(cleaned), source, line)


def _problem(tree: Tree) -> str | None:
    """Why `tree` is malformed, or None."""
    words = 0
    problem = None
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.is_preterminal:
            words += 1
            continue
        if problem is None:
            problem = _node_problem(node, node is tree)
        for child in node.children:
            if isinstance(child, str):
                words += 1
            else:
                stack.append(child)
    return "the tree has no words." if not words else problem


def _node_problem(node: Tree, is_root: bool) -> str | None:
    """Why `node`, not a preterminal, is malformed, or None."""
    if not node.children:
        return f"the constituent ({node.label}) has no children."
    if any(isinstance(child, str) for child in node.children):
        return (
            "a word beside other children (a word stands alone under its "
            f"part-of-speech tag): {_preview(node)}"
        )
    if not node.label and not is_root:
        return f"a constituent below the root has no label: {_preview(node)}"
    return None


def _preview(node: Tree) -> str:
    text = node.to_string()
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(tree: Tree) -> Tree:
    """The root rule of the module notes."""
    if tree.label in _WRAPPER_LABELS and len(tree.children) == 1:
        only = tree.children[0]
        if isinstance(only, Tree):
            return only
    return tree
