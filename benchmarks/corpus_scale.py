"""Corpus scale: prepare, training memory and start-up, and the input
pipeline, from 29k to 29M sentence pairs (a table, not a test).

Corpora are Multi30k's training set (`--multi30k DIR`) repeated, each copy
in its own seeded order and with its own perturbation (half the lines lose
their final full stop), written as plain text files under `--work`;
`--wmt-like N` adds a corpus of N pairs whose lines join two Multi30k
sentences (about 27 tokens a side, WMT's lengths). For each corpus:

- `keras-transformer prepare` with 1 and with 2 workers (the two runs
  alternate which goes first), its wall time from the command's start and
  pairs per second, and the store's size on disk;
- `train --dataset store:DIR` (tiny preset, `--steps` updates) in a child
  process: its peak resident memory (VmHWM, and the peak of its anonymous
  part, RssAnon, sampled every 50 ms: the arrays and heap, without the
  libraries' and the memory map's file pages), and the time from the child's
  start to the end of the first update, split into the imports (Python,
  Keras and the backend), "data" (the store opened and checked, the pairs'
  buckets, the first epoch's plan) and the rest (run directory, model
  build, compile, the first step);
- the input pipeline alone: real target tokens per second of
  `BucketedBatches` over the store, at 2,048 and at 25,000 target tokens per
  batch (the paper's), each timed for `--seconds`, alternated.

    python benchmarks/corpus_scale.py --multi30k ../shared/data/multi30k \\
        --sizes 29000,290000,2900000,29000000 --wmt-like 2900000 --write

The corpora and stores take several GB (at 29M pairs about 4 GB of text and
two stores of about 2 GB); each corpus is deleted once measured, unless
`--keep`. Each corpus's row goes to `--results` as soon as it is measured,
and a corpus already there is skipped: a long run can be stopped and taken
up again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, write_section  # noqa: E402

HEADING = "Corpus scale: prepare, training memory and start-up, pipeline"
# Quoted, not measured here: the in-memory path these numbers replace.
BEFORE = (
    "Before the store, issue #25 measured `train --dataset files` on the same "
    "kind of corpora (tiny, vocabulary 8,000, 20 updates; from the command's "
    "start to the end of the 20th update, and peak RSS): 29,000 pairs 26 s and "
    "1.6 GB, 290,000 pairs 41 s and 1.9 GB, 2,900,000 pairs 115 s and 7.2 GB, "
    "every start tokenizing the whole corpus again."
)
VOCAB_SIZE = 8000
BUDGETS = (2048, 25_000)


def _lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def write_corpus(
    directory: Path, multi30k: Path, pairs: int, wmt_like: bool
) -> tuple[Path, Path]:
    """`pairs` lines per side: Multi30k's training set, copy after copy,
    each copy shuffled and perturbed by its own seed."""
    source, target = _lines(multi30k / "train.en.gz"), _lines(multi30k / "train.de.gz")
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / "train.en", directory / "train.de"
    written = 0
    with (
        open(paths[0], "w", encoding="utf-8") as src,
        open(paths[1], "w", encoding="utf-8") as tgt,
    ):
        copy = 0
        while written < pairs:
            order = list(range(len(source)))
            random.Random(copy).shuffle(order)
            if wmt_like:  # Two sentences a line: about twice the tokens.
                partner = order[1:] + order[:1]
                lines = [
                    (f"{source[a]} {source[b]}", f"{target[a]} {target[b]}")
                    for a, b in zip(order, partner)
                ]
            else:
                lines = [(source[i], target[i]) for i in order]
            take = min(len(lines), pairs - written)
            for number, (en, de) in enumerate(lines[:take]):
                if (number + copy) % 2:
                    en, de = en.rstrip("."), de.rstrip(".")
                src.write(en + "\n")
                tgt.write(de + "\n")
            written += take
            copy += 1
    shutil.copy(multi30k / "val.en.gz", directory / "valid.en.gz")
    shutil.copy(multi30k / "val.de.gz", directory / "valid.de.gz")
    return paths


def _environment() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def prepare(corpus: Path, out: Path, workers: int) -> dict:
    """One `keras-transformer prepare` command, timed from its start."""
    command = [
        sys.executable, "-m", "keras_transformer", "prepare",
        "--dataset", "files",
        "--train-src", str(corpus / "train.en"),
        "--train-tgt", str(corpus / "train.de"),
        "--valid-src", str(corpus / "valid.en.gz"),
        "--valid-tgt", str(corpus / "valid.de.gz"),
        "--vocab-size", str(VOCAB_SIZE),
        "--workers", str(workers),
        "--out", str(out),
    ]  # fmt: skip
    started, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(
        command, env=_environment(), capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    if result.returncode:
        sys.exit(f"prepare failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {
        "seconds": seconds,
        "cpu": cpu,
        "pairs": manifest["splits"]["train"]["pairs"],
        "tokens": manifest["splits"]["train"]["tokens"],
        "bytes": size,
        "fingerprint": manifest["fingerprint"],
    }


def _children_cpu() -> float:
    """User + system seconds of the waited-for child processes (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train(store: Path, run: Path, steps: int) -> dict:
    """The training child, started now; its measurements."""
    env = {**_environment(), "CORPUS_SCALE_START": repr(time.time())}
    command = [sys.executable, __file__, "--child", str(store), str(run), str(steps)]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
    if result.returncode or not lines:
        sys.exit(f"training failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def child(store: str, run: str, steps: str) -> None:
    """Train on `store`, reporting when the data was ready, when the first
    update ended, and the peak resident memory."""
    start = float(os.environ["CORPUS_SCALE_START"])
    import keras

    from keras_transformer import training
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.data.pipeline import BucketedBatches

    marks: dict[str, float] = {"imported": time.time() - start}
    build = training.build_model

    def timed_build(*args, **kwargs):
        marks.setdefault("data", time.time() - start)
        marks.setdefault("data_cpu", time.process_time())
        return build(*args, **kwargs)

    training.build_model = timed_build
    # The first epoch's plan is made when the first batch is read, after
    # the build: its time counts as data, not model.
    plan_epoch = BucketedBatches._plan_epoch

    def timed_plan(self, epoch):
        started = time.perf_counter()
        plan = plan_epoch(self, epoch)
        marks["plan"] = marks.get("plan", 0.0) + time.perf_counter() - started
        return plan

    BucketedBatches._plan_epoch = timed_plan

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.setdefault("first_step", time.time() - start)
            marks.setdefault("first_step_cpu", time.process_time())

    options = training.TrainOptions(
        run_dir=run,
        data=DatasetSpec(name=f"store:{store}"),
        max_steps=int(steps),
        eval_every=0,
        checkpoint_every=0,
        verbose="0",
    )
    peaks = _sample_anonymous_memory()
    training.train(options, callbacks=[FirstStep()])
    marks["peak_rss_mb"] = _status_mb("VmHWM")
    marks["peak_anon_mb"] = max(peaks)
    print("RESULT " + json.dumps(marks), flush=True)


def _status_mb(field: str) -> float:
    """A memory field of /proc/self/status, in MB."""
    status = Path("/proc/self/status").read_text().splitlines()
    line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def _sample_anonymous_memory() -> list[float]:
    """RssAnon every 50 ms in a thread: the process's own arrays and heap,
    which a memory map's pages (file-backed, reclaimable, shared) are not.
    VmHWM counts both, and the libraries' pages too."""
    import threading

    peaks = [_status_mb("RssAnon")]

    def sample():
        while True:
            peaks[0] = max(peaks[0], _status_mb("RssAnon"))
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    return peaks


def pipeline_rates(store_path: Path, seconds: float) -> dict[int, float]:
    """Real target tokens per second of the batches alone, per budget,
    timed in alternating windows."""
    from keras_transformer.data.pipeline import BucketedBatches, bucket_lengths
    from keras_transformer.data.token_store import open_store

    store = open_store(store_path)
    batches = {
        budget: BucketedBatches(
            pairs=store.pairs(), tokens_per_batch=budget, buckets=bucket_lengths(128)
        )
        for budget in BUDGETS
    }
    tokens = dict.fromkeys(BUDGETS, 0)
    spent = dict.fromkeys(BUDGETS, 0.0)
    index = dict.fromkeys(BUDGETS, 0)
    for _ in range(4):
        for budget, data in batches.items():
            started = time.perf_counter()
            while time.perf_counter() - started < seconds / 4:
                _, labels, _ = data[index[budget] % len(data)]
                tokens[budget] += int((labels != 0).sum())
                index[budget] += 1
            spent[budget] += time.perf_counter() - started
    return {budget: tokens[budget] / spent[budget] for budget in BUDGETS}


def measure(args, name: str, pairs: int, wmt_like: bool, flip: bool) -> dict:
    corpus = args.work / name
    print(f"[{name}] writing {pairs:,} pairs ...", flush=True)
    write_corpus(corpus, args.multi30k, pairs, wmt_like)
    prepared = {}
    for workers in (2, 1) if flip else (1, 2):
        print(f"[{name}] prepare, {workers} worker(s) ...", flush=True)
        prepared[workers] = prepare(corpus, corpus / f"store-{workers}", workers)
    assert prepared[1]["fingerprint"] == prepared[2]["fingerprint"]
    shutil.rmtree(corpus / "store-1")
    store = corpus / "store-2"
    row = {"name": name, "prepare": prepared, "train": None, "pipeline": None}
    if not args.skip_train:
        print(f"[{name}] train {args.steps} steps ...", flush=True)
        row["train"] = train(store, corpus / "run", args.steps)
    print(f"[{name}] pipeline ...", flush=True)
    row["pipeline"] = pipeline_rates(store, args.seconds)
    with open(args.results, "a", encoding="utf-8") as results:
        results.write(json.dumps(row) + "\n")
    if not args.keep:
        shutil.rmtree(corpus)
    return row


def _measured(path: Path) -> dict[str, dict]:
    """Rows already in the results file (JSON keys back to int)."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        row["prepare"] = {int(k): v for k, v in row["prepare"].items()}
        row["pipeline"] = {int(k): v for k, v in row["pipeline"].items()}
        rows[row["name"]] = row
    return rows


def _prepared(run: dict) -> str:
    """Wall seconds and pairs per second; CPU seconds (all processes)."""
    rate = run["pairs"] / run["seconds"]
    return f"{run['seconds']:.0f} s, {rate:,.0f}/s (CPU {run['cpu']:.0f} s)"


def table(rows: list[dict]) -> str:
    lines = [
        "| corpus | pairs | tokens a side (mean) | prepare, 1 worker | "
        "prepare, 2 workers | store on disk | training peak RSS | start to first "
        "step (import + data + model) | pipeline tok/s at 2,048 / 25,000 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        one, two = row["prepare"][1], row["prepare"][2]
        pairs = one["pairs"]
        mean = (one["tokens"]["source"] + one["tokens"]["target"]) / 2 / pairs
        cells = [
            row["name"],
            f"{pairs:,}",
            f"{mean:.1f}",
            _prepared(one),
            _prepared(two),
            f"{two['bytes'] / 2**20:,.0f} MiB",
        ]
        trained = row["train"]
        if trained:
            plan = trained.get("plan", 0.0)
            data = trained["data"] - trained["imported"] + plan
            rest = trained["first_step"] - trained["data"] - plan
            anon = trained.get("peak_anon_mb")
            anon = "—" if anon is None else f"{anon:,.0f}"
            cells += [
                f"{trained['peak_rss_mb']:,.0f} MB ({anon} MB anonymous)",
                f"{trained['first_step']:.1f} s ({trained['imported']:.1f} + "
                f"{data:.1f} + {rest:.1f})",
            ]
        else:
            cells += ["—", "—"]
        rates = row["pipeline"]
        cells.append(" / ".join(f"{rates[b] / 1e6:.1f}M" for b in BUDGETS))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def against_targets(rows: list[dict]) -> str:
    """The issue's targets, each with what this run measured."""
    lines = []
    trained = [row for row in rows if row["train"] and "WMT" not in row["name"]]
    if len(trained) > 1:
        small, large = trained[0]["train"], trained[-1]["train"]
        ratios = [
            f"{large[key] / small[key]:.2f} ({what})"
            for key, what in (("peak_rss_mb", "VmHWM"), ("peak_anon_mb", "anonymous"))
            if key in large and key in small
        ]
        lines.append(
            f"- Training peak memory at {trained[-1]['name']} pairs / at "
            f"{trained[0]['name']}: {', '.join(ratios)} (target at most 1.3)."
        )
    data = [
        row["train"]["data"] - row["train"]["imported"] + row["train"].get("plan", 0)
        for row in rows
        if row["train"]
    ]
    if data:
        lines.append(
            f"- Start to first step beyond the imports and the model's build and "
            f"compile (the store opened and checked, the epoch planned): at most "
            f"{max(data):.1f} s (target at most 15 s)."
        )
    slowest = min(min(row["pipeline"].values()) for row in rows)
    lines.append(
        f"- Pipeline alone: at least {slowest / 1e6:.1f}M real target tokens/s "
        "(target at least 1M)."
    )
    largest = rows[-2] if "WMT" in rows[-1]["name"] and len(rows) > 1 else rows[-1]
    two = largest["prepare"][2]
    lines.append(
        f"- Prepare with 2 workers at {largest['name']} pairs: "
        f"{two['pairs'] / two['seconds']:,.0f} pairs/s by the wall clock, "
        f"{two['pairs'] / two['cpu']:,.0f} pairs per CPU-second of all its "
        "processes (target at least 50k pairs/s on 2 cores)."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--multi30k", type=Path, default=Path("../shared/data/multi30k")
    )
    parser.add_argument("--sizes", default="29000,290000,2900000,29000000")
    parser.add_argument("--wmt-like", type=int, default=2_900_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/corpus_scale"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--write", action="store_true")
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("corpus_scale.jsonl"),
        help="each corpus's row is appended here as it is measured; a corpus "
        "already in it is not measured again (delete it to start afresh)",
    )
    args = parser.parse_args()
    corpora = [(f"{int(n):,}", int(n), False) for n in args.sizes.split(",") if n]
    if args.wmt_like:
        corpora.append((f"{args.wmt_like:,} WMT-like", args.wmt_like, True))
    done = _measured(args.results)
    rows = [
        done.get(name) or measure(args, name, pairs, wmt_like, flip=index % 2 == 1)
        for index, (name, pairs, wmt_like) in enumerate(corpora)
    ]
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    text = (
        f"{machine_line()}; backend {backend}; vocabulary {VOCAB_SIZE:,}; tiny "
        f"preset, {args.steps} updates of 2,048 target tokens.\n\n{table(rows)}"
        f"\n\n{against_targets(rows)}\n\n{BEFORE}"
    )
    print(text)
    if args.write:
        write_section(HEADING, text)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
    else:
        main()
