"""The Hugging Face bridge: MarianMT checkpoints in (`huggingface_import`) and
out (`huggingface`), checked against `transformers` itself (on torch, which
it needs, whatever the suite's backend).

On every backend: an imported checkpoint's logits equal `transformers`', and
an exported model's `transformers` logits equal ours (the conversion is
NumPy; the model that computes our side is this backend's). The searches,
the command line, the trained run and the refusals run in the neutral
(torch) suite: the search is checked against the other backends by
tests/decoding/ and tests/test_backend_parity.py.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from keras_transformer.config import BOS_ID
from keras_transformer.decoding.batching import pad_batch
from keras_transformer.decoding.opening import open_huggingface
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.decoding.translator import Translator
from keras_transformer.export import huggingface
from keras_transformer.export.huggingface import save_huggingface
from keras_transformer.model import build_transformer
from keras_transformer.run.directory import RunDirectory
from keras_transformer.run.huggingface_import import read_marian
from keras_transformer.run.marian_layout import MarianIds
from tests.export.marian_checkpoints import write_marian_checkpoint
from tests.helpers import set_seeded_weights, small_config, to_numpy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
neutral = pytest.mark.backend_neutral

TEXTS = ["the dog sleeps.", "a red ball in the big garden.", "water."]
TARGETS = ["THE DOG SLEEPS.", "A RED BALL", "WATER."]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return write_marian_checkpoint(tmp_path_factory.mktemp("marian") / "opus-like")


def opened(directory):
    """(model, tokenizer, search fields) of a MarianMT directory."""
    model, checkpoint = open_huggingface(directory)
    return model, checkpoint.tokenizer, checkpoint.search


def import_huggingface(directory, out):
    """`keras-transformer import DIR --out OUT`; the preset's path."""
    from keras_transformer.cli import main

    assert main(["import", str(directory), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def imported(marian_dir):
    return opened(marian_dir)


@pytest.fixture(scope="module")
def theirs(marian_dir):
    model = transformers.MarianMTModel.from_pretrained(str(marian_dir)).eval()
    return model, transformers.MarianTokenizer.from_pretrained(str(marian_dir))


def both_logits(model, tokenizer, marian_model, sources, targets):
    """(ours, transformers') logits over the real positions, Marian's order."""
    ids = MarianIds.of_tokenizer(tokenizer)
    source_ids = pad_batch(tokenizer.encode(sources))
    decoder_input = pad_batch([[BOS_ID, *t] for t in tokenizer.encode_target(targets)])
    ours = to_numpy(model({"source_ids": source_ids, "target_ids": decoder_input}))
    to_marian = np.asarray(ids.marian_ids)
    with torch.no_grad():
        logits = marian_model(
            input_ids=torch.as_tensor(to_marian[source_ids]),
            attention_mask=torch.as_tensor(source_ids != 0),
            decoder_input_ids=torch.as_tensor(to_marian[decoder_input]),
        ).logits.numpy()
    real = decoder_input != 0
    return ours[..., ids.kept_rows()][real], logits[real]


# --- On every backend ---------------------------------------------------------


def test_an_imported_checkpoint_computes_transformers_logits(imported, theirs):
    model, tokenizer, _ = imported
    assert model.config.activation == "swish" and model.config.output_bias
    assert model.config.layer_norm_epsilon == 1e-5  # PyTorch's, Marian's.
    ours, expected = both_logits(model, tokenizer, theirs[0], TEXTS, TARGETS)
    assert np.abs(expected).max() > 0.5  # Not a model of zeros.
    np.testing.assert_allclose(ours, expected, atol=1e-4)


def test_an_imported_tokenizer_splits_as_marians(imported, theirs):
    _, tokenizer, _ = imported
    texts = [*TEXTS, ">>deu<< the cat.", "zebra \u00e9 ?"]
    encoded = theirs[1](texts)["input_ids"]
    ids = np.asarray(tokenizer.marian_ids)
    assert [ids[row].tolist() for row in tokenizer.encode(texts)] == encoded
    assert tokenizer.encode(["water."])[0][-1] == tokenizer.eos_id  # Marian's </s>.
    assert tokenizer.eos_id not in tokenizer.encode_target(["WATER."])[0]


def test_our_model_exported_gives_transformers_our_logits(untrained_run, tmp_path):
    tokenizer = RunDirectory(untrained_run).load_tokenizer()
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size))
    set_seeded_weights(model, seed=3, eos_bias=0.0)
    out = save_huggingface(model, tokenizer, tmp_path / "hf", SearchSettings())
    differences = json.loads((out / "export.json").read_text())[
        "transformers_logits_difference"
    ]
    assert differences["conversion"] <= huggingface.LOGITS_TOLERANCE
    marian = transformers.MarianMTModel.from_pretrained(str(out)).eval()
    same_epsilon = build_transformer(model.config.replace(layer_norm_epsilon=1e-5))
    same_epsilon.set_weights(model.get_weights())
    ours, expected = both_logits(same_epsilon, tokenizer, marian, TEXTS, TEXTS)
    np.testing.assert_allclose(ours, expected, atol=1e-4)
    # Imported back: the same weights, bit for bit, and our epsilon.
    back, back_tokenizer, _ = opened(out)
    assert back.config == model.config
    for mine, returned in zip(model.weights, back.weights):
        np.testing.assert_array_equal(to_numpy(mine), to_numpy(returned), mine.path)
    # ... and its sources without </s>, as the model was trained.
    assert not back_tokenizer.source_eos
    assert back_tokenizer.encode(TEXTS) == tokenizer.encode(TEXTS)


