"""The parsing task end to end: a tiny step-bounded run trains on a treebank,
parses (one tree per input line, empty and long lines included) and scores.

Backend-neutral (tests/conftest.py): the parsing task is the translation
model on linearized trees (keras_transformer/parsing holds no Keras code:
trees, linearization, repair, EVALB scoring, search settings), so this flow
is the same code on every backend. Its Keras computation is checked in every
suite: training runs, dev evaluation during training and the final test
score in tests/training/test_job.py, separate target vocabularies in
tests/test_model.py, beam search (`allow_unk` too) in
tests/decoding/test_generator.py and tests/decoding/test_translator.py."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from keras_transformer.cli import main
from keras_transformer.data.tokenizer import load_tokenizer
from keras_transformer.data.treebank import read_treebank
from keras_transformer.parsing.linearize import linearize
from keras_transformer.parsing.tree import parse_tree
from keras_transformer.training import job as job_module
from tests.helpers import TRAINING_MODEL

pytestmark = pytest.mark.backend_neutral

_WORDS = {
    "DT": ["the", "a", "every"],
    "NN": ["dog", "cat", "market", "price", "report"],
    "JJ": ["old", "big", "quiet"],
    "NNP": ["Anna", "Boston", "Friday"],
    "VBD": ["saw", "rose", "liked", "left"],
    "IN": ["in", "near", "with"],
}


def _leaf(rng: random.Random, tag: str) -> str:
    return f"({tag} {rng.choice(_WORDS[tag])})"


def _noun_phrase(rng: random.Random, depth: int = 0) -> str:
    choice = rng.random()
    if choice < 0.3:
        return f"(NP {_leaf(rng, 'NNP')})"
    base = f"(NP {_leaf(rng, 'DT')} {_leaf(rng, 'JJ') + ' ' if choice < 0.5 else ''}"
    base = base.rstrip() + f" {_leaf(rng, 'NN')})"
    if depth == 0 and rng.random() < 0.3:
        return f"(NP {base} (PP {_leaf(rng, 'IN')} {_noun_phrase(rng, 1)}))"
    return base


def _sentence(rng: random.Random) -> str:
    verb = f"(VP {_leaf(rng, 'VBD')}" + (
        f" {_noun_phrase(rng)})" if rng.random() < 0.7 else ")"
    )
    return f"( (S {_noun_phrase(rng)} {verb} (. .)) )"


def _write_treebank(path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    trees = [_sentence(rng) for _ in range(count)]
    path.write_text("\n".join(trees) + "\n", encoding="utf-8")
    return trees


@pytest.fixture(scope="module")
def parsing_run(tmp_path_factory):
    """A 4-update parsing run of a very small model on generated trees."""
    root = tmp_path_factory.mktemp("parsing")
    _write_treebank(root / "train.mrg", 150, seed=1)
    _write_treebank(root / "dev.mrg", 8, seed=2)
    assert main(_train_argv(root)) == 0
    return root


def _train_argv(root) -> list[str]:
    """The fixture's `train`: 4 updates, a final test score of beam 2, alpha 1.5."""
    overrides = [f"--set={key}={value}" for key, value in TRAINING_MODEL.items()]
    return [
        "train", "--task", "parsing", "--run-dir", str(root / "run"),
        "--train-trees", str(root / "train.mrg"),
        "--valid-trees", str(root / "dev.mrg"),
        "--test-trees", str(root / "dev.mrg"),
        *overrides, "--vocab-size", "100", "--tokens-per-batch", "1024",
        "--max-length", "64", "--max-steps", "4", "--eval-every", "2",
        "--dev-subset", "4", "--checkpoint-every", "0", "--beam-size", "2",
        "--alpha", "1.5", "--verbose", "0",
    ]  # fmt: skip


def test_a_parsing_run_scores_its_test_trees_and_dev_f1(parsing_run):
    run = parsing_run / "run"
    scores = json.loads((run / "test_scores.json").read_text(encoding="utf-8"))
    assert scores["parsed"] == scores["sentences"] == 8
    assert 0.0 <= scores["f1"] <= 100.0
    assert {"precision", "recall", "exact_match", "repaired"} <= set(scores)
    assert scores["repaired"] == 0  # The search writes trees (tree_grammar).
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["identity"]["task"] == "parsing"
    assert manifest["identity"]["tokenizer"] == "words"
    entries = (run / "dev_bleu.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step"] for line in entries] == [2, 4]
    assert all("dev_f1" in json.loads(line) for line in entries)
    assert all(json.loads(line)["dev_repaired"] == 0 for line in entries)


