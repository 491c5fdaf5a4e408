"""CPU time of `keras-transformer --help` and `COMMAND --help`, this checkout
against another revision, their runs alternated.

Each measurement is one whole process, `python -m keras_transformer ARGS`,
its user + system CPU time read from the kernel (`RUSAGE_CHILDREN`), so a
busy machine's waiting does not count. With `--against REV` the revision is
checked out into a temporary git worktree and the two trees take turns, run
by run; the table gives each one's median and their ratio.

    python benchmarks/cli_startup.py --against HEAD~1 --rounds 5 [--write]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARGUMENTS = {
    "--help": ["--help"],
    "train --help": ["train", "--help"],
    "translate --help": ["translate", "--help"],
    "serve --help": ["serve", "--help"],
}


def cpu_seconds(tree: Path, arguments: list[str], backend: str) -> float:
    """User + system CPU seconds of one `python -m keras_transformer` run in
    `tree` (its package first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "KERAS_BACKEND": backend}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "keras_transformer", *arguments],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode or "usage: keras-transformer" not in done.stdout:
        sys.exit(f"{arguments} failed in {tree}:\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees: dict[str, Path], rounds: int, backend: str) -> dict:
    """name -> tree label -> CPU seconds of every round, the trees alternated
    within each round."""
    times = {name: {label: [] for label in trees} for name in ARGUMENTS}
    for _ in range(rounds):
        for name, arguments in ARGUMENTS.items():
            for label, tree in trees.items():
                times[name][label].append(cpu_seconds(tree, arguments, backend))
    return times


def table(times: dict, labels: list[str]) -> str:
    lines = ["| command | " + " | ".join(labels) + " | ratio |"]
    lines.append("| --- | " + " | ".join("---" for _ in labels) + " | --- |")
    for name, by_label in times.items():
        medians = [statistics.median(by_label[label]) for label in labels]
        cells = " | ".join(f"{m:.2f} s" for m in medians)
        ratio = f"{medians[-1] / medians[0]:.2f}x" if len(medians) > 1 else "—"
        lines.append(f"| `keras-transformer {name}` | {cells} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="a git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--backend", default=os.environ.get("KERAS_BACKEND", "tensorflow")
    )
    parser.add_argument("--write", action="store_true", help="into docs/benchmarks*.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this checkout": ROOT}
        if args.against:
            other = Path(scratch) / "other"
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(other), args.against],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            trees = {args.against: other, **trees}
        try:
            times = measure(trees, args.rounds, args.backend)
        finally:
            if args.against:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(other)],
                    cwd=ROOT,
                    check=False,
                )
    text = (
        f"CPU seconds (user + system), median of {args.rounds} runs each, the "
        f"trees alternated; backend {args.backend}; {machine_line()}\n\n"
        + table(times, list(trees))
    )
    print(text)
    if args.write:
        write_section("Command-line start-up: `--help`", text)


if __name__ == "__main__":
    main()
