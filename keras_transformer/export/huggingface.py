"""Export a trained run as a Hugging Face MarianMT checkpoint.

`export --format huggingface` (and `TransformerSeq2SeqLM.save_to_huggingface`)
write a directory that `transformers` loads with `MarianMTModel` and
`MarianTokenizer`::

    config.json, generation_config.json    # MarianConfig; our beam and alpha
    model.safetensors                      # the weights (marian_layout)
    source.spm, target.spm, vocab.json     # MarianTokenizer's files
    tokenizer_config.json, special_tokens_map.json
    README.md                              # a model card
    export.json                            # what was exported, and how

What differs between the two conventions (also in the card):

- Our sources carry no end-of-sentence token; `MarianTokenizer` appends
  `</s>` to every source. Tokenize with ``add_special_tokens=False`` to give
  the model what it was trained on (a checkpoint imported from Marian keeps
  its `</s>`, and its card says to leave the default). `config.json` says
  which (`keras_transformer_source_eos`), so an import back tokenizes as
  the model was trained.
- CTranslate2's Marian converter (`ct2-transformers-converter`) assumes
  OPUS-MT's layout: the decoder starts from a zero vector and pad is the
  last piece. That holds for an imported OPUS-MT checkpoint exported back,
  not for a model trained here, whose decoder starts from a learned BOS:
  convert those with `export --format ctranslate2`, which writes the same
  weights for CTranslate2 directly.
- Beam search normalises by GNMT's ``((5 + length) / 6) ** alpha`` here and
  by ``length ** length_penalty`` in `transformers`: greedy outputs agree
  token for token, beam outputs can rank finished hypotheses differently.
- `transformers` builds Marian's layer norms with epsilon 1e-5 whatever the
  config says; ours default to 1e-6. The logits move by about 1e-4 for
  it (`export.json` records how much on the sample); `config.json` keeps
  ours for an import back.

Written to a staging directory next to `out` and renamed into place after a
check: when `transformers` (and torch) are installed, it loads the
directory, and its logits on sample sentences must equal ours (with
Marian's epsilon) within 1e-4 (an error, and nothing at `out`, otherwise).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.config import BOS_ID
from keras_transformer.decoding.settings import SearchSettings, search_settings
from keras_transformer.export.common import check_out, export_record, open_run
from keras_transformer.export.options import HF_MAX_POSITIONS
from keras_transformer.export.preset import training_data
from keras_transformer.export.reading import EXPORT_INFO
from keras_transformer.run.marian_layout import MarianIds, to_marian
from keras_transformer.run.preset_files import weights_bytes
from keras_transformer.utils.atomic_files import atomic_directory
from keras_transformer.utils.optional_imports import install_command
from keras_transformer.utils.version import __version__

DEFAULT_MAX_POSITIONS = HF_MAX_POSITIONS  # Rows of the position table written.
#: How far `transformers`' logits may be from ours (the acceptance bound).
LOGITS_TOLERANCE = 1e-4
#: The epsilon of every layer norm in transformers' Marian (PyTorch's default).
MARIAN_EPSILON = 1e-5
SAMPLE_TEXTS = (
    "The dog sleeps.",
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two children play in the garden while their parents watch.",
    "Where is the station?",
)
WEIGHTS_FILE = "model.safetensors"


def export_huggingface(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    settings: SearchSettings | None = None,
    *,
    model: str | os.PathLike | None = None,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    card: dict[str, Any] | None = None,
    **changes,
) -> Path:
    """Export the run in `run_dir` as a MarianMT directory at `out`.

    Args:
        run_dir: A trained run directory (any backend).
        out: The directory to create; must not exist, or be empty.
        settings: The search settings written as `generation_config.json`'s
            defaults (beam size; alpha as `length_penalty`). The paper's
            by default.
        model: A `.keras` file to export instead of the run's final model.
        max_positions: Rows of the position table: the longest source and
            output `transformers` can then run (`max_position_embeddings`).
        card: The model card's fields, over what the run records:
            "command" (that made it), "source", "training_data", "bleu".
        **changes: `SearchSettings` fields to change.

    Raises:
        ImportError: safetensors is not installed (the message names the
            extra).
        ValueError: A model or tokenizer MarianMT cannot represent (named),
            or `transformers`' logits differ from ours.
        FileExistsError: `out` exists and is not empty.
    """
    settings = search_settings(settings, **changes)
    _check_max_positions(max_positions)
    _import_safetensors()
    out = Path(out)
    run = open_run(run_dir, out, model, load_model=True)
    manifest = run.run.manifest() or {}
    recorded = {
        "training_data": training_data(manifest),
        "bleu": _test_bleu(run.run.test_scores_path),
        "source": f"{run.run.path} ({run.model_path.name})",
    }
    card = {**recorded, **{k: v for k, v in (card or {}).items() if v is not None}}

    return save_huggingface(
        run.model,
        run.tokenizer,
        out,
        settings,
        max_positions,
        card,
        record=lambda differences: export_record(
            run,
            settings,
            format="huggingface",
            max_positions=max_positions,
            # Max |logit difference| on SAMPLE_TEXTS; None: not checked.
            transformers_logits_difference=differences,
        ),
    )


def save_huggingface(
    model,
    tokenizer,
    out: str | os.PathLike,
    settings: SearchSettings,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    card: dict[str, Any] | None = None,
    *,
    record=None,
) -> Path:
    """Write `model` and `tokenizer` as a MarianMT directory at `out` (which
    must not exist, or be empty): into a staging directory beside it,
    checked with `transformers` when installed, then renamed into place.
    `record(differences)` gives `export.json`'s contents (default: the
    package version, the settings and the check's differences)."""
    _check_max_positions(max_positions)
    _import_safetensors()
    out = Path(out)
    check_out(out)

    def write(staging: Path) -> None:
        write_marian(model, tokenizer, staging, settings, max_positions, card)
        differences = check_with_transformers(staging, model, tokenizer)
        info = (
            record(differences)
            if record is not None
            else {
                "package_version": __version__,
                "format": "huggingface",
                "transformers_logits_difference": differences,
                **settings.to_dict(),
            }
        )
        (staging / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")

    atomic_directory(
        out,
        write,
        needed_bytes=weights_bytes(model),
        what="the Hugging Face export",
    )
    return out


def write_marian(
    model,
    tokenizer,
    directory: Path,
    settings: SearchSettings,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    card: dict[str, Any] | None = None,
) -> None:
    """Write `model` and `tokenizer` as MarianMT's files into `directory`
    (which exists); no check (`check_with_transformers` does that)."""
    from safetensors.numpy import save_file

    ids = MarianIds.of_tokenizer(tokenizer)
    config, tensors = to_marian(model, ids, max_positions, source_eos(tokenizer))
    directory = Path(directory)
    _write_json(directory / "config.json", config)
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    _write_tokenizer(tokenizer, ids, directory)
    _write_json(directory / "generation_config.json", _generation(ids, settings))
    (directory / "README.md").write_text(
        _model_card(model.config, tokenizer, settings, card or {}), encoding="utf-8"
    )


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", "utf-8")


def _write_tokenizer(tokenizer, ids: MarianIds, directory: Path) -> None:
    if tokenizer.kind == "marian":  # Imported: its own files, as they came.
        source, target = (
            tokenizer.spm_protos["source.spm"],
            tokenizer.spm_protos["target.spm"],
        )
        vocab = tokenizer.vocab
    elif tokenizer.kind == "sentencepiece":
        source = target = tokenizer.model_proto
        vocab = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    else:
        raise ValueError(
            f"A {tokenizer.kind} tokenizer cannot be exported for MarianTokenizer, "
            "which reads SentencePiece models: train with --tokenizer sentencepiece."
        )
    (directory / "source.spm").write_bytes(source)
    (directory / "target.spm").write_bytes(target)
    _write_json(directory / "vocab.json", vocab)
    pieces = {marian_id: piece for piece, marian_id in vocab.items()}
    _write_json(
        directory / "tokenizer_config.json",
        {
            "tokenizer_class": "MarianTokenizer",
            "model_max_length": DEFAULT_MAX_POSITIONS,
            "separate_vocabs": False,
            "unk_token": pieces[ids.unk],
            "eos_token": pieces[ids.eos],
            "pad_token": pieces[ids.pad],
        },
    )
    _write_json(
        directory / "special_tokens_map.json",
        {
            "unk_token": pieces[ids.unk],
            "eos_token": pieces[ids.eos],
            "pad_token": pieces[ids.pad],
        },
    )


def _generation(ids: MarianIds, settings: SearchSettings) -> dict[str, Any]:
    # The tokens our search never writes (PAD, BOS, UNK), as transformers'
    # bad_words_ids: both remove them after the softmax.
    never = sorted({ids.pad, ids.unk, ids.decoder_start})
    return {
        "decoder_start_token_id": ids.decoder_start,
        "pad_token_id": ids.pad,
        "eos_token_id": ids.eos,
        "forced_eos_token_id": None,
        "bad_words_ids": [[i] for i in never],
        "num_beams": settings.beam_size,
        # Not GNMT's alpha (the module doc); transformers warns of it unused
        # by greedy search.
        **({"length_penalty": settings.alpha} if settings.beam_size > 1 else {}),
        "max_length": DEFAULT_MAX_POSITIONS,
    }


def _model_card(config, tokenizer, settings: SearchSettings, card: dict) -> str:
    imported = source_eos(tokenizer)  # Marian's convention, so its tokenizer's.
    sizes = (
        f"{config.num_encoder_layers}+{config.num_decoder_layers} layers, d_model "
        f"{config.d_model}, d_ff {config.d_ff}, {config.num_heads} heads, "
        f"{MarianIds.of_tokenizer(tokenizer).marian_vocab_size} tokens, "
        f"activation {config.activation}"
    )
    options = "" if imported else ", add_special_tokens=False"
    tokenize = f'tokenizer(texts, return_tensors="pt", padding=True{options})'
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: translation",
        "tags: [marian, keras-transformer]",
        "---",
        "",
        "# A Transformer (Vaswani et al. 2017) trained with keras-transformer",
        "",
        f"- Model: {sizes}.",
        f"- Training data: {card.get('training_data') or 'not recorded'}.",
        "- Test BLEU (sacreBLEU, the run's test split): "
        f"{card.get('bleu') or 'not recorded'}.",
        f"- Exported from: {card.get('source') or 'a TransformerSeq2SeqLM'}.",
        f"- Made with: `{card.get('command') or 'save_to_huggingface'}`.",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import MarianMTModel, MarianTokenizer",
        "",
        'tokenizer = MarianTokenizer.from_pretrained("THIS_DIRECTORY")',
        'model = MarianMTModel.from_pretrained("THIS_DIRECTORY")',
        'texts = ["The dog sleeps."]',
        f"batch = {tokenize}",
        f"output = model.generate(**batch, num_beams={settings.beam_size})",
        "print(tokenizer.batch_decode(output, skip_special_tokens=True))",
        "```",
        "",
        "## What differs from keras-transformer's own search",
        "",
    ]
    if not imported:
        lines.append(
            "- The model was trained on sources without `</s>`: pass "
            "`add_special_tokens=False` as above (MarianTokenizer appends it)."
        )
    lines += [
        "- Beam search: keras-transformer normalises scores by GNMT's "
        "((5 + length) / 6) ** alpha, transformers by length ** length_penalty; "
        "greedy search (num_beams=1) gives the same tokens.",
        "- keras-transformer allows each sentence its source length + "
        f"{settings.max_extra_length} tokens; pass max_new_tokens to match.",
        "",
    ]
    return "\n".join(lines)


