"""Tests for keras_transformer.data.treebank (the Penn Treebank reader)."""

from __future__ import annotations

import gc
import io
import tarfile
from pathlib import Path

import pytest

from keras_transformer.data.text_files import DataError
from keras_transformer.data.treebank import (
    TreebankSentence,
    clean_tree,
    read_treebank,
    write_trees,
)
from keras_transformer.parsing.tree import Tree, parse_tree
from tests.data.helpers import assert_imports_nothing_heavy, write
from tests.helpers import PTB_SAMPLE

pytestmark = pytest.mark.backend_neutral

SAMPLE = PTB_SAMPLE

# Invented sentences in the treebank's layout: an unlabelled wrapper, trees
# over several lines, function tags, indices and empty elements.
MULTILINE = b"""
( (S
    (NP-SBJ-1 (DT The) (NN cat) )
    (VP (VBD sat)
      (NP (-NONE- *-1) )
      (PP-LOC-CLR (IN on)
        (NP (DT the) (NN mat) )))
    (. .) ))
( (FRAG
    (NP (JJ Quiet) (NNS mornings) )
    (. .) ))
"""
ONE_PER_LINE = (
    b"(S (NP (PRP We)) (VP (VBP agree)))\n"
    b"(NP (DT a) (NN test))\n"
    b"( (SINV (VP (VBD said)) (NP-SBJ (NNP Ann)) (. .)) )\n"
)


def labels(tree: Tree) -> list[str]:
    """Every label of `tree`, preorder."""
    found = [tree.label]
    for child in tree.children:
        if isinstance(child, Tree):
            found += labels(child)
    return found


def one(folder: Path, text: str) -> Tree:
    """The one tree `read_treebank` makes of `text` (via a file in `folder`)."""
    sentences = read_treebank(write(folder / "one.mrg", text.encode()))
    assert len(sentences) == 1
    return sentences[0].tree


def make_tar(path: Path, files: dict[str, bytes], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def error_of(path, **options) -> str:
    with pytest.raises(DataError) as caught:
        read_treebank(path, **options)
    return str(caught.value)


# --------------------------------------------------------------------------
# What is read: files, directories, archives
# --------------------------------------------------------------------------


def test_single_file_of_multiline_trees(tmp_path):
    path = write(tmp_path / "wsj_0042.mrg", MULTILINE)
    sentences = read_treebank(path)
    assert [(s.source, s.line) for s in sentences] == [(str(path), 2), (str(path), 9)]
    first, second = (s.tree for s in sentences)
    assert first.to_string() == (
        "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) "
        "(NN mat)))) (. .))"
    )
    assert second.label == "FRAG"
    assert second.words() == ["Quiet", "mornings", "."]


def test_one_tree_per_line_file(tmp_path):
    path = write(tmp_path / "trees.txt", ONE_PER_LINE)
    sentences = read_treebank(str(path))
    assert [s.line for s in sentences] == [1, 2, 3]
    assert [s.tree.label for s in sentences] == ["S", "NP", "SINV"]
    assert sentences[2].tree.tags() == ["VBD", "NNP", "."]


def test_gzip_file_recognised_by_magic(tmp_path):
    path = write(tmp_path / "trees.mrg", MULTILINE, compress=True)
    sentences = read_treebank(path)
    assert [s.line for s in sentences] == [2, 9]
    assert sentences[1].tree.words() == ["Quiet", "mornings", "."]


def test_bom_and_crlf_keep_line_numbers(tmp_path):
    data = "\ufeff" + ONE_PER_LINE.decode().replace("\n", "\r\n")
    sentences = read_treebank(write(tmp_path / "crlf.txt", data.encode()))
    assert [s.line for s in sentences] == [1, 2, 3]
    assert sentences[0].tree.words() == ["We", "agree"]


def test_directory_reads_mrg_files_recursively_in_sorted_order(tmp_path):
    write(tmp_path / "b.mrg", b"(S (NN b))\n")
    write(tmp_path / "a.mrg", b"(S (NN a1))\n(S (NN a2))\n")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "c.mrg", b"\n(S (NN c))\n")
    write(tmp_path / ".hidden.mrg", b"(S (NN hidden))\n")
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".git" / "x.mrg", b"(S (NN git))\n")
    write(tmp_path / "README", b"Not a treebank (and not read).\n")
    sentences = read_treebank(tmp_path)
    assert [s.tree.words()[0] for s in sentences] == ["a1", "a2", "b", "c"]
    assert sentences[3].source == str(tmp_path / "sub" / "c.mrg")
    assert sentences[3].line == 2


