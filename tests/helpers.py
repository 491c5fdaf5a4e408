"""Assertions and builders shared by the test modules."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import keras
import numpy as np

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def small_config(**overrides) -> TransformerConfig:
    """The `tiny` preset shrunk further: fast on two CPU cores."""
    values = dict(
        vocab_size=50,
        d_model=32,
        d_ff=64,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_position=64,
    )
    values.update(overrides)
    return TransformerConfig.preset("tiny", **values)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def _flat_numpy(outputs):
    return [to_numpy(x) for x in keras.tree.flatten(outputs)]


def _assert_outputs_equal(actual, expected, what):
    actual, expected = _flat_numpy(actual), _flat_numpy(expected)
    assert len(actual) == len(expected), what
    for a, e in zip(actual, expected):
        assert a.shape == e.shape, what
        assert a.dtype == e.dtype, what
        np.testing.assert_array_equal(a, e, err_msg=what)


def _symbolic_input(array):
    array = np.asarray(array)
    return keras.Input(shape=array.shape[1:], dtype=array.dtype.name)


def assert_layer_contract(
    layer_cls, init_kwargs, inputs, call_kwargs=None, tmp_path=None
):
    """Check the serialization contract every layer must meet.

    1. `from_config(get_config())` gives a layer with an equal config.
    2. The clone, given the original's weights, computes the same outputs.
    3. A functional model around the layer survives `.keras` save/load with
       identical outputs.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        inputs: list of numpy arrays, the positional call arguments (masks
            as bool arrays; they become bool `keras.Input`s).
        call_kwargs: extra keyword call arguments (e.g. `reverse=True`).
            `training` is not needed: everything runs in inference mode.
        tmp_path: folder for the `.keras` file; a temporary one if None.

    Returns:
        The outputs of the original layer, as numpy.
    """
    call_kwargs = dict(call_kwargs or {})
    call_kwargs.pop("training", None)
    inputs = [np.asarray(x) for x in inputs]

    layer = layer_cls(**init_kwargs)
    outputs = layer(*inputs, training=False, **call_kwargs)

    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config
    clone(*inputs, training=False, **call_kwargs)  # Builds the weights.
    original_weights = layer.get_weights()
    clone_weights = clone.get_weights()
    assert [w.shape for w in clone_weights] == [w.shape for w in original_weights]
    clone.set_weights(original_weights)
    _assert_outputs_equal(
        clone(*inputs, training=False, **call_kwargs), outputs, "from_config clone"
    )

    symbolic = [_symbolic_input(x) for x in inputs]
    wrapped = layer_cls(**init_kwargs)
    model = keras.Model(symbolic, wrapped(*symbolic, **call_kwargs))
    wrapped.set_weights(original_weights)
    model_outputs = model(inputs, training=False)
    for a, e in zip(_flat_numpy(model_outputs), _flat_numpy(outputs)):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)

    with tempfile.TemporaryDirectory() as scratch:
        folder = scratch if tmp_path is None else tmp_path
        path = os.path.join(folder, f"{layer_cls.__name__}.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    loaded_layer = loaded.get_layer(wrapped.name)
    assert type(loaded_layer) is layer_cls
    assert loaded_layer.get_config() == wrapped.get_config()
    _assert_outputs_equal(
        loaded(inputs, training=False), model_outputs, "saved and loaded .keras"
    )
    return _flat_numpy(outputs)


def train_one_step(model, inputs, labels, learning_rate=1e-2):
    """Compile with Adam and cross-entropy, run one `train_on_batch` step.

    TensorFlow runs the step eagerly (tracing the whole train step costs
    ~10 s on two CPU cores, the eager step ~1 s); JAX always jit-compiles
    (its eager mode is slower still). Returns the loss as a float.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        run_eagerly=keras.backend.backend() == "tensorflow",
    )
    logs = model.train_on_batch(inputs, labels, return_dict=True)
    return float(logs["loss"])


def shifted_labels(target_ids):
    """Next-token labels for a (B, T) decoder input: left shift, pad at end."""
    target_ids = np.asarray(target_ids)
    pad = np.zeros((target_ids.shape[0], 1), target_ids.dtype)
    return np.concatenate([target_ids[:, 1:], pad], axis=1)


def predict_logits(model, source_ids, target_ids):
    """Inference logits of a whole Transformer as a NumPy array.

    JAX runs the model jit-compiled (`predict_on_batch`): compiling the whole
    graph once per shape is several times cheaper on CPU than JAX's eager
    mode, which compiles every op separately. TensorFlow runs eagerly, its
    fastest path here. Both compute the same inference-mode function.
    """
    inputs = {
        "source_ids": np.asarray(source_ids, "int32"),
        "target_ids": np.asarray(target_ids, "int32"),
    }
    if keras.backend.backend() == "jax":
        return np.asarray(model.predict_on_batch(inputs))
    return to_numpy(model(inputs, training=False))


TOY_WORDS = (
    "the a dog cat bird man woman child sees likes eats sleeps runs red big "
    "small old house garden ball tree water"
).split()


