"""Decoding engines side by side: Keras, ONNX, CTranslate2 and the SavedModel.

The contenders (`--engines`, default all seven):

- keras-float32, keras-int8: the in-process `Translator` on `--backend`
  (default jax), int8 through `--quantize int8`'s `quantize_model`;
- onnx-float32, onnx-int8: `export --format onnx [--quantization int8]`,
  decoded by `OnnxTranslator`;
- ct2-float32, ct2-int8: `export --format ctranslate2 [--quantization int8]`,
  decoded by `ctranslate2.Translator.translate_batch`;
- savedmodel: `export --format savedmodel` (one export per search: its
  settings are fixed at export), its `translate` signature.

Two questions:

- Speed, per preset of `--presets` (default `small` and `base`): a model of
  that size with random weights and the trained run's tokenizer whose
  output bias keeps EOS away, so every sentence decodes to its limit
  (source + 50: the same work for all; `onnx_int8.random_run`), exported
  for each contender. Greedy and beam 4 (`--searches`), batch 1
  (`--sentences-batch1` test sources, one at a time) and batch 32
  (`--sentences`, sorted by length, in batches of 32). Each contender runs
  in its own child process, which loads its engine once and then answers
  one JSON line per command on stdin/stdout (decode these sentences with
  this search in batches of this size; the answer is the seconds, the
  process's peak RSS and, when asked, the translations). For each search
  and batch every contender first decodes the sentences once untimed (the
  warm-up pass: compiling, first-run set-up), then the contenders take
  turns over `--rounds` timing windows, in order and the next round in
  reverse; only one decodes at a time, and the median window gives
  sentences per second (windows half a second apart: idle onnxruntime and
  OpenMP threads spin a while after a call). Also the weights' size on
  disk, each process's peak RSS (VmHWM: imports, engine and decoding) and
  the mean translation length in tokens: CTranslate2 has one length limit
  per batch (its longest source + 50), so at batch 32 it decodes more.
- Quality: the trained run's test split (`--limit` sentences), translated
  by each contender's exports of that run, greedy and beam 4 in batches
  of 32: sacreBLEU (`decoding.evaluation.corpus_scores`).

Threads: onnxruntime intra_op_num_threads and CTranslate2 intra_threads
(inter_threads=1) are `--threads`, as are TensorFlow's intra-op pool (the
SavedModel, Keras on TensorFlow) and torch's threads (Keras on torch);
Keras on JAX keeps XLA's default pool (it has no such setting). Exports
run in child processes: ONNX and CTranslate2 under torch (the ONNX graphs
are traced there), the SavedModel under TensorFlow. A contender whose
extra is not installed, or that fails to export or load, is skipped with
the reason printed. `--write` puts the tables into
docs/benchmarks-decode-engines.md.

    python benchmarks/decode_engines.py --run-dir RUN [--presets small base]
        [--engines onnx-float32 ct2-float32 ...] [--write]
    python benchmarks/decode_engines.py --run-dir RUN --quick  # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DOCS,
    benchmark_page,
    machine_line,
    peak_rss_mb,
    run_child,
    write_section,
)
from onnx_int8 import directory_mb, random_run  # noqa: E402
from quantization import test_split, weight_bytes  # noqa: E402

ENGINES = (
    "keras-float32",
    "keras-int8",
    "onnx-float32",
    "onnx-int8",
    "ct2-float32",
    "ct2-int8",
    "savedmodel",
)
SEARCHES = {"greedy": 1, "beam4": 4}
SEARCH_NAMES = {"greedy": "greedy", "beam4": "beam 4"}
BASELINES = ("onnx-float32", "ct2-float32")
HEADING = "Decoding engines side by side"
PAGE = DOCS.parent / "benchmarks-decode-engines.md"
# The exports written under torch (the SavedModel's: under TensorFlow).
TORCH_EXPORTS = ("onnx-float32", "onnx-int8", "ct2-float32", "ct2-int8")
# Children that do not decode with Keras still import the package (and so
# Keras): on JAX, the lightest backend to import.
PLAIN_BACKEND = "jax"
STARTED = time.perf_counter()
# Seconds between two timing windows: onnxruntime's and OpenMP's idle
# threads spin for a while after a call returns, on the next one's time.
PAUSE = 0.5


# ---------------------------------------------------------------- exports


def export_engine(engine: str, run_dir: Path, out: Path, searches: list[str]) -> Path:
    """Write `engine`'s export of the run in `run_dir` under `out`."""
    kind, _, weights = engine.partition("-")
    if kind == "keras":
        return run_dir  # Decodes the run itself.
    if kind == "onnx":
        from keras_transformer.export.onnx import export_onnx

        return export_onnx(run_dir, out / engine, quantization=weights)
    if kind == "ct2":
        from keras_transformer.export.ctranslate2 import export_ctranslate2

        quantization = None if weights == "float32" else weights
        return export_ctranslate2(run_dir, out / engine, quantization=quantization)
    from keras_transformer.export.savedmodel import export_translator

    for search in searches:
        export_translator(run_dir, out / engine / search, beam_size=SEARCHES[search])
    return out / engine


