"""`keras-transformer` command line: overrides, error exits, summary.

Backend-neutral (tests/conftest.py): parsing flags and refusing bad ones
before any model is built is the same code on every backend; the one model
built here (`summary`) is only counted, and its parameter count is a
property of the configuration (tests/test_model.py builds and runs the model
in every suite)."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from keras_transformer import TransformerConfig, build_transformer, training
from keras_transformer.cli import main, parse_overrides
from keras_transformer.config import field_names
from keras_transformer.data import tokenizer as tokenizer_module
from keras_transformer.training import job, model_setup

pytestmark = pytest.mark.backend_neutral


def _never(*args, **kwargs):
    raise AssertionError("reached work that an earlier error should have stopped")


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if model building (and so training) is reached."""
    monkeypatch.setattr(model_setup, "build_transformer", _never)


# --- parse_overrides ------------------------------------------------------------


def test_parse_overrides_types_values_by_field():
    overrides = parse_overrides(
        [
            "d_model=256",
            "num_heads = 4",
            "dropout_rate=0.2",
            "label_smoothing=0",
            "layer_norm_epsilon=1e-5",
            "norm_first=true",
            "share_embeddings=off",
            "tie_output_projection=No",
            "position_encoding=learned",
            "attention_window=None",
            "target_vocab_size=300",
        ]
    )
    assert overrides == {
        "d_model": 256,
        "num_heads": 4,
        "dropout_rate": 0.2,
        "label_smoothing": 0.0,
        "layer_norm_epsilon": 1e-5,
        "norm_first": True,
        "share_embeddings": False,
        "tie_output_projection": False,
        "position_encoding": "learned",
        "attention_window": None,
        "target_vocab_size": 300,
    }
    assert type(overrides["d_model"]) is int
    assert type(overrides["label_smoothing"]) is float
    assert type(overrides["norm_first"]) is bool
    assert parse_overrides(["attention_window=16"]) == {"attention_window": 16}
    assert parse_overrides(["target_vocab_size=null"]) == {"target_vocab_size": None}
    assert parse_overrides([]) == {}


@pytest.mark.parametrize("word, value", [("1", True), ("YES", True), ("0", False)])
def test_parse_overrides_bool_words(word, value):
    assert parse_overrides([f"norm_first={word}"]) == {"norm_first": value}


def test_parsed_overrides_build_a_valid_config():
    overrides = parse_overrides(["d_model=32", "num_heads=2", "norm_first=yes"])
    config = TransformerConfig.preset("tiny", **overrides)
    assert (config.d_model, config.num_heads, config.norm_first) == (32, 2, True)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError, match="bogus") as info:
        parse_overrides(["bogus=1"])
    message = str(info.value)
    for name in field_names():
        assert name in message


@pytest.mark.parametrize(
    "item, name, kind",
    [
        ("d_model=abc", "d_model", "int"),
        ("d_model=1.5", "d_model", "int"),
        ("norm_first=maybe", "norm_first", "bool"),
        ("dropout_rate=high", "dropout_rate", "float"),
        ("attention_window=wide", "attention_window", "int"),
    ],
)
def test_wrong_typed_value_names_key_and_type(item, name, kind):
    with pytest.raises(ValueError) as info:
        parse_overrides([item])
    message = str(info.value)
    assert name in message
    assert f"type {kind}" in message


def test_missing_equals_sign():
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["d_model"])


# --- train: errors before any work ------------------------------------------------


def test_train_bad_override_exits_2_before_data_work(
    monkeypatch, capsys, tmp_path, no_training
):
    monkeypatch.setattr(job, "prepare_training_store", _never)
    run_dir = tmp_path / "run"
    code = main(["train", "--set", "bogus=1", "--run-dir", str(run_dir)])
    assert code == 2
    err = capsys.readouterr().err
    assert "keras-transformer train: error" in err
    assert "bogus" in err
    for name in field_names():
        assert name in err
    assert not run_dir.exists()


