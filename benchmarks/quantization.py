"""int8 against float32 decoding (`--quantize int8`): quality, speed, size.

For each backend, in its own process: the run's model loaded twice, one
copy quantized (`keras_transformer.decoding.quantization`); the test set translated
by both (beam 4, batches of `--batch-size`; the first pass compiles and
gives the sacreBLEU and chrF of each); then the two take turns over
`--rounds` timing windows of the whole set, and the median window gives
sentences per second. Also the bytes of the weights and the share of
output lines that are identical.

    python benchmarks/quantization.py --run-dir RUN [--src F --ref F]

Without --src/--ref the run's own test split is used (a run trained on
`builtin` or `multi30k`: its manifest names the corpus).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, run_child, write_section  # noqa: E402

CONTENDERS = ("float32", "int8")


def test_split(run_dir: str, limit: int) -> tuple[list[str], list[str]]:
    """The run's test split, from the corpus its manifest names."""
    from keras_transformer.data.datasets import DatasetSpec, load_dataset

    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    data = dict(manifest["identity"]["data"])
    data.pop("fingerprint", None)
    data["files"] = {k: tuple(v) for k, v in (data.get("files") or {}).items()}
    test = load_dataset(DatasetSpec(**data))["test"]
    return list(test.source[:limit]), list(test.target[:limit])


def weight_bytes(model) -> int:
    import numpy as np

    return sum(
        int(np.prod(w.shape)) * np.dtype(str(w.dtype)).itemsize for w in model.weights
    )


def child(args: argparse.Namespace) -> dict:
    from keras_transformer.decoding.evaluation import corpus_scores
    from keras_transformer.decoding.quantization import quantize_model
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.run.directory import RunDirectory

    if args.src:
        sources = Path(args.src).read_text("utf-8").splitlines()[: args.limit]
        references = Path(args.ref).read_text("utf-8").splitlines()[: args.limit]
    else:
        sources, references = test_split(args.run_dir, args.limit)
    translators, results = {}, {}
    for name in CONTENDERS:
        run = RunDirectory(args.run_dir).open_for_inference()
        model = quantize_model(run.model, None if name == "float32" else name)
        translators[name] = Translator(
            model, run.tokenizer, beam_size=4, batch_size=args.batch_size
        )
        start = time.perf_counter()
        hypotheses = translators[name](sources)  # Compiles every shape.
        scores = corpus_scores(hypotheses, references)
        results[name] = {
            "first_pass_s": time.perf_counter() - start,
            "bleu": scores.bleu,
            "chrf": scores.chrf,
            "weight_bytes": weight_bytes(model),
            "hypotheses": hypotheses,
            "windows": [],
        }
    for _ in range(args.rounds):  # Alternating windows: the same noise for both.
        for name in CONTENDERS:
            start = time.perf_counter()
            translators[name](sources)
            results[name]["windows"].append(time.perf_counter() - start)
    same = sum(
        a == b
        for a, b in zip(results["float32"]["hypotheses"], results["int8"]["hypotheses"])
    )
    for result in results.values():
        result["sentences_per_s"] = len(sources) / statistics.median(result["windows"])
        del result["hypotheses"]
    return {"sentences": len(sources), "identical": same, "results": results}


def table(rows: dict[str, dict]) -> str:
    lines = [
        "| backend | weights | weight MB | sacreBLEU | chrF | sentences/s | "
        "int8 / float32 speed | identical lines |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for backend, found in rows.items():
        results = found["results"]
        ratio = (
            results["int8"]["sentences_per_s"] / results["float32"]["sentences_per_s"]
        )
        for name in CONTENDERS:
            result = results[name]
            speed = f"{ratio:.2f}x" if name == "int8" else ""
            identical = (
                f"{found['identical']} / {found['sentences']}" if name == "int8" else ""
            )
            lines.append(
                f"| {backend} | {name} | {result['weight_bytes'] / 1e6:.2f} | "
                f"{result['bleu']:.2f} | {result['chrf']:.2f} | "
                f"{result['sentences_per_s']:.1f} | {speed} | {identical} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--src", help="source file (with --ref)")
    parser.add_argument("--ref", help="reference file (with --src)")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--limit", type=int, default=500, help="sentences")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="docs/benchmarks*.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if bool(args.src) != bool(args.ref):
        parser.error("--src and --ref go together")
    if args.child:
        print("RESULT " + json.dumps(child(args)))
        return
    command = [sys.executable, __file__, "--child", *sys.argv[1:]]
    rows = {}
    for backend in args.backends.split(","):
        rows[backend] = run_child(command, backend)
        print(table({backend: rows[backend]}).splitlines()[-2:], flush=True)
    text = (
        f"{machine_line()}\n\n`python benchmarks/quantization.py "
        f"{' '.join(sys.argv[1:])}` (beam 4, batches of {args.batch_size}, "
        f"median of {args.rounds} alternating windows):\n\n{table(rows)}"
    )
    print(text)
    if args.write:
        write_section("int8 inference (--quantize int8)", text)


if __name__ == "__main__":
    main()
