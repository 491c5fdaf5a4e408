"""ONNX export: its translations equal `Translator`'s (greedy, beam 4) from
Python, from `translate --onnx` (which imports no Keras) and from `serve
--engine onnx`; a directory of another format version is refused naming the
file; a failed export leaves nothing.

The graphs are traced under torch, so the export runs in the torch suite
(other backends export in a torch child process; its route is checked here
on a run it cannot load). The run is a copy of the session's untrained run
(tests/shared_runs.py) with EOS made about as likely as the best word:
outputs end at once, midway or at their limit, and UNK is likely enough to
show where it is suppressed.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.cli import main
from keras_transformer.config import EOS_ID, UNK_ID
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.decoding.translator import Translator
from keras_transformer.export.onnx_translator import (
    CACHE_SLOTS,
    FORMAT_VERSION,
    OnnxTranslator,
    read_export_info,
)
from keras_transformer.run.directory import RunDirectory
from keras_transformer.serving.engines import open_engine
from tests.serving.client import ServerProcess
from tests.shared_runs import copy_run

pytest.importorskip("onnxruntime")
torch_only = pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="traced under torch: the torch suite exports in process",
)

ROOT = Path(__file__).resolve().parents[2]
EXTRA = 6
TEXTS = [
    "the dog sleeps.",
    "the old man likes the garden near the river.",
    "water.",
    "",
    "a child reads a book.",
    "the man sees the dog and the child.",
    "   ",
    "a river.",
    "the garden is old and the water is cold.",
    "Café 日本 😀",
]
SETTINGS = {
    "greedy": SearchSettings(beam_size=1, max_extra_length=EXTRA),
    "beam4": SearchSettings(beam_size=4, max_extra_length=EXTRA),
    "beam4_early": SearchSettings(
        beam_size=4, max_extra_length=EXTRA, early_stopping=True
    ),
    "greedy_unk": SearchSettings(beam_size=1, max_extra_length=EXTRA, allow_unk=True),
}


@pytest.fixture(scope="module")
def run_dir(untrained_run, tmp_path_factory):
    run = copy_run(untrained_run, tmp_path_factory.mktemp("onnx"))
    model = keras.saving.load_model(run / "model.keras")
    bias = model.get_layer("output_projection").bias
    values = np.array(keras.ops.convert_to_numpy(bias))
    values[EOS_ID], values[UNK_ID] = -0.05, 1.0
    bias.assign(values)
    model.save(run / "model.keras")
    return run


@pytest.fixture(scope="module")
def engine(run_dir, tmp_path_factory):
    """The ONNX engine as `serve` opens it without --export-dir: exported
    at start-up (in process, under torch) into its scratch directory."""
    return open_engine(
        "onnx",
        run_dir,
        SETTINGS["beam4"],
        scratch=tmp_path_factory.mktemp("scratch"),
        batch_size=64,
        threads=1,
    )


@pytest.fixture(scope="module")
def translator(run_dir):
    run = RunDirectory(run_dir).open_for_inference()
    return lambda settings: Translator(run.model, run.tokenizer, settings)


@torch_only
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_translations_equal_translator(engine, translator, name):
    settings = SETTINGS[name]
    expected = translator(settings).nbest(TEXTS)
    onnx = OnnxTranslator(engine.directory, threads=1)
    assert onnx.translate(TEXTS, settings) == [h[0][0] for h in expected]
    found = onnx.nbest(TEXTS, settings)
    assert [[t for t, _ in h] for h in found] == [[t for t, _ in h] for h in expected]
    for ours, theirs in zip(found, expected):
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], 1e-4)
    ids = [row[0] for row, _ in onnx.search(TEXTS, settings)]
    lengths = {len(row[row != 0]) for row in ids if len(row)}
    assert len(lengths) > 2  # Ended at once, midway, at the limit.


@torch_only
def test_a_windowed_model_translates_as_translator(run_dir, tmp_path):
    """Restricted self-attention (`attention_window`): the step graph's mask
    over the growing past is `Transformer.step_self_attention_mask`, as in
    the Keras search over its fixed cache. A window of 2 changes the outputs."""
    from keras_transformer.export.onnx import export_onnx
    from keras_transformer.model import build_transformer

    run = copy_run(run_dir, tmp_path / "windowed")
    full = keras.saving.load_model(run / "model.keras")
    windowed = build_transformer(full.config.replace(attention_window=2))
    windowed.set_weights(full.get_weights())
    windowed.save(run / "model.keras")
    windowed.config.to_json(run / "config.json")
    onnx = OnnxTranslator(export_onnx(run, tmp_path / "onnx"), threads=1)
    loaded = RunDirectory(run).open_for_inference()
    for settings in (SETTINGS["greedy"], SETTINGS["beam4"]):
        expected = Translator(loaded.model, loaded.tokenizer, settings).nbest(TEXTS)
        found = onnx.nbest(TEXTS, settings)
        assert [[t for t, _ in h] for h in found] == [
            [t for t, _ in h] for h in expected
        ]
    assert onnx.translate(TEXTS, SETTINGS["beam4"]) != translator_outputs(run_dir)


def translator_outputs(run_dir: Path) -> list[str]:
    run = RunDirectory(run_dir).open_for_inference()
    return Translator(run.model, run.tokenizer, SETTINGS["beam4"]).translate(TEXTS)


@torch_only
def test_unk_is_generated_only_when_allowed(engine):
    onnx = OnnxTranslator(engine.directory, threads=1)
    allowed = onnx.search(TEXTS, SETTINGS["greedy_unk"])
    suppressed = onnx.search(TEXTS, SETTINGS["greedy"])
    assert any(UNK_ID in ids for ids, _ in allowed)
    assert not any(UNK_ID in ids for ids, _ in suppressed)


@torch_only
def test_an_int8_export_multiplies_in_int8_and_stays_near_float32(
    engine, run_dir, tmp_path
):
    import onnx

    from keras_transformer.export.onnx import INT8_TOLERANCE, export_onnx

    out = export_onnx(
        run_dir, tmp_path / "int8", SETTINGS["beam4"], quantization="int8"
    )
    assert read_export_info(out)["quantization"] == "int8"
    assert read_export_info(engine.directory)["quantization"] == "float32"
    for graph in ("encoder.onnx", "decoder_step.onnx"):
        model = onnx.load(out / graph).graph
        weights = {tensor.name for tensor in model.initializer}
        kinds = [node.op_type for node in model.node]
        # Every product with a weight, the tied output projection's too; the
        # attention's products (of two activations) stay float32.
        float_products = [n for n in model.node if n.op_type == "MatMul"]
        assert "MatMulInteger" in kinds, graph
        assert not [n for n in float_products if weights & set(n.input)], graph
    int8, float32 = (OnnxTranslator(d, threads=1) for d in (out, engine.directory))
    source = np.array([[5, 9, 12, 7, 30, 0, 0]], np.int32)
    step = np.full((1, 1), 2, np.int32)
    logits = [
        t.decode_step(step, 0, t.empty_past(1), t.encode(source))[0]
        for t in (int8, float32)
    ]
    difference = np.max(np.abs(logits[0] - logits[1])) / np.max(np.abs(logits[1]))
    assert 0 < difference < INT8_TOLERANCE  # Quantized, and close.
    assert len(int8.translate(TEXTS, SETTINGS["beam4"])) == len(TEXTS)


@torch_only
def test_outputs_past_the_first_cache_slots_equal_translator(
    engine, translator, run_dir
):
    """The caches start with CACHE_SLOTS slots and grow by as many when the
    search reaches their end: each step's logits stay the model's past it
    (`verify`), and outputs that long, in both searches, stay `translate`'s
    (with sentences leaving the batch from caches that grew)."""
    from keras_transformer.export.onnx import verify

    model = keras.saving.load_model(run_dir / "model.keras")
    verify(model, engine.directory, steps=CACHE_SLOTS + 4)
    onnx = OnnxTranslator(engine.directory, threads=1)
    for beams in (1, 4):
        settings = SearchSettings(beam_size=beams, max_extra_length=2 * CACHE_SLOTS)
        expected = translator(settings).translate(TEXTS)
        assert onnx.translate(TEXTS, settings) == expected
        lengths = [np.sum(ids[0] > 0) for ids, _ in onnx.search(TEXTS, settings)]
        assert max(lengths) > CACHE_SLOTS + 1, lengths  # Past one growth.


@torch_only
def test_export_json_records_the_export(engine, run_dir):
    info = read_export_info(engine.directory)
    assert info["format"] == "onnx" and info["format_version"] == FORMAT_VERSION
    assert info["beam_size"] == 4 and info["max_extra_length"] == EXTRA
    assert info["decoder_layers"] == info["encoder_layers"] == 1
    assert info["heads"] == 2 and info["vocab_size"] == 300
    assert info["ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert info["model"] == "model.keras" and info["package_version"]
    assert engine.info()["engine"] == "onnx"


@torch_only
def test_cli_translate_onnx_equals_translate_and_imports_no_keras(
    engine, translator, tmp_path
):
    source = tmp_path / "input.txt"
    source.write_text("".join(f"{line}\n" for line in TEXTS), encoding="utf-8")
    argv = ["translate", "--onnx", str(engine.directory), "--input", str(source)]
    argv += ["--beam-size", "4", "--max-extra-length", str(EXTRA)]
    heavy = ("keras", "torch", "tensorflow", "jax")
    # The model's code (the light `decoding.settings` is the flags').
    model_code = [f"keras_transformer.{m}" for m in ("model", "layers")]
    model_code += [
        f"keras_transformer.decoding.{m}"
        for m in ("search", "generator", "translator", "compile")
    ]
    code = textwrap.dedent(
        f"""
        import runpy, sys
        sys.argv = ["keras-transformer", *{argv!r}]
        try:
            runpy.run_module("keras_transformer", run_name="__main__")
        except SystemExit as stop:
            assert stop.code == 0, stop.code
        loaded = [
            m for m in sys.modules
            if m.split(".")[0] in {heavy!r}
            or any(m == c or m.startswith(c + ".") for c in {model_code!r})
        ]
        print("LOADED", sorted(loaded))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    *lines, loaded = result.stdout.split("\n")[:-1]
    assert loaded == "LOADED []"
    assert lines == translator(SETTINGS["beam4"]).translate(TEXTS)


