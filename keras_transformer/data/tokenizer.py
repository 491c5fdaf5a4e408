"""Joint (shared) subword tokenizers: SentencePiece BPE and WordPiece.

Both implement one interface: `encode` / `tokenize` texts to int32 ids,
`detokenize` ids back to strings, `save` / `load_tokenizer` a run directory.
The reserved ids are fixed for every tokenizer: PAD 0, UNK 1, BOS 2, EOS 3.

The paper used a shared BPE vocabulary of about 37,000 tokens for EN-DE, so
SentencePiece BPE is the default; WordPiece (keras-hub / tensorflow-text)
runs in the TensorFlow graph, which a SavedModel export can embed. The
vocabulary is learned on a seeded sample of the training text when the
corpus is large.

SentencePiece is lossless by default: ``detokenize(encode(text)) == text``
(through the padded `tokenize` / `detokenize` pair too) for any text, with
one exception below. Training uses

* ``byte_fallback=True``: a character that is not in the vocabulary (an
  emoji, a CJK character never seen in training) is encoded as the pieces of
  its UTF-8 bytes instead of `<unk>`. This adds 256 byte pieces, so the
  vocabulary needs at least 4 reserved + 256 + (number of distinct
  characters in the training text) entries; a smaller `vocab_size` raises a
  `ValueError` giving that minimum.
* ``normalization="identity"``: the text is not Unicode-normalised.
* no whitespace collapsing (SentencePiece's ``remove_extra_whitespaces=False``).

With these, runs of spaces, leading and trailing spaces, tabs, ``\r``,
``\n``, NUL and other control characters, combining marks (``"e\u0301"``
stays decomposed), typographic quotes, CJK and emoji all round-trip. The
exception: U+2581 (LOWER ONE EIGHTH BLOCK, ``"▁"``) is SentencePiece's own
symbol for a space, so it comes back as a space. Text must be valid Unicode
(no lone surrogates), which every reader in `keras_transformer.data`
guarantees.

`normalization` chooses SentencePiece's normaliser (stored in the model):

* ``"identity"`` (default): no change, lossless as above.
* ``"nfkc"``: Unicode NFKC. Compatibility characters are folded (full-width
  letters, ligatures such as "ﬁ", circled digits, no-break space -> space)
  and accents composed (``"e\u0301"`` -> ``"é"``); detokenize returns the
  normalised text.
* ``"nmt_nfkc"``: NFKC plus SentencePiece's NMT rules, which also turn tabs,
  line breaks, other control characters and invisible characters (zero-width
  space, BOM) into spaces. SentencePiece's own default.

Tokenizers saved before these options existed (NMT-NFKC, extra spaces
removed, no byte fallback: unseen characters become `<unk>`) load and
behave exactly as before; their options are read from the saved model.

`words` is a plain word-level vocabulary (the parsing task's, whose source
is tokenized words and whose target is tree symbols): a text is split at
whitespace, each word is one id, a word outside the vocabulary is
`<unk>`, and `detokenize` joins with single spaces. It keeps the most
frequent words of the training text (ties broken by first appearance) and,
in the places of the rarest, the unknown-word classes of the words it leaves
out (`data.unknown_words`: "<unk-cap-ed>" for "Flanked"), `vocab_size` - 4
in all; a word outside the vocabulary becomes its class, or `<unk>` when
the class is not in it either (every unknown word of a vocabulary learned
before the classes, as in Vinyals et al., 2015).

WordPiece cannot be lossless: it splits on whitespace and punctuation and
`detokenize` joins the pieces with single spaces ("river." -> "river ."),
and an unseen word becomes `<unk>`. Prefer SentencePiece where the output
text matters.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import math
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data.text_files import DataError, PairBlock, sha256_file
from keras_transformer.data.unknown_words import (
    is_class_token,
    unknown_word_class,
    words_and_classes,
)
from keras_transformer.utils import console
from keras_transformer.utils.atomic_files import atomic_write_bytes, atomic_write_text
from keras_transformer.utils.cpu import available_cores
from keras_transformer.utils.optional_imports import require

RESERVED_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
# The kinds a run can learn, then the one it can only be given: an imported
# MarianMT checkpoint's (`import --from huggingface`).
LEARNED_KINDS = ("sentencepiece", "wordpiece", "words")
TOKENIZER_KINDS = (*LEARNED_KINDS, "marian")
NORMALIZATIONS = ("identity", "nfkc", "nmt_nfkc")
"""SentencePiece normalisations accepted by `train_tokenizer` (module doc)."""
_BYTE_PIECES = 256
TOKENIZER_META_FILE = "tokenizer.json"
"""The file whose presence marks a complete saved tokenizer (its kind and
size; it names the other files)."""
_RETRAIN = "Restore the file, or train into a new run directory."
# SentencePiece reports a vocabulary it cannot build only in these messages.
_TOO_SMALL = re.compile(
    r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)"
)
_TOO_LARGE = re.compile(r"Vocabulary size too high \(\d+\)\. .*<= (\d+)")


class SubwordTokenizer:
    """Common interface; subclasses implement `encode`, `_decode`, `save`."""

    kind = ""
    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Source texts -> ragged lists of ids, without BOS (and without EOS,
        except where a tokenizer's model was trained with one: Marian's)."""
        raise NotImplementedError

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """Target texts -> ragged lists of ids, without BOS/EOS. The same as
        `encode` for a joint tokenizer; Marian's splits each side with its
        own model."""
        return self.encode(texts)

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

    def _save_files(self, directory: Path, data: dict[str, bytes], **extra) -> None:
        """Write each file of `data`, then `tokenizer.json`, each atomically.

        The metadata goes last: its presence marks a complete tokenizer, so
        a process killed in between leaves none that `load_tokenizer` (and
        a resumed run) would take for whole.
        """
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in data.items():
            atomic_write_bytes(directory / name, content)
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, **extra}
        atomic_write_text(
            directory / TOKENIZER_META_FILE, json.dumps(meta, indent=2) + "\n"
        )


