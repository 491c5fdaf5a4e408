"""`Translator`: strings in, strings out, in order, with batch completion
and rows dropped as they finish;
attention weights for plots. A real tiny SentencePiece tokenizer and an
untrained tiny model: the translations are junk, so the tests check
structure, order and determinism, not quality."""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.config import PAD_ID
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.decoding.batching import pad_batch
from keras_transformer.decoding.translator import Translator
from tests.helpers import make_corpus, no_eos_model

MAX_EXTRA = 3
# Token lengths 4, 7 and 2: every output has its own length (see `model`).
SENTENCES = ["the dog sleeps.", "the old man likes the garden.", "water."]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


@pytest.fixture(scope="module")
def model(tokenizer):
    """Untrained, but never emits EOS (nor PAD/UNK/BOS): each output is
    exactly source length + MAX_EXTRA tokens, which pins outputs to inputs."""
    return no_eos_model(tokenizer.vocab_size)


@pytest.fixture(scope="module")
def translators(model, tokenizer):
    """translators(batch_size, drop_finished=True) -> greedy Translator, one
    per setting (each compiles its search once)."""
    made = {}

    def get(batch_size, drop_finished=True):
        key = (batch_size, drop_finished)
        if key not in made:
            made[key] = Translator(
                model,
                tokenizer,
                beam_size=1,
                max_extra_length=MAX_EXTRA,
                batch_size=batch_size,
                drop_finished=drop_finished,
            )
        return made[key]

    return get


def test_outputs_follow_input_order_with_blank_lines(translators, tokenizer):
    translator = translators(2)
    texts = [SENTENCES[0], "", SENTENCES[1], "   ", SENTENCES[2]]
    ids = translator.translate_ids(texts)
    lengths = [len(tokenizer.encode([t])[0]) for t in SENTENCES]
    assert len(set(lengths)) == len(lengths)  # Distinct: the check is sharp.
    expected = [lengths[0] + MAX_EXTRA, 0, lengths[1] + MAX_EXTRA, 0]
    assert [len(x) for x in ids] == expected + [lengths[2] + MAX_EXTRA]
    assert all(PAD_ID not in x for x in ids)

    outputs = translator(texts)
    assert isinstance(outputs, list) and len(outputs) == len(texts)
    assert all(isinstance(o, str) for o in outputs)
    assert outputs[1] == "" and outputs[3] == ""
    assert all(outputs[i] for i in (0, 2, 4))
    assert outputs == [tokenizer.detokenize([x])[0] if len(x) else "" for x in ids]
    # Each sentence alone gives the same as within the batch, and the
    # reversed input gives the reversed output.
    for text, output in zip(texts, outputs):
        assert translator([text]) == [output]
    assert translator(texts[::-1]) == outputs[::-1]


def test_translate_is_deterministic_and_handles_no_input(translators):
    translator = translators(2)
    assert translator(SENTENCES) == translator(SENTENCES)
    assert translator([]) == []
    assert translator(["", "  "]) == ["", ""]


def test_batch_completion_does_not_change_results(translators):
    """3 sentences: batches of 2 then 1, one batch of 8 (five empty rows;
    rows leave it as they finish), or as one program per batch (2 rows,
    then 1) give the same translations."""
    small, large = translators(2), translators(8)
    whole = translators(2, drop_finished=False)
    expected = whole.translate_ids(SENTENCES)
    for translator in (small, large):
        for a, b in zip(translator.translate_ids(SENTENCES), expected):
            np.testing.assert_array_equal(a, b)
    assert small(SENTENCES) == large(SENTENCES) == whole(SENTENCES)


def _check_attention(weights, tokenizer, model, source, target_ids):
    heads = model.config.num_heads
    source_length = len(tokenizer.encode([source])[0])
    target_length = 1 + len(target_ids)  # BOS + target.
    expected = {
        "encoder_self_attention": (heads, source_length, source_length),
        "decoder_self_attention": (heads, target_length, target_length),
        "cross_attention": (heads, target_length, source_length),
    }
    layers = {
        "encoder_self_attention": model.config.num_encoder_layers,
        "decoder_self_attention": model.config.num_decoder_layers,
        "cross_attention": model.config.num_decoder_layers,
    }
    for name, shape in expected.items():
        assert len(weights[name]) == layers[name], name
        for layer in weights[name]:
            assert isinstance(layer, np.ndarray)
            assert layer.shape == shape, name
            assert np.all(layer >= 0)
            np.testing.assert_allclose(layer.sum(-1), 1.0, atol=1e-5, err_msg=name)
    # Causal: no decoder position attends to a later one.
    for layer in weights["decoder_self_attention"]:
        assert np.allclose(np.triu(layer, k=1), 0.0, atol=1e-6)
    assert len(weights["source_tokens"]) == source_length
    assert weights["target_tokens"][0] == "<s>"
    assert len(weights["target_tokens"]) == target_length


def test_attention_weights_for_given_target(translators, tokenizer, model):
    # Same source and target lengths as the test below (shared shapes).
    source, target = SENTENCES[0], SENTENCES[1]
    weights = translators(2).attention_weights(source, target)
    _check_attention(weights, tokenizer, model, source, tokenizer.encode([target])[0])
    assert weights["source_tokens"] == [
        tokenizer.id_to_piece(i) for i in tokenizer.encode([source])[0]
    ]


def test_attention_weights_translate_when_no_target(translators, tokenizer, model):
    translator = translators(2)
    source = SENTENCES[0]
    weights = translator.attention_weights(source)
    translation = translator([source])[0]
    target_ids = tokenizer.encode([translation])[0]
    _check_attention(weights, tokenizer, model, source, target_ids)


# --- pad_batch ------------------------------------------------------------------


@pytest.mark.parametrize(
    "lengths, width",
    [([1, 3], 8), ([8], 8), ([9, 2], 16), ([16], 16), ([17], 24), ([0, 0], 8)],
)
def test_pad_batch_rounds_up_to_multiple_of_8(lengths, width):
    sequences = [list(range(4, 4 + n)) for n in lengths]
    batch = pad_batch(sequences)
    assert batch.dtype == np.int32
    assert batch.shape == (len(lengths), width)
    for row, ids in zip(batch, sequences, strict=True):
        assert list(row[: len(ids)]) == ids
        assert not row[len(ids) :].any()


def test_pad_batch_explicit_length():
    batch = pad_batch([[5, 6], [7]], length=5)
    np.testing.assert_array_equal(batch, [[5, 6, 0, 0, 0], [7, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="3 tokens exceeds length=2"):
        pad_batch([[5, 6, 7], [8]], length=2)


def test_nbest_gives_every_hypothesis_best_first(model, tokenizer):
    translator = Translator(
        model, tokenizer, beam_size=3, max_extra_length=MAX_EXTRA, batch_size=4
    )
    texts = [SENTENCES[0], "", SENTENCES[2]]
    nbest = translator.nbest(texts)
    assert [hypotheses[0][0] for hypotheses in nbest] == translator.translate(texts)
    assert nbest[1] == [("", 0.0)]
    searched = translator.search(texts)
    for index in (0, 2):
        assert len(nbest[index]) == 3
        scores = [score for _, score in nbest[index]]
        assert scores == sorted(scores, reverse=True)
        np.testing.assert_allclose(scores, searched[index][1], rtol=1e-6)
        ids = searched[index][0]
        assert len({tuple(row) for row in ids.tolist()}) == 3  # Distinct.
