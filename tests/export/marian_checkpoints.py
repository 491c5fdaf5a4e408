"""Small MarianMT checkpoints made here by `transformers` (no download), laid
out as OPUS-MT's: a SentencePiece model per side, one joint `vocab.json`
numbered as Marian's (`</s>` 0, `<unk>` 1, ..., `<pad>` last), the decoder
starting with the pad id, swish, and a non-zero `final_logits_bias`."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tests.helpers import make_corpus


def _sentencepiece(texts: list[str], size: int) -> bytes:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=size,
        model_type="unigram",
        pad_id=-1,
        bos_id=-1,
        eos_id=2,
        unk_id=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def _joint_vocabulary(protos: list[bytes]) -> dict[str, int]:
    import sentencepiece

    pieces = ["</s>", "<unk>"]
    for proto in protos:
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        for index in range(processor.get_piece_size()):
            piece = processor.id_to_piece(index)
            control = piece.startswith("<") and piece.endswith(">")
            if piece not in pieces and not control:
                pieces.append(piece)
    pieces += [">>deu<<", "<pad>"]  # A language code, as multilingual ones.
    return {piece: index for index, piece in enumerate(pieces)}


def write_marian_checkpoint(
    directory: Path, *, activation: str = "swish", seed: int = 0, **config
) -> Path:
    """A random MarianMT of 2 + 1 layers, d_model 16, in `directory`."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    directory.mkdir(parents=True, exist_ok=True)
    source = _sentencepiece(make_corpus(300, 1), 60)
    target = _sentencepiece([t.upper() for t in make_corpus(300, 2)], 60)
    vocab = _joint_vocabulary([source, target])
    (directory / "source.spm").write_bytes(source)
    (directory / "target.spm").write_bytes(target)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "MarianTokenizer", "separate_vocabs": False})
    )
    pad = vocab["<pad>"]
    values = dict(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=16,
        encoder_layers=2,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        activation_function=activation,
        scale_embedding=True,
        max_position_embeddings=128,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
    )
    values.update(config)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**values)).eval()
    with torch.no_grad():  # Away from the initial values, which are special.
        model.final_logits_bias.normal_(0.0, 0.5)
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
    model.save_pretrained(str(directory))
    return directory
