"""LoRA against full fine-tuning on a domain shift, the same number of updates.

Starts from a trained run (`--init-from`, e.g. a `small` Multi30k model),
fine-tunes it on a new corpus (`--dataset`, default the built-in one) with
`--lora-rank R` and with full fine-tuning, `--steps` updates each, one
after the other (`keras-transformer train` in a child process under
`/usr/bin/time`, for its peak memory). Then each result is scored on the
new domain's test split (what `train` prints at its end) and on the old
domain's test files (`--old-src`, `--old-ref`: forgetting), with greedy
search. Prints trainable parameters, seconds per update, peak RSS and the
BLEU figures as a table.

    python benchmarks/fine_tune.py --init-from RUN --out DIR \\
        --old-src test.en.gz --old-ref test.de.gz [--steps 300 --rank 8]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, write_section  # noqa: E402

CLI = [sys.executable, "-m", "keras_transformer"]


def fine_tune(args: argparse.Namespace, name: str, extra: list[str]) -> dict:
    run_dir = Path(args.out) / name
    command = [
        "/usr/bin/time",
        "-f",
        "PEAK_KB %M",
        *CLI,
        "train",
        "--init-from",
        args.init_from,
        "--run-dir",
        str(run_dir),
        "--dataset",
        args.dataset,
        "--max-steps",
        str(args.steps),
        "--eval-every",
        "0",
        "--beam-size",
        "1",
        "--verbose",
        "2",
        *args.train_args.split(),
        *extra,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    log = done.stdout + done.stderr
    trained = re.search(r"trained (\d+) steps .*?\(([\d.]+) min\)", log)
    scores = json.loads((run_dir / "test_scores.json").read_text())
    return {
        "run_dir": str(run_dir),
        "trainable": _trainable(log),
        "seconds_per_update": float(trained.group(2)) * 60 / int(trained.group(1)),
        "wall_s": seconds,
        "peak_gb": int(re.search(r"PEAK_KB (\d+)", log).group(1)) / 2**20,
        "new_bleu": scores["bleu"],
    }


def _trainable(log: str) -> str:
    found = re.search(r"([\d,]+) parameters, ([\d,]+) trained", log)
    return f"{found.group(2)} of {found.group(1)}"


def old_domain_bleu(args: argparse.Namespace, run_dir: str) -> float:
    command = [
        *CLI,
        "evaluate",
        "--run-dir",
        run_dir,
        "--beam-size",
        "1",
        "--src",
        args.old_src,
        "--ref",
        args.old_ref,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(re.search(r"sacreBLEU ([\d.]+)", done.stdout).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--init-from", required=True)
    parser.add_argument("--out", required=True, help="where the two runs go")
    parser.add_argument("--dataset", default="builtin")
    parser.add_argument("--old-src", required=True)
    parser.add_argument("--old-ref", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument(
        "--train-args",
        default="--set warmup_steps=100 --learning-rate-scale 0.4",
        help="train flags both fine-tunes take (default: a short warmup)",
    )
    parser.add_argument("--write", action="store_true", help="docs/benchmarks*.md")
    args = parser.parse_args()
    rows = {
        "start (no fine-tuning)": {
            "new_bleu": None,
            "old_bleu": old_domain_bleu(args, args.init_from),
        }
    }
    for name, extra in (
        (f"LoRA rank {args.rank}", ["--lora-rank", str(args.rank)]),
        ("full fine-tuning", []),
    ):
        row = fine_tune(args, name.split()[0].lower(), extra)
        row["old_bleu"] = old_domain_bleu(args, row["run_dir"])
        rows[name] = row
        print(name, row, flush=True)
    lines = [
        "| model | trainable parameters | s / update | peak RSS (GB) | new domain "
        "BLEU | old domain BLEU |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in rows.items():
        new = "" if row["new_bleu"] is None else f"{row['new_bleu']:.2f}"
        if "trainable" not in row:
            lines.append(f"| {name} | | | | {new} | {row['old_bleu']:.2f} |")
            continue
        lines.append(
            f"| {name} | {row['trainable']} | {row['seconds_per_update']:.2f} | "
            f"{row['peak_gb']:.2f} | {new} | {row['old_bleu']:.2f} |"
        )
    text = (
        f"{machine_line()}\n\n`python benchmarks/fine_tune.py "
        f"{' '.join(sys.argv[1:])}` ({args.steps} updates each, greedy "
        "search for both test sets):\n\n" + "\n".join(lines)
    )
    print(text)
    if args.write:
        write_section("Fine-tuning: LoRA against full, on a domain shift", text)


if __name__ == "__main__":
    main()