def _check_normalization(normalization: str) -> None:
    if normalization not in NORMALIZATIONS:
        raise ValueError(
            f"Unknown SentencePiece normalization. Expected one of "
            f"{NORMALIZATIONS}. Received: normalization={normalization!r}"
        )


def _vocab_size_error(
    error: RuntimeError, vocab_size: int, byte_fallback: bool
) -> ValueError | None:
    """A clear error for a vocab_size SentencePiece rejected; None otherwise."""
    if match := _TOO_SMALL.search(str(error)):
        minimum = int(match.group(1))
        byte_pieces = _BYTE_PIECES if byte_fallback else 0
        parts = f"{len(RESERVED_TOKENS)} reserved ids"
        if byte_fallback:
            parts += f" + {byte_pieces} byte pieces for byte_fallback"
        characters = minimum - len(RESERVED_TOKENS) - byte_pieces
        return ValueError(
            f"vocab_size={vocab_size} is too small for this training text: the "
            f"SentencePiece vocabulary needs at least {minimum} entries ({parts} "
            f"+ {characters} distinct characters). Pass vocab_size >= {minimum} "
            "(--vocab-size on the command line)."
        )
    if match := _TOO_LARGE.search(str(error)):
        maximum = int(match.group(1))
        return ValueError(
            f"vocab_size={vocab_size} is too large for this training text: "
            f"SentencePiece can build at most {maximum} entries from it. Pass "
            f"vocab_size <= {maximum} (--vocab-size on the command line)."
        )
    return None