def prepare(request: dict) -> dict:
    """The prepare child: the run (random weights for a preset) and the
    exports of `request["engines"]`, each a path or {"skip": reason}."""
    run_dir, out = Path(request["run_dir"]), Path(request["out"])
    if request.get("preset"):
        out.mkdir(parents=True, exist_ok=True)
        run_dir = random_run(run_dir, request["preset"], out)
    found = {"run_dir": str(run_dir)}
    for engine in request["engines"]:
        try:
            path = export_engine(engine, run_dir, out, request["searches"])
            found[engine] = str(path)
        except Exception as error:  # noqa: BLE001 - skipped with its reason.
            found[engine] = {"skip": f"{type(error).__name__}: {error}"[:300]}
    return found


def prepare_all(args, run_dir: Path, preset: str | None, out: Path) -> dict:
    """Every contender's path (the run for Keras, else its export) or
    {"skip": reason}: the exports in child processes, ONNX and CTranslate2
    under torch, the SavedModel under TensorFlow."""
    command = [sys.executable, __file__, "--child"]
    first = [e for e in args.engines if e in TORCH_EXPORTS]
    request = dict(run_dir=str(run_dir), out=str(out), preset=preset)
    request.update(engines=first, searches=args.searches)
    backend = "torch" if installed("torch") else args.backend
    found = run_child([*command, json.dumps({"prepare": request})], backend)
    progress(f"{preset or 'trained'}: {', '.join(first) or 'run'} ready ({backend})")
    for engine in args.engines:
        if engine.startswith("keras"):
            found[engine] = found["run_dir"]
    if "savedmodel" in args.engines:
        found["savedmodel"] = export_savedmodel(command, found["run_dir"], out, args)
    return found


def export_savedmodel(command: list[str], run_dir: str, out: Path, args):
    if not (installed("tensorflow") and installed("tensorflow_text")):
        return {"skip": "tensorflow and tensorflow-text are not installed"}
    request = dict(run_dir=run_dir, out=str(out), engines=["savedmodel"])
    request["searches"] = args.searches
    found = run_child([*command, json.dumps({"prepare": request})], "tensorflow")
    progress("savedmodel exported (tensorflow)")
    return found["savedmodel"]


def progress(message: str) -> None:
    """A line on stderr with the seconds since the benchmark started."""
    print(f"[{time.perf_counter() - STARTED:6.0f} s] {message}", file=sys.stderr)


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# ------------------------------------------------------- contender child


def set_threads(engine: str, threads: int) -> str:
    """Give the contender's framework `threads` intra-op threads, where it
    has a setting; returns what was done."""
    backend = os.environ.get("KERAS_BACKEND")
    if engine == "savedmodel" or (
        engine.startswith("keras") and backend == "tensorflow"
    ):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        return f"TensorFlow intra-op threads {threads}"
    if engine.startswith("keras") and backend == "torch":
        import torch

        torch.set_num_threads(threads)
        return f"torch threads {threads}"
    if engine.startswith("keras"):
        return "XLA's default thread pool"
    return f"intra-op threads {threads}"


