"""`keras-transformer` command line: overrides, error exits, summary."""

from __future__ import annotations

import re

import pytest

from keras_transformer import TransformerConfig, build_transformer, training
from keras_transformer.cli import main, parse_overrides
from keras_transformer.config import field_names


def _never(*args, **kwargs):
    raise AssertionError("reached work that an earlier error should have stopped")


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if model building (and so training) is reached."""
    monkeypatch.setattr(training, "build_transformer", _never)


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
    monkeypatch.setattr(training, "load_dataset", _never)
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
    monkeypatch.setattr(training, "load_dataset", _never)
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
        "--vocab-size", "40",
        "--max-steps", "1",
    ]  # fmt: skip
    return argv, source, target


def test_train_files_line_count_mismatch(monkeypatch, capsys, tmp_path, no_training):
    monkeypatch.setattr(training, "train_tokenizer", _never)
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