@torch_only
@pytest.mark.slow
def test_served_translations_equal_translate(engine, run_dir, translator, tmp_path):
    """The export is served alone, copied away from its run (issue 53: an
    operator ships the export directory only)."""
    alone = tmp_path / "shipped" / "onnx"
    shutil.copytree(engine.directory, alone)
    args = ["--engine", "onnx", "--export-dir", str(alone), "--warmup-tokens", "16"]
    args += ["--max-extra-length", str(EXTRA), "--allowed-beam-sizes", "1,4"]
    args += ["--workers", "2"]  # Batches side by side, on one pair of sessions.
    server = ServerProcess(args, tmp_path / "server.log")
    try:
        info = server.get("/v1/info").json()
        assert info["engine"] == "onnx" and info["attention"] is False
        assert info["model"]["quantization"] == "float32"
        expected = translator(SETTINGS["beam4"])(TEXTS)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(server.translate, [TEXTS[:5], TEXTS[5:]] * 2))
        assert answers == [expected[:5], expected[5:]] * 2
        greedy = server.translate(TEXTS, beam_size=1)
        assert greedy == translator(SETTINGS["greedy"])(TEXTS)
    finally:
        assert server.stop() == 0


def _export_json(directory: Path, **fields) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    info = {"format": "onnx", "format_version": FORMAT_VERSION, **fields}
    (directory / "export.json").write_text(json.dumps(info))
    return directory