# --- The searches against transformers' generate (neutral) ---------------------


@neutral
@pytest.mark.parametrize("beams", [1, 4])
def test_our_search_equals_generate_where_the_length_penalties_agree(
    imported, theirs, beams
):
    """alpha 0 and length_penalty 0 both leave scores unnormalised; Marian's
    budget counts new tokens, ours the source's (with its </s>) plus extra."""
    model, tokenizer, _ = imported
    marian, marian_tokenizer = theirs
    extra = 10
    ours = Translator(
        model, tokenizer, beam_size=beams, alpha=0.0, max_extra_length=extra
    ).translate(TEXTS)
    for text, mine, source in zip(TEXTS, ours, tokenizer.encode(TEXTS)):
        batch = marian_tokenizer([text], return_tensors="pt")
        output = marian.generate(
            **batch,
            num_beams=beams,
            length_penalty=0.0,
            early_stopping=False,
            max_new_tokens=len(source) + extra,
            forced_eos_token_id=None,
        )
        assert marian_tokenizer.batch_decode(output, skip_special_tokens=True) == [mine]


@neutral
def test_a_trained_run_exported_generates_our_greedy_output(trained_run, tmp_path):
    from keras_transformer.export.huggingface import export_huggingface
    from tests.helpers import short_pairs

    out = export_huggingface(trained_run, tmp_path / "hf", beam_size=1)
    card = (out / "README.md").read_text()
    assert "add_special_tokens=False" in card and "Training data: files" in card
    run = RunDirectory(trained_run).open_for_inference(None, load_model=True)
    sources = [source for source, _ in short_pairs("valid", 20)]
    ours = Translator(run.model, run.tokenizer, beam_size=1).translate(sources)
    marian = transformers.MarianMTModel.from_pretrained(str(out)).eval()
    marian_tokenizer = transformers.MarianTokenizer.from_pretrained(str(out))
    theirs = []
    for text, source in zip(sources, run.tokenizer.encode(sources)):
        batch = marian_tokenizer([text], return_tensors="pt", add_special_tokens=False)
        output = marian.generate(**batch, max_new_tokens=len(source) + 50)
        theirs += marian_tokenizer.batch_decode(output, skip_special_tokens=True)
    assert len(sources) == 20 and theirs == ours
    assert len(set(ours)) > 10  # Sentences, not one repeated output.


