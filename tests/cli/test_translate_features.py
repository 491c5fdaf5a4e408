"""`translate --format jsonl`, sampling, ensembles and constraints on the
command line, and the refusals of their bad input (issue: what translators
ask of a decoder).

Backend-neutral (tests/conftest.py): the flags reaching the search, the
files read and the records written are the same code on every backend. The
searches they drive are checked in every suite: jsonl's details (token
scores, n-best, alignments) in tests/decoding/test_scoring.py and
tests/decoding/test_translator.py, seeded sampling in
tests/decoding/test_sampling.py, an ensemble of a model with itself in
tests/decoding/test_ensemble.py, int8 in tests/decoding/test_quantization.py,
constraints, prefixes and unsatisfiable constraints in
tests/decoding/test_constraints.py."""

from __future__ import annotations

import json
import re

import pytest

from keras_transformer.cli import main

pytestmark = pytest.mark.backend_neutral

INPUT_LINES = ["the dog sleeps.", "", "the old man likes the garden.", "water."]


@pytest.fixture
def run_dir(untrained_run):
    """R/tokenizer and R/model.keras (read-only): the session's untrained
    tiny model (tests/shared_runs.py)."""
    return untrained_run


@pytest.fixture
def source(tmp_path):
    return _write(tmp_path / "input.txt", INPUT_LINES)


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _translate(run_dir, source, *flags):
    return main(["translate", "--run-dir", str(run_dir), "--input", str(source),
                 "--max-extra-length", "4", *flags])  # fmt: skip


def test_jsonl_writes_a_record_per_line_with_the_plain_translation(
    run_dir, source, capsys
):
    assert _translate(run_dir, source) == 0
    plain = capsys.readouterr().out.split("\n")[:-1]
    assert _translate(run_dir, source, "--format", "jsonl", "--n-best") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["translation"] for r in records] == plain
    for record in records:
        assert set(record) == {
            "translation", "score", "normalization", "tokens", "token_scores",
            "alignment", "n_best",
        }  # fmt: skip
        assert record["n_best"][0]["translation"] == record["translation"]
        assert len(record["tokens"]) == len(record["token_scores"])


def test_seeded_sampling_on_the_command_line_is_reproducible(run_dir, source, capsys):
    flags = ["--beam-size", "1", "--sampling", "top-k", "--top-k", "50"]
    outputs = []
    for seed in ("3", "3", "4"):
        assert _translate(run_dir, source, *flags, "--seed", seed) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] != outputs[2]


def test_an_ensemble_of_the_run_with_itself_translates_as_the_run(
    run_dir, source, capsys
):
    assert _translate(run_dir, source) == 0
    alone = capsys.readouterr().out
    assert _translate(run_dir, source, "--ensemble", str(run_dir)) == 0
    assert capsys.readouterr().out == alone
    # evaluate decodes with the ensemble too (the input as its own reference).
    evaluate = ["evaluate", "--run-dir", str(run_dir), "--src", str(source),
                "--ref", str(source), "--max-extra-length", "4"]  # fmt: skip
    scores = []
    for members in ([], ["--ensemble", str(run_dir)]):
        assert main([*evaluate, *members]) == 0
        scores.append(capsys.readouterr().out)
    assert scores[0].startswith("sacreBLEU") and scores[1] == scores[0]
    assert main([*evaluate, "--ensemble", "/nonexistent/run"]) == 2  # Opened.
    assert "/nonexistent/run" in capsys.readouterr().err


def test_quantize_applies_to_every_member_of_an_ensemble(run_dir, source, capsys):
    """int8 members: the int8 run with itself scores as the int8 run, whose
    token scores are not the float32 run's (so a member left in float32
    would show)."""

    def token_scores(*flags):
        assert _translate(run_dir, source, "--format", "jsonl", *flags) == 0
        lines = capsys.readouterr().out.splitlines()
        return [x for line in lines for x in json.loads(line)["token_scores"]]

    int8 = token_scores("--quantize", "int8")
    assert max(abs(a - b) for a, b in zip(int8, token_scores())) > 1e-3
    both = token_scores("--ensemble", str(run_dir), "--quantize", "int8")
    assert both == pytest.approx(int8, abs=1e-4)


