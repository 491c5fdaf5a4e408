"""Joint (shared) subword tokenizers: SentencePiece BPE and WordPiece.

Both implement one interface: `encode` / `tokenize` texts to int32 ids,
`detokenize` ids back to strings, `save` / `load_tokenizer` a run directory.
The reserved ids are fixed for every tokenizer: PAD 0, UNK 1, BOS 2, EOS 3.

The paper used a shared BPE vocabulary of about 37,000 tokens for EN-DE, so
SentencePiece BPE is the default; WordPiece (keras-hub / tensorflow-text)
runs in the TensorFlow graph, which a SavedModel export can embed. The
vocabulary is learned on a seeded sample of the training text when the
corpus is large.
"""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

RESERVED_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
TOKENIZER_KINDS = ("sentencepiece", "wordpiece")
_META_FILE = "tokenizer.json"


class SubwordTokenizer:
    """Common interface; subclasses implement `encode`, `_decode`, `save`."""

    kind = ""
    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts -> ragged lists of ids, without BOS/EOS."""
        raise NotImplementedError

    def _decode(self, ids: list[list[int]]) -> list[str]:
        raise NotImplementedError

    def id_to_piece(self, token_id: int) -> str:
        """The subword string of one id (for attention plots)."""
        raise NotImplementedError

    def save(self, directory: str | os.PathLike) -> None:
        raise NotImplementedError

    def tokenize(
        self, texts: Sequence[str], *, add_eos: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Texts -> (ids (B, L) int32 padded with 0, lengths (B,) int32)."""
        encoded = self.encode(texts)
        if add_eos:
            encoded = [ids + [self.eos_id] for ids in encoded]
        lengths = np.array([len(ids) for ids in encoded], dtype=np.int32)
        batch = np.zeros((len(encoded), max(lengths, default=0)), dtype=np.int32)
        for row, ids in enumerate(encoded):
            batch[row, : len(ids)] = ids
        return batch, lengths

    def detokenize(self, ids) -> list[str]:
        """(B, L) ids -> strings. Stops at EOS; drops PAD and BOS."""
        cleaned = []
        for row in np.asarray(ids).tolist():
            if self.eos_id in row:
                row = row[: row.index(self.eos_id)]
            cleaned.append([i for i in row if i not in (self.pad_id, self.bos_id)])
        return self._decode(cleaned)

    def _write_meta(self, directory: Path, **extra) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, **extra}
        (directory / _META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


class SentencePieceTokenizer(SubwordTokenizer):
    """SentencePiece BPE with the reserved ids fixed (PAD 0 ... EOS 3)."""

    kind = "sentencepiece"
    model_file = "sentencepiece.model"

    def __init__(self, model_proto: bytes):
        import sentencepiece

        self.model_proto = model_proto
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        if self._processor.pad_id() != PAD_ID or self._processor.eos_id() != EOS_ID:
            raise ValueError(
                "SentencePiece model has reserved ids "
                f"pad={self._processor.pad_id()} eos={self._processor.eos_id()}; "
                f"expected pad={PAD_ID}, unk={UNK_ID}, bos={BOS_ID}, eos={EOS_ID}."
            )

    @classmethod
    def train(
        cls, texts: Sequence[str], vocab_size: int, *, model_type: str = "bpe"
    ) -> SentencePieceTokenizer:
        import sentencepiece

        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            character_coverage=1.0,
            # The caller samples; SentencePiece's own sampling is unseeded.
            input_sentence_size=0,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
        return cls(model.getvalue())

    @property
    def vocab_size(self) -> int:
        return self._processor.get_piece_size()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self._processor.encode(list(texts), out_type=int)

    def _decode(self, ids: list[list[int]]) -> list[str]:
        return self._processor.decode(ids)

    def id_to_piece(self, token_id: int) -> str:
        return self._processor.id_to_piece(int(token_id))

    def save(self, directory: str | os.PathLike) -> None:
        directory = Path(directory)
        self._write_meta(directory, model_file=self.model_file)
        (directory / self.model_file).write_bytes(self.model_proto)

    @classmethod
    def load(cls, directory: Path) -> SentencePieceTokenizer:
        return cls((directory / cls.model_file).read_bytes())


class WordPieceTokenizer(SubwordTokenizer):
    """WordPiece through keras-hub (tensorflow-text ops, in-graph)."""

    kind = "wordpiece"
    vocab_file = "wordpiece_vocab.txt"

    def __init__(self, vocabulary: list[str]):
        import keras_hub

        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"WordPiece vocabulary must start with {list(RESERVED_TOKENS)}. "
                f"Received: {vocabulary[: len(RESERVED_TOKENS)]}"
            )
        self.vocabulary = list(vocabulary)
        self.layer = keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=self.vocabulary,
            lowercase=False,
            strip_accents=False,
            oov_token="<unk>",
            dtype="int32",
        )

    @classmethod
    def train(cls, texts: Sequence[str], vocab_size: int) -> WordPieceTokenizer:
        import keras_hub
        import tensorflow as tf

        # A Python list would be read as a list of *file names*; the texts
        # go in as a dataset.
        data = tf.data.Dataset.from_tensor_slices(list(texts)).batch(1024)
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            data, vocab_size, reserved_tokens=list(RESERVED_TOKENS)
        )
        return cls(vocabulary)

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def id_to_piece(self, token_id: int) -> str:
        return self.vocabulary[int(token_id)]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        ragged = self.layer.tokenize(list(texts))
        # Outside a tf.function keras-hub already returns nested lists.
        rows = ragged.to_list() if hasattr(ragged, "to_list") else ragged
        return [list(map(int, row)) for row in rows]

    def _decode(self, ids: list[list[int]]) -> list[str]:
        if not ids:
            return []
        import tensorflow as tf

        ragged = tf.ragged.constant(ids, dtype=tf.int32, inner_shape=None)
        if all(not row for row in ids):
            return [""] * len(ids)
        text = self.layer.detokenize(ragged)
        # Bytes from a tf tensor; str where keras-hub already converted.
        return [
            t.decode("utf-8") if isinstance(t, bytes) else t
            for t in np.asarray(text).reshape(-1).tolist()
        ]

    def save(self, directory: str | os.PathLike) -> None:
        directory = Path(directory)
        self._write_meta(directory, vocab_file=self.vocab_file)
        (directory / self.vocab_file).write_text(
            "\n".join(self.vocabulary) + "\n", encoding="utf-8"
        )

    @classmethod
    def load(cls, directory: Path) -> WordPieceTokenizer:
        text = (directory / cls.vocab_file).read_text(encoding="utf-8")
        return cls(text.splitlines())