# --- The command line and the task (neutral) -------------------------------------


@neutral
def test_import_then_export_from_the_command_line_round_trips(marian_dir, tmp_path):
    from safetensors.numpy import load_file

    from keras_transformer.cli import main

    preset, out = tmp_path / "preset", tmp_path / "back"
    assert main(["import", str(marian_dir), "--out", str(preset)]) == 0
    argv = ["export", "--run-dir", str(preset), "--format", "huggingface"]
    assert main([*argv, "--out", str(out)]) == 0
    original = load_file(str(marian_dir / "model.safetensors"))
    returned = load_file(str(out / "model.safetensors"))
    for name, value in original.items():
        np.testing.assert_array_equal(returned[name], value, name)
    assert json.loads((out / "vocab.json").read_text()) == json.loads(
        (marian_dir / "vocab.json").read_text()
    )
    config = json.loads((out / "config.json").read_text())
    assert config["decoder_start_token_id"] == config["pad_token_id"]
    assert config["activation_function"] == "swish"
    assert f"Exported from: {preset}" in (out / "README.md").read_text()


@neutral
def test_the_task_imports_translates_and_offers_its_logits(
    marian_dir, theirs, tmp_path
):
    from keras_transformer import TransformerSeq2SeqLM

    lm = TransformerSeq2SeqLM.from_huggingface(marian_dir, beam_size=1)
    assert lm.search_settings.beam_size == 1
    assert lm.generate(TEXTS) == Translator(
        lm.backbone, lm.tokenizer, beam_size=1
    ).translate(TEXTS)
    source_ids = pad_batch(lm.tokenizer.encode(TEXTS))
    decoder = pad_batch([[BOS_ID, *t] for t in lm.tokenizer.encode_target(TARGETS)])
    logits = to_numpy(lm.logits(source_ids, decoder))
    assert logits.shape == (*decoder.shape, lm.tokenizer.vocab_size)
    ours, expected = both_logits(lm.backbone, lm.tokenizer, theirs[0], TEXTS, TARGETS)
    real = decoder != 0
    ids = MarianIds.of_tokenizer(lm.tokenizer)
    np.testing.assert_allclose(logits[..., ids.kept_rows()][real], expected, atol=1e-4)
    out = lm.save_to_huggingface(tmp_path / "hf")
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()


# --- What is refused, and nothing half-written (neutral) ------------------------


def _edited_copy(marian_dir, tmp_path, **fields):
    copy = tmp_path / "edited"
    shutil.copytree(marian_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(fields)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@neutral
@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"activation_function": "gelu_new"}, "activation_function='gelu_new'"),
        ({"scale_embedding": False}, "scale_embedding=False"),
        ({"decoder_ffn_dim": 64}, "decoder_ffn_dim=64"),
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder"),
        ({"separate_vocabs": True}, "separate source and target vocabularies"),
        ({"vocab_size": 5}, "vocab.json holds"),
    ],
)
def test_what_cannot_be_represented_is_refused_by_name(
    marian_dir, tmp_path, fields, named
):
    with pytest.raises(ValueError, match=named):
        read_marian(_edited_copy(marian_dir, tmp_path, **fields))


@neutral
def test_missing_files_and_a_repository_id_are_named(marian_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(marian_dir, copy)
    (copy / "target.spm").unlink()
    (copy / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"target\.spm, model\.safetensors or"):
        read_marian(copy)
    with pytest.raises(FileNotFoundError, match="hf download Helsinki-NLP"):
        read_marian("Helsinki-NLP/opus-mt-en-de")


@neutral
def test_an_export_that_fails_its_check_leaves_nothing(
    untrained_run, tmp_path, monkeypatch
):
    tokenizer = RunDirectory(untrained_run).load_tokenizer()
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size))
    monkeypatch.setattr(huggingface, "LOGITS_TOLERANCE", 0.0)
    set_seeded_weights(model, seed=3, eos_bias=0.0)
    with pytest.raises(ValueError, match="logits differ"):
        save_huggingface(model, tokenizer, tmp_path / "hf", SearchSettings())
    assert list(tmp_path.iterdir()) == []


