"""Token scores and word alignments (`decoding.scoring`, `Translator.generate`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer import build_transformer
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.decoding import scoring
from keras_transformer.decoding.search import length_penalty
from keras_transformer.decoding.translator import Translator
from keras_transformer.run.directory import RunDirectory
from tests.helpers import make_corpus, small_config, to_numpy, training_options


class _WordTokenizer:
    """Each id a word: detokenize joins with spaces (the `words` kind)."""

    def detokenize(self, ids):
        return [" ".join(f"w{i}" for i in row if i > 3) for row in np.asarray(ids)]


class _PieceTokenizer:
    """SentencePiece-like: "_" opens a word."""

    pieces = {4: "_The", 5: "_do", 6: "g", 7: ".", 8: "_"}

    def detokenize(self, ids):
        texts = []
        for row in np.asarray(ids):
            text = "".join(self.pieces.get(int(i), "") for i in row if i > 3)
            texts.append(text.replace("_", " ").lstrip(" ") if text != "_" else " ")
        return texts


def test_pieces_map_to_whitespace_words():
    assert scoring.piece_words(_WordTokenizer(), [4, 5, 6]) == [0, 1, 2]
    # "_The _do g ." is "The dog.": two words, "g" and "." inside "dog.".
    assert scoring.piece_words(_PieceTokenizer(), [4, 5, 6, 7]) == [0, 1, 1, 1]
    assert scoring.piece_words(_WordTokenizer(), []) == []


def test_many_sequences_map_in_one_call_as_each_alone():
    sequences = [[4, 5, 6, 7], [], [5, 6], [8, 4], [4]]
    tokenizer = _PieceTokenizer()
    calls = []
    detokenize = tokenizer.detokenize
    tokenizer.detokenize = lambda ids: calls.append(1) or detokenize(ids)
    together = scoring.pieces_words(tokenizer, sequences)
    assert len(calls) == 1
    assert together == [scoring.piece_words(_PieceTokenizer(), s) for s in sequences]
    assert together[3] == [0, 0]  # A lone "_" opens the word that follows.


def test_a_word_is_aligned_to_the_source_word_it_attends_to_most():
    # Target pieces: word 0 = piece 0; word 1 = pieces 1 and 2. Source
    # pieces: word 0 = pieces 0 and 1, word 1 = piece 2.
    attention = np.array(
        [
            [0.3, 0.3, 0.4],  # word 0 sums 0.6 on source word 0 -> 0-0
            [0.1, 0.1, 0.8],
            [0.2, 0.2, 0.6],  # word 1: mean (0.3, 0.7) -> 1-1
            [1.0, 0.0, 0.0],  # EOS's row: not aligned
        ]
    )
    pairs = scoring.word_alignment(attention, [0, 0, 1], [0, 1, 1])
    assert pairs == ["0-0", "1-1"]
    assert scoring.word_alignment(attention, [], [0]) == []


@pytest.mark.parametrize("layer, expected", [(None, 5), (-2, 4), (0, 0), (-6, 0)])
def test_the_alignment_layer_defaults_to_the_last(layer, expected):
    assert scoring.alignment_layer(6, layer) == expected
    assert scoring.alignment_layer(1) == 0


def test_an_alignment_layer_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"alignment_layer must be in \[-2, 1\]"):
        scoring.alignment_layer(2, 2)


# --- Through Translator.generate ---------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


@pytest.fixture(scope="module")
def model(tokenizer):
    """Untrained: the properties below hold for any weights."""
    keras.utils.set_random_seed(3)
    return build_transformer(small_config(vocab_size=tokenizer.vocab_size))


TEXTS = ["the dog sleeps.", "", "the old man likes the garden."]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_token_scores_sum_to_the_search_score(model, tokenizer, beam_size):
    translator = Translator(model, tokenizer, beam_size=beam_size)
    records = translator.generate(TEXTS)
    assert [r["translation"] for r in records] == translator.translate(TEXTS)
    assert records[1] == {
        "translation": "",
        "tokens": [],
        "token_scores": [],
        "alignment": [],
        "score": 0.0,
        "normalization": records[0]["normalization"],
    }
    for record in (records[0], records[2]):
        assert len(record["token_scores"]) == len(record["tokens"]) > 0
        total = record["score"]
        if beam_size > 1:  # The beam ranks by log P / lp(|Y|), EOS counted.
            total *= float(to_numpy(length_penalty(len(record["tokens"]), 0.6)))
            assert "((5 + length) / 6) ** 0.6" in record["normalization"]
        else:
            assert record["normalization"] == "log-probability (none)"
        assert sum(record["token_scores"]) == pytest.approx(total, abs=1e-4)
        assert all(score <= 0 for score in record["token_scores"])
        source_words = 4 if record is records[0] else 6
        for pair in record["alignment"]:
            i, j = map(int, pair.split("-"))
            assert 0 <= i < source_words
            assert 0 <= j < len(record["translation"].split())


def test_n_best_lists_the_beam(model, tokenizer):
    translator = Translator(model, tokenizer, beam_size=4)
    (record,) = translator.generate(TEXTS[:1], n_best=True)
    (expected,) = translator.nbest(TEXTS[:1])
    assert [(h["translation"], h["score"]) for h in record["n_best"]] == expected
    assert record["n_best"][0]["translation"] == record["translation"]


# --- On a model trained to copy -------------------------------------------------

WORDS = [f"tok{i}" for i in range(12)]
# One layer a side and batches of 1024 tokens: 300 updates copy 14 to 16 of
# the 16 test sentences on every backend (two layers a side, which learn
# slower, copied 16 after 600 updates of 2048 tokens and 9 to 15 after 400 of
# 1024, at four times the cost of these). The alignment is the one decoder
# layer's, the last (the default). No dropout or label smoothing, which only
# slow a copy.
COPY_STEPS = 300
COPY_TOKENS_PER_BATCH = 1024
COPY_MODEL = dict(
    d_model=64,
    d_ff=128,
    num_heads=4,
    num_encoder_layers=1,
    num_decoder_layers=1,
    warmup_steps=100,
    dropout_rate=0.0,
    label_smoothing=0.0,
)


def _copy_corpus(directory, count: int, seed: int) -> tuple[str, str]:
    """Random sentences of 3-6 distinct words; the target is the source."""
    rng = np.random.default_rng(seed)
    lines = [
        " ".join(rng.choice(WORDS, size=rng.integers(3, 7), replace=False))
        for _ in range(count)
    ]
    text = "".join(f"{line}\n" for line in lines)
    source, target = directory / f"copy{seed}.src", directory / f"copy{seed}.tgt"
    source.write_text(text, encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    return str(source), str(target)


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A model trained to copy its input, word for word. No validation
    split: these updates are dozens of short epochs, each of which would be
    validated, and nothing here reads the validation loss."""
    from keras_transformer.training.job import train

    directory = tmp_path_factory.mktemp("copy")
    files = {"train": _copy_corpus(directory, 600, 1)}
    options = training_options(
        directory / "run",
        files,
        tokenizer="words",
        vocab_size=len(WORDS) + 4,
        overrides=COPY_MODEL,
        tokens_per_batch=COPY_TOKENS_PER_BATCH,
        max_steps=COPY_STEPS,
        checkpoint_every=COPY_STEPS,
    )
    train(options)
    return RunDirectory(directory / "run").open_for_inference()


