"""The parsing task on the command line, without a trained model: the search
defaults of `parse` and `evaluate --task parsing`, scoring --hyp trees, and
the flags refused before any data is read."""

from __future__ import annotations

import pytest

from keras_transformer import training
from keras_transformer.cli import build_parser, main
from keras_transformer.training import job, model_setup

pytestmark = pytest.mark.backend_neutral

DOG = "( (S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .)) )"
RAN = "( (S (NP (PRP It)) (VP (VBD ran))) )"
# The .mrg layout: one tree over several lines.
RAN_MRG = "( (S\n    (NP (PRP It))\n    (VP (VBD ran))) )\n"
# The dog sentence with a flat subject: VP and S right, NP missed.
FLAT_DOG = "(S (DT The) (NN dog) (VP (VBD barked)) (. .))"


def _never(*args, **kwargs):
    raise AssertionError("reached work that an earlier error should have stopped")


def _files(tmp_path, gold: str, hyp: str):
    gold_path, hyp_path = tmp_path / "gold.mrg", tmp_path / "hyp.txt"
    gold_path.write_text(gold, encoding="utf-8")
    hyp_path.write_text(hyp, encoding="utf-8")
    return gold_path, hyp_path


def _evaluate(*argv: str) -> int:
    return main(["evaluate", "--task", "parsing", *map(str, argv)])


def _all_row(out: str) -> list[str]:
    """The scorer's row over all sentences: counted, errors, precision,
    recall, F1, exact, tagging."""
    rows = [line.split() for line in out.splitlines() if line.startswith("all ")]
    assert len(rows) == 1, out
    return rows[0][1:]


# --- search defaults ------------------------------------------------------------


def test_parse_defaults_to_the_papers_parsing_search():
    args = build_parser().parse_args(["parse", "--run-dir", "R"])
    assert (args.beam_size, args.alpha, args.max_extra_length) == (21, 0.3, 300)
    assert not args.allow_unk and not args.early_stopping


