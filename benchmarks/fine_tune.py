"""LoRA against full fine-tuning on a domain shift, at several learning rates.

Starts from a trained run (`--init-from`, e.g. a `small` Multi30k model) and
fine-tunes it on a new corpus (`--dataset`, default the built-in one) with
`--lora-rank R` (and `--embedding-rank E`: `--lora-embedding-rank`, the
table's; `--token-rows K`: `--lora-token-rows`) at each of `--lora-rates`
and fully at each of `--full-rates` (peaks of the fine-tuning schedule),
`--steps` updates each,
one after the other (`keras-transformer train` in a child process under
`/usr/bin/time`, for its peak memory); `--paper` adds one run of each under
the paper's schedule restarted at step 0 (what a fine-tune used before).
Each result is scored with greedy search on the new domain's test split
(what `train` prints at its end) and on the old domain: the start run's own
test split (`evaluate --split test` with the fine-tuned model), or
`--old-src`/`--old-ref`. Prints trainable parameters, seconds per update,
peak RSS and BLEU as a table, and LoRA's best gain on the new domain as a
share of full fine-tuning's.

    python benchmarks/fine_tune.py --init-from RUN --out DIR \\
        [--steps 200 --rank 8 --token-rows 0 --embedding-rank 32 --paper]

The defaults are the measured recipe of docs/benchmarks-fine-tuning-rows.md:
600 updates, rank 4 with 800 rows, LoRA at 1e-2 and 5e-3, full at 2e-3
and 1e-3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
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


def greedy_bleu(run_dir: str, model: str | None, files=None) -> float:
    """sacreBLEU of `model` (default: the run's) on the run's test split, or
    on `files` (source, reference)."""
    command = [*CLI, "evaluate", "--run-dir", run_dir, "--beam-size", "1"]
    if model is not None:
        command += ["--model", model]
    if files is None:
        command += ["--split", "test"]
    else:
        command += ["--src", files[0], "--ref", files[1]]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(re.search(r"sacreBLEU ([\d.]+)", done.stdout).group(1))


def old_domain_bleu(args: argparse.Namespace, model: str | None) -> float:
    files = (args.old_src, args.old_ref) if args.old_src else None
    return greedy_bleu(args.init_from, model, files)


def contenders(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(row name, run directory name, train flags) of every fine-tune.

    A directory's name holds the LoRA settings, the rate and the updates, so
    a second invocation into the same --out with other ones trains anew
    instead of resuming (or extending) a run made otherwise; for another
    --dataset, --init-from or --train-args, give another --out (`train`
    refuses a run directory whose identity differs)."""
    lora = ["--lora-rank", str(args.rank)]
    label, slug = f"LoRA rank {args.rank}", f"lora-r{args.rank}"
    if args.embedding_rank is not None:
        lora += ["--lora-embedding-rank", str(args.embedding_rank)]
        label += f", table rank {args.embedding_rank}"
        slug += f"-e{args.embedding_rank}"
    if args.token_rows:
        lora += ["--lora-token-rows", str(args.token_rows)]
        label += f", {args.token_rows} rows in full"
        slug += f"-rows{args.token_rows}"
    updates = f"{args.steps}u"
    runs = [
        (f"{label}, peak {rate:g}", f"{slug}-{rate:g}-{updates}",
         [*lora, "--learning-rate", f"{rate:g}"])
        for rate in args.lora_rates
    ] + [
        (f"full, peak {rate:g}", f"full-{rate:g}-{updates}",
         ["--learning-rate", f"{rate:g}"])
        for rate in args.full_rates
    ]  # fmt: skip
    if args.paper:
        paper = ["--fine-tune-schedule", "paper", *PAPER_FLAGS.split()]
        runs += [
            (f"{label}, paper's schedule", f"{slug}-paper-{updates}", [*lora, *paper]),
            ("full, paper's schedule", f"full-paper-{updates}", paper),
        ]
    return runs


# The earlier table's schedule: the paper's, warmup 100, scale 0.4.
PAPER_FLAGS = "--set warmup_steps=100 --learning-rate-scale 0.4"


def _rates(text: str) -> list[float]:
    return [float(rate) for rate in text.split(",") if rate]


def table(rows: dict[str, dict]) -> list[str]:
    lines = [
        "| model | trainable parameters | s / update | peak RSS (GB) | new domain "
        "BLEU | old domain BLEU |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in rows.items():
        if "trainable" not in row:
            lines.append(
                f"| {name} | | | | {row['new_bleu']:.2f} | {row['old_bleu']:.2f} |"
            )
            continue
        lines.append(
            f"| {name} | {row['trainable']} | {row['seconds_per_update']:.2f} | "
            f"{row['peak_gb']:.2f} | {row['new_bleu']:.2f} | {row['old_bleu']:.2f} |"
        )
    return lines


def gain_line(rows: dict[str, dict]) -> str:
    """LoRA's best new-domain gain over the start, as a share of full's."""
    start = rows["start (no fine-tuning)"]["new_bleu"]
    best = {}
    for kind in ("LoRA", "full"):
        scores = [
            (row["new_bleu"], name)
            for name, row in rows.items()
            if name.startswith(kind) and "paper" not in name
        ]
        if scores:
            best[kind] = max(scores)
    if len(best) < 2:
        return ""
    (lora, lora_name), (full, full_name) = best["LoRA"], best["full"]
    share = (lora - start) / (full - start) if full != start else float("nan")
    return (
        f"Best of each: {lora_name} gains {lora - start:+.2f} BLEU on the new "
        f"domain, {full_name} {full - start:+.2f}: LoRA reaches {share:.0%} of "
        "full fine-tuning's gain."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--init-from", required=True)
    parser.add_argument("--out", required=True, help="where the runs go")
    parser.add_argument("--dataset", default="builtin")
    parser.add_argument("--old-src", help="old domain's test sources (default: "
                        "the start run's test split)")  # fmt: skip
    parser.add_argument("--old-ref")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--embedding-rank", type=int,
                        help="the table's rank (--lora-embedding-rank)")  # fmt: skip
    parser.add_argument("--token-rows", type=int, default=800,
                        help="rows in full (--lora-token-rows; 0: none)")  # fmt: skip
    parser.add_argument("--lora-rates", type=_rates, default="1e-2,5e-3")
    parser.add_argument("--full-rates", type=_rates, default="2e-3,1e-3")
    parser.add_argument("--paper", action="store_true",
                        help=f"also the paper's schedule ({PAPER_FLAGS})")  # fmt: skip
    parser.add_argument("--train-args", default="", help="more train flags for all")
    parser.add_argument("--write", action="store_true", help="docs/benchmarks*.md")
    args = parser.parse_args()
    if bool(args.old_src) != bool(args.old_ref):
        parser.error("--old-src and --old-ref go together")
    start_model = str(Path(args.init_from) / "model.keras")
    rows = {}
    for name, directory, extra in contenders(args):
        row = fine_tune(args, directory, extra)
        row["old_bleu"] = old_domain_bleu(
            args, str(Path(row["run_dir"]) / "model.keras")
        )
        if not rows:  # The start on the new domain's test split (the same store).
            rows["start (no fine-tuning)"] = {
                "new_bleu": greedy_bleu(row["run_dir"], start_model),
                "old_bleu": old_domain_bleu(args, None),
            }
        rows[name] = row
        print(name, row, flush=True)
    text = (
        f"{machine_line()}\n\n`python benchmarks/fine_tune.py "
        f"{shlex.join(sys.argv[1:])}` ({args.steps} updates each, greedy "
        "search for both test sets):\n\n"
        + "\n".join(table(rows))
        + "\n\n"
        + gain_line(rows)
    )
    print(text)
    if args.write:
        write_section("Fine-tuning: LoRA against full, on a domain shift", text)


if __name__ == "__main__":
    main()
