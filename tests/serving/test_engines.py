"""The engines without a server: the SavedModel engine (its settings fixed
at export) against the Keras engine on the same run."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.engines import open_engine
from keras_transformer.serving.schema import RequestError

pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]

TEXTS = ["the dog sleeps.", "", "the old man likes the garden near the river."]
SETTINGS = SearchSettings(beam_size=2, max_extra_length=4)


@pytest.fixture(scope="module")
def run_dir(untrained_run):
    """The session's untrained run (read-only: the engines export and
    quantize into their scratch directories)."""
    return untrained_run


def engine(name, run_dir, tmp_path, settings=SETTINGS, **kwargs):
    return open_engine(
        name,
        run_dir,
        settings,
        scratch=tmp_path,
        batch_size=4,
        threads=1,
        **kwargs,
    )


def test_savedmodel_engine_translates_as_the_keras_engine(run_dir, tmp_path):
    pytest.importorskip("tensorflow_text")
    saved = engine("savedmodel", run_dir, tmp_path)  # Exported at start-up.
    keras_engine = engine("keras", run_dir, tmp_path / "k")
    ours = keras_engine.translate(TEXTS, SETTINGS)
    theirs = saved.translate(TEXTS, SETTINGS)
    assert [h[0][0] for h in theirs] == [h[0][0] for h in ours]
    assert [len(h) for h in theirs] == [2, 1, 2]
    assert theirs[1] == [("", 0.0)]
    assert saved.info()["engine"] == "savedmodel" and not saved.has_attention
    with pytest.raises(RequestError) as caught:
        saved.check_settings(SETTINGS.replace(beam_size=3))
    assert caught.value.field == "beam_size"
    assert "exported with beam_size=2" in caught.value.message
    saved.check_settings(SETTINGS)
    # The export again, from --export-dir, copied away and opened without
    # its run (issue 53): flags left at their defaults take its settings;
    # one that disagrees is refused before serving.
    directory = tmp_path / "shipped" / "savedmodel"
    shutil.copytree(tmp_path / "savedmodel", directory)
    again = engine("savedmodel", None, tmp_path, SearchSettings(), export_dir=directory)
    assert again.settings == SETTINGS
    assert again.translate(TEXTS, SETTINGS) == theirs
    with pytest.raises(ValueError, match="--alpha 0.3: .* exported with alpha=0.6"):
        engine(
            "savedmodel",
            run_dir,
            tmp_path,
            SearchSettings(alpha=0.3),
            export_dir=directory,
        )


def test_an_export_dir_of_the_wrong_format_is_refused(run_dir, tmp_path):
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "export.json").write_text('{"format": "savedmodel"}')
    with pytest.raises(ValueError, match="holds a 'savedmodel' export"):
        engine("ctranslate2", run_dir, tmp_path, export_dir=tmp_path / "ct2")
    with pytest.raises(FileNotFoundError, match="is not an export"):
        engine("ctranslate2", run_dir, tmp_path, export_dir=tmp_path)


def test_quantize_int8_serves_the_int8_model_and_says_so(run_dir, tmp_path):
    float_engine = engine("keras", run_dir, tmp_path / "f")
    int8 = engine("keras", run_dir, tmp_path / "q", quantize="int8")
    assert int8.info()["model"]["quantization"] == "int8"
    assert float_engine.info()["model"]["quantization"] is None
    weights = {w.path: str(w.dtype) for w in int8.model.weights}
    assert weights["shared_embedding/embeddings"] == "int8"
    assert len(int8.translate(TEXTS, SETTINGS)) == len(TEXTS)


def test_quantize_is_refused_by_an_engine_that_runs_an_export(run_dir, tmp_path):
    with pytest.raises(ValueError, match="--engine savedmodel runs the weights"):
        engine("savedmodel", run_dir, tmp_path, quantize="int8")
    assert not any(tmp_path.iterdir())  # Refused before exporting anything.


def test_an_unknown_quantization_is_refused_before_loading(tmp_path):
    with pytest.raises(
        ValueError, match=r"--quantize\) must be one of int8. Received: 'int4'"
    ):
        engine("keras", tmp_path / "no-run", tmp_path, quantize="int4")


def test_quantize_int8_loads_a_ctranslate2_export_as_int8(run_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    int8 = engine("ctranslate2", run_dir, tmp_path, quantize="int8")
    assert int8.translator.compute_type == "int8_float32"  # int8 weights.
    assert int8.info()["model"]["quantization"] == "int8"
    assert len(int8.translate(TEXTS, SETTINGS)) == len(TEXTS)


def test_attention_pads_both_sides_to_a_few_lengths():
    from keras_transformer.decoding.scoring import padded_length, padded_lengths

    assert padded_lengths(257) == [8, 16, 32, 64, 128, 256, 264]
    assert padded_lengths(61) == [8, 16, 32, 64]
    assert padded_lengths(33) == [8, 16, 32, 40]
    assert [padded_length(n, 61) for n in (1, 8, 9, 33, 61)] == [8, 8, 16, 64, 64]
    assert padded_length(300, 257) == 512  # Past the limit: the ladder goes on.
    assert padded_length(100) == 128  # No limit (no warm-up yet).


def test_warmed_attention_compiles_nothing_and_gives_the_same_weights(
    run_dir, tmp_path
):
    """Padding to another length changes no weight: the masks give padding
    none. On JAX and TensorFlow each length is one compiled program."""
    import numpy as np

    from keras_transformer.decoding.compile import compilations

    keras_engine = engine("keras", run_dir, tmp_path)
    source = "the old man likes the garden near the river."
    pairs = [(source, "a dog."), (source, "the dog sleeps " * 4), ("a.", "a.")]
    before = [keras_engine.attention(*pair) for pair in pairs]  # 64-long pads.
    assert keras_engine.warm_up_attention(32) == 4  # 8, 16, 32, 40.
    compiled = compilations()
    after = [keras_engine.attention(*pair) for pair in pairs]
    assert compilations() == compiled
    for old, new in zip(before, after):
        assert new["source_tokens"] == old["source_tokens"]
        assert new["target_tokens"] == old["target_tokens"]
        np.testing.assert_allclose(
            new["cross_attention"], old["cross_attention"], atol=2e-4
        )
    if importlib.util.find_spec("ctranslate2"):  # An engine without attention.
        assert engine("ctranslate2", run_dir, tmp_path / "c").warm_up_attention(32) == 0


def test_details_are_translates_and_warmed_they_compile_nothing(run_dir, tmp_path):
    """The Keras engine's details are `Translator.generate`'s records with
    the n-best; the warm-up compiles every shape of their teacher-forced
    pass, and padding to those shapes changes no score or alignment."""
    import numpy as np

    from keras_transformer.decoding.compile import compilations
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.run.directory import RunDirectory
    from keras_transformer.serving.jobs import Decoding

    keras_engine = engine("keras", run_dir, tmp_path)
    key = Decoding(SETTINGS, None, keras_engine.alignment_layer(None))
    before = keras_engine.run_batch(TEXTS, key)  # Unwarmed: exact widths.
    # A batch of at most SMALL_BATCH rows is padded whole: rows 4 by 8..40.
    assert keras_engine.warm_up_details(40) == 4
    compiled = compilations()
    after = keras_engine.run_batch(TEXTS, key)
    assert compilations() == compiled
    run = RunDirectory(run_dir).open_for_inference()
    plain = Translator(run.model, run.tokenizer, SETTINGS, batch_size=4)
    expected = plain.generate(TEXTS, n_best=True)
    for old, new, reference in zip(before, after, expected):
        for record in (old, new):
            assert record["tokens"] == reference["tokens"]
            assert record["alignment"] == reference["alignment"]
            assert record["n_best"] == reference["n_best"]
            np.testing.assert_allclose(
                record["token_scores"], reference["token_scores"], atol=1e-4
            )
    assert keras_engine.run_batch(TEXTS, SETTINGS) == keras_engine.translate(
        TEXTS, SETTINGS
    )
    with pytest.raises(RequestError) as caught:
        keras_engine.alignment_layer(1)  # One decoder layer: 0 or -1.
    assert caught.value.field == "alignment_layer" and "[-1, 0]" in str(caught.value)
    if importlib.util.find_spec("ctranslate2"):  # An engine without details.
        other = engine("ctranslate2", run_dir, tmp_path / "c")
        assert other.warm_up_details(40) == 0
        with pytest.raises(RequestError) as caught:
            other.alignment_layer(None)
        assert caught.value.field == "details" and "--engine keras" in str(caught.value)


def test_an_ensemble_of_the_run_with_itself_serves_as_the_run(run_dir, tmp_path):
    from keras_transformer.decoding.ensemble import Ensemble
    from keras_transformer.serving.jobs import Decoding

    alone = engine("keras", run_dir, tmp_path)
    both = engine("keras", run_dir, tmp_path / "e", ensemble=[str(run_dir)])
    assert isinstance(both.model, Ensemble) and len(both.model) == 2
    ours, theirs = both.translate(TEXTS, SETTINGS), alone.translate(TEXTS, SETTINGS)
    assert [[t for t, _ in h] for h in ours] == [[t for t, _ in h] for h in theirs]
    for mine, its in zip(ours, theirs):  # Renormalised: float rounding.
        assert [s for _, s in mine] == pytest.approx([s for _, s in its], abs=1e-4)
    key = Decoding(SETTINGS, None, 0)
    assert [r["tokens"] for r in both.run_batch(TEXTS, key)] == [
        r["tokens"] for r in alone.run_batch(TEXTS, key)
    ]
    assert both.info()["model"]["ensemble"] == [run_dir.name]
    assert "ensemble" not in alone.info()["model"]
    with pytest.raises(ValueError, match="--ensemble needs --engine keras"):
        engine("onnx", run_dir, tmp_path / "o", ensemble=[str(run_dir)])


def test_the_allowed_alphas_share_one_search_and_translate_as_their_own(
    run_dir, tmp_path
):
    # Issue 50: each allowed alpha compiled its own programs at warm-up.
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.serving.options import AllowedSettings

    keras_engine = engine("keras", run_dir, tmp_path)
    steps = {
        alphas: len(keras_engine.warm_up_steps(AllowedSettings((2,), alphas), 16))
        for alphas in [(0.6,), (0.6, 1.0, 2.0)]
    }
    assert steps[(0.6,)] == steps[(0.6, 1.0, 2.0)] > 0
    other = SETTINGS.replace(alpha=2.0)
    shared = keras_engine._translator(other)
    assert shared.generator is keras_engine._translator(SETTINGS).generator
    assert shared.settings == other and shared is keras_engine._translator(other)
    fresh = Translator(keras_engine.model, keras_engine.tokenizer, other, batch_size=4)
    for mine, theirs in zip(keras_engine.translate(TEXTS, other), fresh.nbest(TEXTS)):
        assert [text for text, _ in mine] == [text for text, _ in theirs]
        assert [s for _, s in mine] == pytest.approx([s for _, s in theirs], abs=1e-5)
