"""A soak of the Keras engine on JAX: requests of random lengths up to
`--max-text-tokens` with every allowed setting mixed, against a real server
on 127.0.0.1 at the defaults for the warm-up (every length).

The failure it guards against: each program XLA compiles for the CPU holds
about 140 memory mappings, and a source longer than the warm-up used to
compile new programs while serving, without bound, until the process hit
the kernel's vm.max_map_count and aborted (issue 50). Now the warm-up
compiles every shape a request can have (`batching.ladder_lengths`), so
nothing compiles while serving and the mappings and memory stay where the
warm-up left them. The server runs on JAX, or on the backend that
KERAS_TRANSFORMER_SOAK names (TensorFlow's traces cost 3-5 s each, so it
is not the default; docs/serving-warm-up.md has both backends' figures; torch
compiles nothing). The server is its own process, so the test runs in
one suite only (backend_neutral): CI's shortest."""

from __future__ import annotations

import os
import random
import threading

import pytest

from keras_transformer.data.tokenizer import load_tokenizer
from keras_transformer.decoding.batching import ladder_length, ladder_lengths
from tests.serving.client import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]
SERVER_BACKEND = os.environ.get("KERAS_TRANSFORMER_SOAK", "jax")

MAX_TOKENS = 96  # Over the old default warm-up (64 tokens).
BEAMS, ALPHAS = (1, 2), (0.6, 1.0)
FLAGS = ["--max-text-tokens", str(MAX_TOKENS), "--max-extra-length", "4",
         "--max-batch-size", "4", "--workers", "2", "--max-texts", "3",
         "--beam-size", "2", "--allowed-beam-sizes", "1,2",
         "--allowed-alphas", "0.6,1.0"]  # fmt: skip
WORDS = "a dog man woman runs plays ball street red two the in on".split()


def _texts_of_lengths(tokenizer, draw: random.Random) -> list[str]:
    """1 to 3 texts of random token counts from 1 to MAX_TOKENS + 4 (a few
    over the limit: those get a 413)."""
    texts = []
    for _ in range(draw.randint(1, 3)):
        wanted, words = draw.randint(1, MAX_TOKENS + 4), []
        while not words or len(tokenizer.encode([" ".join(words)])[0]) < wanted:
            words.append(draw.choice(WORDS))
        texts.append(" ".join(words))
    return texts


COMPILED = "keras_transformer_compilations_total"


def _mappings_and_rss(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/maps", "rb") as lines:
        maps = sum(1 for _ in lines)
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return maps, kib * 1024


def test_random_lengths_and_settings_compile_nothing_and_hold_memory(
    untrained_run, tmp_path
):
    tokenizer = load_tokenizer(untrained_run / "tokenizer")
    server = ServerProcess(
        ["--run-dir", str(untrained_run), *FLAGS],
        tmp_path / "server.log",
        backend=SERVER_BACKEND,
    )
    try:
        ready = _mappings_and_rss(server.process.pid)
        warmed = server.metric(COMPILED, phase="warmup")
        statuses, longest = [], []

        def client(seed: int) -> None:
            draw = random.Random(seed)
            for _ in range(30):
                texts = _texts_of_lengths(tokenizer, draw)
                body = {"texts": texts, "beam_size": draw.choice(BEAMS)}
                if body["beam_size"] > 1:
                    body["alpha"] = draw.choice(ALPHAS)
                answer = server.post("/v1/translate", body)
                statuses.append(answer.status)
                if answer.status == 413:  # Over the token limit: said so.
                    assert "--max-text-tokens" in answer.body.decode(), answer.body
                longest.append(max(map(len, tokenizer.encode(texts))))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert len(statuses) == 120
        assert statuses.count(200) >= 60, statuses  # Most fit the limit.
        assert set(statuses) <= {200, 413}, statuses
        # Every length the ladder pads to was asked for.
        assert {ladder_length(n) for n in longest} >= set(ladder_lengths(MAX_TOKENS))
        assert server.metric(COMPILED, phase="serving") == 0
        assert server.metric(COMPILED, phase="warmup") == warmed > 0
        after = _mappings_and_rss(server.process.pid)
        assert after[0] <= ready[0] * 1.02 + 200, (ready, after)
        assert after[1] <= ready[1] * 1.25, (ready, after)
        assert server.get("/readyz").status == 200
    finally:
        server.stop()
