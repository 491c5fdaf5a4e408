"""Joint subword tokenizers: SentencePiece BPE and WordPiece."""

from __future__ import annotations

import collections
import json
import random

import numpy as np
import pytest

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data import tokenizer as tokenizer_module
from keras_transformer.data.text_files import DataError, PairBlock
from keras_transformer.data.tokenizer import (
    LEARNED_KINDS,
    NORMALIZATIONS,
    RESERVED_TOKENS,
    TOKENIZER_KINDS,
    SentencePieceTokenizer,
    SentenceSample,
    WordPieceTokenizer,
    learn_tokenizer,
    load_tokenizer,
    train_tokenizer,
)

pytestmark = pytest.mark.backend_neutral

ENGLISH = (
    ["the man", "a woman", "the little girl", "two dogs", "my brother", "the cat"],
    ["sees", "likes", "walks to", "finds", "paints"],
    ["the house", "a green tree", "the old street", "the river", "a red car"],
)
GERMAN = (
    ["der Mann", "eine Frau", "das kleine Mädchen", "zwei Hunde", "die Katze"],
    ["sieht", "mag", "geht zur", "findet", "malt"],
    ["das Haus", "einen grünen Baum", "die alte Straße", "den Fluss", "ein Auto"],
)


def make_texts(count=300, seed=0):
    """Simple English and German sentences (alternating)."""
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        parts = ENGLISH if i % 2 == 0 else GERMAN
        words = " ".join(rng.choice(p) for p in parts)
        texts.append(words + (" ." if i % 3 else ""))
    return texts


TEXTS = make_texts()
# SentencePiece's byte fallback needs 4 reserved + 256 byte pieces + one per
# distinct character (35 in TEXTS): 295 at least.
VOCAB_SIZE = {"sentencepiece": 400, "wordpiece": 120}
SAMPLES = [
    "the little girl finds a red car .",
    "das kleine Mädchen malt einen grünen Baum .",
    "two dogs",
]


@pytest.fixture(scope="module")
def sentencepiece():
    return train_tokenizer(TEXTS, VOCAB_SIZE["sentencepiece"], kind="sentencepiece")


@pytest.fixture(scope="module")
def wordpiece():
    return train_tokenizer(TEXTS, VOCAB_SIZE["wordpiece"], kind="wordpiece")


def normalised(text):
    return " ".join(text.split())