def make_corpus(size: int = 300, seed: int = 0) -> list[str]:
    """Random short sentences over TOY_WORDS, for tiny tokenizers."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(TOY_WORDS) for _ in range(rng.randint(2, 7))) + "."
        for _ in range(size)
    ]


def no_eos_model(vocab_size: int):
    """An untrained 1 + 1 layer model that never emits EOS (nor PAD, UNK,
    BOS): every output runs to its length limit, source length + extra, so
    outputs are tied to their inputs. Seeds itself (module fixtures run
    before the per-test seed)."""
    config = small_config(
        vocab_size=vocab_size,
        d_model=16,
        d_ff=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        tie_output_projection=False,
    )
    keras.utils.set_random_seed(0)
    model = build_transformer(config)
    bias = model.get_layer("output_projection").bias
    values = np.zeros(tuple(bias.shape), np.float32)
    values[[PAD_ID, UNK_ID, BOS_ID, EOS_ID]] = -20.0
    bias.assign(values)
    return model


# --- small training runs (tests/training/: test_job.py, distributed_checks.py) ---

TRAINING_MODEL = {"d_model": 32, "d_ff": 64, "num_heads": 2, "warmup_steps": 20}


def short_pairs(split: str, count: int) -> list[tuple[str, str]]:
    """The first `count` built-in (en, de) pairs of `split` ("train" or
    "valid") whose source has at most 7 words."""
    from keras_transformer.data.builtin_corpus import generate_corpus

    splits = generate_corpus(num_train=2000, num_valid=100, num_test=10, seed=5)
    return [p for p in splits[split] if len(p[0].split()) <= 7][:count]


def write_training_corpus(directory) -> dict[str, tuple[str, str]]:
    """Short built-in pairs as files: 240 training pairs (several batches
    per epoch, so short runs cross epochs), 12 validation pairs, no test
    split. Returns {"train": (src, tgt), "valid": (src, tgt)}."""
    files = {}
    for name, count in (("train", 240), ("valid", 12)):
        pairs = short_pairs(name, count)
        source, target = directory / f"{name}.en", directory / f"{name}.de"
        source.write_text("".join(f"{en}\n" for en, _ in pairs), encoding="utf-8")
        target.write_text("".join(f"{de}\n" for _, de in pairs), encoding="utf-8")
        files[name] = (str(source), str(target))
    return files


def training_options(run_dir, files, **changes):
    """TrainOptions of a 12-update run of a very small model on `files`."""
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.training.options import TrainOptions

    values = dict(
        run_dir=str(run_dir),
        overrides=dict(TRAINING_MODEL),
        data=DatasetSpec(name="files", files=files),
        vocab_size=400,
        tokens_per_batch=1024,
        max_length=32,
        max_steps=12,
        eval_every=0,
        checkpoint_every=4,
        keep_checkpoints=10,
        verbose="0",
    )
    values.update(changes)
    return TrainOptions(**values)


def ctranslate2_ids(directory, tokenizer, settings, sentences):
    """Token ids per sentence, each searched alone with its own length limit
    (as `Translator` limits each sentence)."""
    import ctranslate2

    from keras_transformer.export.reading import translate_batch_options

    translator = ctranslate2.Translator(str(directory), intra_threads=1)
    options = translate_batch_options(tokenizer, settings)
    piece_ids = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    outputs = []
    for ids in tokenizer.encode(sentences):
        pieces = [tokenizer.id_to_piece(i) for i in ids]
        result = translator.translate_batch(
            [pieces],
            **options,
            max_decoding_length=len(pieces) + settings.max_extra_length,
            return_end_token=True,
        )
        hypothesis = result[0].hypotheses[0]
        outputs.append([piece_ids[piece] for piece in hypothesis])
    return outputs


# The Penn Treebank sample (../shared/data/ptb-sample): on development
# machines, not in the package; the tests that read it skip where it is absent.
PTB_SAMPLE = Path(
    os.environ.get(
        "KERAS_TRANSFORMER_PTB_SAMPLE",
        "/work/shared/data/ptb-sample/wsj_0001-0179.mrg.tar.gz",
    )
)


def set_seeded_weights(model, seed, eos_bias):
    """Weights from a NumPy seed (the same model on every backend); PAD, UNK
    and BOS made unlikely, EOS biased so that some rows end early."""
    rng = np.random.default_rng(seed)
    values = []
    for variable in model.weights:
        shape = tuple(variable.shape)
        if variable.path.endswith("gamma"):
            value = np.ones(shape)
        elif variable.path.endswith("beta"):
            value = np.zeros(shape)
        elif len(shape) == 1:
            value = rng.normal(size=shape) * 0.1
        else:
            value = rng.normal(size=shape) / np.sqrt(shape[0])
        if variable.path == "output_projection/bias":
            value[[PAD_ID, UNK_ID, BOS_ID]] = -10.0
            value[EOS_ID] = eos_bias
        values.append(value.astype("float32"))
    model.set_weights(values)
