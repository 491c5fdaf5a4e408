"""Time to quality: train `small` on Multi30k, dev BLEU against training time.

Runs the real training job (`keras-transformer train`) once per backend, each
in its own process, with greedy dev BLEU on a fixed dev subset every
`--eval-every` updates, and prints the training time (evaluations excluded)
at which dev BLEU first reached `--target-bleu`. The recipe is the README's
Multi30k recipe unless flags change it.

    python benchmarks/time_to_quality.py --multi30k ../shared/data/multi30k
    python benchmarks/time_to_quality.py --multi30k DIR --backends tensorflow \\
        --learning-rate-scale 0.6 --warmup-steps 800 --max-minutes 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, write_section  # noqa: E402


def train_command(args, backend: str, run_dir: Path) -> list[str]:
    overrides = []
    for name in ("warmup_steps", "dropout_rate"):
        value = getattr(args, name)
        if value is not None:
            overrides += ["--set", f"{name}={value}"]
    return [
        sys.executable,
        "-m",
        "keras_transformer",
        "train",
        "--dataset",
        "multi30k",
        "--data-dir",
        args.multi30k,
        "--preset",
        "small",
        "--vocab-size",
        "8000",
        "--tokens-per-batch",
        str(args.tokens_per_batch),
        "--learning-rate-scale",
        str(args.learning_rate_scale),
        "--max-minutes",
        str(args.max_minutes),
        "--precision",
        args.precision,
        "--eval-every",
        str(args.eval_every),
        "--dev-subset",
        str(args.dev_subset),
        "--checkpoint-every",
        "0",
        "--beam-size",  # the closing test-set score: greedy, quick
        "1",
        "--verbose",
        "0",
        "--run-dir",
        str(run_dir),
        *overrides,
    ]


def time_to(entries: list[dict], target: float) -> dict | None:
    """The first evaluation at or above `target` dev BLEU."""
    return next((e for e in entries if e["dev_bleu"] >= target), None)


def run_backend(args, backend: str, work: Path) -> list[dict]:
    run_dir = work / f"run-{backend}"
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = train_command(args, backend, run_dir)
    print(f"[{backend}] {' '.join(command[2:])}", flush=True)
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{backend}: training failed.\n{result.stdout[-3000:]}")
    log = run_dir / "dev_bleu.jsonl"
    if not log.exists():  # Stopped before the first evaluation.
        print(f"[{backend}] no evaluation within --max-minutes", flush=True)
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multi30k", required=True, help="Multi30k directory")
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--target-bleu", type=float, default=30.0)
    parser.add_argument("--max-minutes", type=float, default=30.0)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--dev-subset", type=int, default=500)
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    parser.add_argument("--learning-rate-scale", type=float, default=0.4)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--dropout-rate", type=float)
    parser.add_argument(
        "--precision",
        default="float32",
        choices=("float32", "mixed_bfloat16"),
        help="dtype policy (mixed_bfloat16 pays off on CPUs with AVX-512 BF16)",
    )
    parser.add_argument("--label", default="README recipe")
    parser.add_argument(
        "--work-dir",
        help="keep the runs here, as run-BACKEND (default: a temporary directory)",
    )
    parser.add_argument("--write", action="store_true", help="update the docs")
    args = parser.parse_args()
    if not Path(args.multi30k).is_dir():
        parser.error(f"--multi30k: {args.multi30k} is not a directory")
    lines = [
        "| backend | recipe | time to dev BLEU "
        f"{args.target_bleu:g} | at step | best dev BLEU (step, time) |",
        "| --- | --- | --- | --- | --- |",
    ]
    if args.work_dir:
        runs = [Path(args.work_dir) / f"run-{b}" for b in args.backends.split(",")]
        if any(run.exists() for run in runs):
            parser.error(f"--work-dir: {args.work_dir} already holds a run-BACKEND")
        Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    work_dir = (
        contextlib.nullcontext(args.work_dir)
        if args.work_dir
        else tempfile.TemporaryDirectory()
    )
    with work_dir as work:
        for backend in args.backends.split(","):
            entries = run_backend(args, backend, Path(work))
            for entry in entries:
                print(
                    f"  step {entry['step']:>5}  {entry['train_seconds']:>7.0f} s  "
                    f"dev BLEU {entry['dev_bleu']:5.1f}  "
                    f"(evaluation {entry['eval_seconds']:.1f} s)",
                    flush=True,
                )
            hit = time_to(entries, args.target_bleu)
            best = max(entries, key=lambda e: e["dev_bleu"], default=None)
            lines.append(
                f"| {backend} | {args.label} | "
                + (f"{hit['train_seconds'] / 60:.1f} min" if hit else "not reached")
                + f" | {hit['step'] if hit else '-'} | "
                + (
                    f"{best['dev_bleu']:.1f} ({best['step']}, "
                    f"{best['train_seconds'] / 60:.1f} min)"
                    if best
                    else "-"
                )
                + " |"
            )
    recipe = (
        f"tokens per batch {args.tokens_per_batch}, learning-rate scale "
        f"{args.learning_rate_scale}, warmup {args.warmup_steps or 'preset'}, "
        f"dropout {args.dropout_rate if args.dropout_rate is not None else 'preset'}"
        f", {args.precision}"
    )
    text = (
        f"`python benchmarks/time_to_quality.py --multi30k DIR` ({recipe}; greedy "
        f"dev BLEU on the first {args.dev_subset} validation sentences every "
        f"{args.eval_every} updates; at most {args.max_minutes:g} minutes; "
        f"training time excludes the evaluations) on {machine_line()}.\n\n"
        + "\n".join(lines)
    )
    print("\n" + text)
    if args.write:
        write_section(f"Time to quality: {args.label}", text)


if __name__ == "__main__":
    main()