class SentencePieceTokenizer(SubwordTokenizer):
    """SentencePiece BPE with the reserved ids fixed (PAD 0 ... EOS 3).

    Lossless unless trained with another `normalization` (see the module
    doc); a model's options are stored in the model itself.
    """

    kind = "sentencepiece"
    model_file = "sentencepiece.model"

    def __init__(self, model_proto: bytes):
        import sentencepiece
        from sentencepiece import sentencepiece_model_pb2

        self.model_proto = model_proto
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        if self._processor.pad_id() != PAD_ID or self._processor.eos_id() != EOS_ID:
            raise ValueError(
                "SentencePiece model has reserved ids "
                f"pad={self._processor.pad_id()} eos={self._processor.eos_id()}; "
                f"expected pad={PAD_ID}, unk={UNK_ID}, bos={BOS_ID}, eos={EOS_ID}."
            )
        # The options live in the model (protobuf comes with TensorFlow), so a
        # model trained before they existed reports its own, old ones.
        spec = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
        self.normalization = spec.normalizer_spec.name
        self.byte_fallback = spec.trainer_spec.byte_fallback
        self.remove_extra_whitespaces = spec.normalizer_spec.remove_extra_whitespaces

    @classmethod
    def train(
        cls,
        texts: Sequence[str],
        vocab_size: int,
        *,
        model_type: str = "bpe",
        normalization: str = "identity",
        byte_fallback: bool = True,
    ) -> SentencePieceTokenizer:
        """Learn a vocabulary of exactly `vocab_size` entries from `texts`.

        Args:
            texts: Training sentences.
            vocab_size: Size of the vocabulary, reserved ids included.
            model_type: SentencePiece model type, "bpe" or "unigram".
            normalization: One of `NORMALIZATIONS` (see the module doc).
            byte_fallback: Encode characters missing from the vocabulary as
                their UTF-8 bytes (256 extra pieces) instead of `<unk>`.

        Raises:
            ValueError: If `normalization` is unknown, or `vocab_size` is too
                small (the message gives the minimum) or too large for `texts`.
        """
        import sentencepiece

        _check_normalization(normalization)
        model = io.BytesIO()
        try:
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
                byte_fallback=byte_fallback,
                normalization_rule_name=normalization,
                # Keep runs of spaces and leading/trailing spaces: lossless.
                remove_extra_whitespaces=False,
                # The caller samples; SentencePiece's own sampling is unseeded.
                input_sentence_size=0,
                num_threads=available_cores(),
                minloglevel=2,
            )
        except RuntimeError as error:
            clear = _vocab_size_error(error, vocab_size, byte_fallback)
            if clear is None:
                raise
            raise clear from error
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
        self._save_files(
            Path(directory),
            {self.model_file: self.model_proto},
            model_file=self.model_file,
            # For reading only: loading takes the options from the model.
            normalization=self.normalization,
            byte_fallback=self.byte_fallback,
        )

    @classmethod
    def load(cls, directory: Path) -> SentencePieceTokenizer:
        path = directory / cls.model_file
        if not path.is_file():
            raise ValueError(f"{path} is missing. " + _RETRAIN)
        proto = path.read_bytes()
        if not proto:  # Parses as a model without pieces.
            raise ValueError(f"{path} is empty (truncated). " + _RETRAIN)
        try:
            return cls(proto)
        except ValueError as error:  # Other reserved ids: it says which.
            raise ValueError(f"{path}: {error}") from None
        except Exception:  # noqa: BLE001
            # SentencePiece (RuntimeError) and protobuf (DecodeError) say only
            # "ParseFromArray", and nothing of the file.
            raise ValueError(
                f"{path}: not a readable SentencePiece model ({len(proto)} "
                "bytes: truncated or damaged). " + _RETRAIN
            ) from None