# --- shared interface ----------------------------------------------------------


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_tokenize_returns_padded_int32_and_lengths(kind, request):
    tok = request.getfixturevalue(kind)
    assert tok.kind == kind
    ids, lengths = tok.tokenize(SAMPLES)
    assert ids.dtype == np.int32 and lengths.dtype == np.int32
    assert ids.shape == (len(SAMPLES), lengths.max())
    encoded = tok.encode(SAMPLES)
    np.testing.assert_array_equal(lengths, [len(e) for e in encoded])
    for row, ids_row, length in zip(encoded, ids, lengths, strict=True):
        assert list(ids_row[:length]) == row
        assert not ids_row[length:].any()
        # Real tokens: no pad, no BOS / EOS; known text: no UNK.
        assert all(i >= 4 for i in row)
        assert all(i < tok.vocab_size for i in row)
    assert lengths.min() < lengths.max()  # Padding really happened.


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_tokenize_add_eos(kind, request):
    tok = request.getfixturevalue(kind)
    ids, lengths = tok.tokenize(SAMPLES, add_eos=True)
    plain, plain_lengths = tok.tokenize(SAMPLES)
    np.testing.assert_array_equal(lengths, plain_lengths + 1)
    for row, n in zip(ids, lengths, strict=True):
        assert row[n - 1] == EOS_ID


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_empty_batch_and_empty_text(kind, request):
    tok = request.getfixturevalue(kind)
    ids, lengths = tok.tokenize([])
    assert ids.shape == (0, 0) and lengths.shape == (0,)
    ids, lengths = tok.tokenize(["", "two dogs"])
    assert lengths[0] == 0 and lengths[1] > 0
    assert not ids[0].any()
    assert tok.detokenize(ids)[0] == ""


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_detokenize_round_trips(kind, request):
    tok = request.getfixturevalue(kind)
    texts = SAMPLES + ["  the   man \t sees  the river "]
    ids, _ = tok.tokenize(texts)
    decoded = tok.detokenize(ids)
    assert isinstance(decoded[0], str)
    # WordPiece and words join tokens with single spaces; SentencePiece is
    # lossless.
    if kind != "sentencepiece":
        assert decoded == [normalised(t) for t in texts]
    else:
        assert decoded == texts


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_detokenize_stops_at_eos_and_ignores_pad_and_bos(kind, request):
    tok = request.getfixturevalue(kind)
    first = tok.encode(["two dogs"])[0]
    second = tok.encode(["the river"])[0]
    row = [BOS_ID, *first, PAD_ID, EOS_ID, *second]
    other = [BOS_ID, PAD_ID, *second, PAD_ID, PAD_ID]
    width = max(len(row), len(other))
    batch = np.zeros((2, width), np.int32)
    batch[0, : len(row)] = row
    batch[1, : len(other)] = other
    assert tok.detokenize(batch) == ["two dogs", "the river"]
    assert tok.detokenize(np.array([[EOS_ID, *first]])) == [""]


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_save_and_load_round_trip(kind, request, tmp_path):
    tok = request.getfixturevalue(kind)
    tok.save(tmp_path / "tokenizer")
    meta = json.loads((tmp_path / "tokenizer" / "tokenizer.json").read_text())
    assert meta["kind"] == kind
    assert meta["vocab_size"] == tok.vocab_size
    loaded = load_tokenizer(tmp_path / "tokenizer")
    assert type(loaded) is type(tok)
    assert loaded.vocab_size == tok.vocab_size
    texts = TEXTS[:20] + SAMPLES
    np.testing.assert_array_equal(loaded.tokenize(texts)[0], tok.tokenize(texts)[0])
    ids, _ = tok.tokenize(texts)
    assert loaded.detokenize(ids) == tok.detokenize(ids)


def test_load_missing_or_unknown(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"kind": "bogus"}))
    with pytest.raises(ValueError, match="bogus"):
        load_tokenizer(tmp_path)


def test_a_save_stopped_before_its_last_file_leaves_no_tokenizer_json(
    sentencepiece, tmp_path, monkeypatch
):
    # tokenizer.json marks a whole tokenizer: written last, so a save that
    # stops on the model file leaves none, and a resumed run learns the
    # tokenizer again instead of failing on the missing file.
    monkeypatch.setattr(sentencepiece, "model_proto", None)  # Its write fails.
    with pytest.raises(TypeError):
        sentencepiece.save(tmp_path / "tokenizer")
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == []


def test_truncated_sentencepiece_model_names_the_file(sentencepiece, tmp_path):
    sentencepiece.save(tmp_path)
    path = tmp_path / "sentencepiece.model"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=f"{path}: not a readable SentencePiece"):
        load_tokenizer(tmp_path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=f"{path} is empty"):
        load_tokenizer(tmp_path)


