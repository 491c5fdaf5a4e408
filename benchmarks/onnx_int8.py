"""ONNX int8 against ONNX float32 (`export --format onnx --quantization int8`).

Two questions, one table each:

- Quality, on a trained run: its test split (or `--src`/`--ref`) translated
  by the float32 and the int8 export (beam 4, batches of 32): sacreBLEU,
  chrF and the share of identical lines.
- Speed, at the paper's sizes: for each of `--presets` (default `small`
  and `base`), a model of that size with random weights and the run's
  tokenizer and an untied output projection whose bias makes the
  end-of-sentence unlikely, so that every sentence decodes to its limit
  (source + 50: the same work for both contenders);
  both exports decode `--sentences` test sources with beam 4 in batches of
  32, the two taking turns over `--rounds` timing windows after a first
  pass; the median window gives sentences per second.

onnxruntime uses the cores of the machine (its default); both contenders
run in this one process, one after the other. Exports are traced under
torch (a child process with KERAS_BACKEND=torch when this one runs another
backend).

    python benchmarks/onnx_int8.py --run-dir RUN [--presets small base]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, write_section  # noqa: E402
from quantization import test_split  # noqa: E402

CONTENDERS = ("float32", "int8")


def export_both(run_dir: Path, scratch: Path) -> dict[str, Path]:
    from keras_transformer.export.onnx import export_onnx

    return {
        name: export_onnx(run_dir, scratch / name, quantization=name)
        for name in CONTENDERS
    }


def directory_mb(directory: Path) -> float:
    graphs = ("encoder.onnx", "decoder_step.onnx")
    return sum((directory / g).stat().st_size for g in graphs) / 1e6


def quality(run_dir: Path, scratch: Path, limit: int) -> dict:
    from keras_transformer.decoding.evaluation import corpus_scores
    from keras_transformer.export.onnx_translator import OnnxTranslator

    sources, references = test_split(str(run_dir), limit)
    found = {}
    for name, directory in export_both(run_dir, scratch).items():
        hypotheses = OnnxTranslator(directory, batch_size=32).translate(sources)
        scores = corpus_scores(hypotheses, references)
        found[name] = {"bleu": scores.bleu, "chrf": scores.chrf, "out": hypotheses}
    same = sum(a == b for a, b in zip(found["float32"]["out"], found["int8"]["out"]))
    return {"sentences": len(sources), "identical": same, **found}


def random_run(run_dir: Path, preset: str, scratch: Path) -> Path:
    """A run of `preset`'s size with random weights and `run_dir`'s tokenizer."""
    import shutil

    import keras
    import numpy as np

    from keras_transformer.config import EOS_ID, TransformerConfig
    from keras_transformer.data.tokenizer import load_tokenizer
    from keras_transformer.model import build_transformer

    target = scratch / f"{preset}-run"
    shutil.copytree(run_dir / "tokenizer", target / "tokenizer")
    vocab = load_tokenizer(target / "tokenizer").vocab_size
    # An output projection of its own (the same size as the tied one) has
    # the bias that keeps EOS away.
    config = TransformerConfig.preset(
        preset, vocab_size=vocab, tie_output_projection=False
    )
    model = build_transformer(config)
    bias = model.get_layer("output_projection").bias
    values = np.array(keras.ops.convert_to_numpy(bias))
    values[EOS_ID] = -1e4  # Every sentence runs to its limit: equal work.
    bias.assign(values)
    model.save(target / "model.keras")
    model.config.to_json(target / "config.json")
    return target


def speed(run_dir: Path, preset: str, scratch: Path, sources, rounds: int) -> dict:
    from keras_transformer.export.onnx_translator import OnnxTranslator

    exports = export_both(random_run(run_dir, preset, scratch), scratch / preset)
    translators = {n: OnnxTranslator(d, batch_size=32) for n, d in exports.items()}
    for translator in translators.values():
        translator.translate(sources[:32])  # onnxruntime's first-run set-up.
    windows = {name: [] for name in CONTENDERS}
    for round_ in range(rounds):  # Alternating, each going first in turn.
        order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
        for name in order:
            start = time.perf_counter()
            translators[name].translate(sources)
            windows[name].append(time.perf_counter() - start)
    return {
        name: {
            "sentences_per_s": len(sources) / statistics.median(windows[name]),
            "windows": windows[name],
            "mb": directory_mb(exports[name]),
        }
        for name in CONTENDERS
    }


def tables(found: dict, presets: list[str], sentences: int) -> str:
    q = found["quality"]
    lines = [
        machine_line(),
        "",
        f"Quality: the run's test split, {q['sentences']} sentences, beam 4.",
        "",
        "| weights | sacreBLEU | chrF | identical lines |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in CONTENDERS:
        same = f"{q['identical']} / {q['sentences']}" if name == "int8" else ""
        lines.append(
            f"| {name} | {q[name]['bleu']:.2f} | {q[name]['chrf']:.2f} | {same} |"
        )
    lines += [
        "",
        f"Speed: random weights, {sentences} sentences decoded to source + 50, "
        "beam 4, batches of 32; median of alternating windows.",
        "",
        "| model | weights | graphs MB | sentences/s | int8 / float32 | windows s |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for preset in presets:
        rows = found[preset]
        ratio = rows["int8"]["sentences_per_s"] / rows["float32"]["sentences_per_s"]
        for name in CONTENDERS:
            row = rows[name]
            windows = ", ".join(f"{w:.1f}" for w in row["windows"])
            lines.append(
                f"| {preset} | {name} | {row['mb']:.1f} | "
                f"{row['sentences_per_s']:.2f} | "
                f"{f'{ratio:.2f}x' if name == 'int8' else ''} | {windows} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True, help="a trained run")
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument("--limit", type=int, default=500, help="quality sentences")
    parser.add_argument("--sentences", type=int, default=64, help="speed sentences")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="docs/benchmarks*.md")
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        found = {"quality": quality(run_dir, scratch / "trained", args.limit)}
        sources = test_split(str(run_dir), args.sentences)[0]
        for preset in args.presets:
            found[preset] = speed(run_dir, preset, scratch, sources, args.rounds)
            print(f"{preset}: done", file=sys.stderr, flush=True)
    text = tables(found, args.presets, len(sources))
    print(text)
    if args.write:
        write_section("ONNX int8 against float32", text)


if __name__ == "__main__":
    main()