def test_constraints_and_a_prefix_appear_in_the_output(
    run_dir, source, tmp_path, capsys
):
    constraints = _write(tmp_path / "c.tsv", ["garden", "", "dog\twater", ""])
    prefixes = _write(tmp_path / "p.txt", ["", "", "", "the old"])
    flags = ["--constraints", str(constraints), "--target-prefix", str(prefixes)]
    assert _translate(run_dir, source, *flags, "--max-extra-length", "12") == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert "garden" in lines[0]
    assert "dog" in lines[2] and "water" in lines[2]
    assert lines[3].startswith("the old")


def test_an_unsatisfiable_constraint_is_reported_for_its_line(
    run_dir, source, tmp_path, capsys
):
    long_phrase = " ".join(["garden"] * 30)  # Longer than any output may be.
    constraints = _write(tmp_path / "c.tsv", ["", "", long_phrase, "dog"])
    flags = ["--constraints", str(constraints), "--format", "jsonl"]
    assert _translate(run_dir, source, *flags) == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert records[2]["constraints"]["satisfied"] is False
    assert records[2]["constraints"]["unmet"] == [long_phrase]
    assert records[3]["constraints"] == {"satisfied": True, "unmet": []}
    assert "dog" in records[3]["translation"]
    assert f"{constraints}:3: no translation within the length limit" in captured.err


def test_a_prefix_past_the_length_limit_is_reported_for_its_line(
    run_dir, source, tmp_path, capsys
):
    """It used to be cut to the limit without a word (issue 50)."""
    long_prefix = " ".join(["garden"] * 30)  # Longer than any output may be.
    prefixes = _write(tmp_path / "p.txt", ["", long_prefix, "", ""])
    flags = ["--target-prefix", str(prefixes), "--format", "jsonl"]
    assert _translate(run_dir, source, *flags) == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert records[1]["constraints"]["prefix"] == "unmet"
    assert f"{prefixes}:2: the prefix is longer than the length limit" in (captured.err)
    assert f"{prefixes}:1:" not in captured.err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sampling", "top-p", "--top-p", "0"], r"top_p \(--top-p\) must be > 0"),
        (["--sampling", "top-p", "--top-p", "1.5"], r"top_p \(--top-p\) must be <= 1"),
        (["--sampling", "top-k", "--top-k", "0"], r"--top-k: must be >= 1"),
        (["--sampling", "top-k", "--temperature", "0"], r"at 0 every draw"),
        (["--top-k", "5"], "--top-k applies to --sampling top-k"),
        (["--seed", "5"], "--seed applies to sampling only"),
        (["--n-best"], "--n-best needs --format jsonl"),
        (
            ["--sampling", "top-k", "--num-samples", "2", "--beam-size", "1"],
            "--num-samples above 1 needs --format jsonl",
        ),
        (["--sampling", "top-k"], "needs --beam-size 1"),
        (["--ensemble", "/nonexistent/run"], "/nonexistent/run"),
        (["--alignment-layer", "5", "--format", "jsonl"], "alignment_layer must be"),
    ],
)
def test_bad_decoder_feature_flags_are_refused_naming_the_flag(
    run_dir, source, capsys, flags, message
):
    try:
        code = _translate(run_dir, source, *flags)
    except SystemExit as exit:  # argparse's own range check.
        code = exit.code
    assert code == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_constraints_file_of_another_length_names_both_files(
    run_dir, source, tmp_path, capsys
):
    constraints = _write(tmp_path / "c.tsv", ["dog", ""])
    assert _translate(run_dir, source, "--constraints", str(constraints)) == 2
    error = capsys.readouterr().err
    assert str(constraints) in error and str(source) in error
    assert "2 lines" in error and "4" in error


def test_features_are_refused_with_an_onnx_export(tmp_path, source, capsys):
    argv = ["translate", "--onnx", str(tmp_path), "--input", str(source)]
    assert main([*argv, "--format", "jsonl"]) == 2
    assert "--format jsonl cannot be used with --onnx" in capsys.readouterr().err
