"""CTranslate2 export: the weight mapping, checked on untrained models of each
layout against this package's own search (the trained-run checks, 50
held-out sentences, are in test_savedmodel.py).

Backend-neutral (the torch suite only): the conversion reads the model's
weights as NumPy arrays and CTranslate2 runs them, the same whichever
backend built the model; the other side of each comparison, this package's
search, scoring and logits, is checked on every backend by
tests/decoding/ (test_translator.py, test_scoring.py, test_sampling.py) and
agrees across backends (tests/test_backend_parity.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from keras_transformer.decoding import scoring
from keras_transformer.decoding.sampling import SamplingSettings
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.decoding.translator import Translator
from keras_transformer.export.ctranslate2 import build_spec, export_ctranslate2
from keras_transformer.export.reading import translate_batch_options
from keras_transformer.model import build_transformer
from keras_transformer.run.directory import RunDirectory
from tests.helpers import (
    ctranslate2_ids,
    set_seeded_weights,
    small_config,
    to_numpy,
)

ctranslate2 = pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.backend_neutral

SENTENCES = [
    "the dog sleeps.",
    "the old man likes the garden.",
    "water.",
    "a child reads a book near the river.",
]
EXTRA = 6


@pytest.fixture(scope="module")
def tokenizer(untrained_run):
    """The session's untrained run's tokenizer (`train_tokenizer(make_corpus(),
    300)`, tests/shared_runs.py)."""
    return RunDirectory(untrained_run).load_tokenizer()


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


def test_a_word_pointer_cannot_be_exported(tokenizer):
    config = small_config(vocab_size=tokenizer.vocab_size, pointer_bracket_ids=(4,))
    with pytest.raises(ValueError, match="word pointer"):
        build_spec(build_transformer(config), tokenizer)


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
    with pytest.raises(ImportError, match=r"pip install -e '\.\[serve\]'"):
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


@pytest.fixture(scope="module")
def seeded(tokenizer, tmp_path_factory):
    """A model whose greedy outputs end with EOS for "water." and are cut at
    the length limit for the others (NumPy-seeded: alike on every backend),
    with its CTranslate2 directory and a CTranslate2 translator."""
    model = build_transformer(
        small_config(
            vocab_size=tokenizer.vocab_size,
            dropout_rate=0.0,
            tie_output_projection=False,
        )
    )
    set_seeded_weights(model, seed=0, eos_bias=2.0)
    directory = save_spec(model, tokenizer, tmp_path_factory.mktemp("seeded") / "ct2")
    return model, ctranslate2.Translator(str(directory), intra_threads=1)


def ct2_translate(translator, tokenizer, settings, sentence, **arguments):
    """CTranslate2's result for one sentence, searched as `Translator` does
    (`translate_batch_options`, its own length limit)."""
    pieces = [tokenizer.id_to_piece(i) for i in tokenizer.encode([sentence])[0]]
    return translator.translate_batch(
        [pieces],
        **translate_batch_options(tokenizer, settings),
        max_decoding_length=len(pieces) + settings.max_extra_length,
        **arguments,
    )[0]


def piece_ids(tokenizer, pieces):
    ids = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    return [ids[piece] for piece in pieces]


def test_returned_attention_is_the_alignment_of_token_details(seeded, tokenizer):
    """`return_attention=True` returns, per output token, the last decoder
    layer's cross-attention averaged over all heads (`build_spec`'s
    alignment_layer=-1, alignment_heads=0): `scoring.token_details`' default
    alignment. One row per returned token: with `return_end_token=True` the
    EOS has its row (the last), without it the EOS and its row are dropped;
    a sentence cut at the length limit has no EOS either way."""
    model, ct2 = seeded
    settings = SearchSettings(beam_size=1, alpha=0.0, max_extra_length=EXTRA)
    with_end = [
        ct2_translate(
            ct2,
            tokenizer,
            settings,
            sentence,
            return_attention=True,
            return_end_token=True,
        )
        for sentence in SENTENCES
    ]
    without_end = [
        ct2_translate(ct2, tokenizer, settings, sentence, return_attention=True)
        for sentence in SENTENCES
    ]
    outputs = [piece_ids(tokenizer, result.hypotheses[0]) for result in with_end]
    sources = tokenizer.encode(SENTENCES)
    layer = scoring.alignment_layer(model.config.num_decoder_layers)
    details = scoring.token_details(model, sources, outputs, layer)
    for source, ids, (_, ours), full, short in zip(
        sources, outputs, details, with_end, without_end
    ):
        theirs = np.asarray(full.attention[0], np.float32)
        assert theirs.shape == ours.shape == (len(ids), len(source))
        np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=0)
        ended = ids[-1] == tokenizer.eos_id
        assert short.hypotheses[0] == full.hypotheses[0][: len(ids) - ended]
        rows = len(ids) - ended
        theirs = np.asarray(short.attention[0], np.float32)
        np.testing.assert_allclose(theirs, ours[:rows], atol=1e-4, rtol=0)
    ended = sum(ids[-1] == tokenizer.eos_id for ids in outputs)
    assert 0 < ended < len(SENTENCES)  # Both kinds of row ends were compared.


def test_sampling_among_the_top_1_is_greedy_in_both(seeded, tokenizer):
    """CTranslate2's `sampling_topk=1`, this package's `--sampling top-k
    --top-k 1` and greedy search give the same ids. A larger k cannot be
    compared token for token: each library draws with its own random numbers
    (NumPy's seeded generator here, CTranslate2's C++ one there); see the
    next test for what can be checked."""
    model, ct2 = seeded
    settings = SearchSettings(beam_size=1, alpha=0.0, max_extra_length=EXTRA)
    greedy = our_outputs(model, tokenizer, settings, SENTENCES)
    top_1 = Translator(
        model,
        tokenizer,
        settings,
        sampling=SamplingSettings(sampling="top-k", top_k=1),
    )
    assert [ids.tolist() for ids in top_1.translate_ids(SENTENCES)] == greedy
    ctranslate2.set_random_seed(1)
    theirs = [
        piece_ids(
            tokenizer,
            ct2_translate(
                ct2,
                tokenizer,
                settings,
                sentence,
                sampling_topk=1,
                return_end_token=True,
            ).hypotheses[0],
        )
        for sentence in SENTENCES
    ]
    assert theirs == greedy


def test_ctranslate2_samples_among_our_top_k(seeded, tokenizer):
    """With `sampling_topk=K`, every token CTranslate2 draws is among the K
    most probable of this model's distribution given the same prefix (the
    tokens `Translator` never generates left out, as CTranslate2 leaves
    them out), up to float rounding at the K-th place."""
    model, ct2 = seeded
    settings = SearchSettings(beam_size=1, alpha=0.0, max_extra_length=EXTRA)
    top_k = 3
    allowed = np.ones(tokenizer.vocab_size, bool)
    allowed[[tokenizer.pad_id, tokenizer.bos_id]] = False
    allowed[tokenizer.unk_id] = settings.allow_unk
    ctranslate2.set_random_seed(7)
    sources, outputs = [], []
    for sentence, source in zip(SENTENCES, tokenizer.encode(SENTENCES)):
        result = ct2_translate(
            ct2,
            tokenizer,
            settings,
            sentence,
            sampling_topk=top_k,
            num_hypotheses=2,
            return_end_token=True,
        )
        for hypothesis in result.hypotheses:
            sources.append(source)
            outputs.append(piece_ids(tokenizer, hypothesis))
    # One padded teacher-forced pass (causal: padding after a row's tokens
    # changes none of its logits).
    source_ids = np.zeros((len(sources), max(map(len, sources))), np.int32)
    decoder_input = np.zeros((len(outputs), max(map(len, outputs))), np.int32)
    for row, (source, ids) in enumerate(zip(sources, outputs)):
        source_ids[row, : len(source)] = source
        decoder_input[row, : len(ids)] = [tokenizer.bos_id, *ids[:-1]]
    memory = model.encode(source_ids)
    all_logits = to_numpy(model.decode(decoder_input, memory, source_ids))
    below_best = 0
    for ids, logits in zip(outputs, all_logits.astype(np.float32)):
        logits = np.where(allowed, logits[: len(ids)], -np.inf)
        kth = np.sort(logits, axis=-1)[:, -top_k]
        chosen = logits[np.arange(len(ids)), ids]
        assert np.all(chosen >= kth - 1e-4), ids
        below_best += int(np.sum(chosen < logits.max(axis=-1) - 1e-4))
    assert below_best  # Not all greedy: draws beyond the first were tested.
