"""One-off CLI runs with an empty and a warm compilation cache, per backend.

`translate`, `evaluate` and `train` keep compiled XLA programs on disk
(`keras_transformer.decoding.compile.enable_compilation_cache`: JAX's persistent
cache; XLA's in TensorFlow). This times whole commands, process start to
exit, as a user runs them once: each command twice with a fresh cache root,
first empty ("cold": it compiles and writes every program) and then warm
(it loads them). Commands:

- `translate` of one sentence on stdin (beam 4): the CLI's first
  translation;
- `evaluate` of Multi30k test2016 (1,000 sentences), greedy and beam 4;
- `train` of the default (the README's main job: `tiny` on the built-in
  corpus, then the test set translated and scored), stopped after
  `--train-steps` updates, in a new run directory each time.

    python benchmarks/compilation_cache.py --run-dir RUN \\
        --multi30k ../shared/data/multi30k
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cli_seconds, machine_line, write_section  # noqa: E402

SENTENCE = "A man in a blue shirt is standing on a ladder.\n"


FRESH = "{fresh directory}"  # replaced by a new directory on every run


def commands(run_dir: str, source: Path, reference: Path, train_steps: int) -> dict:
    """name -> (CLI arguments, stdin)."""
    evaluate = ["evaluate", "--run-dir", run_dir, "--src", str(source)]
    evaluate += ["--ref", str(reference)]
    return {
        "translate one sentence, beam 4": (
            ["translate", "--run-dir", run_dir],
            SENTENCE,
        ),
        "evaluate test2016, greedy": ([*evaluate, "--beam-size", "1"], ""),
        "evaluate test2016, beam 4": (evaluate, ""),
        f"train (main job, {train_steps} steps)": (
            ["train", "--run-dir", FRESH, "--max-steps", str(train_steps)],
            "",
        ),
    }


def unpack_test_set(multi30k: str, directory: Path) -> tuple[Path, Path]:
    """test2016's English and German as plain text files under directory."""
    paths = []
    for language in ("en", "de"):
        packed = Path(multi30k) / f"test_2016_flickr.{language}.gz"
        if not packed.is_file():
            sys.exit(f"{packed}: not found (expected Multi30k's test2016 there)")
        path = directory / f"test2016.{language}"
        path.write_bytes(gzip.decompress(packed.read_bytes()))
        paths.append(path)
    return paths[0], paths[1]


def measure(backend: str, named: dict, rounds: int) -> dict:
    """name -> {"cold": [s...], "warm": [s...]}, the commands taking turns."""
    seconds = {name: {"cold": [], "warm": []} for name in named}
    for _ in range(rounds):
        for name, (arguments, stdin) in named.items():
            with tempfile.TemporaryDirectory() as cache:
                for state in ("cold", "warm"):
                    fresh = tempfile.mkdtemp(dir=cache)
                    run = [fresh if a == FRESH else a for a in arguments]
                    elapsed = cli_seconds(run, backend, cache, stdin)
                    seconds[name][state].append(elapsed)
            print(f"{backend}: {name}: {seconds[name]}", flush=True)
    return seconds


def table(results: dict) -> str:
    lines = [
        "| backend | command | empty cache s | warm cache s | saved |",
        "| --- | --- | --- | --- | --- |",
    ]
    for backend, seconds in results.items():
        for name, states in seconds.items():
            cold = statistics.median(states["cold"])
            warm = statistics.median(states["warm"])
            lines.append(
                f"| {backend} | {name} | {cold:.1f} | {warm:.1f} | "
                f"{1 - warm / cold:.0%} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="a trained run directory")
    parser.add_argument("--multi30k", required=True, help="Multi30k directory")
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=100)
    parser.add_argument("--write", action="store_true", help="update the docs")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1. Received: {args.rounds}")
    with tempfile.TemporaryDirectory() as data:
        source, reference = unpack_test_set(args.multi30k, Path(data))
        named = commands(args.run_dir, source, reference, args.train_steps)
        results = {
            backend: measure(backend, named, args.rounds)
            for backend in args.backends.split(",")
        }
    text = (
        "`python benchmarks/compilation_cache.py --run-dir RUN --multi30k DIR "
        f"--rounds {args.rounds} --train-steps {args.train_steps}` on "
        f"{machine_line()}. RUN: {args.run_dir}. "
        "Whole `keras-transformer` commands, process start to exit, each run "
        "twice on a fresh cache root (`KERAS_TRANSFORMER_CACHE`): empty (it "
        "compiles and writes every program), then warm (it loads them); "
        f"median of {args.rounds}.\n\n" + table(results) + "\n"
    )
    print("\n" + text)
    if args.write:
        write_section("Compilation caches: one-off CLI runs", text)


if __name__ == "__main__":
    main()