def test_directory_without_mrg_files_reads_every_file(tmp_path):
    write(tmp_path / "train.txt", b"(S (NN one))\n")
    write(tmp_path / "dev.trees", b"(S (NN two))\n", compress=True)
    sentences = read_treebank(tmp_path)
    assert [s.tree.words() for s in sentences] == [["two"], ["one"]]
    assert [Path(s.source).name for s in sentences] == ["dev.trees", "train.txt"]


def test_directory_members_filter_selects_by_file_name(tmp_path):
    for number in range(1, 5):
        write(tmp_path / f"wsj_{number:04d}.mrg", f"(S (CD {number}))\n".encode())
    sentences = read_treebank(
        tmp_path, members=lambda name: "wsj_0002.mrg" <= name <= "wsj_0003.mrg"
    )
    assert [s.tree.words() for s in sentences] == [["2"], ["3"]]


@pytest.mark.parametrize(
    ("name", "mode"),
    [("sample.tar.gz", "w:gz"), ("sample.tgz", "w:gz"), ("sample.tar", "w")],
)
def test_tar_archive(tmp_path, name, mode):
    path = make_tar(
        tmp_path / name,
        {
            "wsj_0002.mrg": b"(S (NN two))\n",
            "wsj_0001.mrg": MULTILINE,
            "README.md": b"Not read: the archive has .mrg members.\n",
            "._wsj_0001.mrg": b"\x00\x05\x16\x07 hidden metadata",
        },
        mode,
    )
    sentences = read_treebank(path)
    assert [(s.source, s.line) for s in sentences] == [
        (f"{path}:wsj_0001.mrg", 2),
        (f"{path}:wsj_0001.mrg", 9),
        (f"{path}:wsj_0002.mrg", 1),
    ]
    assert sentences[2].tree.words() == ["two"]


def test_tar_archive_recognised_without_its_suffix(tmp_path):
    path = make_tar(tmp_path / "trees.data", {"x/y.mrg": b"(S (NN y))\n"})
    sentences = read_treebank(path)
    assert [s.source for s in sentences] == [f"{path}:x/y.mrg"]


def test_archive_members_filter_selects_by_base_name(tmp_path):
    files = {f"wsj/wsj_{n:04d}.mrg": f"(S (CD {n}))\n".encode() for n in (3, 1, 2)}
    path = make_tar(tmp_path / "wsj.tar.gz", files)
    sentences = read_treebank(
        path, members=lambda name: "wsj_0001.mrg" <= name <= "wsj_0002.mrg"
    )
    assert [s.tree.words() for s in sentences] == [["1"], ["2"]]
    assert sentences[0].source == f"{path}:wsj/wsj_0001.mrg"


def test_archive_inside_a_directory_is_read(tmp_path):
    make_tar(tmp_path / "part.tar.gz", {"b.txt": b"(S (NN inside))\n"})
    sentences = read_treebank(tmp_path)
    assert [s.tree.words() for s in sentences] == [["inside"]]
    assert sentences[0].source == f"{tmp_path / 'part.tar.gz'}:b.txt"


def test_nothing_to_read_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "no file to read" in error_of(tmp_path / "empty")
    write(tmp_path / "empty" / "a.mrg", b"(S (NN a))\n")
    message = error_of(tmp_path / "empty", members=lambda name: False)
    assert "members filter" in message and str(tmp_path / "empty") in message
    archive = make_tar(tmp_path / "a.tar.gz", {"a.mrg": b"(S (NN a))\n"})
    assert str(archive) in error_of(archive, members=lambda name: False)


def test_empty_file_has_no_trees(tmp_path):
    assert read_treebank(write(tmp_path / "empty.mrg", b"\n\n")) == []


# --------------------------------------------------------------------------
# Cleaning
# --------------------------------------------------------------------------


def test_empty_elements_removed_with_the_constituents_they_empty():
    tree = parse_tree(
        "(S (NP-SBJ (-NONE- *)) (VP (VB go) (S (NP-SBJ (-NONE- *PRO*)) "
        "(VP (-NONE- *?*)))) (SBAR (-NONE- 0) (S (-NONE- *T*-2))) (. .))"
    )
    cleaned = clean_tree(tree)
    assert cleaned.to_string() == "(S (VP (VB go)) (. .))"
    assert cleaned.words() == ["go", "."]


def test_tree_of_only_empty_elements_cleans_to_none():
    assert clean_tree(parse_tree("(S (NP (-NONE- *)) (VP (-NONE- *?*)))")) is None
    assert clean_tree(parse_tree("(-NONE- *U*)")) is None