@neutral
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"position_encoding": "learned"}, "position_encoding='learned'"),
        ({"norm_first": True}, "norm_first=True"),
        ({"attention_window": 3}, "attention_window=3"),
    ],
)
def test_a_model_marian_cannot_hold_is_refused_by_name(
    untrained_run, tmp_path, change, named
):
    tokenizer = RunDirectory(untrained_run).load_tokenizer()
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size, **change))
    with pytest.raises(ValueError, match=named):
        save_huggingface(model, tokenizer, tmp_path / "hf", SearchSettings())
    assert not (tmp_path / "hf").exists()


@neutral
def test_an_imported_tokenizer_saves_and_loads_as_it_was(imported, tmp_path):
    from keras_transformer.data.tokenizer import load_tokenizer

    _, tokenizer, _ = imported
    tokenizer.save(tmp_path / "tokenizer")
    loaded = load_tokenizer(tmp_path / "tokenizer")
    assert loaded.kind == "marian" and loaded.source_eos
    assert loaded.encode(TEXTS) == tokenizer.encode(TEXTS)
    ids = loaded.encode_target(TARGETS)
    assert loaded.detokenize(pad_batch(ids)) == tokenizer.detokenize(pad_batch(ids))
    assert loaded.id_to_piece(BOS_ID) == "<s>"  # The decoder start's copy.
    (tmp_path / "tokenizer" / "marian_ids.json").unlink()
    with pytest.raises(ValueError, match=r"marian_ids\.json is missing"):
        load_tokenizer(tmp_path / "tokenizer")


