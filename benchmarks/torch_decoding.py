"""Decoding on torch: eager (the default) against torch.compile.

Each mode runs in its own process (`KERAS_TRANSFORMER_TORCH_COMPILE` is read
when a `SequenceGenerator` is built, and torch.compile's caches live in the
process); the processes take turns over `--rounds`. In each: the `tiny`
preset (untrained, seeded), `--batch` random sources of `--length` tokens,
greedy and beam 4, the whole batch as one search (`drop_finished=False`,
one shape), `--calls` calls each; the first call (which compiles) is
reported on its own, the later ones as a median. A process that runs past
`--timeout` seconds is stopped and reported as such.

    python benchmarks/torch_decoding.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, write_section  # noqa: E402

MODES = {"eager": "0", "torch.compile": "1"}
SEARCHES = {"greedy": 1, "beam 4": 4}


def child(batch: int, length: int, calls: int) -> None:
    import keras
    import numpy as np

    from keras_transformer import TransformerConfig, build_transformer
    from keras_transformer.decoding.generator import SequenceGenerator

    keras.utils.set_random_seed(0)
    model = build_transformer(TransformerConfig.preset("tiny", vocab_size=2000))
    rng = np.random.default_rng(0)
    sources = rng.integers(4, 2000, size=(batch, length)).astype("int32")
    for name, beam in SEARCHES.items():
        search = SequenceGenerator(
            model, beam_size=beam, max_extra_length=length, drop_finished=False
        )
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            search(sources)
            seconds.append(time.perf_counter() - start)
        # One line per search: a parent that stops us keeps what finished.
        print("RESULT " + json.dumps({"search": name, "seconds": seconds}), flush=True)


def run_mode(flag: str, args) -> dict:
    env = {
        **os.environ,
        "KERAS_BACKEND": "torch",
        "KERAS_TRANSFORMER_TORCH_COMPILE": flag,
    }
    command = [sys.executable, __file__, "--child", "--batch", str(args.batch)]
    command += ["--length", str(args.length), "--calls", str(args.calls)]
    try:
        out = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=args.timeout
        )
        stdout = out.stdout
    except subprocess.TimeoutExpired as stopped:
        stdout = (
            (stopped.stdout or b"").decode()
            if isinstance(stopped.stdout, bytes)
            else (stopped.stdout or "")
        )
    found = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            found[result["search"]] = result["seconds"]
    return found


def table(results: dict, args) -> str:
    lines = [
        "| mode | search | first call s | later calls s (median) | sentences/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode in MODES:
        for search in SEARCHES:
            runs = [r[search] for r in results[mode] if search in r]
            if not runs:
                lines.append(
                    f"| {mode} | {search} | not done in {args.timeout} s | | |"
                )
                continue
            first = statistics.median(r[0] for r in runs)
            later = statistics.median(s for r in runs for s in r[1:])
            lines.append(
                f"| {mode} | {search} | {first:.2f} | {later:.2f} | "
                f"{args.batch / later:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.batch, args.length, args.calls, args.rounds) < 2 and not args.child:
        parser.error("--batch, --length, --calls and --rounds must be at least 2")
    if args.child:
        child(args.batch, args.length, args.calls)
        return
    results = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode, flag in MODES.items():
            results[mode].append(run_mode(flag, args))
            print(mode, results[mode][-1], flush=True)
    text = (
        f"`python benchmarks/torch_decoding.py --rounds {args.rounds} --timeout "
        f"{args.timeout}` on {machine_line()}. `tiny` preset (untrained), "
        f"{args.batch} random sources of {args.length} tokens, output limit "
        f"source + {args.length}, the whole batch as one search; {args.calls} "
        "calls per process, the eager and the compiled process taking turns.\n\n"
        + table(results, args)
        + "\n"
    )
    print("\n" + text)
    if args.write:
        write_section("Decoding on torch: eager and torch.compile", text)


if __name__ == "__main__":
    main()
