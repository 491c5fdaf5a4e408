"""keras-hub reads our presets: `keras_hub.models.Seq2SeqLM.from_preset`
returns our task with equal outputs, and `keras_hub.upload_preset` takes the
directory up to its network call (faked here: no network)."""

from __future__ import annotations

import keras
import pytest

# keras-hub requires TensorFlow: its interop is the TensorFlow suite's.
if keras.backend.backend() != "tensorflow":
    pytest.skip(
        "keras-hub interop runs in the TensorFlow suite", allow_module_level=True
    )
keras_hub = pytest.importorskip("keras_hub")
hub = pytest.importorskip("keras_transformer.task.hub")

from keras_transformer import TransformerSeq2SeqLM  # noqa: E402

SOURCES = ["the dog sleeps .", "", "the old man likes the garden ."]


@pytest.fixture(scope="module")
def preset(fitted, tmp_path_factory):
    task, _ = fitted
    return task.save_to_preset(tmp_path_factory.mktemp("hub") / "p")


def test_keras_hub_loads_our_task_with_equal_outputs(preset, fitted):
    task, _ = fitted
    loaded = keras_hub.models.Seq2SeqLM.from_preset(str(preset))
    assert isinstance(loaded, hub.HubTransformerSeq2SeqLM)
    assert isinstance(loaded, TransformerSeq2SeqLM)
    assert isinstance(loaded, keras_hub.models.Seq2SeqLM)
    for beam_size in (1, 4):
        expected = task.generate(SOURCES, beam_size=beam_size)
        assert loaded.generate(SOURCES, beam_size=beam_size) == expected
    loaded.compile()  # the paper's, once the model exists
    assert loaded.optimizer.beta_2 == 0.98


def test_our_loader_still_reads_the_preset_with_keras_hub_imported(preset, fitted):
    task, _ = fitted
    loaded = TransformerSeq2SeqLM.from_preset(preset)
    assert loaded.generate(SOURCES) == task.generate(SOURCES)


def test_upload_preset_takes_the_directory_up_to_the_network(preset, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    uploaded = []

    class Repo:
        repo_id = "someone/transformer"

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda **_: Repo())
    # No model card there yet: keras-hub writes one from our files first.
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda **_: False)
    monkeypatch.setattr(
        huggingface_hub,
        "upload_folder",
        lambda repo_id, folder_path: uploaded.append((repo_id, folder_path)),
    )
    keras_hub.upload_preset("hf://someone/transformer", str(preset))
    assert uploaded == [("someone/transformer", str(preset))]


def test_upload_preset_refuses_a_directory_without_weights(preset, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(preset, broken)
    (broken / "model.weights.h5").unlink()
    with pytest.raises(FileNotFoundError, match="weights file is missing"):
        keras_hub.upload_preset("hf://someone/transformer", str(broken))
