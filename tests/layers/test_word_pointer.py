"""WordPointer: the parsing decoder is fed the encoder state of its word.

The word index is checked against counting by hand, the cached step against
the whole prefix, the beams' shared states against repeated rows, and the
point of it all on a copy-order toy: a tag per word, decided by the word
alone. With the pointer a one-layer model writes every tag right after 100
updates; the same model without it has not yet learned where it is.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer import build_transformer
from keras_transformer.config import BOS_ID, EOS_ID
from keras_transformer.decoding.generator import SequenceGenerator
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.layers import WordPointer
from keras_transformer.training.model_setup import paper_compile_arguments
from tests.helpers import assert_layer_contract, small_config, to_numpy

OPEN, CLOSE = 4, 5  # The toy's brackets, (S and )S.
FIRST_WORD, WORDS = 6, 16
FIRST_TAG, TAGS = FIRST_WORD + WORDS, 4


def test_layer_contract(tmp_path):
    rng = np.random.default_rng(0)
    memory = rng.normal(size=(2, 5, 8)).astype("float32")
    source = np.array([[9, 9, 9, 0, 0], [9, 9, 9, 9, 9]], "int32")
    index = np.array([[0, 1, 1, 3], [0, 2, 4, 5]], "int32")
    assert_layer_contract(
        WordPointer,
        {"bracket_ids": [OPEN, CLOSE], "model_dim": 8},
        [memory, source, index],
        tmp_path=tmp_path,
    )


def test_the_word_index_counts_the_tags_written_so_far():
    pointer = WordPointer([OPEN, CLOSE], model_dim=4)
    # BOS (S t (S t t )S )S EOS pad: brackets, BOS, EOS and pad do not move.
    target = np.array([[BOS_ID, OPEN, 30, OPEN, 31, 30, CLOSE, CLOSE, EOS_ID, 0]])
    expected = [[0, 0, 1, 1, 2, 3, 3, 3, 3, 3]]
    np.testing.assert_array_equal(to_numpy(pointer.word_index(target)), expected)


def test_each_position_gets_its_words_state_and_zeros_after_the_last():
    pointer = WordPointer([OPEN, CLOSE], model_dim=3)
    memory = np.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3)
    source = np.array([[7, 7, 7, 0], [7, 7, 7, 7]], "int32")
    index = np.array([[0, 2, 3, 5], [1, 3, 4, 0]], "int32")
    states = to_numpy(pointer(memory, source, index))
    projection = to_numpy(pointer.projection.kernel)
    projected = memory @ projection
    expected = np.zeros((2, 4, 3), "float32")
    for row, words in enumerate((3, 4)):
        for position, word in enumerate(index[row]):
            if word < words:
                expected[row, position] = projected[row, word]
    np.testing.assert_allclose(states, expected, atol=1e-5)


def test_the_cached_step_index_is_the_whole_prefixs():
    pointer = WordPointer([OPEN, CLOSE], model_dim=4)
    target = np.array([[BOS_ID, OPEN, 30, 31, CLOSE, EOS_ID], [BOS_ID, 30] * 3])
    cache = pointer.empty_cache(2, 6)
    steps = []
    for step in range(6):
        index, cache = pointer.step_index(cache, target[:, step : step + 1], step)
        steps.append(to_numpy(index)[:, 0])
    whole = to_numpy(pointer.word_index(target))
    np.testing.assert_array_equal(np.stack(steps, axis=1), whole)
    # Two new tokens at once (a forced prefix) count as the prefix does.
    index, _ = pointer.step_index(pointer.empty_cache(2, 6), target[:, :2], 0)
    np.testing.assert_array_equal(to_numpy(index), whole[:, :2])


def test_beams_share_their_sources_states():
    pointer = WordPointer([OPEN, CLOSE], model_dim=4)
    rng = np.random.default_rng(1)
    memory = rng.normal(size=(2, 5, 4)).astype("float32")
    source = np.array([[9, 9, 9, 0, 0], [9] * 5], "int32")
    states = pointer.project(memory)
    index = rng.integers(0, 6, size=(6, 2)).astype("int32")  # 3 beams each
    shared = pointer.gather(states, np.repeat(source, 3, 0), index, beams=3)
    repeated = pointer.gather(
        ops.repeat(states, 3, axis=0), np.repeat(source, 3, 0), index
    )
    np.testing.assert_allclose(to_numpy(shared), to_numpy(repeated), atol=1e-6)


def _pointer_config(pointer: bool):
    return small_config(
        vocab_size=FIRST_TAG + TAGS,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dropout_rate=0.0,
        label_smoothing=0.0,
        pointer_bracket_ids=(OPEN, CLOSE) if pointer else None,
    )


def test_a_pointer_model_decodes_the_same_cached_and_whole():
    model = build_transformer(_pointer_config(True))
    source, target = _toy_pairs(3, seed=3)
    target = target[:, :-1]
    whole = to_numpy(model({"source_ids": source, "target_ids": target}))
    key_values = model.cross_key_values(model.encode(source))
    cache = model.init_decode_cache(3, target.shape[1])
    for step in range(target.shape[1]):
        logits, cache = model.decode_step(
            target[:, step : step + 1], step, cache, key_values, source
        )
        real = target[:, step] > 0  # Padding is masked in the whole pass only.
        np.testing.assert_allclose(
            to_numpy(logits)[real, 0], whole[real, step], atol=1e-4, err_msg=f"{step}"
        )


def _toy_pairs(count: int, seed: int):
    """Sentences of 3-12 words; the target tags each word with its id
    modulo TAGS, inside one bracket: BOS (S t_1 .. t_n )S EOS."""
    rng = np.random.default_rng(seed)
    source = np.zeros((count, 12), "int32")
    target = np.zeros((count, 16), "int32")
    for row in range(count):
        words = rng.integers(0, WORDS, rng.integers(3, 13))
        source[row, : len(words)] = FIRST_WORD + words
        tokens = [BOS_ID, OPEN, *(FIRST_TAG + words % TAGS), CLOSE, EOS_ID]
        target[row, : len(tokens)] = tokens
    return source, target


def _exact_share(pointer: bool, updates: int = 100) -> float:
    keras.utils.set_random_seed(0)
    config = _pointer_config(pointer)
    model = build_transformer(config)
    compile_arguments = paper_compile_arguments(config)
    model.compile(**{**compile_arguments, "optimizer": keras.optimizers.Adam(3e-3)})
    source, target = _toy_pairs(64 * updates, seed=1)
    inputs = {"source_ids": source, "target_ids": target[:, :-1]}
    model.fit(inputs, target[:, 1:], batch_size=64, epochs=1, verbose=0)
    source, target = _toy_pairs(200, seed=2)
    settings = SearchSettings(beam_size=1, alpha=0.0, max_extra_length=4)
    outputs = to_numpy(SequenceGenerator(model, settings)(source)[0])[:, 0]
    exact = [
        list(output[: np.count_nonzero(gold) - 1]) == list(gold[1:][gold[1:] > 0])
        for output, gold in zip(outputs, target)
    ]
    return float(np.mean(exact))


# In the torch suite only (the fastest): the backends compute a pointer
# model's logits alike and train alike (tests/test_backend_parity.py).
@pytest.mark.slow
@pytest.mark.backend_neutral
def test_the_pointer_makes_a_copy_order_toy_exact():
    """The decoder must write the tag of word k at position k + 1: with the
    pointer the word is its input; without it, cross-attention has to learn
    to find word k by position first, which 100 updates do not teach."""
    with_pointer, without = _exact_share(True), _exact_share(False)
    assert with_pointer == 1.0
    assert without < 0.5, without