def test_parse_writes_one_tree_over_each_lines_words(parsing_run, tmp_path, capsys):
    long_line = " ".join(["the", "old", "dog", "saw", "a", "cat"] * 15)
    lines = ["Anna saw the dog .", "", "   ", long_line, "a cat left ."]
    source = tmp_path / "sentences.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capsys.readouterr()
    argv = ["parse", "--run-dir", str(parsing_run / "run"), "--input", str(source)]
    search = ["--beam-size", "2", "--max-extra-length", "20"]
    for constraints in ([], ["--no-tree-constraints"]):
        assert main([*argv, *search, *constraints]) == 0
        captured = capsys.readouterr()
        output = captured.out.splitlines()
        assert len(output) == len(lines)
        for line, tree_text in zip(lines, output):
            if not line.strip():
                assert tree_text == ""  # An empty line has no tree.
            else:
                assert parse_tree(tree_text).words() == line.split()
        # Only the unconstrained search writes what needs the repair rule.
        assert ("repaired" in captured.err) == bool(constraints)


def test_parse_tagged_input_keeps_each_words_tag(parsing_run, tmp_path, capsys):
    lines = ["Anna/NNP saw/VBD the/DT dog/NN ./.", "", "a/DT cat/NN left/VBD ./."]
    source = tmp_path / "tagged.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["parse", "--run-dir", str(parsing_run / "run"), "--beam-size", "2"]
    capsys.readouterr()
    assert main([*argv, "--input", str(source), "--tagged"]) == 0
    output = capsys.readouterr().out.splitlines()
    assert output[1] == ""
    for line, tree_text in zip(lines[::2], output[::2], strict=True):
        expected = [tuple(token.split("/")[::-1]) for token in line.split()]
        assert parse_tree(tree_text).tagged_words() == expected
    source.write_text("the/DT dog/NN\nthe/DT dog/QQ\n", encoding="utf-8")
    assert main([*argv, "--input", str(source), "--tagged"]) == 2
    assert "tagged.txt:2, word 2: the tag 'QQ' is not" in capsys.readouterr().err
    source.write_text("the/DT dog/NN\nthe/DT dog\n", encoding="utf-8")
    assert main([*argv, "--input", str(source), "--tagged"]) == 2
    assert "tagged.txt:2: token 2 ('dog') is not word/TAG" in capsys.readouterr().err
    tagged = [*argv, "--input", str(source), "--tagged", "--no-tree-constraints"]
    assert main(tagged) == 2
    assert "--no-tree-constraints" in capsys.readouterr().err