class _VocabularyFileTokenizer(SubwordTokenizer):
    """A tokenizer whose state is its vocabulary, saved one entry per line
    in `vocab_file`; subclasses set `self.vocabulary` and `vocab_file`."""

    vocab_file = ""
    vocabulary: list[str]

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def id_to_piece(self, token_id: int) -> str:
        return self.vocabulary[int(token_id)]

    def save(self, directory: str | os.PathLike) -> None:
        text = "\n".join(self.vocabulary) + "\n"
        self._save_files(
            Path(directory),
            {self.vocab_file: text.encode("utf-8")},
            vocab_file=self.vocab_file,
            **self._settings(),
        )

    def _settings(self) -> dict:
        """What `tokenizer.json` records beside the vocabulary."""
        return {}

    @classmethod
    def load(cls, directory: Path) -> _VocabularyFileTokenizer:
        return cls(cls._read_vocabulary(directory))

    @classmethod
    def _read_vocabulary(cls, directory: Path) -> list[str]:
        path = directory / cls.vocab_file
        if not path.is_file():
            raise ValueError(f"{path} is missing. " + _RETRAIN)
        return path.read_text(encoding="utf-8").splitlines()


class WordPieceTokenizer(_VocabularyFileTokenizer):
    """WordPiece through keras-hub (tensorflow-text ops, in-graph).

    Lossy by design: text is split on whitespace and punctuation, so
    `detokenize` joins pieces with single spaces ("river." -> "river ."), and
    a word it cannot spell with its pieces becomes `<unk>`.
    """

    kind = "wordpiece"
    vocab_file = "wordpiece_vocab.txt"

    def __init__(self, vocabulary: list[str]):
        keras_hub = require("keras_hub", "hub", "The WordPiece tokenizer")

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
        keras_hub = require("keras_hub", "hub", "The WordPiece tokenizer")
        import tensorflow as tf

        # A Python list would be read as a list of *file names*; the texts
        # go in as a dataset.
        data = tf.data.Dataset.from_tensor_slices(list(texts)).batch(1024)
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            data, vocab_size, reserved_tokens=list(RESERVED_TOKENS)
        )
        return cls(vocabulary)

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


