"""Read a Hugging Face MarianMT checkpoint (the OPUS-MT family), converted.

`read_marian` is what `decoding.opening.open_huggingface` builds a model
from, for `TransformerSeq2SeqLM.from_huggingface(DIR)` and `keras-transformer
import DIR --out PRESET` (which writes it as a preset). They read a local MarianMT
directory (`config.json`, `model.safetensors` or `pytorch_model.bin`,
`source.spm`, `target.spm`, `vocab.json`); nothing is downloaded. The
result translates, fine-tunes (`train --init-from PRESET --lora-rank 8`),
quantizes, exports and serves as any model of this package.

What the conversion does (`marian_layout`): the model dimension is
permuted to the paper's interleaved sinusoids, linear weights transposed,
Marian's feed-forward activation (`swish` in OPUS-MT) and
`final_logits_bias` kept as config options, and the ids renumbered so that
PAD, UNK, BOS and EOS are ours (BOS becomes a copy of Marian's decoder
start, the pad row in OPUS-MT). The tokenizer (`MarianTokenizer` kind)
splits sources with `source.spm` and appends `</s>`, as Marian's does.
What cannot be represented is refused by name: separate source and target
vocabularies (`target_vocab.json`), other positions, pre-norm.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tokenizer import MarianTokenizer
from keras_transformer.run.marian_layout import (
    SOURCE_EOS_FIELD,
    MarianIds,
    check_positions,
    config_from_marian,
    from_marian,
)
from keras_transformer.utils.optional_imports import install_command

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")


@dataclasses.dataclass(frozen=True)
class MarianCheckpoint:
    """A MarianMT checkpoint read and converted: our `config`, the
    `tokenizer` and `search` settings to go with it, and its weights, which
    `load_into` puts into a model built from `config`
    (`decoding.opening.open_huggingface` does both)."""

    config: TransformerConfig
    tokenizer: MarianTokenizer
    search: dict
    """`SearchSettings` fields the checkpoint sets (its beam size)."""
    tensors: dict
    ids: MarianIds
    where: str

    def load_into(self, model) -> None:
        """Assign the checkpoint's weights to `model` (built from `config`)."""
        from_marian(model, self.tensors, self.ids, self.where)


def read_marian(directory: str | os.PathLike) -> MarianCheckpoint:
    """The MarianMT checkpoint in `directory`, converted (`MarianCheckpoint`).

    Raises:
        FileNotFoundError: `directory` or one of its files is missing (a
            repository id gets the command that downloads it).
        ValueError: what the checkpoint holds that this package cannot
            represent, or a file that does not read, named.
        ImportError: safetensors (or torch, for a `.bin`) is missing.
    """
    directory = _check_directory(Path(directory))
    fields = _read_json(directory / "config.json")
    vocab = _read_json(directory / "vocab.json")
    if (directory / "target_vocab.json").exists() or fields.get("separate_vocabs"):
        raise ValueError(
            f"{directory}: separate source and target vocabularies "
            "(target_vocab.json, separate_vocabs) cannot be imported: this "
            "package's models share one vocabulary."
        )
    ids = _marian_ids(fields, vocab, directory)
    tensors = _read_weights(directory)
    bias = np.asarray(tensors.get("final_logits_bias", np.zeros(1)), np.float32)
    config = config_from_marian(
        fields, len(ids.marian_ids), bool(np.any(bias != 0)), str(directory)
    )
    check_positions(tensors, config.d_model, str(directory))
    tokenizer = MarianTokenizer(
        (directory / "source.spm").read_bytes(),
        (directory / "target.spm").read_bytes(),
        vocab,
        list(ids.marian_ids),
        # False for a model trained here and exported: its sources had none.
        source_eos=fields.get(SOURCE_EOS_FIELD, True) is not False,
    )
    return MarianCheckpoint(
        config, tokenizer, _search_settings(directory), tensors, ids, str(directory)
    )


def _check_directory(directory: Path) -> Path:
    if directory.is_dir():
        missing = [
            name
            for name in ("config.json", *TOKENIZER_FILES)
            if not (directory / name).is_file()
        ]
        if not any((directory / name).is_file() for name in WEIGHT_FILES):
            missing.append(" or ".join(WEIGHT_FILES))
        if missing:
            raise FileNotFoundError(
                f"{directory} is not a whole MarianMT checkpoint: {', '.join(missing)} "
                "missing."
            )
        return directory
    hint = ""
    if "/" in str(directory) and not str(directory).startswith((".", "/")):
        hint = (
            f" If {directory} is a Hugging Face repository, download it first "
            f"(this package downloads nothing): hf download "
            f"{directory} --local-dir {Path(str(directory)).name}"
        )
    raise FileNotFoundError(f"{directory} is not a directory.{hint}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: unreadable ({error}).") from None


def _marian_ids(fields: dict, vocab: dict, directory: Path) -> MarianIds:
    size = fields.get("vocab_size")
    if not isinstance(size, int) or sorted(vocab.values()) != list(range(size)):
        raise ValueError(
            f"{directory}: vocab.json holds {len(vocab)} pieces, which do not "
            f"number 0 .. vocab_size - 1 = {size} - 1 of config.json."
        )
    roles = {}
    for role in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        value = fields.get(role)
        if not isinstance(value, int) or not 0 <= value < size:
            raise ValueError(f"{directory}/config.json: {role}={value!r} is not an id.")
        roles[role] = value
    unk = vocab.get("<unk>")
    if unk is None:
        raise ValueError(f"{directory}/vocab.json: no <unk> piece.")
    return MarianIds.renumbered(
        size,
        pad=roles["pad_token_id"],
        eos=roles["eos_token_id"],
        unk=unk,
        decoder_start=roles["decoder_start_token_id"],
    )


def _read_weights(directory: Path) -> dict[str, np.ndarray]:
    path = directory / WEIGHT_FILES[0]
    if path.is_file():
        try:
            from safetensors.numpy import load_file
        except ImportError as error:
            raise ImportError(
                f"Reading {path} needs safetensors: {install_command('hf')}."
            ) from error
        try:
            return load_file(str(path))
        except Exception as error:  # noqa: BLE001 - safetensors' own kinds.
            raise ValueError(f"{path}: not readable safetensors ({error}).") from None
    path = directory / WEIGHT_FILES[1]
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            f"{path} is a PyTorch file, which needs torch to read "
            f"({install_command('torch')}); a model.safetensors needs only "
            "safetensors."
        ) from error
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    return {name: value.float().numpy() for name, value in state.items()}


def _search_settings(directory: Path) -> dict:
    """The checkpoint's beam size, as `SearchSettings` fields; GNMT's alpha
    stays the paper's (Marian's length_penalty is another formula)."""
    path = directory / "generation_config.json"
    beams = _read_json(path).get("num_beams") if path.is_file() else None
    if isinstance(beams, int) and not isinstance(beams, bool) and beams >= 1:
        return {"beam_size": beams}
    return {}