def test_evaluate_parsing_parses_the_gold_words_and_prints_f1(parsing_run, capsys):
    gold = parsing_run / "dev.mrg"
    argv = ["evaluate", "--task", "parsing", "--run-dir", str(parsing_run / "run")]
    capsys.readouterr()
    assert main([*argv, "--ref", str(gold), "--beam-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "Labeled bracketing" in out and "F1" in out
    assert "repaired parses: 0 of 8" in out
    assert main([*argv, "--task", "translation", "--no-tree-constraints"]) == 2
    assert "applies to --task parsing only" in capsys.readouterr().err


def test_the_final_test_score_decodes_with_the_runs_beam_and_alpha(
    parsing_run, tmp_path, monkeypatch
):
    # Its test trees are those evaluate writes with the same search.
    run = parsing_run / "run"
    output = tmp_path / "alpha.mrg"
    assert main(["evaluate", "--task", "parsing", "--run-dir", str(run),
                 "--ref", str(parsing_run / "dev.mrg"), "--beam-size", "2",
                 "--alpha", "1.5", "--output", str(output)]) == 0  # fmt: skip
    assert (run / "test.hyp.txt").read_text() == output.read_text()
    # The same run again only scores again: its search is the flags' own.
    searches = []
    original = job_module.Translator

    def recording(model, tokenizer, settings, **kwargs):
        searches.append((settings.beam_size, settings.alpha))
        return original(model, tokenizer, settings, **kwargs)

    monkeypatch.setattr(job_module, "Translator", recording)
    assert main(_train_argv(parsing_run)) == 0
    assert searches == [(2, 1.5)]
    scores = json.loads((run / "test_scores.json").read_text(encoding="utf-8"))
    assert (scores["search"]["beam_size"], scores["search"]["alpha"]) == (2, 1.5)


def test_evaluate_parsing_with_gold_tags_keeps_the_treebanks_tags(
    parsing_run, tmp_path, capsys
):
    gold = parsing_run / "dev.mrg"
    output = tmp_path / "parses.mrg"
    argv = ["evaluate", "--task", "parsing", "--run-dir", str(parsing_run / "run"),
            "--ref", str(gold), "--beam-size", "2"]  # fmt: skip
    assert main([*argv, "--gold-tags", "--output", str(output)]) == 0
    assert "repaired parses: 0 of 8" in capsys.readouterr().out
    parses = [parse_tree(line) for line in output.read_text().splitlines()]
    gold_trees = [parse_tree(line) for line in gold.read_text().splitlines()]
    assert [p.tagged_words() for p in parses] == [g.tagged_words() for g in gold_trees]
    assert main([*argv, "--gold-tags", "--no-tree-constraints"]) == 2
    assert "--no-tree-constraints" in capsys.readouterr().err
    assert main([*argv, "--gold-tags", "--task", "translation"]) == 2
    assert "--gold-tags applies to --task parsing only" in capsys.readouterr().err
    hyp = ["evaluate", "--task", "parsing", "--ref", str(gold), "--hyp", str(output)]
    assert main([*hyp, "--gold-tags"]) == 2
    assert "--gold-tags cannot be used with --hyp" in capsys.readouterr().err


def test_an_ensemble_parses_and_scores_and_its_members_share_targets(
    parsing_run, tmp_path, capsys
):
    """`parse` and `evaluate --task parsing` take `--ensemble`: the run with
    a copy of itself decodes as the run alone (the mean of equal
    log-probabilities; tests/decoding/test_ensemble.py checks the mean of
    different models). A member trained on other targets is refused."""
    run, gold = parsing_run / "run", parsing_run / "dev.mrg"
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)
    search = ["--beam-size", "2", "--max-extra-length", "20"]
    evaluate = ["evaluate", "--task", "parsing", "--run-dir", str(run), "--ref",
                str(gold), *search]  # fmt: skip
    source = tmp_path / "in.txt"
    source.write_text("Anna saw the dog .\na cat left .\n", encoding="utf-8")
    parse = ["parse", "--run-dir", str(run), "--input", str(source), *search]
    outputs = []
    for members in ([], ["--ensemble", str(twin)]):
        capsys.readouterr()
        assert main([*evaluate, *members]) == 0
        assert main([*parse, *members]) == 0
        outputs.append(capsys.readouterr().out)
    assert "Labeled bracketing" in outputs[0] and outputs[1] == outputs[0]
    hyp = tmp_path / "dev.hyp"
    hyp.write_text("\n".join(["(S (NN x))"] * 8) + "\n", encoding="utf-8")
    hyp_argv = ["evaluate", "--task", "parsing", "--ref", str(gold), "--hyp", str(hyp)]
    assert main([*hyp_argv, "--ensemble", str(twin)]) == 2
    assert "--ensemble cannot be used with --hyp" in capsys.readouterr().err
    manifest = json.loads((twin / "manifest.json").read_text(encoding="utf-8"))
    manifest["identity"]["data"]["linearization"] = "xx"
    (twin / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for argv in (evaluate, parse):  # The members are opened, and checked.
        assert main([*argv, "--ensemble", str(twin)]) == 2
        error = capsys.readouterr().err
        assert "must write the same targets" in error and "parsing (xx)" in error


def test_a_parsing_run_refuses_to_translate(parsing_run, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("Anna saw the dog .\n", encoding="utf-8")
    run = str(parsing_run / "run")
    assert main(["translate", "--run-dir", run, "--input", str(source)]) == 2
    assert "trained for parsing" in capsys.readouterr().err


def test_a_parsing_run_is_not_served(parsing_run, capsys):
    assert main(["serve", "--run-dir", str(parsing_run / "run"), "--port", "0"]) == 2
    assert "trained for parsing" in capsys.readouterr().err


def test_a_run_with_words_in_its_targets_parses_with_them(tmp_path, capsys):
    _write_treebank(tmp_path / "train.mrg", 60, seed=3)
    run = tmp_path / "run"
    overrides = [f"--set={key}={value}" for key, value in TRAINING_MODEL.items()]
    argv = [
        "train", "--task", "parsing", "--run-dir", str(run),
        "--train-trees", str(tmp_path / "train.mrg"),
        "--linearization", "tags+words", "--subtree-substitution", "2",
        *overrides, "--vocab-size", "100",
        "--tokens-per-batch", "1024", "--max-length", "64", "--max-steps", "2",
        "--checkpoint-every", "0", "--eval-every", "0", "--verbose", "0",
    ]  # fmt: skip
    assert main(argv) == 0
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["identity"]["data"]["linearization"] == "tags+words"
    assert manifest["identity"]["data"]["subtree_substitution"] == 2
    # Words in the targets: one joint vocabulary, shared, as the paper's.
    assert load_tokenizer(run / "tokenizer").target_size is None
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert config["share_embeddings"] is True and config["target_vocab_size"] is None
    source = tmp_path / "in.txt"
    source.write_text("Anna saw the dog .\n", encoding="utf-8")
    capsys.readouterr()
    parse = ["parse", "--run-dir", str(run), "--input", str(source)]
    assert main([*parse, "--beam-size", "2", "--max-extra-length", "10"]) == 0
    captured = capsys.readouterr()
    (tree,) = captured.out.splitlines()
    assert parse_tree(tree).words() == ["Anna", "saw", "the", "dog", "."]
    assert "repaired" not in captured.err  # Each tag wrote its word's copy.


@pytest.mark.parametrize("linearization", ["tags", "xx"])
def test_a_word_pointer_run_trains_parses_and_scores(tmp_path, capsys, linearization):
    _write_treebank(tmp_path / "train.mrg", 60, seed=4)
    _write_treebank(tmp_path / "dev.mrg", 6, seed=5)
    run = tmp_path / "run"
    overrides = [f"--set={key}={value}" for key, value in TRAINING_MODEL.items()]
    argv = [
        "train", "--task", "parsing", "--run-dir", str(run), "--word-pointer",
        "--linearization", linearization,
        "--train-trees", str(tmp_path / "train.mrg"),
        "--test-trees", str(tmp_path / "dev.mrg"), *overrides,
        "--vocab-size", "100", "--tokens-per-batch", "1024", "--max-length", "64",
        "--max-steps", "2", "--checkpoint-every", "0", "--eval-every", "0",
        "--beam-size", "2", "--verbose", "0",
    ]  # fmt: skip
    assert main(argv) == 0
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert "subtree_substitution" not in manifest["identity"]["data"]  # As before.
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    tokenizer = load_tokenizer(run / "tokenizer")
    tokens = tokenizer.vocabulary
    skipped = {tokens[i] for i in config["pointer_bracket_ids"]}
    assert "(NP" in skipped and ")S" in skipped and "NN" not in skipped
    assert ("NN" in tokens) == (linearization == "tags")  # xx: only XX and "."
    # The targets' own vocabulary: every symbol of the training targets,
    # first, and the output layer over those alone.
    tag = "XX" if linearization == "xx" else None
    trees = read_treebank(tmp_path / "train.mrg")
    symbols = {token for tree in trees for token in linearize(tree.tree, tag=tag)}
    assert set(tokenizer.target_vocabulary[4:]) == symbols
    assert config["target_vocab_size"] == tokenizer.target_size == 4 + len(symbols)
    assert config["share_embeddings"] is False
    assert max(config["pointer_bracket_ids"]) < tokenizer.target_size
    scores = json.loads((run / "test_scores.json").read_text(encoding="utf-8"))
    assert scores["parsed"] == 6 and scores["repaired"] == 0
    source = tmp_path / "in.txt"
    source.write_text("Anna saw the dog .\n", encoding="utf-8")
    capsys.readouterr()
    parse = ["parse", "--run-dir", str(run), "--input", str(source)]
    assert main([*parse, "--beam-size", "2", "--max-extra-length", "10"]) == 0
    (tree,) = capsys.readouterr().out.splitlines()
    assert parse_tree(tree).words() == ["Anna", "saw", "the", "dog", "."]


def test_a_parsing_run_is_not_exported(parsing_run, tmp_path, capsys):
    run = str(parsing_run / "run")
    out = str(tmp_path / "preset")
    assert main(["export", "--run-dir", run, "--out", out, "--format", "preset"]) == 2
    assert "trained for parsing" in capsys.readouterr().err