def vm_hwm_mb() -> float:
    """This process's peak resident memory (VmHWM), in MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def keras_engine(path: Path, weights: str, threads: int):
    """(make(beam, batch) -> translate, weight MB) of the run's model."""
    from keras_transformer.decoding.quantization import quantize_model
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.run.directory import RunDirectory

    run = RunDirectory(path).open_for_inference()
    model = quantize_model(run.model, None if weights == "float32" else weights)

    def make(beam: int, batch: int):
        return Translator(model, run.tokenizer, beam_size=beam, batch_size=batch)

    return make, weight_bytes(model) / 1e6


def onnx_engine(path: Path, weights: str, threads: int):
    from keras_transformer.decoding.settings import SearchSettings
    from keras_transformer.export.onnx_translator import OnnxTranslator

    translator = OnnxTranslator(path, threads=threads, batch_size=32)

    def make(beam: int, batch: int):
        settings = SearchSettings(beam_size=beam)
        return lambda texts: translator.translate(texts, settings)

    return make, directory_mb(path)


def ct2_engine(path: Path, weights: str, threads: int):
    """CTranslate2 as `Translator` searches (`translate_batch_options`), one
    length limit per batch: its longest source + max_extra_length."""
    import ctranslate2
    import numpy as np

    from keras_transformer.decoding.batching import detokenize
    from keras_transformer.decoding.settings import SearchSettings
    from keras_transformer.export.reading import (
        read_export_info,
        read_export_tokenizer,
        translate_batch_options,
    )

    tokenizer = read_export_tokenizer(
        path, read_export_info(path, "ctranslate2"), "ctranslate2"
    )
    translator = ctranslate2.Translator(
        str(path), device="cpu", inter_threads=1, intra_threads=threads
    )
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    ids = {piece: i for i, piece in enumerate(pieces)}

    def make(beam: int, batch: int):
        settings = SearchSettings(beam_size=beam)
        options = translate_batch_options(tokenizer, settings)

        def translate(texts):
            source = [[pieces[i] for i in row] for row in tokenizer.encode(texts)]
            limit = max(map(len, source)) + settings.max_extra_length
            found = translator.translate_batch(
                source, **options, max_decoding_length=limit
            )
            out = [np.array([ids[p] for p in r.hypotheses[0]], np.int32) for r in found]
            return detokenize(tokenizer, out)

        return translate

    return make, (path / "model.bin").stat().st_size / 1e6


def savedmodel_engine(path: Path, weights: str, threads: int):
    """Both exports (one per search) loaded; the `translate` signature."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the SentencePiece ops

    loaded = {p.name: tf.saved_model.load(str(p)) for p in sorted(path.iterdir())}
    beams = {beam: name for name, beam in SEARCHES.items()}

    def make(beam: int, batch: int):
        signature = loaded[beams[beam]].signatures["translate"]

        def translate(texts):
            text = tf.constant(texts, tf.string)
            return [
                t.decode("utf-8") for t in signature(text=text)["translation"].numpy()
            ]

        return translate

    variables = next(iter(sorted(path.iterdir()))) / "variables"
    return make, sum(
        f.stat().st_size for f in variables.rglob("*") if f.is_file()
    ) / 1e6


LOADERS = {
    "keras": keras_engine,
    "onnx": onnx_engine,
    "ct2": ct2_engine,
    "savedmodel": savedmodel_engine,
}


def contender(request: dict, reply) -> None:
    """The contender child: load, then answer commands until told to quit."""
    engine, threads = request["engine"], request["threads"]
    try:
        threading = set_threads(engine, threads)
        kind, _, weights = engine.partition("-")
        make, weight_mb = LOADERS[kind](Path(request["path"]), weights, threads)
    except Exception as error:  # noqa: BLE001 - reported, the row skipped.
        reply({"error": f"{type(error).__name__}: {error}"[:300]})
        return
    reply({"weight_mb": weight_mb, "threads": threading, "peak_rss_mb": vm_hwm_mb()})
    translators = {}
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            return
        key = (SEARCHES[command["search"]], command["batch"])
        try:
            if key not in translators:
                translators[key] = make(*key)
            translate = translators[key]
            reply(decode(translate, command))
        except Exception as error:  # noqa: BLE001 - this row fails, not all.
            reply({"error": f"{type(error).__name__}: {error}"[:300]})


def decode(translate, command: dict) -> dict:
    """Decode the command's texts in batches of its size; the seconds."""
    texts, batch = command["texts"], command["batch"]
    start = time.perf_counter()
    out = [
        t for i in range(0, len(texts), batch) for t in translate(texts[i : i + batch])
    ]
    seconds = time.perf_counter() - start
    answer = {"seconds": seconds, "peak_rss_mb": vm_hwm_mb()}
    if command.get("hypotheses"):
        answer["hypotheses"] = out
    return answer


