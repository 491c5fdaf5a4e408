"""What the decoding options cost: sentences/s against plain beam 4 and greedy.

In one process (`KERAS_BACKEND` picks the backend), on `--sentences`
sentences of a test set, each option translates the whole set once as a
warm-up (every shape compiles there; compiles are not timed), then the
options take turns over `--rounds` timing windows of the whole set. Each
option's speed is its median window; its ratios to plain beam 4 and to
greedy are the medians of the per-round ratios (the same round's windows:
the same machine noise). The options:

- greedy and beam 4: `Translator.translate`, the baseline;
- `Translator.generate` (token scores and alignments: the search, then one
  teacher-forced pass over the outputs), greedy and beam 4;
- sampling top-k 10 and top-p 0.9 (beam 1, one sample per sentence);
- an ensemble of the run's final model with its checkpoint average
  (`keras-transformer average --last K` into a temporary file, or an
  `averaged-*.keras` already in the run), greedy and beam 4;
- constrained beam 4 (`generate(constraints=...)`): one phrase per
  sentence, a word of its reference that the tokenizer holds as one piece
  (the longest; else the longest without the unknown piece);
- beam 4 with a forced prefix (`generate(prefixes=...)`): the reference's
  first word.

Also the sacreBLEU and chrF (`decoding.evaluation.corpus_scores`) of beam 4
with the final model, the averaged model and their ensemble, and of the
constrained and prefixed outputs, and the share of constraints met.

    KERAS_BACKEND=jax python benchmarks/decoder_features.py --run-dir RUN \\
        [--src F --ref F] [--sentences 200 --rounds 3 --last 5] [--write]

Without --src/--ref: a run trained on Multi30k reads test2016 from
../shared/data/multi30k (`test_2016_flickr.{en,de}.gz`) when that folder
exists; any other run (or without the folder) reads its own test split,
from the corpus its manifest names. `--write` replaces the generated part
of the "Decoding options: what each costs" section of docs/benchmarks*.md
(between the markers below; the prose around them is kept).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import benchmark_page, machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
HEADING = "### Decoding options: what each costs"
WRITE_BEGIN = "<!-- benchmarks/decoder_features.py --write: generated from here -->"
WRITE_END = "<!-- benchmarks/decoder_features.py --write: generated to here -->"


def read_lines(path: str | Path) -> list[str]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_set(args: argparse.Namespace) -> tuple[list[str], list[str], str]:
    """(sources, references, what they are) of `--sentences` lines."""
    n = args.sentences
    if args.src:
        return read_lines(args.src)[:n], read_lines(args.ref)[:n], args.src
    manifest = json.loads((Path(args.run_dir) / "manifest.json").read_text())
    data = dict(manifest["identity"]["data"])
    if data.get("name") == "multi30k" and MULTI30K.is_dir():
        src, tgt = data.get("source_lang") or "en", data.get("target_lang") or "de"
        files = [MULTI30K / f"test_2016_flickr.{lang}.gz" for lang in (src, tgt)]
        if all(f.is_file() for f in files):
            what = f"Multi30k test2016 ({files[0].name})"  # No local paths.
            return read_lines(files[0])[:n], read_lines(files[1])[:n], what
    from keras_transformer.data.datasets import DatasetSpec, load_dataset

    data.pop("fingerprint", None)
    data["files"] = {k: tuple(v) for k, v in (data.get("files") or {}).items()}
    test = load_dataset(DatasetSpec(**data))["test"]
    what = f"the run's test split (corpus {data['name']})"
    return list(test.source[:n]), list(test.target[:n]), what


def averaged_model(run_dir: Path, last: int, temp: str) -> tuple[Path, str]:
    """An `averaged-*.keras` of the run, else `keras-transformer average
    --last K` (K: at most the checkpoints there are) into `temp`."""
    found = sorted(run_dir.glob("averaged-*.keras"))
    if found:
        return found[-1], f"existing {found[-1].name}"
    count = len(list((run_dir / "checkpoints").glob("ckpt-*.keras")))
    k = min(last, count)
    if k < 1:
        sys.exit(f"{run_dir} has no checkpoints to average.")
    output = Path(temp) / f"averaged-last-{k}.keras"
    command = [sys.executable, "-m", "keras_transformer", "average"]
    command += ["--run-dir", str(run_dir), "--last", str(k), "--output", str(output)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"average failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    note = f"`average --last {k}` ({done.stdout.strip().split(' -> ')[0]})"
    if k < last:
        note += f"; --last {last} asked, the run keeps only {count} checkpoints"
    return output, note


def constraint_word(reference: str, tokenizer) -> list[int] | None:
    """The ids of a reference word to force: the longest that is one piece
    of the vocabulary, else the longest without the unknown piece."""
    unk = getattr(tokenizer, "unk_id", 1)
    words = {w.strip(".,;:!?\"'()") for w in reference.split()} - {""}
    words = sorted(words, key=lambda w: (-len(w), w))
    if not words:
        return None
    encoded = tokenizer.encode(words)
    for word, ids in zip(words, encoded):
        if len(ids) == 1 and tokenizer.id_to_piece(ids[0]) == "\u2581" + word:
            return ids
    for ids in encoded:
        if ids and unk not in ids:
            return ids
    return None


def prefix_word(reference: str, tokenizer) -> list[int]:
    words = reference.split()
    if not words:
        return []
    ids = tokenizer.encode([words[0]])[0]
    return [] if getattr(tokenizer, "unk_id", 1) in ids else ids


def child(args: argparse.Namespace) -> dict:
    import keras

    from keras_transformer.decoding.ensemble import Ensemble
    from keras_transformer.decoding.evaluation import corpus_scores
    from keras_transformer.decoding.sampling import SamplingSettings
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.run.directory import RunDirectory

    run_dir = Path(args.run_dir)
    sources, references, data = test_set(args)
    temp = tempfile.mkdtemp(prefix="decoder_features-")
    average_path, average_note = averaged_model(run_dir, args.last, temp)
    run = RunDirectory(run_dir).open_for_inference()
    averaged = RunDirectory(run_dir).open_for_inference(average_path).model
    tokenizer, final = run.tokenizer, run.model
    ensemble = Ensemble([final, averaged])
    size = args.batch_size

    def translator(model=final, beam=4, sampling=None):
        return Translator(
            model, tokenizer, beam_size=beam, batch_size=size, sampling=sampling
        )

    constraints = [constraint_word(r, tokenizer) for r in references]
    phrases = [[c] if c else [] for c in constraints]
    prefixes = [prefix_word(r, tokenizer) for r in references]
    greedy, beam = translator(beam=1), translator()
    top_k = translator(beam=1, sampling=SamplingSettings("top-k", top_k=10))
    top_p = translator(beam=1, sampling=SamplingSettings("top-p", top_p=0.9))
    ens_greedy, ens_beam = translator(ensemble, 1), translator(ensemble)
    avg_beam = translator(averaged)
    options = {  # name -> a call over the whole set, returning translations
        "greedy": lambda: greedy(sources),
        "beam 4": lambda: beam(sources),
        "generate (scores + alignments), greedy": lambda: greedy.generate(sources),
        "generate (scores + alignments), beam 4": lambda: beam.generate(sources),
        "sampling top-k 10": lambda: top_k(sources),
        "sampling top-p 0.9": lambda: top_p(sources),
        "ensemble final + averaged, greedy": lambda: ens_greedy(sources),
        "ensemble final + averaged, beam 4": lambda: ens_beam(sources),
        "constrained beam 4 (1 word each)": lambda: beam.generate(
            sources, constraints=phrases
        ),
        "beam 4, forced prefix (1st word)": lambda: beam.generate(
            sources, prefixes=prefixes
        ),
    }
    outputs, warmup = {}, {}
    for name, call in options.items():  # Every shape compiles here.
        start = time.perf_counter()
        outputs[name] = call()
        warmup[name] = time.perf_counter() - start
        print(f"warm-up {name}: {warmup[name]:.1f} s", file=sys.stderr, flush=True)
    windows = {name: [] for name in options}
    for round_ in range(args.rounds):  # Alternating: the same noise for all.
        for name, call in options.items():
            start = time.perf_counter()
            call()
            windows[name].append(time.perf_counter() - start)
        print(f"round {round_ + 1} done", file=sys.stderr, flush=True)

    def text(output):
        return [o["translation"] if isinstance(o, dict) else o for o in output]

    def scores(hypotheses):
        found = corpus_scores(text(hypotheses), references)
        return {"bleu": found.bleu, "chrf": found.chrf}

    constrained = outputs["constrained beam 4 (1 word each)"]
    asked = [i for i, p in enumerate(phrases) if p]
    prefixed = outputs["beam 4, forced prefix (1st word)"]
    asked_prefix = [i for i, p in enumerate(prefixes) if p]
    quality = {
        "final model, beam 4": scores(outputs["beam 4"]),
        "averaged model, beam 4": scores(avg_beam(sources)),
        "ensemble final + averaged, beam 4": scores(
            outputs["ensemble final + averaged, beam 4"]
        ),
        "final model, constrained beam 4": scores(constrained),
        "final model, beam 4 + forced prefix": scores(prefixed),
    }
    rows = {}
    for name in options:
        rows[name] = {
            "sentences_per_s": len(sources) / statistics.median(windows[name]),
            "warmup_s": warmup[name],
            "vs_beam": statistics.median(
                b / w for b, w in zip(windows["beam 4"], windows[name])
            ),
            "vs_greedy": statistics.median(
                g / w for g, w in zip(windows["greedy"], windows[name])
            ),
        }
    met = sum(constrained[i]["constraints"]["satisfied"] for i in asked)
    prefix_met = sum(prefixed[i]["constraints"]["satisfied"] for i in asked_prefix)
    return {
        "backend": keras.backend.backend(),
        "data": data,
        "sentences": len(sources),
        "average": average_note,
        "rows": rows,
        "quality": quality,
        "constraints_asked": len(asked),
        "constraints_met": met,
        "prefixes_asked": len(asked_prefix),
        "prefixes_met": prefix_met,
    }


def tables(found: dict, rounds: int) -> str:
    lines = [
        "| option | sentences/s | vs beam 4 | vs greedy | warm-up s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, row in found["rows"].items():
        lines.append(
            f"| {name} | {row['sentences_per_s']:.1f} | {row['vs_beam']:.2f}x | "
            f"{row['vs_greedy']:.2f}x | {row['warmup_s']:.1f} |"
        )
    lines += ["", "| model, search | sacreBLEU | chrF |", "| --- | ---: | ---: |"]
    for name, score in found["quality"].items():
        lines.append(f"| {name} | {score['bleu']:.2f} | {score['chrf']:.2f} |")
    return (
        f"Backend {found['backend']}; {found['sentences']} sentences of "
        f"{found['data']}; averaged model: {found['average']}; median of "
        f"{rounds} alternating windows, after one warm-up call of each option "
        "(compiles excluded; its time is the last column).\n\n"
        + "\n".join(lines)
        + f"\n\nConstraints met: {found['constraints_met']} of "
        f"{found['constraints_asked']} sentences given one; forced prefixes met: "
        f"{found['prefixes_met']} of {found['prefixes_asked']}."
    )


def write_tables(text: str, docs: Path | None = None) -> None:
    """Replace the text between the markers of the section (in `docs`,
    default: the benchmark page holding it); without them, append the
    section (heading, markers, text) at the end."""
    docs = docs or benchmark_page(HEADING.removeprefix("### "))
    content = docs.read_text(encoding="utf-8")
    begin, end = content.find(WRITE_BEGIN), content.find(WRITE_END)
    block = f"{WRITE_BEGIN}\n\n{text.strip()}\n\n{WRITE_END}"
    if begin >= 0 and end > begin:
        content = content[:begin] + block + content[end + len(WRITE_END) :]
    else:
        content = content.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
    docs.write_text(content, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--src", help="source file, plain or .gz (with --ref)")
    parser.add_argument("--ref", help="reference file, plain or .gz (with --src)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--last", type=int, default=5, help="checkpoints averaged")
    parser.add_argument("--write", action="store_true", help="docs/benchmarks*.md")
    args = parser.parse_args()
    if bool(args.src) != bool(args.ref):
        parser.error("--src and --ref go together")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    found = child(args)
    text = f"{machine_line()}\n\n{tables(found, args.rounds)}"
    print(text)
    if args.write:
        write_tables(text)


if __name__ == "__main__":
    main()