class WordTokenizer(_VocabularyFileTokenizer):
    """One id per space-separated word; `<unk>` for a word not in the vocabulary.

    With `target_size` K (a parsing vocabulary: `train(target_words=...)`),
    the first K entries are every symbol a target holds (reserved ids, tree
    brackets, tags) and only those: targets are encoded within them (a
    symbol past them, never seen in a training target, is `<unk>`), so a
    model's output layer needs K rows, not the whole vocabulary's
    (`TransformerConfig.target_vocab_size`).
    """

    kind = "words"
    vocab_file = "words_vocab.txt"

    def __init__(self, vocabulary: list[str], target_size: int | None = None):
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"A word vocabulary must start with {list(RESERVED_TOKENS)}. "
                f"Received: {vocabulary[: len(RESERVED_TOKENS)]}"
            )
        for number, word in enumerate(vocabulary, start=1):
            if not word or any(char.isspace() for char in word):
                raise ValueError(
                    f"Word vocabulary entry {number} ({word!r}) is empty or "
                    "holds whitespace; entries are single words."
                )
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError("A word vocabulary must not repeat an entry.")
        if target_size is not None and not (
            len(RESERVED_TOKENS) < target_size <= len(vocabulary)
        ):
            raise ValueError(
                f"target_size must be in ({len(RESERVED_TOKENS)}, "
                f"{len(vocabulary)}] (the vocabulary's size). Received: {target_size}"
            )
        self.vocabulary = list(vocabulary)
        self.target_size = target_size
        self._ids = {word: index for index, word in enumerate(self.vocabulary)}
        # A vocabulary learned with classes holds them; one without (learned
        # before they existed) reads every unknown word as <unk>, as it did.
        self.has_unknown_classes = any(map(is_class_token, self.vocabulary))

    @classmethod
    def train(
        cls,
        texts: Sequence[str],
        vocab_size: int,
        target_words: Sequence[str] | None = None,
    ) -> WordTokenizer:
        """The `vocab_size` words of `texts` most frequent (and the unknown-
        word classes); with `target_words` (every symbol of the training
        targets, most frequent first), those first, as the target vocabulary."""
        targets = [
            w for w in dict.fromkeys(target_words or ()) if w not in RESERVED_TOKENS
        ]
        room = vocab_size - len(RESERVED_TOKENS) - len(targets)
        if room < 1:
            held = f" and the targets' {len(targets)} symbols" if targets else ""
            raise ValueError(
                f"vocab_size must exceed the {len(RESERVED_TOKENS)} reserved "
                f"tokens{held} to hold a word. Received: vocab_size={vocab_size}"
            )
        counts: dict[str, int] = {}
        for text in texts:
            for word in text.split():
                counts[word] = counts.get(word, 0) + 1
        for known in (*RESERVED_TOKENS, *targets):
            counts.pop(known, None)
        # Stable sorts keep first appearance among equal counts.
        kept = words_and_classes(counts, room)
        if target_words is None:
            return cls([*RESERVED_TOKENS, *kept])
        return cls(
            [*RESERVED_TOKENS, *targets, *kept], len(RESERVED_TOKENS) + len(targets)
        )

    @property
    def target_vocabulary(self) -> list[str]:
        """The entries a target may hold, by id: the first `target_size`
        (all of them without one)."""
        return self.vocabulary[: self.target_size or len(self.vocabulary)]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        encoded = self.encode(texts)
        if self.target_size is None:
            return encoded
        size, unk = self.target_size, self.unk_id
        return [[i if i < size else unk for i in row] for row in encoded]

    def _settings(self) -> dict:
        return {} if self.target_size is None else {"target_size": self.target_size}

    @classmethod
    def load(cls, directory: Path) -> WordTokenizer:
        vocabulary = cls._read_vocabulary(directory)
        meta_path = directory / TOKENIZER_META_FILE
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        target_size = meta.get("target_size")
        reserved = len(RESERVED_TOKENS)
        if target_size is not None and (
            isinstance(target_size, bool)
            or not isinstance(target_size, int)
            or not reserved < target_size <= len(vocabulary)
        ):
            raise ValueError(
                f"{meta_path}: target_size must be a whole number in "
                f"({reserved}, {len(vocabulary)}] (the vocabulary's size). "
                f"Received: {target_size!r}. " + _RETRAIN
            )
        return cls(vocabulary, target_size)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        ids, unk = self._ids, self.unk_id
        # A literal "</s>" or "<pad>" in a text is a word, not a control id.
        reserved = len(RESERVED_TOKENS)
        unknown = self._unknown_id if self.has_unknown_classes else lambda word: unk
        return [
            [
                i if (i := ids.get(word, -1)) >= reserved else unknown(word)
                for word in text.split()
            ]
            for text in texts
        ]

    def _unknown_id(self, word: str) -> int:
        """The id of `word`'s unknown-word class, or `<unk>`'s."""
        token = unknown_word_class(word)
        return self._ids.get(token, self.unk_id) if token else self.unk_id

    def _decode(self, ids: list[list[int]]) -> list[str]:
        words = self.vocabulary
        return [" ".join(words[i] for i in row) for row in ids]