def test_another_format_version_is_refused_naming_the_file(tmp_path):
    directory = _export_json(tmp_path / "old", format_version=99)
    path = directory / "export.json"
    with pytest.raises(ValueError) as refused:
        OnnxTranslator(directory)
    message = str(refused.value)
    assert str(path) in message
    assert "format_version 99" in message
    assert "reads format_version 1, 2 and 3" in message


@torch_only
@pytest.mark.parametrize("version", [1, 2])
def test_an_older_format_version_export_still_translates(
    engine, translator, version, tmp_path
):
    """Versions 1 and 2 read the new position from the past's length, which
    holds exactly the positions before it; 1 returned the new position's
    keys/values (the caller appended them), 2 the past with them appended.
    Made here from a version 3 export (`_as_older_version`)."""
    old = Path(shutil.copytree(engine.directory, tmp_path / f"v{version}"))
    _as_older_version(old / "decoder_step.onnx", version)
    info = json.loads((old / "export.json").read_text())
    (old / "export.json").write_text(json.dumps({**info, "format_version": version}))
    settings = SETTINGS["beam4"]
    expected = [h[0][0] for h in translator(settings).nbest(TEXTS)]
    assert OnnxTranslator(old, threads=1).translate(TEXTS, settings) == expected


def _as_older_version(path: Path, version: int) -> None:
    """A version 3 step graph rewritten as version 1 or 2: each past input
    holds exactly the positions before the new one, padded with two unused
    slots for the version 3 body (whose caches have at least two), and the
    `position` input becomes the past's length; for version 2 each output
    `new_*` becomes `present_*`, the past with it appended."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(path)
    graph = model.graph
    pads = np.array([0, 0, 0, 0, 0, 0, 2, 0], np.int64)
    graph.initializer.append(numpy_helper.from_array(pads, "two_slots"))
    pasts = [i.name for i in graph.input if i.name.startswith("past_")]
    for node in graph.node:
        node.input[:] = [f"padded_{n}" if n in pasts else n for n in node.input]
    front = [
        helper.make_node("Shape", ["past_keys_0"], ["length"], start=2, end=3),
        helper.make_node("Cast", ["length"], ["position"], to=TensorProto.INT32),
        *(helper.make_node("Pad", [n, "two_slots"], [f"padded_{n}"]) for n in pasts),
    ]
    for node in reversed(front):
        graph.node.insert(0, node)
    graph.input.remove(next(i for i in graph.input if i.name == "position"))
    if version == 2:
        for output in graph.output[1:]:
            new = output.name
            output.name = new.replace("new_", "present_")
            output.type.tensor_type.ClearField("shape")  # T + 1 slots.
            past = new.replace("new_", "past_")
            concat = helper.make_node("Concat", [past, new], [output.name], axis=2)
            graph.node.append(concat)
    onnx.save(model, path)


def test_what_is_not_an_onnx_export_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="export.json not found"):
        OnnxTranslator(tmp_path)
    _export_json(tmp_path / "ct2", format="ctranslate2")
    with pytest.raises(
        ValueError,
        match="holds a 'ctranslate2' export; this needs one of .* --format onnx",
    ):
        OnnxTranslator(tmp_path / "ct2")
    _export_json(tmp_path / "bare")
    with pytest.raises(ValueError, match="decoder_layers, vocab_size, beam_size"):
        OnnxTranslator(tmp_path / "bare")


@torch_only
def test_graphs_unlike_their_record_are_refused(engine, tmp_path):
    copy = Path(shutil.copytree(engine.directory, tmp_path / "copy"))
    info = json.loads((copy / "export.json").read_text())
    (copy / "export.json").write_text(json.dumps({**info, "decoder_layers": 3}))
    with pytest.raises(ValueError, match="decoder_step.onnx: inputs"):
        OnnxTranslator(copy)
    (copy / "decoder_step.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="decoder_step.onnx not found"):
        OnnxTranslator(copy)


@torch_only
def test_a_failed_export_leaves_no_directory(run_dir, tmp_path, monkeypatch):
    from keras_transformer.export import onnx_graphs
    from keras_transformer.export.onnx import export_onnx

    def half_written(model, directory):
        (directory / "encoder.onnx").write_bytes(b"half")
        raise RuntimeError("tracing failed")

    monkeypatch.setattr(onnx_graphs, "write_graphs", half_written)
    with pytest.raises(RuntimeError, match="tracing failed"):
        export_onnx(run_dir, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # No staging directory either.


@torch_only
@pytest.mark.slow
def test_an_export_in_a_child_process_reports_its_error(run_dir, tmp_path, monkeypatch):
    """From another backend the export runs under torch in a child process:
    its error comes back as itself, and nothing is written."""
    from keras_transformer.export.onnx import export_onnx

    damaged = Path(shutil.copytree(run_dir, tmp_path / "run"))
    (damaged / "model.keras").write_bytes(b"not a zip")
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ValueError, match="model.keras is damaged"):
        export_onnx(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_command_refuses_what_onnx_does_not_take(tmp_path, capsys):
    argv = ["export", "--run-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main([*argv, "--format", "onnx", "--quantization", "int16"]) == 2
    error = capsys.readouterr().err
    assert "--quantization int16 is a CTranslate2 weight type" in error
    assert "a onnx export takes int8 or float32" in error
    assert main(["translate", "--onnx", str(tmp_path), "--run-dir", "r"]) == 2
    assert "--onnx and --run-dir both name a model" in capsys.readouterr().err
    assert main(["translate", "--onnx", str(tmp_path), "--quantize", "int8"]) == 2
    assert "--quantize does not apply to --onnx" in capsys.readouterr().err


def test_export_command_calls_the_onnx_exporter(tmp_path, capsys, monkeypatch):
    from keras_transformer.export import onnx

    calls = []
    monkeypatch.setattr(
        onnx, "export_onnx", lambda *a, **k: calls.append((a, k)) or a[1]
    )
    argv = ["export", "--run-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main([*argv, "--format", "onnx", "--beam-size", "2"]) == 0
    assert main([*argv, "--format", "onnx", "--quantization", "int8"]) == 0
    ((run_dir, out, settings), changes), (_, int8) = calls
    assert (run_dir, out, settings.beam_size) == (str(tmp_path), str(tmp_path / "o"), 2)
    assert changes["quantization"] is None and int8["quantization"] == "int8"
    assert f"translate --onnx {tmp_path / 'o'}" in capsys.readouterr().out


def test_missing_packages_are_named_with_their_extra(tmp_path, monkeypatch):
    from keras_transformer.export import onnx
    from keras_transformer.utils.optional_imports import MissingExtraError

    monkeypatch.setattr(onnx, "is_installed", lambda name: name != "onnxscript")
    with pytest.raises(MissingExtraError, match=r"onnxscript .*\[onnx-export\]"):
        onnx.export_onnx(tmp_path / "run", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    settings = SearchSettings().to_dict()
    directory = _export_json(tmp_path / "x", decoder_layers=1, vocab_size=9, **settings)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtraError, match=r"'\.\[onnx\]'"):
        OnnxTranslator(directory)


@torch_only
def test_a_word_pointer_model_is_refused_before_any_graph(tmp_path):
    from keras_transformer import build_transformer
    from keras_transformer.export.onnx_graphs import write_graphs
    from tests.helpers import small_config

    model = build_transformer(small_config(pointer_bracket_ids=(4, 5)))
    with pytest.raises(ValueError, match="word pointer"):
        write_graphs(model, tmp_path)
    assert list(tmp_path.iterdir()) == []
