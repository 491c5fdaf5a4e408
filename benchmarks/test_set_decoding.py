"""Decoding a real test set: Multi30k test2016 with a trained run, per backend.

For each backend, in its own process: the whole test set translated by the
compiled `Translator` (batches of `--batch-size`), greedy and beam 4. The
first pass compiles every batch shape and is reported on its own; then the
two searches take turns over `--rounds` timing windows. It prints sentences
per second, seconds for the whole set (median window) and sacreBLEU. Then the
CLI's time from start to its first translation (`keras-transformer translate`,
one sentence on stdin, beam 4), with an empty and then a warm compilation
cache (JAX keeps compiled programs between runs; TensorFlow does not).

    python benchmarks/test_set_decoding.py --run-dir RUN \\
        --multi30k ../shared/data/multi30k
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, run_child, write_section  # noqa: E402

SEARCHES = {"greedy": 1, "beam 4": 4}


def child(run_dir: str, multi30k: str, batch_size: int, rounds: int) -> dict:
    import keras

    from keras_transformer.data.multi30k import load_multi30k
    from keras_transformer.evaluation import corpus_scores
    from keras_transformer.run_directory import RunDirectory
    from keras_transformer.translator import Translator

    test = load_multi30k("test", data_dir=multi30k)
    run = RunDirectory(run_dir)
    model, tokenizer = run.load_model(), run.load_tokenizer()
    translators = {
        name: Translator(model, tokenizer, beam_size=beam, batch_size=batch_size)
        for name, beam in SEARCHES.items()
    }
    results = {}
    for name, translator in translators.items():
        start = time.perf_counter()
        hypotheses = translator(test.source)
        results[name] = {
            "first_seconds": time.perf_counter() - start,
            "bleu": corpus_scores(hypotheses, test.target).bleu,
            "windows": [],
        }
    for _ in range(rounds):
        for name, translator in translators.items():
            start = time.perf_counter()
            translator(test.source)
            results[name]["windows"].append(time.perf_counter() - start)
    return {
        "backend": keras.backend.backend(),
        "sentences": len(test.source),
        "searches": results,
    }


def first_translation_seconds(run_dir: str, backend: str, cache: str) -> float:
    """Wall time of `keras-transformer translate` on one stdin sentence."""
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_TRANSFORMER_CACHE": cache,
    }
    command = [sys.executable, "-m", "keras_transformer", "translate"]
    start = time.perf_counter()
    out = subprocess.run(
        [*command, "--run-dir", run_dir],
        input="A man in a blue shirt is standing on a ladder.\n",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if out.returncode or not out.stdout.strip():
        sys.exit(f"translate failed on {backend}:\n{out.stderr[-3000:]}")
    return seconds


def table(results: list[dict]) -> str:
    lines = [
        "| backend | search | sentences/s | seconds for the set | first pass s | "
        "BLEU | CLI first translation s (cold / warm cache) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for name, search in result["searches"].items():
            seconds = statistics.median(search["windows"])
            cli = ""
            if name == "beam 4" and "cli" in result:  # The CLI's default search.
                cli = "{:.1f} / {:.1f}".format(*result["cli"])
            lines.append(
                f"| {result['backend']} | {name} | "
                f"{result['sentences'] / seconds:.1f} | {seconds:.1f} | "
                f"{search['first_seconds']:.1f} | {search['bleu']:.1f} | "
                f"{cli} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="a trained run directory")
    parser.add_argument("--multi30k", required=True, help="Multi30k directory")
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1. Received: {args.rounds}")
    if args.child:
        result = child(args.run_dir, args.multi30k, args.batch_size, args.rounds)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, "--child", "--run-dir", args.run_dir]
        command += ["--multi30k", args.multi30k, "--rounds", str(args.rounds)]
        command += ["--batch-size", str(args.batch_size)]
        result = run_child(command, backend)
        with tempfile.TemporaryDirectory() as cache:
            result["cli"] = [
                first_translation_seconds(args.run_dir, backend, cache)
                for _ in ("cold", "warm")
            ]
        results.append(result)
        print(table(results[-1:]), flush=True)
    text = (
        f"`python benchmarks/test_set_decoding.py --run-dir RUN --multi30k DIR` "
        f"on {machine_line()}. RUN: {args.run_dir}. Multi30k test2016, "
        f"{results[0]['sentences']:,} sentences, `Translator` compiled, batches "
        f"of {args.batch_size}, sorted by length; median of {args.rounds} "
        "windows, greedy and beam 4 taking turns, after a first pass that "
        "compiles.\n\n" + table(results) + "\n"
    )
    print("\n" + text)
    if args.write:
        write_section("Decoding Multi30k test2016: a trained small model", text)


if __name__ == "__main__":
    main()