def child_main(request: dict) -> None:
    """A child's side: prepare (a RESULT line) or a contender (JSON lines on
    the original stdout; anything else printed goes to stderr)."""
    if "prepare" in request:
        print("RESULT " + json.dumps(prepare(request["prepare"])), flush=True)
        return
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # Libraries' prints (C-level too) leave the channel alone.

    def reply(answer: dict) -> None:
        channel.write(json.dumps(answer) + "\n")
        channel.flush()

    contender(request, reply)


# ------------------------------------------------------------- the parent


class Contender:
    """A contender's child process, loaded; `ask` sends one command."""

    def __init__(self, engine: str, path: str, args, log: Path):
        backend = args.backend if engine.startswith("keras") else PLAIN_BACKEND
        if engine == "savedmodel":
            backend = "tensorflow"
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
        request = {"engine": engine, "path": path, "threads": args.threads}
        self.engine, self.log, self._stderr = engine, log, log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(request)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        self.ready = self._answer()
        self.peak_rss_mb = self.ready.get("peak_rss_mb", 0.0)

    def ask(self, **command) -> dict:
        try:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        except OSError:  # It ended: `_answer` says why.
            pass
        answer = self._answer()
        self.peak_rss_mb = max(self.peak_rss_mb, answer.get("peak_rss_mb", 0.0))
        return answer

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            return {"error": "the process ended: " + " / ".join(tail)}
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write('{"quit": true}\n')
                self.process.stdin.close()
            except OSError:
                pass
        self.process.wait()
        self._stderr.close()


def start(paths: dict, args, scratch: Path, skipped: list[str], what: str):
    """Each contender's child, started one at a time; the others skipped."""
    live = {}
    for engine in args.engines:
        path = paths.get(engine)
        if isinstance(path, dict):
            skipped.append(f"{engine} ({what}): not exported: {path['skip']}")
            continue
        child = Contender(engine, path, args, scratch / f"{what}-{engine}.log")
        if "error" in child.ready:
            skipped.append(f"{engine} ({what}): {child.ready['error']}")
            child.close()
            continue
        live[engine] = child
        progress(f"{what}: {engine} loaded")
    return live


def quality(args, run_dir: Path, scratch: Path, skipped: list[str]) -> dict:
    """{engine: {"bleu": {search: BLEU}, "mb": weight MB}} on the test split."""
    from keras_transformer.decoding.evaluation import corpus_scores

    sources, references = test_split(str(run_dir), args.limit)
    paths = prepare_all(args, run_dir, None, scratch / "trained")
    found = {}
    for engine in args.engines:  # One process at a time: no timing here.
        one = argparse.Namespace(**{**vars(args), "engines": [engine]})
        for name, child in start(paths, one, scratch, skipped, "trained").items():
            found[name] = {"mb": child.ready["weight_mb"], "bleu": {}}
            for search in args.searches:
                answer = child.ask(
                    search=search, batch=32, texts=sources, hypotheses=True
                )
                if "error" in answer:
                    skipped.append(f"{name} (trained, {search}): {answer['error']}")
                    continue
                scores = corpus_scores(answer["hypotheses"], references)
                found[name]["bleu"][search] = scores.bleu
            child.close()
    return {"sentences": len(sources), "rows": found}