def source_eos(tokenizer) -> bool:
    """Whether `tokenizer`'s sources end in `</s>`: an imported Marian
    tokenizer's do (unless it came from an export of ours), ours never."""
    return bool(getattr(tokenizer, "source_eos", False))


def _test_bleu(path: Path) -> str | None:
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
        return f"{float(scores['bleu']):.2f}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_with_transformers(directory: Path, model, tokenizer) -> dict | None:
    """Load `directory` with `transformers` and compare its logits on
    `SAMPLE_TEXTS` (teacher-forced on the sentences themselves) with ours.

    `transformers` builds Marian's layer norms with epsilon 1e-5, so the
    conversion is checked against `model` with that epsilon (the same
    weights): within `LOGITS_TOLERANCE`. The difference from `model` as
    trained (its own epsilon) is measured and returned too. Returns None,
    checking nothing, when transformers or torch is not installed.

    Raises:
        ValueError: The logits differ by more than `LOGITS_TOLERANCE`, or
            `MarianTokenizer` splits a sample otherwise than `tokenizer`.
    """
    try:
        import torch
        from transformers import MarianMTModel, MarianTokenizer
    except ImportError:
        return None
    ids = MarianIds.of_tokenizer(tokenizer)
    sources = tokenizer.encode(list(SAMPLE_TEXTS))
    targets = tokenizer.encode_target(list(SAMPLE_TEXTS))
    to_marian_id = np.asarray(ids.marian_ids)
    theirs_tokenizer = MarianTokenizer.from_pretrained(str(directory))
    encoded = theirs_tokenizer(
        list(SAMPLE_TEXTS), add_special_tokens=source_eos(tokenizer)
    )
    for text, ours, theirs in zip(SAMPLE_TEXTS, sources, encoded["input_ids"]):
        if to_marian_id[ours].tolist() != list(theirs):
            raise ValueError(
                f"{directory}: MarianTokenizer splits {text!r} into ids {theirs}, "
                f"this package into {to_marian_id[ours].tolist()}."
            )
    theirs_model = MarianMTModel.from_pretrained(str(directory)).eval()
    differences = {}
    for name, candidate in (
        ("conversion", _with_epsilon(model, MARIAN_EPSILON)),
        ("as_trained", model),
    ):
        ours_logits, theirs_logits = _sample_logits(
            candidate, theirs_model, sources, targets, ids, torch
        )
        differences[name] = float(np.max(np.abs(ours_logits - theirs_logits)))
    if differences["conversion"] > LOGITS_TOLERANCE:
        raise ValueError(
            f"{directory}: transformers' logits differ from this package's by "
            f"{differences['conversion']:.3g} (more than {LOGITS_TOLERANCE}); "
            "nothing was written."
        )
    return differences