def test_function_tags_and_indices_stripped():
    tree = parse_tree(
        "(S-TPC-1 (NP-SBJ-1 (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) "
        "(VP=2 (VBZ is) (PP-LOC-CLR (IN in) (NP (PRP$ our) (NN lab)))) "
        "(ADVP|PRT (RP up)))"
    )
    assert labels(clean_tree(tree)) == [
        "S",
        "NP",
        "-LRB-",
        "NN",
        "-RRB-",
        "VP",
        "VBZ",
        "PP",
        "IN",
        "NP",
        "PRP$",
        "NN",
        "ADVP|PRT",
        "RP",
    ]
    assert clean_tree(tree).words() == tree.words()


def test_function_tags_kept_when_asked():
    tree = parse_tree(
        "(S (NP-SBJ=2 (-NONE- *)) (NP-SBJ-1 (NN x)) (VP-TPC (VBZ is)) (. .))"
    )
    cleaned = clean_tree(tree, strip_function_tags=False)
    assert cleaned.to_string() == "(S (NP-SBJ-1 (NN x)) (VP-TPC (VBZ is)) (. .))"


def test_part_of_speech_tags_are_never_stripped():
    tree = parse_tree("(NP-SBJ (NN-HLN word) (-LRB- -LRB-))")
    assert clean_tree(tree).to_string() == "(NP (NN-HLN word) (-LRB- -LRB-))"


def test_unchanged_tree_is_returned_as_it_is():
    tree = parse_tree("(S (NP (NN a)) (VP (VBZ is)))")
    assert clean_tree(tree) is tree
    assert clean_tree(parse_tree("(S-1 (NN a))")) == parse_tree("(S (NN a))")


def test_reading_cleans_and_strips_as_asked(tmp_path):
    path = write(tmp_path / "a.mrg", MULTILINE)
    stripped = read_treebank(path)[0].tree
    kept = read_treebank(path, strip_function_tags=False)[0].tree
    assert "-NONE-" not in labels(stripped) + labels(kept)
    assert labels(stripped)[:2] == ["S", "NP"]
    assert "NP-SBJ-1" in labels(kept) and "PP-LOC-CLR" in labels(kept)
    words = ["The", "cat", "sat", "on", "the", "mat", "."]
    assert stripped.words() == kept.words() == words


# --------------------------------------------------------------------------
# The root rule
# --------------------------------------------------------------------------


@pytest.mark.parametrize("wrapper", ["", "ROOT", "TOP"])
def test_wrapper_over_one_constituent_removed(tmp_path, wrapper):
    assert one(tmp_path, f"({wrapper} (SQ (VBZ Is) (NP (PRP it)) (. ?)))").label == "SQ"


def test_wrapper_left_with_one_constituent_by_cleaning_removed(tmp_path):
    tree = one(tmp_path, "( (S (NN yes)) (-NONE- *) )")
    assert tree.to_string() == "(S (NN yes))"


def test_wrapper_over_several_constituents_kept(tmp_path):
    tree = one(tmp_path, "( (S (NN yes)) (. .) )")
    assert tree.label == ""
    assert tree.to_string() == "( (S (NN yes)) (. .))"
    assert one(tmp_path, "(TOP (NP (NN a)) (. .))").label == "TOP"


def test_wrapper_over_a_word_kept(tmp_path):
    assert one(tmp_path, "(TOP Hello)") == Tree("TOP", ("Hello",))


def test_labelled_top_level_tree_kept(tmp_path):
    assert one(tmp_path, "(S (VP (VB Go)))").to_string() == "(S (VP (VB Go)))"
    assert one(tmp_path, "(NP (NN Stop))").label == "NP"


# --------------------------------------------------------------------------
# Errors: each names the file and the line
# --------------------------------------------------------------------------


def test_unclosed_tree_names_the_line_it_opens(tmp_path):
    path = write(tmp_path / "bad.mrg", b"(S (NN a))\n\n( (S\n  (NN b)\n")
    message = error_of(path)
    assert f"{path}:3:" in message and "not closed" in message


def test_extra_closing_bracket_names_its_line(tmp_path):
    path = write(tmp_path / "bad.mrg", b"(S (NN a))\n(S (NN b))\n  )\n")
    assert f"{path}:3:" in error_of(path)


def test_nul_byte_names_file_and_line(tmp_path):
    path = write(tmp_path / "utf16.mrg", b"(S (NN a))\n(S (NN \x00b))\n")
    message = error_of(path)
    assert f"{path}:2:" in message and "NUL" in message


def test_binary_data_names_file_and_line(tmp_path):
    path = write(tmp_path / "blob.mrg", b"(S (NN a))\n\x07\x1b\x02\x03\x04\x05\n")
    message = error_of(path)
    assert f"{path}:2:" in message and "binary" in message


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = write(tmp_path / "latin1.mrg", b"(S (NN a))\n\n(S (NN caf\xe9))\n")
    message = error_of(path)
    assert f"{path}:3:" in message and "UTF-8" in message


