"""Preset directories (`run.preset_files`) as the task writes and reads
them: keras-hub's layout, written whole or not at all, and every bad preset
refused with the file named (here beside the task's other tests: they share
its fitted model)."""

from __future__ import annotations

import json
import shutil

import pytest

from keras_transformer import TransformerSeq2SeqLM
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.run import preset_files
from keras_transformer.utils.version import __version__
from tests.helpers import make_corpus


@pytest.fixture(scope="module")
def preset(fitted, tmp_path_factory):
    task, _ = fitted
    return task.save_to_preset(tmp_path_factory.mktemp("presets") / "p")


@pytest.fixture
def copy(preset, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(preset, target)
    return target


def test_the_layout_is_keras_hubs(preset, fitted):
    task, _ = fitted
    names = {p.name for p in preset.iterdir()}
    assert names == {*preset_files.REQUIRED_FILES, "assets"}
    assert (preset / "assets" / "tokenizer" / "sentencepiece.model").is_file()
    config = json.loads((preset / "config.json").read_text())
    assert config["registered_name"] == "keras_transformer>Transformer"
    task_json = json.loads((preset / "task.json").read_text())
    assert task_json["registered_name"] == "keras_transformer>TransformerSeq2SeqLM"
    assert task_json["config"]["backbone"] == config
    assert task_json["config"]["search"]["beam_size"] == 4
    metadata = json.loads((preset / "metadata.json").read_text())
    assert metadata["keras_transformer_version"] == __version__
    assert metadata["keras_transformer_preset_format"] == preset_files.PRESET_FORMAT
    assert metadata["parameter_count"] == task.backbone.count_params()
    # The shrunk `tiny` is no Table 3 configuration.
    assert metadata["paper_configuration"] is None


def test_a_paper_configuration_is_named_in_the_metadata(tokenizer, tmp_path):
    task = TransformerSeq2SeqLM.from_preset("tiny", tokenizer=tokenizer)
    task.save_to_preset(tmp_path / "p")
    metadata = json.loads((tmp_path / "p" / "metadata.json").read_text())
    assert metadata["paper_configuration"] == "tiny"


def test_a_newer_format_is_refused_with_both_versions(copy):
    path = copy / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata.update(keras_transformer_preset_format=99, keras_transformer_version="9.0")
    path.write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=r"metadata.json: preset format 99 .* 9\.0"):
        TransformerSeq2SeqLM.from_preset(copy)


def test_a_tokenizer_that_does_not_match_the_config_names_both_files(copy):
    other = train_tokenizer(make_corpus(), 300)
    shutil.rmtree(copy / "assets" / "tokenizer")
    other.save(copy / "assets" / "tokenizer")
    with pytest.raises(ValueError, match=r"tokenizer of 300 pieces but .*config.json"):
        TransformerSeq2SeqLM.from_preset(copy)


@pytest.mark.parametrize("name", ["model.weights.h5", "task.json", "tokenizer.json"])
def test_a_missing_file_is_named(copy, name):
    (copy / name).unlink()
    with pytest.raises(FileNotFoundError, match=f"{name} missing"):
        TransformerSeq2SeqLM.from_preset(copy)


def test_damaged_weights_name_the_file(copy):
    (copy / "model.weights.h5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="model.weights.h5: the weights do not load"):
        TransformerSeq2SeqLM.from_preset(copy)


def test_a_run_directory_is_told_to_export_a_preset(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="training run directory.*--format preset"):
        TransformerSeq2SeqLM.from_preset(run)


def test_a_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere is neither a directory"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "nowhere")


def test_a_misspelled_name_lists_the_configurations():
    with pytest.raises(FileNotFoundError) as refused:
        TransformerSeq2SeqLM.from_preset("tinyy")
    assert "Preset tinyy is neither" in str(refused.value)
    assert all(name in str(refused.value) for name in ("tiny", "small", "base", "big"))


def test_a_file_is_told_a_preset_is_a_directory(tmp_path):
    weights = tmp_path / "model.weights.h5"
    weights.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="is a file, not a preset"):
        TransformerSeq2SeqLM.from_preset(weights)


def test_a_failed_save_leaves_no_half_preset(fitted, tmp_path, monkeypatch):
    task, _ = fitted

    def broken(directory):
        raise OSError("disk full")

    monkeypatch.setattr(task.tokenizer, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        task.save_to_preset(tmp_path / "p")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_is_named_before_h5py_can_crash(fitted, tmp_path, monkeypatch):
    """h5py segfaulted on ENOSPC (issue 50): the space is checked first, and
    the preset is named with what it needs; nothing is left behind."""
    import collections

    from keras_transformer.utils import atomic_files

    task, _ = fitted
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(
        atomic_files.shutil, "disk_usage", lambda path: usage(10**9, 10**9, 1000)
    )
    with pytest.raises(atomic_files.WriteFailed) as failed:
        task.save_to_preset(tmp_path / "p")
    message = str(failed.value)
    assert f"could not write the preset {tmp_path / 'p'}" in message
    assert "(the disk is full): it needs about" in message and "0.0 MB free" in message
    assert list(tmp_path.iterdir()) == []


def test_a_preset_is_readable_by_others_as_every_export(preset):
    assert preset.stat().st_mode & 0o777 == 0o755


def test_an_existing_preset_is_kept_unless_overwrite_moves_it_aside(fitted, tmp_path):
    task, _ = fitted
    target = tmp_path / "p"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not empty. Pass overwrite=True"):
        task.save_to_preset(target)
    assert (target / "mine.txt").read_text() == "keep me"
    task.save_to_preset(target, overwrite=True)
    assert (target / "config.json").is_file()
    (backup,) = tmp_path.glob("p.backup-*")
    assert (backup / "mine.txt").read_text() == "keep me"


def test_an_exported_run_names_its_training_data():
    from keras_transformer.export.preset import training_data

    manifest = {
        "identity": {
            "data": {
                "name": "multi30k",
                "data_dir": "/data/multi30k",
                "fingerprint": "b0cd8724149d95b4fddcf3d9",
            }
        }
    }
    assert (
        training_data(manifest) == "multi30k (/data/multi30k) fingerprint b0cd8724149d"
    )
    builtin = {"identity": {"data": {"name": "builtin", "builtin_size": 20000,
                                     "builtin_seed": 1234}}}  # fmt: skip
    assert training_data(builtin) == "builtin (20000 generated pairs, seed 1234)"
    assert training_data({}) is None