# Backend-neutral: the alignment is read off the cross-attention in NumPy
# (`decoding.scoring`), the same code on every backend; the attention and the
# details pass it reads are checked per backend (tests/layers/
# test_multi_head_attention.py, test_token_scores_sum_to_the_search_score and
# test_n_best_lists_the_beam here, test_details_are_what_translate_writes_as_jsonl
# in tests/serving/test_server_keras.py). Training the copy model is most of
# its cost.
@pytest.mark.slow
@pytest.mark.backend_neutral
def test_a_copy_model_aligns_each_word_with_itself(copy_run):
    translator = Translator(copy_run.model, copy_run.tokenizer, beam_size=1)
    rng = np.random.default_rng(7)
    texts = [
        " ".join(rng.choice(WORDS, size=rng.integers(3, 7), replace=False))
        for _ in range(16)
    ]
    records = translator.generate(texts)
    copied = [r for r, t in zip(records, texts) if r["translation"] == t]
    assert len(copied) >= 12, [r["translation"] for r in records]
    for record in copied:  # One pair per target word, in order, in range.
        words = len(record["translation"].split())
        targets = [int(pair.split("-")[1]) for pair in record["alignment"]]
        assert targets == list(range(words))
    pairs = [pair.split("-") for r in copied for pair in r["alignment"]]
    diagonal = [i for i, j in pairs if i == j]
    assert len(diagonal) >= 0.9 * len(pairs), pairs
