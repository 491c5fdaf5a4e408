"""CTranslate2 export: the weight mapping, checked on untrained models of each
layout against this package's own search (the trained-run checks, 50
held-out sentences from a TensorFlow and a JAX run, are in test_savedmodel.py)."""

from __future__ import annotations

import json

import pytest

from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.decoding.translator import Translator
from keras_transformer.export.ctranslate2 import (
    build_spec,
    export_ctranslate2,
    translate_batch_options,
)
from keras_transformer.model import build_transformer
from tests.helpers import ctranslate2_ids, make_corpus, small_config

ctranslate2 = pytest.importorskip("ctranslate2")

SENTENCES = [
    "the dog sleeps.",
    "the old man likes the garden.",
    "water.",
    "a child reads a book near the river.",
]
EXTRA = 6


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


def our_outputs(model, tokenizer, settings, sentences):
    translator = Translator(
        model,
        tokenizer,
        beam_size=settings.beam_size,
        alpha=settings.alpha,
        max_extra_length=settings.max_extra_length,
    )
    return [ids.tolist() for ids in translator.translate_ids(sentences)]


def save_spec(model, tokenizer, directory):
    directory.mkdir()
    spec = build_spec(model, tokenizer, max_positions=64)
    spec.validate()
    spec.optimize()
    spec.save(str(directory))
    return directory


@pytest.mark.parametrize(
    "layout",
    [
        {},
        {"norm_first": True},
        {"position_encoding": "learned"},
        {"share_embeddings": False, "tie_output_projection": False},
    ],
    ids=["post_norm", "pre_norm", "learned_positions", "separate_matrices"],
)
def test_untrained_model_decodes_greedily_alike_in_ctranslate2(
    tokenizer, tmp_path, layout
):
    """Greedy only: an untrained model's outputs run to the length limit,
    where the two beam searches prune differently (beam is compared on a
    trained run in test_savedmodel.py)."""
    model = build_transformer(
        small_config(vocab_size=tokenizer.vocab_size, dropout_rate=0.0, **layout)
    )
    directory = save_spec(model, tokenizer, tmp_path / "ct2")
    settings = SearchSettings(beam_size=1, alpha=0.0, max_extra_length=EXTRA)
    ours = our_outputs(model, tokenizer, settings, SENTENCES)
    assert len({len(ids) for ids in ours}) > 1  # Not all cut at one length.
    theirs = ctranslate2_ids(directory, tokenizer, settings, SENTENCES)
    assert theirs == ours


def test_local_attention_cannot_be_exported(tokenizer):
    model = build_transformer(
        small_config(vocab_size=tokenizer.vocab_size, attention_window=4)
    )
    with pytest.raises(ValueError, match="attention_window=4"):
        build_spec(model, tokenizer)


def test_a_key_dim_apart_from_the_heads_cannot_be_exported(tokenizer):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size, key_dim=4))
    with pytest.raises(ValueError, match="key_dim=4 differs"):
        build_spec(model, tokenizer)


def test_tokenizer_of_another_size_is_refused(tokenizer):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size + 5))
    with pytest.raises(ValueError, match="tokenizer has"):
        build_spec(model, tokenizer)


def test_options_suppress_what_translator_never_generates(tokenizer):
    options = translate_batch_options(
        tokenizer,
        SearchSettings(beam_size=4, alpha=0.6, max_extra_length=50, allow_unk=False),
    )
    assert options["suppress_sequences"] == [["<pad>"], ["<s>"]]
    assert options["disable_unk"] is True
    assert options["min_decoding_length"] == 0  # An immediate EOS is allowed.
    assert options["max_input_length"] == 0  # Never truncate.
    allowed = translate_batch_options(
        tokenizer,
        SearchSettings(beam_size=1, alpha=0.0, max_extra_length=50, allow_unk=True),
    )
    assert allowed["disable_unk"] is False
    json.dumps(options)  # Recorded in export.json as is.


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"quantization": "int4"}, "--quantization must be one of"),
        ({"max_positions": 0}, "max_positions must be an integer >= 1"),
        ({"beam_size": 0}, "beam_size"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    tmp_path, arguments, message
):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        export_ctranslate2(tmp_path / "no-run", out, **arguments)
    assert not out.exists()


def test_missing_ctranslate2_names_the_package(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r"pip install 'keras-transformer\[serve\]'"):
        export_ctranslate2(tmp_path / "run", tmp_path / "out")


def test_positions_beyond_the_table_fail_clearly(tokenizer, tmp_path):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size))
    spec = build_spec(model, tokenizer, max_positions=8)
    spec.validate()
    spec.optimize()
    spec.save(str(tmp_path))
    translator = ctranslate2.Translator(str(tmp_path))
    pieces = [tokenizer.id_to_piece(i) for i in tokenizer.encode([SENTENCES[3]])[0]]
    assert len(pieces) > 8
    with pytest.raises(RuntimeError, match="No position encodings"):
        translator.translate_batch([pieces], max_input_length=0)


def test_a_forced_prefix_decodes_alike_in_ctranslate2(tokenizer, tmp_path):
    """`--target-prefix` and CTranslate2's `target_prefix`: the prefix's
    pieces, then the same greedy continuation."""
    model = build_transformer(
        small_config(vocab_size=tokenizer.vocab_size, dropout_rate=0.0)
    )
    directory = save_spec(model, tokenizer, tmp_path / "ct2")
    settings = SearchSettings(beam_size=1, alpha=0.0, max_extra_length=EXTRA)
    prefix_texts = ["the old", "water", "a child", "the"]
    prefixes = tokenizer.encode(prefix_texts)
    translator = Translator(model, tokenizer, settings)
    records = translator.generate(SENTENCES, prefixes=prefixes)
    piece_ids = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    ct2 = ctranslate2.Translator(str(directory), intra_threads=1)
    options = translate_batch_options(tokenizer, settings)
    for record, sentence, prefix in zip(records, SENTENCES, prefixes):
        pieces = [tokenizer.id_to_piece(i) for i in tokenizer.encode([sentence])[0]]
        result = ct2.translate_batch(
            [pieces],
            target_prefix=[[tokenizer.id_to_piece(i) for i in prefix]],
            **options,
            max_decoding_length=len(pieces) + EXTRA,
            return_end_token=True,
        )
        theirs = [piece_ids[piece] for piece in result[0].hypotheses[0]]
        assert theirs[: len(prefix)] == prefix
        assert record["tokens"] == [tokenizer.id_to_piece(i) for i in theirs]