def test_unreadable_tokenizer_json_names_the_file(sentencepiece, tmp_path):
    sentencepiece.save(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"kind": "senten')
    with pytest.raises(ValueError, match="tokenizer.json: unreadable"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_training_is_deterministic(kind, request):
    tok = request.getfixturevalue(kind)
    again = train_tokenizer(TEXTS, VOCAB_SIZE[kind], kind=kind)
    assert again.vocab_size == tok.vocab_size
    texts = TEXTS[:50] + SAMPLES
    np.testing.assert_array_equal(again.tokenize(texts)[0], tok.tokenize(texts)[0])


@pytest.mark.parametrize("texts", [[], [""], ["  ", "\t\n"]])
def test_empty_text_raises(texts):
    with pytest.raises(ValueError, match="empty"):
        train_tokenizer(texts, 50)


def test_unknown_kind_lists_kinds():
    with pytest.raises(ValueError, match="bpe") as info:
        train_tokenizer(TEXTS, 50, kind="bpe")
    for kind in LEARNED_KINDS:
        assert kind in str(info.value)
    with pytest.raises(ValueError, match="imported with a MarianMT checkpoint"):
        train_tokenizer(TEXTS, 50, kind="marian")


def test_sample_size_draws_a_seeded_sample(monkeypatch):
    seen = []

    def spy(cls, texts, vocab_size, **options):
        seen.append(list(texts))
        return vocab_size

    monkeypatch.setattr(SentencePieceTokenizer, "train", classmethod(spy))
    train_tokenizer(TEXTS, 80, sample_size=100, seed=3)
    train_tokenizer(TEXTS, 80, sample_size=100, seed=3)
    train_tokenizer(TEXTS, 80, sample_size=100, seed=4)
    train_tokenizer(TEXTS[:50], 80, sample_size=100, seed=3)
    assert [len(s) for s in seen] == [100, 100, 100, 50]
    assert seen[0] == seen[1] != seen[2]
    assert set(seen[0]) <= set(TEXTS)
    assert seen[3] == TEXTS[:50]  # Small corpora are used whole.


def test_sample_size_smaller_than_corpus_trains(sentencepiece):
    tok = train_tokenizer(TEXTS, 350, kind="sentencepiece", sample_size=150, seed=1)
    assert tok.vocab_size == 350
    ids, _ = tok.tokenize(SAMPLES)
    assert tok.detokenize(ids) == SAMPLES


# --- SentencePiece --------------------------------------------------------------


def test_sentencepiece_reserved_ids(sentencepiece):
    tok = sentencepiece
    assert tok.vocab_size == VOCAB_SIZE["sentencepiece"]
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    processor = tok._processor
    assert processor.pad_id() == PAD_ID
    assert processor.unk_id() == UNK_ID
    assert processor.bos_id() == BOS_ID
    assert processor.eos_id() == EOS_ID


def test_sentencepiece_unknown_character_is_bytes_not_unk(sentencepiece):
    ids = sentencepiece.encode(["the 猫"])[0]
    assert UNK_ID not in ids
    pieces = [sentencepiece.id_to_piece(i) for i in ids]
    assert pieces[-3:] == ["<0xE7>", "<0x8C>", "<0xAB>"]  # UTF-8 of 猫
    without = train_tokenizer(TEXTS, 120, byte_fallback=False)
    assert UNK_ID in without.encode(["the 猫"])[0]


def test_sentencepiece_rejects_a_model_with_other_reserved_ids():
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS),
        model_writer=model,
        vocab_size=60,
        model_type="bpe",
        minloglevel=2,
    )  # Defaults: unk 0, bos 1, eos 2, no pad.
    with pytest.raises(ValueError, match="reserved ids"):
        SentencePieceTokenizer(model.getvalue())


UNICODE_TEXTS = [
    "Café 日本 😀",
    "e\u0301 vs \u00e9",  # combining acute accent, then precomposed é
    "\u201cquoted\u201d and \u2018single\u2019 \u201eGänsefüßchen\u201c",
    "a\tb\t\tc",
    "two  spaces   three",
    "  leading and trailing  ",
    " ",
    "\t",
    "line\nbreak\r\n",
    "nul\x00 and bell\x07",
    "\u00a0no-break\u202fspace \u200bzero width \ufeffbom",
    "\ufb01 ligature \u2460 \uff26\uff55\uff4c\uff4c width",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 family, \U0001f44d\U0001f3fd",
    "Ελληνικά, русский, עברית, العربية, हिन्दी, 한국어",
    "<unk> <s> </s> <pad> <0x41>",
    "\ufffd replacement",
    "Z\u0308\u0336alg\u0301o",
    "",
]