@neutral
def test_both_ctranslate2_routes_translate_as_we_do(marian_dir, imported, tmp_path):
    """CTranslate2's own Marian converter on the checkpoint, and our
    `export --format ctranslate2` of the import: greedy outputs equal ours."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    from keras_transformer.export.ctranslate2 import export_ctranslate2
    from keras_transformer.export.preset import preset_as_run

    model, tokenizer, _ = imported
    texts = [*TEXTS, "the old man likes the garden.", "a child sees a tree."]
    ours = Translator(model, tokenizer, beam_size=1, max_extra_length=8)
    expected = [row.split() for row in ours.translate(texts)]
    converted = TransformersConverter(str(marian_dir)).convert(str(tmp_path / "ct2"))
    preset = import_huggingface(marian_dir, tmp_path / "preset")
    run = preset_as_run(preset, tmp_path / "run")
    exported = export_ctranslate2(run, tmp_path / "ours", beam_size=1)
    pieces = [
        [tokenizer.id_to_piece(i) for i in row] for row in tokenizer.encode(texts)
    ]
    for directory in (converted, exported):
        translator = ctranslate2.Translator(str(directory))
        outputs = [  # Each its own limit, as ours: its length + 8.
            translator.translate_batch(
                [source], beam_size=1, max_decoding_length=len(source) + 8
            )[0].hypotheses[0]
            for source in pieces
        ]
        outputs = [[tokenizer.vocab[piece] for piece in row] for row in outputs]
        marian_to_ours = {m: i for i, m in enumerate(tokenizer.marian_ids)}
        ids = [[marian_to_ours[m] for m in row] for row in outputs]
        words = [text.split() for text in tokenizer.detokenize(pad_batch(ids))]
        assert words == expected, directory


@neutral
def test_lora_fine_tunes_an_import_and_the_run_exports_back(marian_dir, tmp_path):
    """`train --init-from PRESET --lora-rank 2` on an imported checkpoint: the
    text is split with its SentencePiece models, the projections change,
    the logits bias (Marian's buffer) does not, and the run exports back."""
    from keras_transformer.export.huggingface import export_huggingface
    from keras_transformer.training import train
    from tests.helpers import training_options, write_training_corpus

    preset = import_huggingface(marian_dir, tmp_path / "preset")
    (tmp_path / "corpus").mkdir()
    files = write_training_corpus(tmp_path / "corpus")
    options = training_options(
        tmp_path / "run",
        files,
        overrides={},
        vocab_size=4000,
        init_from=str(preset),
        lora_rank=2,
        max_steps=8,
    )
    train(options)
    before, _, _ = opened(marian_dir)
    after = RunDirectory(tmp_path / "run").open_for_inference(None, load_model=True)
    assert after.tokenizer.kind == "marian"

    def weight(model, path):
        return next(to_numpy(w) for w in model.weights if w.path == path)

    query = "encoder_block_0/self_attention/query_projection/kernel"
    changed = weight(after.model, query) - weight(before, query)
    assert np.abs(changed).max() > 0 and np.linalg.matrix_rank(changed) <= 2
    bias = "output_bias/bias"
    np.testing.assert_array_equal(weight(after.model, bias), weight(before, bias))
    out = export_huggingface(tmp_path / "run", tmp_path / "hf")
    differences = json.loads((out / "export.json").read_text())
    assert differences["transformers_logits_difference"]["conversion"] <= 1e-4


@neutral
def test_a_pytorch_bin_checkpoint_with_stored_positions_imports_alike(
    marian_dir, theirs, tmp_path
):
    """Older OPUS-MT uploads: `pytorch_model.bin`, the sinusoid stored with
    the weights (checked to be Marian's, as `transformers` computes it)."""
    from keras_transformer.run.marian_layout import marian_position_table

    marian, _ = theirs
    copy = tmp_path / "bin"
    shutil.copytree(marian_dir, copy)
    (copy / "model.safetensors").unlink()
    state = {k: v.clone() for k, v in marian.state_dict().items()}
    table = marian.model.encoder.embed_positions.weight.detach().numpy()
    np.testing.assert_allclose(marian_position_table(*table.shape), table, atol=1e-6)
    state["model.encoder.embed_positions.weight"] = torch.as_tensor(table)
    torch.save(state, copy / "pytorch_model.bin")
    model, tokenizer, _ = opened(copy)
    ours, expected = both_logits(model, tokenizer, marian, TEXTS, TARGETS)
    np.testing.assert_allclose(ours, expected, atol=1e-4)
    state["model.encoder.embed_positions.weight"] = torch.as_tensor(table[::-1].copy())
    torch.save(state, copy / "pytorch_model.bin")
    with pytest.raises(ValueError, match="not Marian's sinusoidal table"):
        read_marian(copy)


@neutral
def test_the_docs_snippets_run_as_written(
    marian_dir, trained_run, tmp_path, monkeypatch, capsys
):
    """docs/huggingface.md's Python blocks, in a directory holding what they
    name: an OPUS-MT-like checkpoint, a preset, an export of a trained run."""
    from keras_transformer.export.huggingface import export_huggingface
    from keras_transformer.export.preset import export_preset
    from tests.test_docs import HUGGINGFACE_SNIPPETS

    assert len(HUGGINGFACE_SNIPPETS) == 4
    (tmp_path / "opus-mt-en-de").symlink_to(marian_dir)
    export_preset(trained_run, tmp_path / "presets" / "mine", SearchSettings())
    export_huggingface(trained_run, tmp_path / "hf-tiny")
    monkeypatch.chdir(tmp_path)
    for number, code in enumerate(HUGGINGFACE_SNIPPETS, start=1):
        exec(compile(code, f"docs/huggingface.md block {number}", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert (tmp_path / "hf-mine" / "model.safetensors").is_file()
    assert float(printed[-1]) < 1e-4  # The conversion check's difference.
