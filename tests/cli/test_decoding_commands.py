"""`keras-transformer translate` and `evaluate` on a hand-made run directory
(a tiny SentencePiece tokenizer and an untrained tiny model: the session's
`untrained_run`, tests/shared_runs.py).

Backend-neutral (tests/conftest.py): reading the input, the flags reaching
the search, the output's lines, the refusals and error messages are the
same code on every backend. The computation they drive is checked in every
suite: `Translator` (order, blank lines, batches) in
tests/decoding/test_translator.py, compiled against eager search in
tests/decoding/test_generator.py (which also checks early stopping), int8
decoding in tests/decoding/test_quantization.py, checkpoints in
tests/run/test_checkpoints.py."""

from __future__ import annotations

import io
import re
import shutil
import sys

import keras
import pytest

from keras_transformer.cli import main
from keras_transformer.data.tokenizer import load_tokenizer
from keras_transformer.decoding.translator import Translator

pytestmark = pytest.mark.backend_neutral

MAX_EXTRA = 3
INPUT_LINES = ["the dog sleeps.", "", "the old man likes the garden.", "water."]


@pytest.fixture
def run_dir(untrained_run):
    """R/tokenizer and R/model.keras (read-only). The model never emits EOS
    (nor PAD, UNK, BOS), so each output has source length + MAX_EXTRA tokens
    and differs from line to line."""
    return untrained_run


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_translate_prints_one_line_per_input_line_in_order(run_dir, tmp_path, capsys):
    source = write_lines(tmp_path / "input.txt", INPUT_LINES)
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source)]
    argv += ["--beam-size", "1", "--max-extra-length", str(MAX_EXTRA)]
    assert main(argv) == 0
    printed = capsys.readouterr().out.split("\n")
    assert printed[-1] == ""  # Every line ends with a newline.
    lines = printed[:-1]
    assert len(lines) == len(INPUT_LINES)
    assert lines[1] == ""
    assert all(lines[i] for i in (0, 2, 3))
    assert len(set(lines)) == len(lines)
    # The same as the run's model and tokenizer translating in-process.
    model = keras.saving.load_model(run_dir / "model.keras", compile=False)
    translator = Translator(
        model,
        load_tokenizer(run_dir / "tokenizer"),
        beam_size=1,
        max_extra_length=MAX_EXTRA,
        batch_size=4,
        jit=False,
    )
    assert lines == translator(INPUT_LINES)


def test_translate_quantize_int8_decodes_with_the_int8_model(run_dir, tmp_path, capsys):
    from keras_transformer.decoding.quantization import quantize_model

    source = write_lines(tmp_path / "input.txt", INPUT_LINES)
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source)]
    argv += ["--beam-size", "1", "--max-extra-length", str(MAX_EXTRA)]
    assert main([*argv, "--quantize", "int8"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    model = keras.saving.load_model(run_dir / "model.keras", compile=False)
    translator = Translator(
        quantize_model(model, "int8"),
        load_tokenizer(run_dir / "tokenizer"),
        beam_size=1,
        max_extra_length=MAX_EXTRA,
    )
    assert lines == translator(INPUT_LINES)


def test_translate_refuses_an_unknown_quantization(run_dir, tmp_path, capsys):
    source = write_lines(tmp_path / "input.txt", ["a dog."])
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source)]
    with pytest.raises(SystemExit):  # argparse: the choices are listed.
        main([*argv, "--quantize", "int4"])
    assert "--quantize: invalid choice: 'int4' (choose from 'int8')" in (
        capsys.readouterr().err
    )


def test_translate_without_a_model_is_an_error(tmp_path, capsys):
    source = write_lines(tmp_path / "input.txt", ["a dog."])
    argv = ["translate", "--run-dir", str(tmp_path), "--input", str(source)]
    assert main(argv) == 2
    assert "has no model: neither model.keras nor a checkpoint" in (
        capsys.readouterr().err
    )


def test_evaluate_line_count_mismatch_names_both_counts(tmp_path, capsys):
    hyp = write_lines(tmp_path / "hyp.txt", ["a", "b", "c"])
    ref = write_lines(tmp_path / "ref.txt", ["a", "b"])
    argv = ["evaluate", "--run-dir", str(tmp_path), "--hyp", str(hyp)]
    assert main(argv + ["--ref", str(ref)]) == 2
    error = capsys.readouterr().err
    assert "keras-transformer evaluate: error:" in error
    assert "3 hypotheses" in error and "2 references" in error


def test_evaluate_source_reference_mismatch_fails_before_translating(tmp_path, capsys):
    src = write_lines(tmp_path / "src.txt", ["a", "b"])
    ref = write_lines(tmp_path / "ref.txt", ["a", "b", "c", "d"])
    argv = ["evaluate", "--run-dir", str(tmp_path), "--src", str(src)]
    assert main(argv + ["--ref", str(ref)]) == 2  # No model there: not loaded.
    error = capsys.readouterr().err
    assert "2 lines" in error and "has 4" in error