_CLASSES = {cls.kind: cls for cls in (SentencePieceTokenizer, WordPieceTokenizer)}


def train_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    *,
    kind: str = "sentencepiece",
    sample_size: int = 2_000_000,
    seed: int = 0,
) -> SubwordTokenizer:
    """Learn a joint vocabulary from `texts` (source and target together).

    At most `sample_size` sentences, drawn with `seed`, are used, which keeps
    vocabulary building fast and bounded in memory on large corpora.
    """
    if kind not in _CLASSES:
        raise ValueError(
            f"Unknown tokenizer kind. Expected one of {TOKENIZER_KINDS}. "
            f"Received: kind={kind!r}"
        )
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValueError("Cannot learn a vocabulary from an empty training text.")
    if len(texts) > sample_size:
        texts = random.Random(seed).sample(texts, sample_size)
    return _CLASSES[kind].train(texts, vocab_size)


def load_tokenizer(directory: str | os.PathLike) -> SubwordTokenizer:
    """Load the tokenizer saved in `directory` (a run directory)."""
    directory = Path(directory)
    meta_path = directory / _META_FILE
    if not meta_path.exists():
        raise FileNotFoundError(f"No tokenizer in {directory}: {meta_path} is missing.")
    meta = json.loads(meta_path.read_text())
    kind = meta.get("kind")
    if kind not in _CLASSES:
        raise ValueError(f"{meta_path}: unknown tokenizer kind {kind!r}.")
    return _CLASSES[kind].load(directory)