def timed(live: dict, command: dict, rounds: int, tokens) -> dict:
    """Every contender's warm-up pass (its mean output length in tokens,
    `tokens` of its translations), then `rounds` alternating windows; per
    contender {"windows": seconds, "tokens": mean} or {"error": reason}."""
    found = {}
    for name, child in live.items():
        answer = child.ask(**command, hypotheses=True)
        if "error" in answer:
            found[name] = {"error": answer["error"]}
            continue
        found[name] = {"windows": [], "tokens": tokens(answer["hypotheses"])}
    names = [name for name in live if "windows" in found[name]]
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            time.sleep(PAUSE)  # The last one's spinning threads settle.
            answer = live[name].ask(**command)
            if "error" in answer:
                found[name] = {"error": answer["error"]}
                names.remove(name)
            else:
                found[name]["windows"].append(answer["seconds"])
    return found


def speed(args, run_dir: Path, preset: str, scratch: Path, skipped: list[str]):
    """One preset's rows (engine, search, batch, sentences/s, windows, mean
    output tokens) and its contenders' weight MB, peak RSS and threads."""
    from keras_transformer.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(run_dir / "tokenizer")

    def tokens(texts: list[str]) -> float:
        return statistics.mean(map(len, tokenizer.encode(texts)))

    sources = test_split(str(run_dir), max(args.sentences, args.sentences_batch1))[0]
    texts = {1: sources[: args.sentences_batch1]}
    texts[32] = sorted(sources[: args.sentences], key=len)
    paths = prepare_all(args, run_dir, preset, scratch / preset)
    live = start(paths, args, scratch, skipped, preset)
    rows = []
    try:
        for search in args.searches:
            for batch in args.batches:
                command = {"search": search, "batch": batch, "texts": texts[batch]}
                progress(f"{preset}: {SEARCH_NAMES[search]}, batch {batch}")
                for name, found in timed(live, command, args.rounds, tokens).items():
                    if "error" in found:
                        where = f"{preset}, {SEARCH_NAMES[search]}, batch {batch}"
                        skipped.append(f"{name} ({where}): {found['error']}")
                        continue
                    rate = len(texts[batch]) / statistics.median(found["windows"])
                    rows.append((name, search, batch, rate, found))
    finally:
        for child in live.values():
            child.close()
    children = {n: c.ready | {"rss": c.peak_rss_mb} for n, c in live.items()}
    return {"rows": rows, "children": children}


# ------------------------------------------------------------------ tables