def test_sentencepiece_round_trips_arbitrary_unicode(sentencepiece):
    # TEXTS is plain ASCII/German: nearly every character here is unseen.
    ids, _ = sentencepiece.tokenize(UNICODE_TEXTS)
    assert sentencepiece.detokenize(ids) == UNICODE_TEXTS
    for text, row in zip(UNICODE_TEXTS, sentencepiece.encode(UNICODE_TEXTS)):
        assert UNK_ID not in row
        padded = np.array([row + [PAD_ID] * 3], np.int32)
        assert sentencepiece.detokenize(padded) == [text]


def test_sentencepiece_meta_symbol_comes_back_as_a_space(sentencepiece):
    # U+2581 is SentencePiece's space symbol: the one documented exception.
    ids, _ = sentencepiece.tokenize(["a\u2581b", "\u2581"])
    assert sentencepiece.detokenize(ids) == ["a b", " "]


def test_sentencepiece_options_are_recorded(sentencepiece, tmp_path):
    assert sentencepiece.normalization == "identity"
    assert sentencepiece.byte_fallback is True
    assert sentencepiece.remove_extra_whitespaces is False
    sentencepiece.save(tmp_path)
    meta = json.loads((tmp_path / "tokenizer.json").read_text())
    assert meta["normalization"] == "identity" and meta["byte_fallback"] is True


@pytest.mark.parametrize(
    ("normalization", "expected"),
    [
        ("identity", ["e\u0301 \uff26\ufb01", "a\tb  c"]),
        ("nfkc", ["\u00e9 Ffi", "a\tb  c"]),
        ("nmt_nfkc", ["\u00e9 Ffi", "a b  c"]),
    ],
)
def test_sentencepiece_normalization_choices(normalization, expected):
    assert normalization in NORMALIZATIONS
    tok = train_tokenizer(TEXTS, 350, normalization=normalization)
    assert tok.normalization == normalization
    ids, _ = tok.tokenize(["e\u0301 \uff26\ufb01", "a\tb  c"])
    assert tok.detokenize(ids) == expected


def test_unknown_normalization_lists_choices():
    with pytest.raises(ValueError, match="normalization='nfc'") as info:
        train_tokenizer(TEXTS, 350, normalization="nfc")
    for name in NORMALIZATIONS:
        assert name in str(info.value)


def test_sentencepiece_vocab_size_too_small_gives_the_minimum():
    minimum = len(RESERVED_TOKENS) + 256 + len(set("".join(TEXTS)))
    with pytest.raises(ValueError) as info:
        train_tokenizer(TEXTS, 120)
    message = str(info.value)
    assert "vocab_size=120" in message and f"at least {minimum}" in message
    assert "256 byte pieces" in message
    assert train_tokenizer(TEXTS, minimum).vocab_size == minimum
    # Without byte fallback only the reserved ids and the characters count.
    with pytest.raises(ValueError, match=f"at least {minimum - 256} "):
        train_tokenizer(TEXTS, 30, byte_fallback=False)


def test_sentencepiece_vocab_size_too_large_gives_the_maximum():
    with pytest.raises(ValueError, match=r"vocab_size=5000 is too large.*<= \d+"):
        train_tokenizer(TEXTS[:20], 5000)


