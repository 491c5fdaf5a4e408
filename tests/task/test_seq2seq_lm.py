"""`TransformerSeq2SeqLM`: fit on text pairs, generate, presets, compile."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer import TransformerSeq2SeqLM
from keras_transformer.cli import main
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.schedules import TransformerSchedule
from keras_transformer.task import seq2seq_lm
from tests.task.conftest import SMALL

SOURCES = ["the dog sleeps .", "", "the old man likes the garden .", "water ."]


def weights_of(model):
    return [np.array(keras.ops.convert_to_numpy(w)) for w in model.weights]


def untrained(tokenizer, **changes):
    keras.utils.set_random_seed(7)
    return TransformerSeq2SeqLM.from_preset(
        "tiny",
        tokenizer=tokenizer,
        tokens_per_batch=512,
        max_length=32,
        **SMALL,
        **changes,
    )


def test_fit_on_text_pairs_moves_the_weights_and_lowers_the_loss(fitted, tokenizer):
    task, history = fitted
    losses = history.history["loss"]
    assert len(losses) == 10
    assert losses[-1] < losses[0] - 0.5
    before = weights_of(untrained(tokenizer))
    after = weights_of(task)
    assert len(before) == len(after)
    assert any(not np.allclose(a, b) for a, b in zip(before, after))


def fit_one_epoch(tokenizer, x, y=None, **kwargs):
    """The history of one epoch of a fresh `untrained` task on (x, y)."""
    task = untrained(tokenizer)
    task.compile()
    return task.fit(x=x, y=y, epochs=1, verbose=0, **kwargs).history


@pytest.fixture(scope="module")
def reference_fit(pairs, tokenizer):
    """One epoch on the first 80 pairs as `x=(sources, targets)`, with the
    last 40 as validation data (evaluated after the epoch: the training
    loss is the same without them): the training the other forms of text
    pairs must equal, and the validation that text pairs give. One fit
    serves three tests (a fit is a new train function to trace or compile
    on TensorFlow and JAX)."""
    source, target = pairs
    return fit_one_epoch(
        tokenizer,
        (source[:80], target[:80]),
        validation_data=(source[200:], target[200:]),
    )


def test_sources_and_targets_as_x_and_y_give_the_same_training(
    pairs, tokenizer, reference_fit
):
    # The other forms give the same batches (the test below), which fit
    # then uses alike: one fit checks the route through Keras's y.
    source, target = pairs
    got = fit_one_epoch(tokenizer, source[:80], target[:80])["loss"][0]
    assert got == pytest.approx(reference_fit["loss"][0])


def test_fit_on_a_tf_dataset_of_string_pairs(pairs, tokenizer, reference_fit):
    tf = pytest.importorskip("tensorflow")
    source, target = pairs
    source, target = source[:80], target[:80]
    expected = reference_fit["loss"][0]  # x=(source, target)
    dataset = tf.data.Dataset.from_tensor_slices((source, target))
    got = fit_one_epoch(tokenizer, dataset)["loss"][0]
    assert got == pytest.approx(expected)


def test_validation_data_as_text_pairs(reference_fit):
    assert np.isfinite(reference_fit["val_loss"][0])
    assert "val_token_accuracy" in reference_fit


def batch_arrays(data):
    """Every training batch of `data` (a `TrainingData`) as NumPy arrays."""
    for index in range(len(data.train)):
        inputs, labels, weights = data.train[index]
        yield [np.asarray(a) for a in (*inputs.values(), labels, weights)]


def test_every_form_of_text_pairs_gives_the_same_batches(pairs, tokenizer):
    # Generators and UTF-8 bytes were handed to Keras, which failed with
    # "Invalid dtype: str2912" or printed the whole list (issue 50).
    source, target = pairs[0][:40], pairs[1][:40]
    forms = [
        ((source, target), None),
        (source, target),
        (list(zip(source, target)), None),
        ((pair for pair in zip(source, target)), None),
        (([s.encode() for s in source], [t.encode() for t in target]), None),
    ]
    preprocessor = untrained(tokenizer).preprocessor
    expected = None
    for x, y in forms:
        _, text_pairs = seq2seq_lm._text_pairs(x, y)
        got = list(batch_arrays(preprocessor.batches(text_pairs)))
        expected = expected or got
        assert len(got) == len(expected) > 1
        for mine, theirs in zip(got, expected):
            for a, b in zip(mine, theirs):
                np.testing.assert_array_equal(a, b)


def test_a_generator_of_arrays_is_keras_business_and_given_back_whole():
    batches = [(np.zeros((2, 3)), np.ones((2, 3))) for _ in range(3)]
    x, text_pairs = seq2seq_lm._text_pairs(iter(batches), None)
    assert text_pairs is None and len(list(x)) == 3


def test_fit_needs_no_compile_and_takes_batch_size_as_sentences(pairs, tokenizer):
    # keras-hub's tasks are compiled on construction, and a Keras user's
    # batch_size means sentences per batch: both are so here (issue 50).
    source, target = pairs[0][:40], pairs[1][:40]
    task = untrained(tokenizer)
    data = task.preprocessor.batches((source, target), rows_per_batch=8)
    rows = [arrays[0].shape[0] for arrays in batch_arrays(data)]
    assert set(rows) == {8} and len(rows) >= 5  # 40 pairs, by length bucket.
    seen = []
    count = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.append(batch)
    )
    history = task.fit(
        x=(source, target), batch_size=8, epochs=1, verbose=0, callbacks=[count]
    )
    assert len(seen) == len(rows) and np.isfinite(history.history["loss"][0])
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        task.fit(x=(source, target), batch_size=0, epochs=1, verbose=0)


def test_texts_without_targets_and_pairs_of_three_are_named(pairs, tokenizer):
    source, target = pairs
    task = untrained(tokenizer)
    with pytest.raises(ValueError, match="x holds texts but no targets: pass y="):
        task.fit(x=source, epochs=1, verbose=0)
    triples = ((s, t, t) for s, t in zip(source, target))
    with pytest.raises(TypeError, match="x: item 0 is not a .source, target. pair"):
        task.fit(x=triples, epochs=1, verbose=0)


def test_fit_refuses_lists_of_different_lengths(pairs, tokenizer):
    source, target = pairs
    task = untrained(tokenizer)
    task.compile()
    with pytest.raises(ValueError, match="240 source texts but 239 target texts"):
        task.fit(x=(source, target[:-1]), epochs=1, verbose=0)


def test_fit_names_a_text_that_is_not_a_string(pairs, tokenizer):
    source, target = pairs
    task = untrained(tokenizer)
    task.compile()
    with pytest.raises(TypeError, match="target text 3 is a int"):
        task.fit(x=(source[:5], target[:3] + [7, "x"]), epochs=1, verbose=0)


def test_compile_without_arguments_is_the_papers(tokenizer):
    task = untrained(tokenizer)
    task.compile()
    optimizer = task.optimizer
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer._learning_rate, TransformerSchedule)
    assert isinstance(task.loss, LabelSmoothedCrossEntropy)
    assert task.loss.epsilon == 0.1
    task.compile(optimizer="sgd", metrics=[])
    assert isinstance(task.optimizer, keras.optimizers.SGD)
    assert isinstance(task.loss, LabelSmoothedCrossEntropy)


@pytest.mark.backend_neutral
@pytest.mark.parametrize("beam_size", [1, 4])
def test_generate_equals_translate_on_the_exported_run(
    fitted, tmp_path, capsys, beam_size
):
    """The fitted model saved as a run (tokenizer + model.keras), exported
    with `export --format preset`, loaded back: `generate` equals
    `translate --run-dir` and `translate --preset` line for line.

    Backend-neutral (tests/conftest.py): the three routes to one search
    (the task, the command line on a run, on a preset) are the same code on
    every backend, each building its own `Translator` (a compile each).
    What they share is checked in every suite: a preset's weights and
    `generate` through `save_to_preset`/`from_preset` (below), the search
    in tests/decoding/test_translator.py."""
    task, _ = fitted
    run = tmp_path / "run"
    task.tokenizer.save(run / "tokenizer")
    task.backbone.save(run / "model.keras")
    preset = tmp_path / "preset"
    assert (
        main(
            [
                "export",
                "--format",
                "preset",
                "--run-dir",
                str(run),
                "--out",
                str(preset),
            ]
        )
        == 0
    )
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    outputs = {}
    for flag, path in (("--run-dir", run), ("--preset", preset)):
        capsys.readouterr()
        argv = ["translate", flag, str(path), "--input", str(source)]
        assert main(argv + ["--beam-size", str(beam_size)]) == 0
        outputs[flag] = capsys.readouterr().out.split("\n")[:-1]
    loaded = TransformerSeq2SeqLM.from_preset(preset)
    generated = loaded.generate(SOURCES, beam_size=beam_size)
    assert generated == outputs["--run-dir"] == outputs["--preset"]
    assert generated == task.generate(SOURCES, beam_size=beam_size)
    assert sum(bool(line) for line in generated) == 3  # the blank stays blank


def test_fit_then_save_to_preset_then_from_preset_gives_the_same_outputs(
    fitted, tmp_path
):
    task, _ = fitted
    task.save_to_preset(tmp_path / "p")
    loaded = TransformerSeq2SeqLM.from_preset(tmp_path / "p")
    for a, b in zip(weights_of(task.backbone), weights_of(loaded.backbone)):
        np.testing.assert_array_equal(a, b)
    assert loaded.generate(SOURCES) == task.generate(SOURCES)
    assert loaded.preprocessor.get_config() == task.preprocessor.get_config()


def test_generate_takes_one_string_and_search_changes(fitted):
    task, _ = fitted
    one = task.generate("the dog sleeps .", beam_size=1)
    assert isinstance(one, str)
    assert one == task.generate(["the dog sleeps ."], beam_size=1)[0]
    with pytest.raises(TypeError, match=r"texts\[1\] is a bytes"):
        task.generate(["a", b"b"])
    with pytest.raises(TypeError, match="beam_wdth"):
        task.generate(["a"], beam_wdth=2)


def test_generate_gives_details_and_samples_as_translate_does(fitted):
    from keras_transformer.decoding.sampling import SamplingSettings

    task, _ = fitted
    plain = task.generate("the dog sleeps .", beam_size=4)
    record = task.generate("the dog sleeps .", beam_size=4, details=True, n_best=True)
    assert record["translation"] == plain == record["n_best"][0]["translation"]
    assert len(record["token_scores"]) == len(record["tokens"])
    top_1 = SamplingSettings(sampling="top-k", top_k=1)
    sampled = task.generate(["the dog sleeps ."], beam_size=1, sampling=top_1)
    assert sampled == task.generate(["the dog sleeps ."], beam_size=1)


def test_a_keras_file_round_trip_keeps_the_tokenizer_and_the_outputs(fitted, tmp_path):
    task, _ = fitted
    task.save(tmp_path / "task.keras")
    loaded = keras.saving.load_model(tmp_path / "task.keras")
    assert isinstance(loaded, TransformerSeq2SeqLM)  # or keras-hub's subclass
    assert loaded.generate(SOURCES, beam_size=1) == task.generate(SOURCES, beam_size=1)
    assert isinstance(loaded.loss, LabelSmoothedCrossEntropy)


def test_from_a_configuration_name_needs_a_tokenizer_or_texts():
    with pytest.raises(ValueError, match="pass tokenizer= .* or texts="):
        TransformerSeq2SeqLM.from_preset("tiny")


def test_from_a_configuration_name_learns_a_tokenizer_from_texts(pairs):
    source, target = pairs
    task = TransformerSeq2SeqLM.from_preset(
        "tiny", texts=source + target, vocab_size=350, **SMALL
    )
    assert task.tokenizer.vocab_size == 350
    assert task.backbone.config.vocab_size == 350
    assert task.backbone.config.d_model == 32


def test_overrides_that_are_no_setting_are_refused_by_name(tokenizer, fitted, tmp_path):
    with pytest.raises(ValueError, match="d_modle=8 cannot be set"):
        TransformerSeq2SeqLM.from_preset("tiny", tokenizer=tokenizer, d_modle=8)
    with pytest.raises(ValueError, match="vocab_size is the tokenizer's"):
        TransformerSeq2SeqLM.from_preset("tiny", tokenizer=tokenizer, vocab_size=9)
    task, _ = fitted
    task.save_to_preset(tmp_path / "p")
    with pytest.raises(ValueError, match="d_model=64 cannot be set on the trained"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "p", d_model=64)
    with pytest.raises(ValueError, match="brings its own tokenizer"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "p", tokenizer=tokenizer)
    with pytest.raises(ValueError, match="vocab_size is for a configuration name"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "p", vocab_size=500)
    changed = TransformerSeq2SeqLM.from_preset(
        tmp_path / "p", beam_size=2, dropout_rate=0.3
    )
    assert changed.search_settings.beam_size == 2
    assert changed.backbone.config.dropout_rate == 0.3


def test_generate_without_a_tokenizer_says_what_to_do(fitted):
    task, _ = fitted
    bare = TransformerSeq2SeqLM(task.backbone)
    with pytest.raises(ValueError, match="generate needs the tokenizer"):
        bare.generate(["a"])


@pytest.mark.backend_neutral
def test_evaluate_takes_a_preset(fitted, tmp_path, capsys):
    """Backend-neutral (tests/conftest.py): `evaluate --preset` is command
    line plumbing; loading a preset and generating are checked in every
    suite (test_fit_then_save_to_preset_then_from_preset_gives_the_same_outputs)."""
    task, _ = fitted
    preset = task.save_to_preset(tmp_path / "p")
    source, reference = tmp_path / "src.en", tmp_path / "ref.de"
    source.write_text("the dog sleeps .\nwater .\n", encoding="utf-8")
    reference.write_text("Der Hund schläft.\nWasser.\n", encoding="utf-8")
    argv = ["evaluate", "--preset", str(preset), "--src", str(source)]
    assert main([*argv, "--ref", str(reference), "--beam-size", "1"]) == 0
    assert "sacreBLEU" in capsys.readouterr().out
    assert main([*argv, "--ref", str(reference), "--run-dir", str(tmp_path)]) == 2
    assert "--preset and --run-dir both name a model" in capsys.readouterr().err