def test_tree_without_words_names_file_and_line(tmp_path):
    path = write(tmp_path / "empty.mrg", b"(S (NN a))\n(S (NP))\n")
    message = error_of(path)
    assert f"{path}:2:" in message and "no words" in message


def test_tree_of_only_empty_elements_names_file_and_line(tmp_path):
    path = write(tmp_path / "none.mrg", b"(S (NN a))\n\n( (S (NP (-NONE- *))) )\n")
    message = error_of(path)
    assert f"{path}:3:" in message and "-NONE-" in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("(S (NP (DT the) dog))", "word beside other children"),
        ("(S (NP (NN a)) (VP))", "no children"),
        ("(S ( (NN a)) (VP (VB b)))", "no label"),
    ],
)
def test_malformed_tree_names_file_and_line(tmp_path, text, problem):
    path = write(tmp_path / "bad.mrg", f"(S (NN fine))\n{text}\n".encode())
    message = error_of(path)
    assert f"{path}:2:" in message and problem in message


def test_error_in_archive_member_names_the_member(tmp_path):
    path = make_tar(
        tmp_path / "sample.tar.gz",
        {"wsj_0001.mrg": b"(S (NN a))\n", "wsj_0003.mrg": b"(S (NN a))\n(S (NN b)\n"},
    )
    assert f"{path}:wsj_0003.mrg:2:" in error_of(path)


def test_missing_path(tmp_path):
    message = error_of(tmp_path / "no-such.mrg")
    assert "not found" in message and str(tmp_path / "no-such.mrg") in message


def test_collector_state_restored(tmp_path):
    bad = write(tmp_path / "bad.mrg", b"(S (NN a)")
    assert gc.isenabled()
    with pytest.raises(DataError):
        read_treebank(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        read_treebank(write(tmp_path / "good.mrg", b"(S (NN a))"))
        assert not gc.isenabled()
    finally:
        gc.enable()


# --------------------------------------------------------------------------
# write_trees, the sentence record, imports
# --------------------------------------------------------------------------


def test_write_trees_round_trip(tmp_path):
    trees = [s.tree for s in read_treebank(write(tmp_path / "a.mrg", MULTILINE))]
    trees.append(one(tmp_path, "( (S (NN yes)) (. .) )"))
    out = tmp_path / "out.txt"
    write_trees(iter(trees), out)
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(trees) + 1
    assert [s.tree for s in read_treebank(out)] == trees


def test_write_trees_utf8_and_refuses_unwritable_words(tmp_path):
    out = tmp_path / "out.txt"
    write_trees([Tree("NP", (Tree("NN", ("Café",)),))], out)
    assert out.read_bytes() == "(NP (NN Café))\n".encode()
    for word in ("two words", "a(b", "line\nbreak", ""):
        with pytest.raises(ValueError, match="cannot be written"):
            write_trees([Tree("NP", (Tree("NN", (word,)),))], out)


def test_sentence_is_frozen(tmp_path):
    sentence = read_treebank(write(tmp_path / "a.mrg", b"(S (NN a))"))[0]
    assert sentence == TreebankSentence(
        parse_tree("(S (NN a))"), str(sentence.source), 1
    )
    with pytest.raises(AttributeError):
        sentence.line = 2


def test_imports_nothing_heavy():
    assert_imports_nothing_heavy("keras_transformer.data.treebank")


# --------------------------------------------------------------------------
# The WSJ sample (skipped where it is absent)
# --------------------------------------------------------------------------


@pytest.mark.skipif(not SAMPLE.is_file(), reason=f"no PTB sample at {SAMPLE}")
def test_wsj_sample():
    sentences = read_treebank(SAMPLE)
    assert len(sentences) == 3669
    assert sentences[0].source == f"{SAMPLE}:wsj_0001.mrg"
    assert sentences[-1].source == f"{SAMPLE}:wsj_0179.mrg"
    all_labels = [label for s in sentences for label in labels(s.tree)]
    assert "-NONE-" not in all_labels
    assert "" not in all_labels  # Every wrapper held one constituent.
    tagged = [label for label in all_labels if not label.startswith("-")]
    assert not [label for label in tagged if "-" in label or "=" in label]
    kept = read_treebank(SAMPLE, strip_function_tags=False)
    assert any("-SBJ" in label for s in kept for label in labels(s.tree))
    assert [s.tree.words() for s in kept] == [s.tree.words() for s in sentences]
    train = read_treebank(
        SAMPLE, members=lambda name: "wsj_0001.mrg" <= name <= "wsj_0159.mrg"
    )
    assert len(train) == 3396
