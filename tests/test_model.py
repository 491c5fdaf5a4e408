"""The whole Transformer: sizes, tying, invariances, save/load, decoding."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer import Transformer, TransformerConfig, build_transformer
from tests.helpers import (
    predict_logits,
    shifted_labels,
    small_config,
    to_numpy,
    train_one_step,
)

pytestmark = pytest.mark.usefixtures("keras_state")

B, S, T = 3, 6, 5
SOURCE = np.array(
    [[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0], [14, 15, 0, 0, 0, 0]], "int32"
)
TARGET = np.array([[2, 20, 21, 22, 23], [2, 24, 25, 0, 0], [2, 26, 27, 28, 0]], "int32")
FULL_TARGET = np.array(
    [[2, 20, 21, 22, 23], [2, 24, 25, 30, 31], [2, 26, 27, 28, 29]], "int32"
)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return build_transformer(small_config())


def expected_param_count(config: TransformerConfig) -> int:
    d, f = config.d_model, config.d_ff
    attention = 4 * (d * d + d)
    feed_forward = (d * f + f) + (f * d + d)
    norm = 2 * d
    encoder = attention + feed_forward + 2 * norm
    decoder = 2 * attention + feed_forward + 3 * norm
    embeddings = config.vocab_size * d
    if not config.share_embeddings:
        embeddings += config.output_vocab_size * d
    total = embeddings
    total += config.num_encoder_layers * encoder + config.num_decoder_layers * decoder
    if not config.tie_output_projection:
        total += d * config.output_vocab_size + config.output_vocab_size
    if config.norm_first:
        total += 2 * norm
    return total


# --- Sizes and embedding tying ---------------------------------------------


@pytest.mark.backend_neutral  # A count of shapes: the same on every backend.
def test_base_parameter_count_matches_paper():
    config = TransformerConfig.preset("base", vocab_size=37000)
    base_model = build_transformer(config)
    count = base_model.count_params()
    del base_model
    assert count == expected_param_count(config)
    assert abs(count - 65e6) / 65e6 < 0.05


@pytest.mark.backend_neutral  # A count of shapes: the same on every backend.
def test_big_parameter_count_matches_paper():
    config = TransformerConfig.preset("big", vocab_size=37000)
    big_model = build_transformer(config)
    count = big_model.count_params()
    del big_model
    assert count == expected_param_count(config)
    assert abs(count - 213e6) / 213e6 < 0.02


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {
            "norm_first": True,
            "share_embeddings": False,
            "tie_output_projection": False,
            "target_vocab_size": 40,
        },
    ],
)
def test_small_parameter_count_is_exact(overrides):
    config = small_config(**overrides)
    assert build_transformer(config).count_params() == expected_param_count(config)


def test_tied_model_has_one_embedding_matrix_that_trains():
    config = small_config(
        share_embeddings=True,
        tie_output_projection=True,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    tied = build_transformer(config)
    vocab, d = config.vocab_size, config.d_model
    shapes = [tuple(w.shape) for w in tied.trainable_weights]
    assert shapes.count((vocab, d)) == 1
    assert (d, vocab) not in shapes and (vocab,) not in shapes
    assert not any(vocab in shape for shape in shapes if shape != (vocab, d))
    (embedding,) = [w for w in tied.trainable_weights if tuple(w.shape) == (vocab, d)]
    assert "embedding" in embedding.path
    before = to_numpy(embedding).copy()
    loss = train_one_step(
        tied, {"source_ids": SOURCE, "target_ids": TARGET}, shifted_labels(TARGET)
    )
    assert np.isfinite(loss)
    after = to_numpy(embedding)
    assert np.all(np.isfinite(after))
    assert not np.array_equal(before, after)
    # Token 45 occurs in no input: its row only gets a gradient through the
    # tied pre-softmax projection.
    used = set(SOURCE.ravel()) | set(TARGET.ravel())
    assert 45 not in used
    assert not np.array_equal(before[45], after[45])
    assert np.any(before[list(used)] != after[list(used)])


@pytest.mark.parametrize("tie_output_projection", [False, True])
def test_untied_vocabularies(tie_output_projection):
    config = small_config(
        vocab_size=30,
        target_vocab_size=60,
        share_embeddings=False,
        tie_output_projection=tie_output_projection,
    )
    untied = build_transformer(config)
    source = np.minimum(SOURCE, 29)
    # Target ids beyond the source vocabulary are valid target tokens.
    target = np.where(TARGET > 0, TARGET + 25, 0).astype("int32")
    assert 30 <= target.max() < 60
    logits = predict_logits(untied, source, target)
    assert logits.shape == (B, T, 60)
    assert logits.dtype == np.float32
    assert np.all(np.isfinite(logits))
    d = config.d_model
    shapes = [tuple(w.shape) for w in untied.trainable_weights]
    assert shapes.count((30, d)) == 1
    assert shapes.count((60, d)) == 1
    assert ((d, 60) in shapes) is not tie_output_projection


# --- Forward-pass invariances ------------------------------------------------


def test_logits_shape_dtype_and_finite(model):
    logits = predict_logits(model, SOURCE, TARGET)
    assert logits.shape == (B, T, 50)
    assert logits.dtype == np.float32
    assert np.all(np.isfinite(logits))
    assert model.output.dtype == "float32"


def test_extra_source_padding_does_not_change_logits(model):
    logits = predict_logits(model, SOURCE, TARGET)
    padded = np.pad(SOURCE, ((0, 0), (0, 3)))
    padded_logits = predict_logits(model, padded, TARGET)
    real = TARGET != 0
    np.testing.assert_allclose(padded_logits[real], logits[real], atol=1e-5)


def test_extra_target_padding_does_not_change_logits(model):
    logits = predict_logits(model, SOURCE, TARGET)
    padded = np.pad(TARGET, ((0, 0), (0, 3)))
    padded_logits = predict_logits(model, SOURCE, padded)
    assert padded_logits.shape == (B, T + 3, 50)
    np.testing.assert_allclose(padded_logits[:, :T], logits, atol=1e-5)


@pytest.mark.parametrize("t", [0, 2, 3])
def test_causal_no_leak(model, t):
    logits = predict_logits(model, SOURCE, FULL_TARGET)
    changed = FULL_TARGET.copy()
    changed[:, t + 1 :] = 40 + np.arange(T - t - 1)
    changed_logits = predict_logits(model, SOURCE, changed)
    np.testing.assert_allclose(
        changed_logits[:, : t + 1], logits[:, : t + 1], atol=1e-5
    )
    # The changed tokens themselves do change what follows them.
    assert not np.allclose(changed_logits[:, t + 1 :], logits[:, t + 1 :], atol=1e-3)


def test_source_tokens_reach_the_logits(model):
    logits = predict_logits(model, SOURCE, TARGET)
    changed = SOURCE.copy()
    changed[0, 0] = 44
    changed_logits = predict_logits(model, changed, TARGET)
    assert not np.allclose(changed_logits[0], logits[0], atol=1e-3)
    np.testing.assert_allclose(changed_logits[1:], logits[1:], atol=1e-5)


@pytest.mark.parametrize("source_length,target_length", [(9, 5), (6, 8), (9, 8)])
def test_source_and_target_lengths_differ(model, source_length, target_length):
    # Lengths shared with the padding tests: JAX compiles each shape once.
    rng = np.random.default_rng(source_length + target_length)
    source = rng.integers(1, 50, size=(B, source_length)).astype("int32")
    target = rng.integers(1, 50, size=(B, target_length)).astype("int32")
    logits = predict_logits(model, source, target)
    assert logits.shape == (B, target_length, 50)
    assert np.all(np.isfinite(logits))


def test_fully_padded_rows_give_finite_logits(model):
    source = SOURCE.copy()
    source[2] = 0
    target = TARGET.copy()
    target[1] = 0
    logits = predict_logits(model, source, target)
    assert np.all(np.isfinite(logits))
    # The other rows do not notice.
    reference = predict_logits(model, SOURCE, TARGET)
    np.testing.assert_allclose(logits[0], reference[0], atol=1e-5)


def test_call_equals_encode_then_decode(model):
    logits = predict_logits(model, SOURCE, TARGET)
    memory = model.encode(SOURCE)
    assert tuple(memory.shape) == (B, S, 32)
    decoded = to_numpy(model.decode(TARGET, memory, SOURCE))
    np.testing.assert_allclose(decoded, logits, atol=1e-5)


def test_dropout_only_in_training(model):
    inputs = {"source_ids": SOURCE, "target_ids": TARGET}
    inference = to_numpy(model(inputs, training=False))
    np.testing.assert_array_equal(to_numpy(model(inputs)), inference)
    training = to_numpy(model(inputs, training=True))
    assert np.all(np.isfinite(training))
    assert not np.allclose(training, inference, atol=1e-4)


def test_layers_by_role(model):
    assert [b.name for b in model.encoder_blocks] == [
        "encoder_block_0",
        "encoder_block_1",
    ]
    assert [b.name for b in model.decoder_blocks] == [
        "decoder_block_0",
        "decoder_block_1",
    ]
    names = sorted(i.name for i in keras.tree.flatten(model.inputs))
    assert names == ["source_ids", "target_ids"]
    for tensor in keras.tree.flatten(model.inputs):
        assert tensor.dtype == "int32"
        assert tuple(tensor.shape) == (None, None)


@pytest.mark.parametrize(
    "options",
    [
        {"norm_first": True, "position_encoding": "learned", "attention_window": 3},
        # An imported MarianMT's (OPUS-MT): swish and a logits bias.
        {"activation": "swish", "output_bias": True},
        # A parsing model's word pointer (--word-pointer).
        {"pointer_bracket_ids": (4, 5, 6)},
    ],
)
def test_save_and_load_keras_file(tmp_path, options):
    config = small_config(**options)
    original = build_transformer(config)
    if config.output_bias:  # Not zero, so that it is seen to load.
        bias = original.get_layer("output_bias").bias
        bias.assign(np.linspace(-1.0, 1.0, config.vocab_size, dtype="float32"))
    path = tmp_path / "model.keras"
    original.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, Transformer)
    assert loaded.config == config
    np.testing.assert_array_equal(
        predict_logits(loaded, SOURCE, TARGET), predict_logits(original, SOURCE, TARGET)
    )


# --- Options: restricted attention, learned positions ------------------------


@pytest.mark.parametrize("num_layers", [1, 2])
def test_attention_window_limits_encoder_receptive_field(num_layers):
    window = 3  # r = 3: each position sees itself and one on each side.
    config = small_config(
        num_encoder_layers=num_layers, num_decoder_layers=1, attention_window=window
    )
    windowed = build_transformer(config)
    source = 1 + np.arange(B * S, dtype="int32").reshape(B, S)  # No padding.
    changed = source.copy()
    far = S - 1  # Change the last token of every row.
    changed[:, far] = 45
    encoded = to_numpy(windowed.encode(source))
    encoded_changed = to_numpy(windowed.encode(changed))
    # Position p sees p-1..p+1 in one layer; each layer widens that by one:
    # with 1 layer positions 0..3 cannot see position 5, with 2 layers
    # positions 0..2.
    reach = num_layers * (window // 2)
    for position in range(S):
        same = np.allclose(
            encoded_changed[:, position], encoded[:, position], atol=1e-6
        )
        assert same == (abs(position - far) > reach), position


def test_without_window_every_position_sees_every_token():
    config = small_config(num_encoder_layers=1, num_decoder_layers=1)
    unrestricted = build_transformer(config)
    source = 1 + np.arange(B * S, dtype="int32").reshape(B, S)
    changed = source.copy()
    changed[:, S - 1] = 45
    encoded = to_numpy(unrestricted.encode(source))
    encoded_changed = to_numpy(unrestricted.encode(changed))
    assert not np.allclose(encoded_changed[:, 0], encoded[:, 0], atol=1e-6)


def test_learned_positions_build_and_run():
    config = small_config(position_encoding="learned", max_position=16)
    learned = build_transformer(config)
    logits = predict_logits(learned, SOURCE, TARGET)
    assert logits.shape == (B, T, 50)
    assert np.all(np.isfinite(logits))
    tables = [w for w in learned.trainable_weights if "position_embeddings" in w.path]
    assert len(tables) == 2
    assert all(tuple(w.shape) == (16, config.d_model) for w in tables)
    with pytest.raises(ValueError, match="max_position=16"):
        learned.encode(np.ones((1, 17), "int32"))


# --- Incremental decoding ----------------------------------------------------


def incremental_logits(model, source, target, max_length):
    memory = model.encode(source)
    cross_key_values = model.cross_key_values(memory)
    cache = model.init_decode_cache(source.shape[0], max_length)
    steps = []
    for step in range(target.shape[1]):
        logits, cache = model.decode_step(
            target[:, step : step + 1], step, cache, cross_key_values, source
        )
        steps.append(to_numpy(logits))
    return np.concatenate(steps, axis=1), cache


@pytest.mark.parametrize(
    "overrides",
    [
        None,
        {"norm_first": True},
        {"attention_window": 2},
        {"position_encoding": "learned"},
        {"share_embeddings": False, "tie_output_projection": False},
    ],
)
def test_decode_step_matches_full_decode(model, overrides):
    if overrides is not None:
        model = build_transformer(small_config(**overrides))
    memory = model.encode(SOURCE)
    expected = to_numpy(model.decode(FULL_TARGET, memory, SOURCE))
    logits, cache = incremental_logits(model, SOURCE, FULL_TARGET, T + 2)
    assert logits.shape == (B, T, 50)
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, expected, atol=1e-4)
    assert len(cache) == len(model.decoder_blocks)
    key_cache, value_cache = cache[0]
    assert tuple(key_cache.shape) == (B, 4, T + 2, 8)  # Heads-first.
    assert np.all(to_numpy(value_cache)[:, :, T:] == 0)


def test_decode_cache_structure(model):
    cache = model.init_decode_cache(2, 9)
    assert len(cache) == 2
    for key_cache, value_cache in cache:
        # Heads-first: (B, H, L_max, K).
        assert tuple(key_cache.shape) == tuple(value_cache.shape) == (2, 4, 9, 8)
        assert np.all(to_numpy(key_cache) == 0)
    cross = model.cross_key_values(model.encode(SOURCE))
    assert len(cross) == 2
    assert all(tuple(k.shape) == (B, 4, S, 8) for k, _ in cross)


def test_decode_step_with_a_prompt_chunk(model):
    memory = model.encode(SOURCE)
    expected = to_numpy(model.decode(FULL_TARGET, memory, SOURCE))
    cross = model.cross_key_values(memory)
    cache = model.init_decode_cache(B, T + 2)
    first, cache = model.decode_step(FULL_TARGET[:, :3], 0, cache, cross, SOURCE)
    np.testing.assert_allclose(to_numpy(first), expected[:, :3], atol=1e-4)
    for step in (3, 4):
        # The step may also be a scalar tensor (as in a compiled decode loop).
        logits, cache = model.decode_step(
            FULL_TARGET[:, step : step + 1],
            keras.ops.convert_to_tensor(step, "int32"),
            cache,
            cross,
            SOURCE,
        )
        np.testing.assert_allclose(to_numpy(logits)[:, 0], expected[:, step], atol=1e-4)


@pytest.mark.parametrize(
    "beams", [2, pytest.param(3, marks=pytest.mark.backend_neutral)]
)
def test_decode_step_shares_a_sources_cross_key_values_among_its_beams(model, beams):
    """`beams` hypotheses per source, consecutive rows, reading one copy of
    its cross-attention keys/values: the logits of each row equal those of
    a row with its own copy (beams=1), one position or a chunk at a time."""
    rng = np.random.default_rng(7)
    targets = rng.integers(4, 50, (B * beams, T)).astype("int32")
    targets[:, 0] = 2
    sources = np.repeat(SOURCE, beams, axis=0)
    shared = model.cross_key_values(model.encode(SOURCE))
    assert all(tuple(k.shape) == (B, 4, S, 8) for k, _ in shared)
    copies = model.cross_key_values(model.encode(sources))
    cache_shared = cache_copies = model.init_decode_cache(B * beams, T + 2)
    for start, stop in ((0, 3), (3, 4), (4, T)):
        chunk = targets[:, start:stop]
        got, cache_shared = model.decode_step(
            chunk, start, cache_shared, shared, sources, beams=beams
        )
        want, cache_copies = model.decode_step(
            chunk, start, cache_copies, copies, sources
        )
        assert tuple(got.shape) == (B * beams, stop - start, 50)
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-5)


def test_keras_load_model_after_importing_the_package_alone(tmp_path):
    """A fresh process that only imports the package can load a `.keras`
    file with `keras.saving.load_model` (the classes are registered on
    import; Keras does not import custom packages by itself)."""
    import os
    import subprocess
    import sys

    path = tmp_path / "model.keras"
    build_transformer(small_config()).save(path)
    script = (
        "import sys, keras, keras_transformer\n"
        "model = keras.saving.load_model(sys.argv[1])\n"
        "print(type(model).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "Transformer"


# --- d_k apart from d_model / h (Table 3 row (B)) ----------------------------


def test_key_dim_none_and_d_model_over_h_build_bit_identical_models():
    keras.utils.set_random_seed(11)
    default = build_transformer(small_config())
    keras.utils.set_random_seed(11)
    explicit = build_transformer(small_config(key_dim=8))  # 32 / 4
    assert len(default.weights) == len(explicit.weights)
    for ours, theirs in zip(default.weights, explicit.weights):
        assert ours.path == theirs.path
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))
    np.testing.assert_array_equal(
        predict_logits(default, SOURCE, TARGET),
        predict_logits(explicit, SOURCE, TARGET),
    )


def test_key_dim_parameter_count_is_exact():
    config = small_config(key_dim=2)
    d, h = config.d_model, config.num_heads
    # W_Q and W_K (with biases) shrink from d x d to d x (h * d_k) in each of
    # the encoder's self-attentions and the decoder's self- and
    # cross-attentions; W_V and W_O keep d_v = d / h.
    attentions = config.num_encoder_layers + 2 * config.num_decoder_layers
    change = attentions * 2 * (d + 1) * (h * config.key_dim - d)
    assert build_transformer(config).count_params() == (
        expected_param_count(small_config()) + change
    )


def test_key_dim_save_and_load_keras_file(tmp_path):
    config = small_config(key_dim=5)
    original = build_transformer(config)
    path = tmp_path / "model.keras"
    original.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.config == config
    assert loaded.decoder_blocks[0].cross_attention.key_dim == 5
    np.testing.assert_array_equal(
        predict_logits(loaded, SOURCE, TARGET), predict_logits(original, SOURCE, TARGET)
    )


def test_key_dim_decode_step_matches_full_decode():
    model = build_transformer(small_config(key_dim=5))
    memory = model.encode(SOURCE)
    expected = to_numpy(model.decode(FULL_TARGET, memory, SOURCE))
    logits, cache = incremental_logits(model, SOURCE, FULL_TARGET, T + 2)
    np.testing.assert_allclose(logits, expected, atol=1e-4)
    key_cache, value_cache = cache[0]
    assert tuple(key_cache.shape) == (B, 4, T + 2, 5)
    assert tuple(value_cache.shape) == (B, 4, T + 2, 8)