class MarianTokenizer(SubwordTokenizer):
    """The tokenizer of an imported MarianMT checkpoint (the OPUS-MT family):
    its two SentencePiece models (`source.spm` splits sources, `target.spm`
    targets) and its vocabulary (`vocab.json`, piece -> Marian id), with the
    ids renumbered to this package's reserved ones (`marian_ids.json`: the
    Marian id of each of ours; `run.huggingface_import` makes it).

    As Marian's own tokenizer: a leading language code (``>>fra<<``) stays
    one piece, a piece not in the vocabulary is `<unk>`, and every source
    ends in `</s>` (a Marian model is trained so; `encode` includes it)
    unless `source_eos` is False: a model trained here, exported and
    imported back, whose sources never had it. Targets (`encode_target`)
    do not. Detokenizing joins the target pieces with the target model and
    strips the ends, as Marian's does.
    """

    kind = "marian"
    files = ("source.spm", "target.spm", "vocab.json", "marian_ids.json")

    def __init__(
        self,
        source_spm: bytes,
        target_spm: bytes,
        vocab: dict,
        marian_ids: list,
        source_eos: bool = True,
    ):
        import sentencepiece

        self.source_eos = bool(source_eos)
        self.spm_protos = {"source.spm": source_spm, "target.spm": target_spm}
        self._source = sentencepiece.SentencePieceProcessor(model_proto=source_spm)
        self._target = sentencepiece.SentencePieceProcessor(model_proto=target_spm)
        self.vocab = dict(vocab)
        self.marian_ids = list(marian_ids)
        pieces = {marian_id: piece for piece, marian_id in self.vocab.items()}
        missing = [i for i in self.marian_ids if i not in pieces]
        if missing or len(self.marian_ids) <= EOS_ID:
            raise ValueError(
                f"marian_ids.json names Marian ids {missing[:5]} that vocab.json "
                "lacks (or too few ids): the files do not belong together."
            )
        self.pieces = [pieces[i] for i in self.marian_ids]
        ours = {marian_id: our_id for our_id, marian_id in enumerate(self.marian_ids)}
        if self.marian_ids[BOS_ID] == self.marian_ids[PAD_ID]:
            # BOS is a copy of the pad row, Marian's decoder start (OPUS-MT),
            # which no text spells; the pad piece stays PAD.
            self.pieces[BOS_ID] = "<s>" if "<s>" not in vocab else "<decoder_start>"
            ours[self.marian_ids[PAD_ID]] = PAD_ID
        self._ids = {piece: ours[i] for piece, i in self.vocab.items()}

    @property
    def vocab_size(self) -> int:
        return len(self.marian_ids)

    def _pieces_to_ids(self, pieces: list[str]) -> list[int]:
        ids, unk = self._ids, self.unk_id
        return [ids.get(piece, unk) for piece in pieces]

    def _split(self, processor, text: str) -> list[str]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        return code + processor.encode(text, out_type=str)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        end = [self.eos_id] if self.source_eos else []
        return [
            [*self._pieces_to_ids(self._split(self._source, text)), *end]
            for text in texts
        ]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._pieces_to_ids(self._split(self._target, t)) for t in texts]

    def _decode(self, ids: list[list[int]]) -> list[str]:
        special = {self.pad_id, self.bos_id, self.eos_id}
        return [
            self._target.decode_pieces(
                [self.pieces[i] for i in row if i not in special]
            )
            .replace("\u2581", " ")
            .strip()
            for row in ids
        ]

    def id_to_piece(self, token_id: int) -> str:
        return self.pieces[int(token_id)]

    def save(self, directory: str | os.PathLike) -> None:
        data = dict(self.spm_protos)
        data["vocab.json"] = json.dumps(self.vocab, ensure_ascii=False).encode()
        data["marian_ids.json"] = json.dumps(self.marian_ids).encode()
        self._save_files(Path(directory), data, source_eos=self.source_eos)

    @classmethod
    def load(cls, directory: Path) -> MarianTokenizer:
        contents = {}
        for name in cls.files:
            path = directory / name
            if not path.is_file():
                raise ValueError(f"{path} is missing. Import the checkpoint again.")
            contents[name] = path.read_bytes()
        try:
            vocab = json.loads(contents["vocab.json"])
            marian_ids = json.loads(contents["marian_ids.json"])
        except ValueError as error:
            raise ValueError(f"{directory}: unreadable vocabulary ({error}).") from None
        meta = json.loads((directory / TOKENIZER_META_FILE).read_text("utf-8"))
        return cls(
            contents["source.spm"],
            contents["target.spm"],
            vocab,
            marian_ids,
            source_eos=meta.get("source_eos", True),
        )


_CLASSES = {
    cls.kind: cls
    for cls in (
        SentencePieceTokenizer,
        WordPieceTokenizer,
        WordTokenizer,
        MarianTokenizer,
    )
}