def test_parse_help_shows_the_parsing_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as info:
        main(["parse", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "beam width; 1 is greedy search (default: 21)" in out
    assert "(default: 0.3)" in out and "(default: 300)" in out


def test_translate_keeps_the_translation_search_defaults():
    args = build_parser().parse_args(["translate", "--run-dir", "R"])
    assert (args.beam_size, args.alpha, args.max_extra_length) == (4, 0.6, 50)


def test_parse_needs_a_run_dir_and_takes_no_preset(capsys):
    for argv in (["parse"], ["parse", "--preset", "P"]):
        with pytest.raises(SystemExit) as info:
            build_parser().parse_args(argv)
        assert info.value.code == 2
    assert "--run-dir" in capsys.readouterr().err


def test_evaluate_task_is_translation_or_parsing(capsys):
    parser = build_parser()
    assert parser.parse_args(["evaluate", "--ref", "G"]).task == "translation"
    args = parser.parse_args(["evaluate", "--task", "parsing", "--ref", "G"])
    assert args.task == "parsing"
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["evaluate", "--task", "tagging", "--ref", "G"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "'tagging'" in err and "translation" in err and "parsing" in err


@pytest.mark.parametrize("task", ["translation", "parsing"])
def test_evaluate_search_flags_default_to_none_for_the_task_to_fill(task):
    args = build_parser().parse_args(["evaluate", "--task", task, "--ref", "G"])
    assert (args.beam_size, args.alpha, args.max_extra_length) == (None, None, None)
    assert not args.allow_unk and not args.early_stopping


# --- evaluate --task parsing --hyp: no model ---------------------------------------


def test_evaluate_parsing_hyp_equal_to_the_gold_is_100(tmp_path, capsys):
    gold, hyp = _files(tmp_path, f"{DOG}\n{RAN_MRG}", f"{DOG}\n{RAN}\n")
    assert _evaluate("--hyp", hyp, "--ref", gold) == 0
    out = capsys.readouterr().out
    assert "Labeled bracketing" in out
    counted, errors, precision, recall, f1, exact, tagging = _all_row(out)
    assert (counted, errors) == ("2", "0")
    assert precision == recall == f1 == exact == tagging == "100.00"
    assert out.splitlines()[-1] == "repaired parses: 0 of 2"


def test_evaluate_parsing_hyp_scores_by_hand(tmp_path, capsys):
    # Gold DOG: NP VP S (3 brackets, "." not counted); gold RAN: NP VP S.
    # The flat DOG matches VP and S of 2 test brackets; RAN has no tree (an
    # empty line): precision 2/2 = 100, recall 2/6 = 33.33, F1 = 50.
    gold, hyp = _files(tmp_path, f"{DOG}\n{RAN}\n", f"{FLAT_DOG}\n\n")
    assert _evaluate("--hyp", hyp, "--ref", gold) == 0
    counted, errors, precision, recall, f1, exact, _ = _all_row(capsys.readouterr().out)
    assert (counted, errors) == ("2", "0")
    assert (precision, recall, f1, exact) == ("100.00", "33.33", "50.00", "0.00")


def test_evaluate_parsing_output_writes_the_hyp_trees(tmp_path, capsys):
    gold, hyp = _files(tmp_path, f"{DOG}\n{RAN}\n", f"{FLAT_DOG}\n\n")
    output = tmp_path / "trees.txt"
    assert _evaluate("--hyp", hyp, "--ref", gold, "--output", output) == 0
    assert output.read_text(encoding="utf-8") == f"{FLAT_DOG}\n\n"


@pytest.mark.parametrize("line", ["The dog barked .", "(S (NN The) (NN dog)"])
def test_evaluate_parsing_hyp_line_that_is_not_a_tree_exits_2(tmp_path, capsys, line):
    gold, hyp = _files(tmp_path, f"{RAN}\n{DOG}\n", f"{RAN}\n{line}\n")
    assert _evaluate("--hyp", hyp, "--ref", gold) == 2
    err = capsys.readouterr().err
    assert "keras-transformer evaluate: error" in err
    assert f"{hyp}:2" in err


def test_evaluate_parsing_hyp_of_another_length_exits_2(tmp_path, capsys):
    gold, hyp = _files(tmp_path, f"{DOG}\n{RAN}\n", f"{DOG}\n")
    assert _evaluate("--hyp", hyp, "--ref", gold) == 2
    err = capsys.readouterr().err
    assert str(hyp) in err and "1 lines" in err and "2 trees" in err


def test_evaluate_parsing_bad_gold_exits_2_naming_it(tmp_path, capsys):
    gold, hyp = _files(tmp_path, f"{DOG}\n(S (NN a)\n", f"{DOG}\n{DOG}\n")
    assert _evaluate("--hyp", hyp, "--ref", gold) == 2
    assert f"{gold}:2" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--src", "SRC"], "--src"),
        (["--paper-bleu"], "--paper-bleu"),
        (["--preset", "P"], "--preset"),
    ],
)
def test_evaluate_parsing_refuses_translation_flags(tmp_path, capsys, argv, flag):
    gold, _ = _files(tmp_path, f"{DOG}\n", "")
    assert _evaluate("--ref", gold, *argv) == 2
    err = capsys.readouterr().err
    assert flag in err and "--task parsing" in err


@pytest.mark.parametrize(
    "argv",
    [["--beam-size", "4"], ["--beam-size", "21"], ["--alpha", "0.3"], ["--allow-unk"]],
)
def test_evaluate_parsing_hyp_refuses_search_flags(tmp_path, capsys, argv):
    gold, hyp = _files(tmp_path, f"{DOG}\n", f"{DOG}\n")
    assert _evaluate("--hyp", hyp, "--ref", gold, *argv) == 2
    err = capsys.readouterr().err
    assert argv[0] in err and "--hyp" in err


def test_evaluate_translation_hyp_refuses_a_search_flag_at_its_default(
    tmp_path, capsys
):
    text = tmp_path / "text.txt"
    text.write_text("ein Hund\n", encoding="utf-8")
    argv = ["evaluate", "--hyp", str(text), "--ref", str(text), "--beam-size", "4"]
    assert main(argv) == 2
    assert "--beam-size" in capsys.readouterr().err


def test_evaluate_parsing_without_hyp_needs_a_run_dir(tmp_path, capsys):
    gold, _ = _files(tmp_path, f"{DOG}\n", "")
    assert _evaluate("--ref", gold) == 2
    assert "--run-dir" in capsys.readouterr().err


# --- train: treebank flags refused before any data is read ---------------------------


@pytest.fixture
def train_exit(monkeypatch, tmp_path):
    """`train ARGV`'s exit status, failing the test if data or a model is
    reached, and checking that no run directory was made."""
    monkeypatch.setattr(training, "train", _never)
    monkeypatch.setattr(job, "prepare_training_store", _never)
    monkeypatch.setattr(model_setup, "build_transformer", _never)
    run_dir = tmp_path / "run"

    def run(*argv: str) -> int:
        try:
            code = main(["train", "--run-dir", str(run_dir), *argv])
        except SystemExit as exit:  # argparse's own usage error.
            code = exit.code
        assert not run_dir.exists()
        return code

    return run


TREES = "train.mrg"  # Never read: each refusal comes first.


def test_train_trees_with_another_dataset_exits_2(train_exit, capsys):
    argv = ["--task", "parsing", "--train-trees", TREES, "--dataset", "multi30k"]
    assert train_exit(*argv) == 2
    err = capsys.readouterr().err
    assert "--dataset multi30k" in err and "--train-trees" in err


@pytest.mark.parametrize("flag", ["--valid-trees", "--test-trees"])
def test_valid_or_test_trees_without_train_trees_exits_2(train_exit, capsys, flag):
    assert train_exit("--task", "parsing", flag, TREES) == 2
    assert "need --train-trees" in capsys.readouterr().err


def test_train_trees_without_task_parsing_exits_2(train_exit, capsys):
    assert train_exit("--train-trees", TREES) == 2
    assert "--task parsing" in capsys.readouterr().err


def test_task_parsing_without_train_trees_exits_2(train_exit, capsys):
    assert train_exit("--task", "parsing") == 2
    assert "--train-trees" in capsys.readouterr().err


def test_task_parsing_with_a_subword_tokenizer_exits_2(train_exit, capsys):
    argv = ["--task", "parsing", "--train-trees", TREES, "--tokenizer", "wordpiece"]
    assert train_exit(*argv) == 2
    assert "--tokenizer words" in capsys.readouterr().err


def test_train_trees_with_lenient_utf8_exits_2(train_exit, capsys):
    argv = ["--task", "parsing", "--train-trees", TREES, "--lenient-utf8"]
    assert train_exit(*argv) == 2
    assert "--lenient-utf8" in capsys.readouterr().err


def test_train_trees_with_text_files_exits_2(train_exit, capsys):
    argv = ["--task", "parsing", "--train-trees", TREES]
    argv += ["--train-src", "train.en", "--train-tgt", "train.de"]
    assert train_exit(*argv) == 2
    assert "cannot be mixed" in capsys.readouterr().err


def test_prepare_has_no_trees_flags(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["prepare", "--train-trees", TREES])
    assert info.value.code == 2
    assert "--train-trees" in capsys.readouterr().err


def test_evaluate_parsing_lenient_utf8_reads_a_damaged_hyp(tmp_path, capsys):
    gold, hyp = _files(tmp_path, f"{DOG}\n{RAN}\n", "")
    hyp.write_bytes(f"{DOG}\n{RAN}\n".replace("ran", "r\xffn").encode("latin-1"))
    assert _evaluate("--hyp", hyp, "--ref", gold) == 2
    assert "invalid UTF-8" in capsys.readouterr().err
    assert _evaluate("--hyp", hyp, "--ref", gold, "--lenient-utf8") == 0
    # "r\ufffdn" is not the gold's word: that sentence is not counted.
    counted, errors, *_ = _all_row(capsys.readouterr().out)
    assert (counted, errors) == ("1", "1")


def test_evaluate_parsing_lenient_utf8_needs_hyp(tmp_path, capsys):
    gold, _ = _files(tmp_path, f"{DOG}\n", "")
    run = tmp_path / "run"
    assert _evaluate("--run-dir", run, "--ref", gold, "--lenient-utf8") == 2
    assert "--lenient-utf8 applies to --hyp only" in capsys.readouterr().err


def test_linearization_without_trees_exits_2(train_exit, capsys):
    assert train_exit("--linearization", "tags+words") == 2
    assert "--linearization applies to --train-trees" in capsys.readouterr().err


def test_subtree_substitution_without_trees_exits_2(train_exit, capsys):
    assert train_exit("--subtree-substitution", "2") == 2
    assert "--subtree-substitution applies to --train-trees" in capsys.readouterr().err
    assert (
        train_exit(
            "--task", "parsing", "--train-trees", TREES, "--subtree-substitution", "-1"
        )
        == 2
    )
    assert "--subtree-substitution: must be >= 0" in capsys.readouterr().err


def test_word_pointer_outside_parsing_exits_2(train_exit, capsys):
    assert train_exit("--word-pointer") == 2
    assert "--word-pointer follows the words of a parse" in capsys.readouterr().err


def test_word_pointer_with_the_words_in_the_targets_exits_2(train_exit, capsys):
    argv = ["--task", "parsing", "--train-trees", TREES, "--word-pointer"]
    assert train_exit(*argv, "--linearization", "tags+words") == 2
    assert "use it with --linearization tags" in capsys.readouterr().err


def test_pointer_bracket_ids_are_not_set_by_hand(train_exit, capsys):
    argv = ["--task", "parsing", "--train-trees", TREES]
    assert train_exit(*argv, "--set", "pointer_bracket_ids=[4]") == 2
    assert "pass --word-pointer instead" in capsys.readouterr().err