def rate_text(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def speed_table(found: dict) -> list[str]:
    rates = {(n, s, b): r for n, s, b, r, _ in found["rows"]}
    lines = [
        "| contender | search | batch | sentences/s | / onnx-float32 | "
        "/ ct2-float32 | tokens out | weight MB | peak RSS MB | windows s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, search, batch, rate, timing in found["rows"]:
        ratios = [rates.get((base, search, batch)) for base in BASELINES]
        ratios = [f"{rate / r:.2f}x" if r else "-" for r in ratios]
        child = found["children"][name]
        cells = [name, SEARCH_NAMES[search], str(batch), rate_text(rate), *ratios]
        cells += [f"{timing['tokens']:.1f}", f"{child['weight_mb']:.1f}"]
        cells += [f"{child['rss']:,.0f}"]
        cells.append(", ".join(f"{w:.2f}" for w in timing["windows"]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def fastest(found: dict) -> str:
    """One sentence: the fastest contender per search and batch."""
    best = {}
    for name, search, batch, rate, _ in found["rows"]:
        if rate > best.get((search, batch), ("", 0.0))[1]:
            best[search, batch] = (name, rate)
    parts = [
        f"{SEARCH_NAMES[s]} at batch {b}: {n} ({rate_text(r)}/s)"
        for (s, b), (n, r) in best.items()
    ]
    return "Fastest: " + "; ".join(parts) + "." if parts else ""


def quality_table(found: dict, searches: list[str]) -> list[str]:
    names = " | ".join(f"BLEU {SEARCH_NAMES[s]}" for s in searches)
    lines = [
        f"| contender | weight MB | {names} |",
        "| --- | ---: |" + " ---: |" * len(searches),
    ]
    for name, row in found["rows"].items():
        bleu = [row["bleu"].get(s) for s in searches]
        cells = [f"{b:.2f}" if b is not None else "-" for b in bleu]
        lines.append(f"| {name} | {row['mb']:.1f} | " + " | ".join(cells) + " |")
    return lines


def threads_line(args, found: dict) -> str:
    """How each contender's threads were set, as its child reported."""
    seen = {}
    for table in found.values():
        for name, child in table.get("children", {}).items():
            seen.setdefault(name, child["threads"])
    described = "; ".join(f"{n}: {t}" for n, t in seen.items())
    return (
        f"Threads: {described} (CTranslate2 inter_threads=1, onnxruntime "
        f"inter_op_num_threads=1). Keras contenders on {args.backend}."
    )


def report(args, found: dict, skipped: list[str]) -> str:
    command = " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [machine_line(), "", f"`python benchmarks/decode_engines.py {command}`", ""]
    lines += [
        f"Speed: random weights of each preset's shape with the run's tokenizer, "
        f"every sentence decoded to its limit (source + 50); batch 1: "
        f"{args.sentences_batch1} test sentences one at a time, batch 32: "
        f"{args.sentences} sorted by length; median of {args.rounds} windows, "
        "the contenders taking turns (reversed every other round) after a "
        "warm-up pass each. Tokens out: the warm-up pass's mean translation "
        "length, tokenized again (equal work when equal). Weight MB: Keras, "
        "its weights in memory (int8 is quantized at load); ONNX, the two "
        "graphs; CTranslate2, model.bin; "
        "SavedModel, variables/ of one export. Peak RSS: the contender's own "
        f"process (VmHWM), imports included (ONNX and CTranslate2 import the "
        f"package, Keras on {PLAIN_BACKEND}; the SavedModel's holds one export "
        "per search).",
        "",
        threads_line(args, found),
    ]
    for preset in args.presets:
        lines += ["", f"**{preset}**", "", *speed_table(found[preset])]
        lines += ["", fastest(found[preset])]
    q = found["quality"]
    lines += [
        "",
        f"**Quality**: the trained run's test split, {q['sentences']} sentences, "
        "batches of 32, each contender's export of the run.",
        "",
        *quality_table(q, args.searches),
    ]
    if skipped:
        lines += ["", "Skipped:", "", *(f"- {reason}" for reason in skipped)]
    return "\n".join(lines)


def write(text: str) -> None:
    """`write_section` onto docs/benchmarks-decode-engines.md (a new section goes
    there rather than onto docs/benchmarks.md)."""
    if benchmark_page(HEADING) == DOCS and f"### {HEADING}\n" not in DOCS.read_text():
        PAGE.write_text(PAGE.read_text().rstrip("\n") + f"\n\n### {HEADING}\n")
    write_section(HEADING, text)


def arguments() -> argparse.Namespace:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", help="a trained run: tokenizer, test split, BLEU")
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument(
        "--searches", nargs="+", default=list(SEARCHES), choices=SEARCHES
    )
    parser.add_argument(
        "--batches", nargs="+", type=int, default=[1, 32], choices=[1, 32]
    )
    parser.add_argument("--sentences", type=int, default=64, help="at batch 32")
    parser.add_argument("--sentences-batch1", type=int, default=16)
    parser.add_argument("--limit", type=int, default=500, help="BLEU sentences")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=cores or os.cpu_count() or 1)
    parser.add_argument(
        "--backend", default="jax", choices=["jax", "tensorflow", "torch"]
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny, 4 sentences, 1 round"
    )
    parser.add_argument(
        "--write", action="store_true", help="docs/benchmarks-decode-engines.md"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is None and args.run_dir is None:
        parser.error("--run-dir is required")
    if args.quick:
        args.presets, args.rounds = ["tiny"], 1
        args.sentences = args.sentences_batch1 = args.limit = 4
    return args


def main() -> None:
    args = arguments()
    if args.child is not None:
        child_main(json.loads(args.child))
        return
    run_dir, skipped = Path(args.run_dir).resolve(), []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        found = {"quality": quality(args, run_dir, scratch, skipped)}
        for preset in args.presets:
            found[preset] = speed(args, run_dir, preset, scratch, skipped)
            progress(f"{preset}: done")
    text = report(args, found, skipped)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