def _sentencepiece_options(
    kind: str, normalization: str, byte_fallback: bool
) -> dict[str, object]:
    """The options to pass to `kind`'s `train`; only SentencePiece has any."""
    if kind == SentencePieceTokenizer.kind:
        _check_normalization(normalization)
        return {"normalization": normalization, "byte_fallback": byte_fallback}
    if normalization != "identity" or not byte_fallback:
        raise ValueError(
            "normalization and byte_fallback are SentencePiece options; "
            f"{kind} has neither. Received: kind={kind!r}, "
            f"normalization={normalization!r}, byte_fallback={byte_fallback!r}"
        )
    return {}


def train_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    *,
    kind: str = "sentencepiece",
    sample_size: int = 2_000_000,
    seed: int = 0,
    normalization: str = "identity",
    byte_fallback: bool = True,
    origin: str | None = None,
    target_words: Sequence[str] | None = None,
) -> SubwordTokenizer:
    """Learn a joint vocabulary from `texts` (source and target together).

    At most `sample_size` sentences, drawn with `seed`, are used, which keeps
    vocabulary building fast and bounded in memory on large corpora. Blank
    texts are ignored.

    Args:
        texts: Training sentences of both languages.
        vocab_size: Vocabulary size, reserved ids included.
        kind: One of `LEARNED_KINDS`.
        sample_size: Most sentences to learn from.
        seed: Seed of the sample.
        normalization: SentencePiece only; one of `NORMALIZATIONS`, see the
            module doc. The default, "identity", keeps the text lossless.
        byte_fallback: SentencePiece only; encode unseen characters as UTF-8
            bytes instead of `<unk>`. Needs `vocab_size` >= 260 + the number of
            distinct characters.
        origin: Where `texts` come from (e.g. `ParallelCorpus.origin`), named
            in the error for an empty training text.
        target_words: `words` only: every symbol of the training targets,
            most frequent first, to be the vocabulary's first entries and
            its target vocabulary (`WordTokenizer`).

    Raises:
        DataError: If every text is blank (naming `origin`).
        ValueError: For an unknown `kind` or `normalization`, SentencePiece
            options with WordPiece, or a `vocab_size` SentencePiece cannot
            build (the message gives the limit).
    """
    if kind not in LEARNED_KINDS:
        given = " (imported with a MarianMT checkpoint, never learned)"
        raise ValueError(
            f"Unknown tokenizer kind to learn. Expected one of {LEARNED_KINDS}. "
            f"Received: kind={kind!r}{given if kind == 'marian' else ''}"
        )
    options = _sentencepiece_options(kind, normalization, byte_fallback)
    if target_words is not None:
        if kind != "words":
            raise ValueError(
                "A target vocabulary of its own (target_words) is the words "
                f"tokenizer's. Received: kind={kind!r}"
            )
        options["target_words"] = target_words
    texts = list(texts)
    if not all(map(str.strip, texts)):  # One pass in C finds no blank text.
        texts = [t for t in texts if t.strip()]
    if not texts:
        source = f" from {origin}" if origin else ""
        raise DataError(
            f"Cannot learn a vocabulary: the training text{source} is empty "
            "(no lines, or only blank lines)."
        )
    if len(texts) > sample_size:
        texts = random.Random(seed).sample(texts, sample_size)
    return _CLASSES[kind].train(texts, vocab_size, **options)


def load_tokenizer(directory: str | os.PathLike) -> SubwordTokenizer:
    """Load the tokenizer saved in `directory` (a run directory)."""
    directory = Path(directory)
    meta_path = directory / TOKENIZER_META_FILE
    if not meta_path.exists():
        raise FileNotFoundError(f"No tokenizer in {directory}: {meta_path} is missing.")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{meta_path}: unreadable ({error}).") from None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind not in _CLASSES:
        raise ValueError(f"{meta_path}: unknown tokenizer kind {kind!r}.")
    return _CLASSES[kind].load(directory)


