"""End to end on the built-in corpus: tokenizer, batches, fit, decode, BLEU.

One run of the `tiny` model (on TensorFlow; the skip says why) for a few
hundred steps on the short sentences of the built-in corpus, its vocabulary
mostly whole words. It catches the silent bugs that unit tests miss
(swapped inputs, a wrong shift, leaking masks, a loss counting padding):
the loss must fall far below its start and greedy decoding must reproduce
many references of a small held-out set exactly (a bug of that kind leaves
almost none).
"""

from __future__ import annotations

import json

import keras
import pytest

from keras_transformer.data.builtin_corpus import generate_corpus
from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.training import TrainOptions, train

MAX_WORDS = 6  # Short sentences: enough signal for a few hundred CPU steps.
# The short sentences hold about 4,000 distinct words (English and German).
# With 2,000 pieces, mostly whole words, 350 updates pass by wider margins
# than 700 updates with 1,000 pieces did: 19 of the 40 exact and BLEU 65-66
# on TensorFlow and on JAX, against 18 and 62 (TensorFlow), 15 and 60 (JAX).
# Fewer updates had a thinner margin (300: 15 exact on JAX), other sizes
# failed (1,500 pieces after 400 updates, 2,500 after 350: BLEU 39-49).
SMOKE_VOCAB = 2000
SMOKE_STEPS = 350


def _write_split(directory, name, pairs):
    source = directory / f"{name}.en"
    target = directory / f"{name}.de"
    source.write_text("".join(f"{en}\n" for en, _ in pairs), encoding="utf-8")
    target.write_text("".join(f"{de}\n" for _, de in pairs), encoding="utf-8")
    return str(source), str(target)


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="one backend learns it here (TensorFlow: 115 s on CI, JAX 137 s, "
    "torch's eager updates 13 minutes); the others train the same losses and "
    "weights and translate the trained model alike (test_backend_parity: "
    "training steps, logits, trained translations)",
)
def test_tiny_model_learns_builtin_corpus(tmp_path):
    corpus = generate_corpus(num_train=20000, num_valid=200, num_test=200, seed=7)
    short = {
        name: [pair for pair in pairs if len(pair[0].split()) <= MAX_WORDS]
        for name, pairs in corpus.items()
    }
    files = {
        "train": _write_split(tmp_path, "train", short["train"]),
        "test": _write_split(tmp_path, "test", short["test"][:40]),
    }
    result = train(
        TrainOptions(
            run_dir=str(tmp_path / "run"),
            preset="tiny",
            data=DatasetSpec(name="files", files=files),
            vocab_size=SMOKE_VOCAB,
            max_length=32,
            max_steps=SMOKE_STEPS,
            checkpoint_every=0,
            beam_size=1,
        )
    )
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    first_loss = history["loss"][0]
    assert result.final_loss < 0.5 * first_loss
    references = [de for _, de in short["test"][:40]]
    hypotheses = (tmp_path / "run" / "test.hyp.txt").read_text().splitlines()
    exact = sum(h == r for h, r in zip(hypotheses, references))
    assert exact >= 0.35 * len(references), (exact, hypotheses[:5], references[:5])
    assert result.test.bleu > 50.0