def test_evaluate_hypotheses_equal_to_references_is_bleu_100(tmp_path, capsys):
    lines = ["The cat sat on the mat.", "A well-known dog runs in the garden."]
    ref = write_lines(tmp_path / "ref.txt", lines)
    hyp = write_lines(tmp_path / "hyp.txt", lines)
    argv = ["evaluate", "--run-dir", str(tmp_path), "--hyp", str(hyp)]
    assert main(argv + ["--ref", str(ref), "--paper-bleu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("sacreBLEU 100.00 (")
    assert "tok:13a" in printed[0]
    assert printed[1].startswith("100.00 tokenized BLEU")


def test_evaluate_without_src_or_hyp_is_an_error(tmp_path, capsys):
    ref = write_lines(tmp_path / "ref.txt", ["a"])
    assert main(["evaluate", "--run-dir", str(tmp_path), "--ref", str(ref)]) == 2
    assert "--src" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [[], ["--early-stopping"]])
def test_translate_passes_early_stopping_to_the_search(
    run_dir, tmp_path, capsys, monkeypatch, flag
):
    import keras_transformer.decoding.translator as translator_module

    made = []

    class RecordingTranslator(Translator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.generator.early_stopping)

    monkeypatch.setattr(translator_module, "Translator", RecordingTranslator)
    source = write_lines(tmp_path / "input.txt", INPUT_LINES[:1])
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source)]
    argv += ["--beam-size", "2", "--max-extra-length", str(MAX_EXTRA), *flag]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip()
    assert made == [bool(flag)]


# --- bad input and misuse (issue 24) ---------------------------------------------


class _Stdin:
    """Stands in for sys.stdin: the CLI reads its bytes."""

    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


def test_translate_from_stdin_names_invalid_utf8_like_a_file(
    run_dir, capsys, monkeypatch
):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"the dog sleeps.\nwater \xff.\n"))
    argv = ["translate", "--run-dir", str(run_dir), "--beam-size", "1"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "<stdin>: invalid UTF-8 at line 2, byte 7" in error
    assert "--lenient-utf8" in error
    # The advice works: the flag exists for translate.
    monkeypatch.setattr(sys, "stdin", _Stdin(b"the dog sleeps.\nwater \xff.\n"))
    argv += ["--max-extra-length", str(MAX_EXTRA), "--lenient-utf8"]
    with pytest.warns(UnicodeWarning, match="<stdin>: replaced invalid UTF-8"):
        assert main(argv) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_translate_from_stdin_refuses_binary_input(run_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
    assert main(["translate", "--run-dir", str(run_dir)]) == 2
    assert "<stdin>: NUL byte" in capsys.readouterr().err


def test_evaluate_takes_the_flag_its_utf8_error_advises(tmp_path, capsys):
    hyp = tmp_path / "hyp.txt"
    hyp.write_bytes(b"a \xff dog\n")
    ref = write_lines(tmp_path / "ref.txt", ["a dog"])
    argv = ["evaluate", "--hyp", str(hyp), "--ref", str(ref)]
    assert main(argv) == 2
    assert "Pass --lenient-utf8" in capsys.readouterr().err
    with pytest.warns(UnicodeWarning):
        assert main(argv + ["--lenient-utf8"]) == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--alpha", "nan"], r"alpha \(--alpha\) must be a finite number"),
        (["--alpha", "inf"], r"alpha \(--alpha\) must be a finite number"),
        (["--beam-size", "298"], "use a beam of at most 297"),
    ],
)
def test_translate_refuses_settings_that_cannot_search(
    run_dir, tmp_path, capsys, flags, message
):
    source = write_lines(tmp_path / "input.txt", ["a dog."])
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source), *flags]
    assert main(argv) == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--src", "SRC"], "--src"),
        (["--beam-size", "2"], "--beam-size"),
        (["--quantize", "int8"], "--quantize"),
    ],
)
def test_evaluate_hyp_refuses_flags_it_would_ignore(tmp_path, capsys, flags, named):
    lines = write_lines(tmp_path / "lines.txt", ["a dog"])
    flags = [str(lines) if flag == "SRC" else flag for flag in flags]
    argv = ["evaluate", "--hyp", str(lines), "--ref", str(lines), *flags]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"{named} cannot be used with --hyp" in error


def test_a_damaged_model_names_the_damage_and_an_intact_checkpoint(
    run_dir, tmp_path, capsys
):
    from keras_transformer.data.pipeline import DataPosition
    from keras_transformer.run.checkpoints import save_checkpoint
    from keras_transformer.run.directory import RunDirectory

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    model = keras.saving.load_model(run / "model.keras", compile=False)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    run_id = RunDirectory(run).create({"test": True}, {})
    checkpoint = save_checkpoint(
        model, run / "checkpoints", step=7, run_id=run_id, position=DataPosition()
    )
    data = (run / "model.keras").read_bytes()
    (run / "model.keras").write_bytes(data[: len(data) // 2])  # A killed save.
    source = write_lines(tmp_path / "input.txt", ["a dog."])
    argv = ["translate", "--run-dir", str(run), "--input", str(source)]
    argv += ["--beam-size", "1", "--max-extra-length", str(MAX_EXTRA)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "model.keras is damaged: not a complete .keras archive" in error
    assert "File not found" not in error
    assert f"pass --model {checkpoint.path}" in error
    assert main([*argv, "--model", str(checkpoint.path)]) == 0
    assert capsys.readouterr().out.strip()