def tokenizer_sha256(directory: Path) -> str:
    """A saved tokenizer's identity: one SHA-256 over its files (names and
    bytes, `tokenizer.json` included). Equal digests, the same ids for the
    same text: a store, a run's copy and an ensemble's members compare by it."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).iterdir() if p.is_file()):
        if path.name.startswith("."):  # A partial write's leftover.
            continue
        digest.update(f"{path.name}\0{sha256_file(path)}\0".encode())
    return digest.hexdigest()


class SentenceSample:
    """A uniform sample of at most `size` non-blank sentences of a stream.

    While everything fits, it keeps every sentence, sources then targets in
    corpus order (what `train_tokenizer` was always given for a small
    corpus, so its vocabulary stays the same); past `size`, reservoir
    sampling (Li's algorithm L: a few random draws per replaced sentence,
    none per sentence read) seeded by `seed`.
    """

    def __init__(self, size: int, seed: int):
        self.size = size
        self._rng = random.Random(seed)
        self._source: list[str] = []
        self._target: list[str] = []
        self._items: list[str] | None = None  # The reservoir, once full.
        self._seen = 0
        self._weight = 0.0
        self._next = 0

    def add(self, source: list[str], target: list[str]) -> None:
        for texts, kept in ((source, self._source), (target, self._target)):
            if not all(map(str.strip, texts)):  # One pass in C, usually enough.
                texts = [text for text in texts if text.strip()]
            if self._items is None:
                room = self.size - len(self._source) - len(self._target)
                kept += texts[:room]
                self._seen += min(room, len(texts))
                texts = texts[room:]
                if not texts:
                    continue
                self._fill()
            self._replace(texts)

    def _fill(self) -> None:
        self._items = self._source + self._target
        self._source, self._target = [], []
        self._weight = math.exp(math.log(self._rng.random()) / self.size)
        self._next = self._seen + self._skip()

    def _skip(self) -> int:
        return int(math.log(self._rng.random()) / math.log(1 - self._weight))

    def _replace(self, texts: list[str]) -> None:
        end = self._seen + len(texts)
        while self._next < end:
            self._items[self._rng.randrange(self.size)] = texts[self._next - self._seen]
            self._weight *= math.exp(math.log(self._rng.random()) / self.size)
            self._next += 1 + self._skip()
        self._seen = end

    def texts(self) -> list[str]:
        return self._items if self._items is not None else self._source + self._target


def learn_tokenizer(
    blocks: Iterable[PairBlock],
    origin: str,
    *,
    kind: str,
    vocab_size: int,
    sample_size: int,
    seed: int,
    log: Callable[[str], None] = console.log,
    target_vocabulary: bool = False,
):
    """Read every block of a training split (and so check it) for a seeded
    sample of at most `sample_size` sentences, and learn the joint tokenizer
    from it: `prepare`'s first pass, and `train` on text without a store.

    With `target_vocabulary` (a treebank's targets: a closed set of tree
    symbols), every symbol of every training target, counted on the whole
    split, comes first in the vocabulary as its target vocabulary."""
    sample = SentenceSample(sample_size, seed)
    progress = console.Progress(log, f"{origin} (checked, sampled)")
    target_counts: collections.Counter[str] = collections.Counter()
    for block in blocks:
        sample.add(block.source, block.target)
        if target_vocabulary:
            for text in block.target:
                target_counts.update(text.split())
        progress.add(len(block.source))
    started = time.monotonic()
    tokenizer = train_tokenizer(
        sample.texts(),
        vocab_size,
        kind=kind,
        sample_size=sample_size,
        seed=seed,
        origin=origin,
        target_words=[w for w, _ in target_counts.most_common()]
        if target_vocabulary
        else None,
    )
    targets = getattr(tokenizer, "target_size", None)
    log(
        f"learned a joint {kind} vocabulary of {tokenizer.vocab_size}"
        + (f" (the first {targets} the targets')" if targets else "")
        + f" in {time.monotonic() - started:.1f}s"
    )
    return tokenizer