def _with_epsilon(model, epsilon: float):
    """`model` itself, or a copy of it (its own class, from its config) whose
    layer norms use `epsilon`."""
    if model.config.layer_norm_epsilon == epsilon:
        return model
    config = model.get_config()
    config["config"] = {**config["config"], "layer_norm_epsilon": epsilon}
    copy = type(model).from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def _sample_logits(model, theirs_model, sources, targets, ids: MarianIds, torch):
    """Both models' logits over the real positions, in Marian's vocabulary order."""
    from keras import ops

    from keras_transformer.decoding.batching import pad_batch

    source_ids = pad_batch(sources)
    decoder_input = pad_batch([[BOS_ID, *row] for row in targets])
    ours = np.asarray(
        ops.convert_to_numpy(
            model({"source_ids": source_ids, "target_ids": decoder_input})
        )
    )[..., ids.kept_rows()]
    to_marian_id = np.asarray(ids.marian_ids)
    with torch.no_grad():
        theirs = theirs_model(
            input_ids=torch.as_tensor(to_marian_id[source_ids]),
            attention_mask=torch.as_tensor(source_ids != 0),
            decoder_input_ids=torch.as_tensor(to_marian_id[decoder_input]),
        ).logits.numpy()
    real = decoder_input != 0
    return ours[real], theirs[real]


def _check_max_positions(max_positions: int) -> None:
    if (
        isinstance(max_positions, bool)
        or not isinstance(max_positions, int)
        or max_positions < 1
    ):
        raise ValueError(
            f"max_positions must be an integer >= 1. Received: {max_positions!r}"
        )


def _import_safetensors() -> None:
    try:
        import safetensors  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "--format huggingface needs the safetensors package: "
            f"{install_command('hf')} (or pip install safetensors)."
        ) from error