def test_train_invalid_config_exits_2_before_data_work(
    monkeypatch, capsys, tmp_path, no_training
):
    monkeypatch.setattr(job, "prepare_training_store", _never)
    code = main(["train", "--set", "d_model=30", "--run-dir", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err
    assert "d_model" in err and "num_heads" in err


def _train_files(tmp_path, source_lines, target_lines):
    source = tmp_path / "train.en"
    target = tmp_path / "train.de"
    source.write_text("".join(f"{line}\n" for line in source_lines), encoding="utf-8")
    target.write_text("".join(f"{line}\n" for line in target_lines), encoding="utf-8")
    argv = [
        "train",
        "--dataset", "files",
        "--train-src", str(source),
        "--train-tgt", str(target),
        "--run-dir", str(tmp_path / "run"),
        "--vocab-size", "300",
        "--max-steps", "1",
    ]  # fmt: skip
    return argv, source, target


def test_train_files_line_count_mismatch(monkeypatch, capsys, tmp_path, no_training):
    monkeypatch.setattr(tokenizer_module, "train_tokenizer", _never)
    argv, source, target = _train_files(
        tmp_path, [f"sentence {i}" for i in range(5)], ["satz 0", "satz 1", "satz 2"]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(source) in err and str(target) in err
    assert "5 lines" in err and "3 lines" in err
    assert "Line 4" in err


def test_train_half_src_tgt_pair_exits_2(capsys, tmp_path, no_training):
    source = tmp_path / "train.en"
    source.write_text("a\n")
    code = main(["train", "--dataset", "files", "--train-src", str(source),
                 "--run-dir", str(tmp_path / "run")])  # fmt: skip
    assert code == 2
    assert "--train-src and --train-tgt go together" in capsys.readouterr().err


def test_train_files_all_blank_exits_2(capsys, tmp_path, no_training):
    # Nothing to learn a vocabulary from: the first check that sees the
    # blank pairs is the tokenizer's, which runs before the pair filter.
    argv, _, _ = _train_files(tmp_path, ["", "   ", "\t"], [" ", "", "  "])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "keras-transformer train: error" in err
    assert "empty" in err


def test_train_files_no_pairs_left_exits_2(capsys, tmp_path, no_training):
    # Text on the source side only: a vocabulary is learned, then every
    # pair is dropped as empty.
    sources = [f"the cat sees {word}" for word in ("a dog", "the house", "me")] * 4
    argv, source, target = _train_files(tmp_path, sources, ["  "] * len(sources))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no training pairs left" in err
    assert str(source) in err and str(target) in err
    assert "12 empty" in err


# --- summary ----------------------------------------------------------------------


def test_summary_prints_parameter_count(capsys):
    assert main(["summary", "tiny", "--vocab-size", "100"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"tiny: ([\d,]+) parameters \(vocab 100\)", out)
    assert match, out
    count = int(match.group(1).replace(",", ""))
    expected = build_transformer(TransformerConfig.preset("tiny", vocab_size=100))
    assert count == expected.count_params()


def test_unknown_preset_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--preset", "huge"])
    assert info.value.code == 2
    assert "huge" in capsys.readouterr().err


# --- every numeric flag is range-checked, naming the flag ---------------------------

BAD_TRAIN_VALUES = [
    ("--tokens-per-batch", "0"),
    ("--vocab-size", "3"),
    ("--accumulation-steps", "0"),
    ("--max-length", "1"),
    ("--epochs", "0"),
    ("--max-steps", "0"),
    ("--max-minutes", "-1"),
    ("--learning-rate-scale", "0"),
    ("--seed", "-1"),
    ("--eval-every", "-1"),
    ("--dev-subset", "0"),
    ("--checkpoint-every", "-5"),
    ("--keep-checkpoints", "0"),
    ("--test-batch-size", "0"),
    ("--beam-size", "0"),
    ("--builtin-size", "0"),
    ("--cpu-devices", "0"),
    ("--tokens-per-batch", "many"),
]


@pytest.mark.parametrize("flag,value", BAD_TRAIN_VALUES)
def test_train_numeric_flags_are_range_checked(
    flag, value, monkeypatch, capsys, tmp_path, no_training
):
    monkeypatch.setattr(job, "prepare_training_store", _never)
    argv = ["train", "--run-dir", str(tmp_path / "run"), flag, value]
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own usage error.
        code = exit.code
    assert code == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--run-dir", "R", "--beam-size", "0"],
        ["translate", "--run-dir", "R", "--alpha", "-0.5"],
        ["translate", "--run-dir", "R", "--max-extra-length", "0"],
        ["average", "--run-dir", "R", "--last", "0"],
        ["summary", "--vocab-size", "0"],
    ],
)
def test_other_numeric_flags_are_range_checked(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert argv[-2] in capsys.readouterr().err


def test_python_options_are_range_checked_naming_field_and_flag():
    with pytest.raises(ValueError, match=r"tokens_per_batch \(--tokens-per-batch\)"):
        training.TrainOptions(tokens_per_batch=0)
    with pytest.raises(ValueError, match=r"precision \(--precision\) must be one of"):
        training.TrainOptions(precision="float8")


def test_cli_defaults_come_from_train_options():
    from keras_transformer.cli import build_parser

    args = build_parser().parse_args(["train"])
    for field in dataclasses.fields(training.TrainOptions):
        if field.metadata.get("flag", True):
            assert getattr(args, field.name) == field.default, field.name


def test_every_flag_has_help_text():
    from keras_transformer.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        for action in command._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings}"


# --- evaluate --hyp needs no model ----------------------------------------------------


def test_evaluate_hyp_without_run_dir(tmp_path, capsys):
    hyp = tmp_path / "hyp.txt"
    ref = tmp_path / "ref.txt"
    hyp.write_text("ein Hund schläft .\nzwei Katzen\n", encoding="utf-8")
    ref.write_text("ein Hund schläft .\nzwei Katzen\n", encoding="utf-8")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 0
    assert "sacreBLEU 100.00" in capsys.readouterr().out


def test_evaluate_src_without_run_dir_is_an_error(tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("a\n")
    assert main(["evaluate", "--src", str(src), "--ref", str(src)]) == 2
    assert "--run-dir" in capsys.readouterr().err


# --- train: flags refused at option validation, before any data -------------------


def _train_exit(argv, monkeypatch, tmp_path):
    """Exit status of `train ARGV`, failing the test if data is loaded."""
    monkeypatch.setattr(job, "prepare_training_store", _never)
    run_dir = tmp_path / "run"
    try:
        code = main(["train", "--run-dir", str(run_dir), *argv])
    except SystemExit as exit:  # argparse's own usage error.
        code = exit.code
    assert not run_dir.exists()
    return code


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--learning-rate-scale", "nan"),
        ("--learning-rate-scale", "inf"),
        ("--max-minutes", "nan"),
        ("--max-minutes", "inf"),
    ],
)
def test_train_non_finite_float_flags_are_refused_naming_the_flag(
    flag, value, monkeypatch, capsys, tmp_path, no_training
):
    assert _train_exit([flag, value], monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert flag in err and "must be a finite number" in err
    assert "must be > 0" not in err


def test_train_seed_past_32_bits_is_refused_naming_the_flag_and_range(
    monkeypatch, capsys, tmp_path, no_training
):
    assert _train_exit(["--seed", str(2**32)], monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "2**32" in err and str(2**32) in err
    assert training.TrainOptions(seed=2**32 - 1).seed == 2**32 - 1


def test_train_max_minutes_zero_is_refused(monkeypatch, capsys, tmp_path, no_training):
    # It trained nothing and still wrote model.keras, with exit status 0.
    assert _train_exit(["--max-minutes", "0"], monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert "--max-minutes" in err and "must be > 0" in err


@pytest.mark.parametrize("item", ["vocab_size=50", "target_vocab_size=10"])
def test_train_set_of_the_tokenizers_vocabulary_is_refused_naming_both(
    item, monkeypatch, capsys, tmp_path, no_training
):
    argv = ["--vocab-size", "300", "--set", item]
    assert _train_exit(argv, monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"--set {item}" in err
    assert "--vocab-size" in err and "300" in err
    assert "1000" not in err  # The tiny preset's vocabulary, not this run's.


def test_train_tsv_with_src_and_tgt_is_refused(
    monkeypatch, capsys, tmp_path, no_training
):
    argv = ["--dataset", "files", "--train-tsv", "t.tsv",
            "--train-src", "a.en", "--train-tgt", "a.de"]  # fmt: skip
    assert _train_exit(argv, monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert "--train-tsv" in err and "--train-src" in err and "one or the other" in err


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--train-src", "a.en", "--train-tgt", "a.de"], "--train-src"),
        (["--dataset", "multi30k", "--valid-tsv", "v.tsv"], "--valid-src"),
        (["--data-dir", "somewhere"], "--data-dir"),
        (["--dataset", "files", "--train-tsv", "t.tsv", "--data-dir", "d"],
         "--data-dir"),
        (["--source-lang", "de"], "--source-lang"),
        (["--target-lang", "en"], "--target-lang"),
    ],
)  # fmt: skip
def test_train_data_flags_that_the_dataset_ignores_are_refused(
    argv, flag, monkeypatch, capsys, tmp_path, no_training
):
    assert _train_exit(argv, monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert flag in err and "is read only with --dataset" in err


def test_train_more_cpu_devices_than_cores_is_refused(
    monkeypatch, capsys, tmp_path, no_training
):
    # 64 simulated devices on 2 cores: a step took over 10 minutes.
    from keras_transformer.training import distribution

    monkeypatch.setattr(distribution, "simulate_cpu_devices", _never)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    argv = ["--cpu-devices", str(cores + 1)]
    assert _train_exit(argv, monkeypatch, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"--cpu-devices {cores + 1}" in err
    assert f"{cores} CPU core" in err and f"at most --cpu-devices {cores}" in err


def test_python_options_name_the_field_and_flag_of_new_checks():
    with pytest.raises(ValueError, match=r"learning_rate_scale .* finite"):
        training.TrainOptions(learning_rate_scale=float("nan"))
    with pytest.raises(ValueError, match=r"seed \(--seed\) must be <= 4294967295"):
        training.TrainOptions(seed=2**32)
    with pytest.raises(ValueError, match=r"overrides\['vocab_size'\]"):
        training.TrainOptions(overrides={"vocab_size": 10})
    # None means "the same as vocab_size": nothing to refuse.
    assert training.TrainOptions(overrides={"target_vocab_size": None})


# --- one line per sentence out ------------------------------------------------


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_translation_with_a_line_break_stays_on_its_line(
    command, monkeypatch, capsys, tmp_path
):
    from keras_transformer.cli import commands

    source = tmp_path / "src.txt"
    source.write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    translations = ["one", "two\nlines", "three"]
    monkeypatch.setattr(
        commands, "_translator", lambda args, **_: lambda lines: translations
    )
    output = tmp_path / "hyp.txt"
    if command == "translate":
        argv = ["translate", "--run-dir", "unused", "--input", str(source)]
    else:
        argv = ["evaluate", "--run-dir", "unused", "--src", str(source),
                "--ref", str(source), "--output", str(output)]  # fmt: skip
    with pytest.warns(UserWarning, match="1 line held a line break.*line 2"):
        assert main(argv) == 0
    written = capsys.readouterr().out if command == "translate" else output.read_text()
    assert written.splitlines() == ["one", "two lines", "three"]


def test_serve_refuses_a_port_past_65535_before_loading(capsys):
    assert main(["serve", "--run-dir", "unused", "--port", "70000"]) == 2
    assert "port (--port) must be <= 65535 (< 2**16). Received: 70000" in (
        capsys.readouterr().err
    )