def _train_like_before_byte_fallback(texts, vocab_size):
    """A model as the tokenizer trained it before: SentencePiece defaults."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="bpe",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        character_coverage=1.0,
        input_sentence_size=0,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def test_tokenizer_saved_before_byte_fallback_loads_and_behaves_as_before(tmp_path):
    (tmp_path / "sentencepiece.model").write_bytes(
        _train_like_before_byte_fallback(TEXTS, 120)
    )
    old_meta = {"kind": "sentencepiece", "vocab_size": 120}
    old_meta["model_file"] = "sentencepiece.model"
    (tmp_path / "tokenizer.json").write_text(json.dumps(old_meta, indent=2) + "\n")
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, SentencePieceTokenizer) and tok.vocab_size == 120
    assert (tok.normalization, tok.byte_fallback) == ("nmt_nfkc", False)
    assert UNK_ID in tok.encode(["the 猫"])[0]
    ids, _ = tok.tokenize(["  two   dogs\t", SAMPLES[0]])
    assert tok.detokenize(ids) == ["two dogs", SAMPLES[0]]
    tok.save(tmp_path / "again")
    assert load_tokenizer(tmp_path / "again").encode(SAMPLES) == tok.encode(SAMPLES)


def test_empty_training_text_names_its_origin():
    with pytest.raises(DataError, match="empty") as info:
        train_tokenizer(["", "  "], 400, origin="train.en | train.de")
    assert "train.en | train.de" in str(info.value)


# --- WordPiece ------------------------------------------------------------------


def test_wordpiece_reserved_tokens_first(wordpiece):
    vocabulary = wordpiece.vocabulary
    assert tuple(vocabulary[:4]) == RESERVED_TOKENS
    assert vocabulary.index("<pad>") == PAD_ID
    assert vocabulary.index("<unk>") == UNK_ID
    assert vocabulary.index("<s>") == BOS_ID
    assert vocabulary.index("</s>") == EOS_ID
    assert 4 < wordpiece.vocab_size <= 120
    assert len(set(vocabulary)) == len(vocabulary)


def test_wordpiece_unknown_word_is_unk(wordpiece):
    assert wordpiece.encode(["the 猫"])[0][-1] == UNK_ID


def test_wordpiece_detokenize_punctuation(wordpiece):
    # Punctuation is split off, so it comes back space-separated.
    ids, _ = wordpiece.tokenize(["the man sees the river."])
    decoded = wordpiece.detokenize(ids)[0]
    assert decoded == "the man sees the river ."


def test_wordpiece_vocabulary_must_start_with_reserved_tokens():
    with pytest.raises(ValueError, match="must start with"):
        WordPieceTokenizer(["[PAD]", "[UNK]", "a", "b"])


def test_kinds_are_the_registered_classes():
    assert set(TOKENIZER_KINDS) == set(tokenizer_module._CLASSES)


def test_wordpiece_rejects_sentencepiece_options():
    for options in ({"normalization": "nfkc"}, {"byte_fallback": False}):
        with pytest.raises(ValueError, match="SentencePiece options"):
            train_tokenizer(TEXTS, 120, kind="wordpiece", **options)


# --- words (one id per word: the parsing task's) ---------------------------------

# The shared tests above take every kind in TOKENIZER_KINDS by its fixture.
# TEXTS holds 53 distinct words: 100 keeps all of them.
VOCAB_SIZE["words"] = 100


@pytest.fixture(scope="module")
def words():
    return train_tokenizer(TEXTS, VOCAB_SIZE["words"], kind="words")


def test_words_keeps_the_most_frequent_words_first_appearance_breaking_ties():
    # Counts: b 1, a 3, c 2, d 1, e 1, F 1; b comes before d and e. Room for
    # five: the words left out (d, e, F) bring their classes, which take the
    # places of the rarest words kept.
    texts = ["b a c", "a c d", "a e F"]
    tok = train_tokenizer(texts, 9, kind="words")
    assert tok.kind == "words"
    assert tok.vocabulary == [
        *RESERVED_TOKENS,
        "a",
        "c",
        "<unk-lower>",
        "b",
        "<unk-cap>",
    ]
    assert tok.vocab_size == 9
    assert tok.has_unknown_classes
    lower, b, cap = (tok.vocabulary.index(t) for t in ("<unk-lower>", "b", "<unk-cap>"))
    # Unseen words too: a word outside the vocabulary is its class.
    assert tok.encode(["d e b F Zed 猫"]) == [[lower, lower, b, cap, cap, UNK_ID]]


def test_words_classes_take_the_places_of_the_rarest_words():
    # a 4, b 3, c 2 and d, e, f once each: room for three; the classes of the
    # left-out words (here all "<unk-lower>") must fit, so c goes too.
    tok = train_tokenizer(["a a a a b b b c c d e f"], 7, kind="words")
    assert tok.vocabulary == [*RESERVED_TOKENS, "<unk-lower>", "a", "b"]
    assert tok.encode(["c f a"])[0] == [4, 4, 5]


def test_words_vocabulary_without_classes_reads_unknown_words_as_unk():
    # Learned before the classes existed: every unknown word is <unk>, as then.
    tok = tokenizer_module.WordTokenizer([*RESERVED_TOKENS, "a", "b"])
    assert not tok.has_unknown_classes
    assert tok.encode(["a Zed running b"]) == [[4, UNK_ID, UNK_ID, 5]]


def test_words_with_classes_save_and_load(tmp_path):
    tok = train_tokenizer(["the the the cat ran", "the dog Walked"], 7, kind="words")
    tok.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.vocabulary == tok.vocabulary and loaded.has_unknown_classes
    texts = ["the Running dog", "a cat-like thing"]
    assert loaded.encode(texts) == tok.encode(texts)


def test_words_vocabulary_is_no_larger_than_the_words_seen():
    tok = train_tokenizer(["x y", "y x x"], 50, kind="words")
    assert tok.vocabulary == [*RESERVED_TOKENS, "x", "y"]
    assert tok.vocab_size == 6


def test_words_does_not_count_the_reserved_tokens_as_words():
    tok = train_tokenizer(["<unk> a </s> <pad> a <s> b"], 50, kind="words")
    assert tok.vocabulary == [*RESERVED_TOKENS, "a", "b"]


def test_words_unknown_word_is_unk(words):
    ids = words.encode(["the 猫 river"])[0]
    assert ids[1] == UNK_ID
    assert words.id_to_piece(ids[0]) == "the"
    assert words.id_to_piece(ids[2]) == "river"
    assert words.detokenize(np.array([ids]))[0] == "the <unk> river"


def test_words_round_trip_in_vocabulary_text(words):
    ids, lengths = words.tokenize(SAMPLES)
    assert list(lengths) == [len(text.split()) for text in SAMPLES]
    assert words.detokenize(ids) == SAMPLES


def test_words_splits_at_any_whitespace_and_joins_with_single_spaces(words):
    ids, _ = words.tokenize(["  two \t dogs\n", "two dogs"])
    np.testing.assert_array_equal(ids[0], ids[1])
    assert words.detokenize(ids) == ["two dogs", "two dogs"]


def test_words_tokenize_add_eos_and_detokenize_stops_at_eos(words):
    two, dogs = words.encode(["two dogs"])[0]
    ids, lengths = words.tokenize(["two dogs", "two"], add_eos=True)
    assert ids.tolist() == [[two, dogs, EOS_ID], [two, EOS_ID, PAD_ID]]
    assert lengths.tolist() == [3, 2]
    assert words.detokenize(ids) == ["two dogs", "two"]
    row = [[BOS_ID, two, EOS_ID, dogs, dogs]]
    assert words.detokenize(np.array(row, np.int32)) == ["two"]


def test_words_id_to_piece(words):
    for token_id, token in enumerate(RESERVED_TOKENS):
        assert words.id_to_piece(token_id) == token
    pieces = [words.id_to_piece(np.int32(i)) for i in range(words.vocab_size)]
    assert pieces == words.vocabulary
    for word in "the little girl".split():
        assert words.id_to_piece(words.encode([word])[0][0]) == word


def test_words_save_and_load(words, tmp_path):
    words.save(tmp_path / "tokenizer")
    meta = json.loads((tmp_path / "tokenizer" / "tokenizer.json").read_text())
    assert meta["kind"] == "words" and meta["vocab_size"] == words.vocab_size
    saved = (tmp_path / "tokenizer" / "words_vocab.txt").read_text(encoding="utf-8")
    assert saved.splitlines() == words.vocabulary
    loaded = load_tokenizer(tmp_path / "tokenizer")
    assert loaded.kind == "words"
    assert loaded.vocabulary == words.vocabulary
    texts = [*SAMPLES, "the 猫 river"]
    np.testing.assert_array_equal(loaded.tokenize(texts)[0], words.tokenize(texts)[0])


def test_words_load_without_its_vocabulary_file_names_it(words, tmp_path):
    words.save(tmp_path)
    (tmp_path / "words_vocab.txt").unlink()
    with pytest.raises(ValueError, match="words_vocab.txt is missing"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize(
    "vocabulary, message",
    [
        (["<pad>", "<unk>", "</s>", "<s>", "a"], "must start with"),
        (["a", "b", "c", "d", "e"], "must start with"),
        (["<pad>", "<unk>"], "must start with"),
        ([*RESERVED_TOKENS, "a", "two words"], "whitespace"),
        ([*RESERVED_TOKENS, "tab\there"], "whitespace"),
        ([*RESERVED_TOKENS, ""], "empty"),
        ([*RESERVED_TOKENS, "a", "b", "a"], "repeat"),
        ([*RESERVED_TOKENS, "<unk>"], "repeat"),
    ],
)
def test_words_refuses_a_bad_vocabulary(vocabulary, message):
    with pytest.raises(ValueError, match=message):
        tokenizer_module.WordTokenizer(vocabulary)


def test_words_load_refuses_an_edited_vocabulary(words, tmp_path):
    words.save(tmp_path)
    path = tmp_path / "words_vocab.txt"
    path.write_text(path.read_text(encoding="utf-8") + "the\n", encoding="utf-8")
    with pytest.raises(ValueError, match="repeat"):
        load_tokenizer(tmp_path)


def test_words_rejects_sentencepiece_options():
    for options in ({"normalization": "nfkc"}, {"byte_fallback": False}):
        with pytest.raises(ValueError, match="SentencePiece options"):
            train_tokenizer(TEXTS, 100, kind="words", **options)


def test_words_tokenizer_needs_room_for_a_word():
    with pytest.raises(ValueError, match="vocab_size must exceed the 4 reserved"):
        train_tokenizer(["a b c"], 4, kind="words")


def test_words_tokenizer_reads_reserved_tokens_in_text_as_unknown_words():
    tokenizer = train_tokenizer(["a b"], 10, kind="words")
    # "</s>" in a text is a word it has never seen, not the end of the text.
    assert tokenizer.encode(["a </s> <pad> b"]) == [
        [tokenizer.encode(["a"])[0][0], 1, 1, tokenizer.encode(["b"])[0][0]]
    ]


# A treebank's pairs: words, and the tree symbols of the linearized trees.
TREE_PAIRS = (
    ["the dog saw a cat", "Anna left", "a cat saw the dog"],
    ["(S (NP DT NN )NP (VP VBD (NP DT NN )NP )VP )S", "(S (NP NNP )NP (VP VBD )VP )S",
     "(S (NP DT NN )NP (VP VBD (NP DT NN )NP )VP )S"],
)  # fmt: skip


def _tree_tokenizer(vocab_size: int = 40):
    blocks = [PairBlock(1, list(TREE_PAIRS[0]), list(TREE_PAIRS[1]))]
    return learn_tokenizer(
        blocks, "trees", kind="words", vocab_size=vocab_size, sample_size=100,
        seed=0, log=lambda line: None, target_vocabulary=True,
    )  # fmt: skip


def test_words_target_vocabulary_holds_the_targets_symbols_first():
    tok = _tree_tokenizer()
    # Every target symbol, the most frequent first (ties: first seen), then
    # the words; the symbols are counted in the targets only.
    symbols = ["(NP", ")NP", "DT", "NN", "(S", "(VP", "VBD", ")VP", ")S", "NNP"]
    assert tok.target_vocabulary == [*RESERVED_TOKENS, *symbols]
    assert tok.target_size == 14
    assert tok.vocabulary[:14] == tok.target_vocabulary
    assert set(tok.vocabulary[14:]) >= {"the", "dog", "Anna", "cat"}
    assert not set(tok.vocabulary[14:]) & set(symbols)  # Each symbol once.


def test_words_target_vocabulary_encodes_targets_within_it():
    tok = _tree_tokenizer()
    # A source reads any word; a target reads its symbols, and anything else
    # (a tag never seen in a training target, a word) as <unk>.
    assert tok.encode(["the (NP dog"])[0][1] == tok.vocabulary.index("(NP")
    target = tok.encode_target(["(S (NP NNS )NP dog )S"])[0]
    assert target == [8, 4, UNK_ID, 5, UNK_ID, 12]
    assert max(tok.encode(["the dog"])[0]) >= tok.target_size
    # Without a target vocabulary, targets are encoded as sources.
    plain = train_tokenizer([*TREE_PAIRS[0], *TREE_PAIRS[1]], 40, kind="words")
    assert plain.target_size is None and plain.target_vocabulary == plain.vocabulary
    assert plain.encode_target(["the dog"]) == plain.encode(["the dog"])


def test_words_target_vocabulary_saves_and_loads(tmp_path):
    tok = _tree_tokenizer()
    tok.save(tmp_path)
    meta = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert meta["target_size"] == 14
    loaded = load_tokenizer(tmp_path)
    assert loaded.target_size == 14 and loaded.vocabulary == tok.vocabulary
    assert loaded.encode_target(["(S dog )S"]) == tok.encode_target(["(S dog )S"])
    # A tokenizer saved before (no target_size) loads without one.
    train_tokenizer(["a b"], 10, kind="words").save(tmp_path / "old")
    assert load_tokenizer(tmp_path / "old").target_size is None


@pytest.mark.parametrize("value", [4, 99, "14", True, 2.0])
def test_words_load_refuses_a_bad_target_size_naming_the_file(tmp_path, value):
    _tree_tokenizer().save(tmp_path)
    path = tmp_path / "tokenizer.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**meta, "target_size": value}), encoding="utf-8")
    with pytest.raises(ValueError, match="tokenizer.json: target_size must be"):
        load_tokenizer(tmp_path)


def test_words_target_vocabulary_needs_room_for_a_word():
    with pytest.raises(ValueError, match="reserved tokens and the targets' 10 symbols"):
        _tree_tokenizer(vocab_size=14)
    assert _tree_tokenizer(vocab_size=15).vocab_size == 15


def test_a_target_vocabulary_of_its_own_is_the_words_tokenizers():
    with pytest.raises(ValueError, match="target_words.*kind='wordpiece'"):
        train_tokenizer(["a b"], 10, kind="wordpiece", target_words=["a"])


def test_sample_is_seeded_uniform_and_bounded():
    def sample(seed, size=100):
        sampler = SentenceSample(size, seed)
        for start in range(0, 2000, 300):  # Blocks of pairs, as read.
            numbers = range(start, min(start + 300, 2000))
            sampler.add(
                [f"s{i}" for i in numbers], [f"t{i}" if i % 7 else " " for i in numbers]
            )
        return sampler.texts()

    first = sample(0)
    assert len(first) == len(set(first)) == 100
    assert first == sample(0) and first != sample(1)
    assert not any(text.strip() == "" for text in first)
    # Uniform: sources and targets (less the blank ones) in proportion.
    counts = collections.Counter(text[0] for seed in range(30) for text in sample(seed))
    assert 0.40 < counts["t"] / (counts["s"] + counts["t"]) < 0.52
    everything = SentenceSample(10, 0)
    everything.add(["a", "b"], ["x", " "])
    everything.add(["c"], ["y"])
    assert everything.texts() == ["a", "b", "c", "x", "y"]  # Sources first.
