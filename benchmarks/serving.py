"""Serving: the exported SavedModel, the in-process `Translator` and
CTranslate2 (float32 and int8 weights) on the same trained weights.

For each search (greedy, beam 4) and batch size (1, 32) it prints sentences
per second and the p50/p95 latency of one request (a batch of strings in,
strings out, tokenization included), the time of the first request (which
compiles), then the export times and the sizes on disk. Every contender
first translates all the sentences once (compiling its shapes), then the
contenders take turns over `--rounds` timing windows, so load on the machine
falls on all of them alike. BLEU against the references
shows that the contenders translate alike (int8 changes the weights).

    KERAS_BACKEND=tensorflow python benchmarks/serving.py --run-dir RUN

The SavedModel needs TensorFlow, so the whole benchmark runs on the
TensorFlow backend (the in-process `Translator` too).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402

from keras_transformer.data.builtin_corpus import generate_corpus  # noqa: E402
from keras_transformer.run.directory import RunDirectory  # noqa: E402


def held_out(count: int) -> tuple[list[str], list[str]]:
    """The test split of the built-in corpus at its defaults (unseen in
    training by a run on the built-in corpus)."""
    pairs = generate_corpus(num_train=20000, num_valid=500, num_test=500, seed=1234)
    test = pairs["test"][:count]
    return [s for s, _ in test], [t for _, t in test]


def size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def export_all(run_dir: Path, out: Path):
    """Exports, their wall times (s) and the contenders' translate functions."""
    from keras_transformer.export import export_translator
    from keras_transformer.export.ctranslate2 import export_ctranslate2

    times, paths = {}, {}
    for name, export, kwargs in [
        ("SavedModel, beam 4", export_translator, dict(beam_size=4)),
        ("SavedModel, greedy", export_translator, dict(beam_size=1)),
        ("CTranslate2 float32", export_ctranslate2, {}),
        ("CTranslate2 int8", export_ctranslate2, dict(quantization="int8")),
    ]:
        start = time.perf_counter()
        paths[name] = export(
            run_dir, out / name.replace(" ", "_").replace(",", ""), **kwargs
        )
        times[name] = time.perf_counter() - start
    return times, paths


def saved_model_fn(path: Path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the SentencePiece ops

    signature = tf.saved_model.load(str(path)).signatures["translate"]

    def translate(texts):
        out = signature(text=tf.constant(texts, tf.string))["translation"].numpy()
        return [t.decode("utf-8") for t in out]

    return translate


def ctranslate2_fn(path: Path, beam_size: int, threads: int):
    import json

    import ctranslate2
    import sentencepiece

    info = json.loads((path / "export.json").read_text())
    options = dict(info["translate_batch"], beam_size=beam_size)
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(path / "sentencepiece.model")
    )
    translator = ctranslate2.Translator(
        str(path), device="cpu", inter_threads=1, intra_threads=threads
    )

    def translate(texts):
        source = processor.encode(texts, out_type=str)
        results = translator.translate_batch(
            source,
            **options,
            max_decoding_length=max(map(len, source)) + info["max_extra_length"],
        )
        return [processor.decode(r.hypotheses[0]) for r in results]

    return translate


def translator_fn(run: RunDirectory, beam_size: int, batch_size: int):
    from keras_transformer.decoding.translator import Translator

    translator = Translator(
        run.load_model(),
        run.load_tokenizer(),
        beam_size=beam_size,
        batch_size=batch_size,
    )
    return translator.translate


def chunks(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def measure(contenders: dict, texts: list[str], batch_size: int, rounds: int):
    """Latency samples per contender, the windows alternating contenders."""
    requests = chunks(texts, batch_size)
    outputs, latencies, totals, first = {}, {}, {}, {}
    for name, translate in contenders.items():  # Warm-up: every shape compiles.
        start = time.perf_counter()
        outputs[name] = list(translate(requests[0]))
        first[name] = time.perf_counter() - start
        outputs[name] += [t for request in requests[1:] for t in translate(request)]
        latencies[name], totals[name] = [], 0.0
    for _ in range(rounds):
        for name, translate in contenders.items():
            start_window = time.perf_counter()
            for request in requests:
                start = time.perf_counter()
                translate(request)
                latencies[name].append(time.perf_counter() - start)
            totals[name] += time.perf_counter() - start_window
    rows = {}
    for name in contenders:
        samples = np.asarray(latencies[name]) * 1000
        rows[name] = dict(
            per_second=rounds * len(texts) / totals[name],
            p50=float(np.percentile(samples, 50)),
            p95=float(np.percentile(samples, 95)),
            first=first[name],
            outputs=outputs[name],
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True, help="a trained run (small)")
    parser.add_argument("--sentences", type=int, default=256, help="at batch 32")
    parser.add_argument(
        "--sentences-batch1", type=int, default=64, help="at batch 1 (slower)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 intra")
    args = parser.parse_args()

    run = RunDirectory(args.run_dir)
    config = run.load_config()
    sources, references = held_out(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        export_times, paths = export_all(run.path, Path(tmp))
        sizes = {".keras file": size_mb(run.resolve_model_path(None))}
        sizes.update({name: size_mb(path) for name, path in paths.items()})
        print(
            f"\n### Serving, {config.d_model}-d model "
            f"({config.num_encoder_layers}+{config.num_decoder_layers} layers, "
            f"vocabulary {config.vocab_size}), held-out built-in sentences\n"
        )
        print(
            "| search | batch | contender | sentences/s | p50 ms | p95 ms "
            "| first request s | BLEU |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for beam_size, search in ((1, "greedy"), (4, "beam 4")):
            saved = paths[
                "SavedModel, greedy" if beam_size == 1 else "SavedModel, beam 4"
            ]
            for batch_size in (1, 32):
                count = args.sentences_batch1 if batch_size == 1 else args.sentences
                contenders = {
                    "Translator (in-process)": translator_fn(
                        run, beam_size, batch_size
                    ),
                    "SavedModel translate": saved_model_fn(saved),
                    "CTranslate2 float32": ctranslate2_fn(
                        paths["CTranslate2 float32"], beam_size, args.threads
                    ),
                    "CTranslate2 int8": ctranslate2_fn(
                        paths["CTranslate2 int8"], beam_size, args.threads
                    ),
                }
                rows = measure(contenders, sources[:count], batch_size, args.rounds)
                for name, row in rows.items():
                    bleu = sacrebleu.corpus_bleu(row["outputs"], [references[:count]])
                    cells = [search, batch_size, name, f"{row['per_second']:,.1f}"]
                    cells += [f"{row['p50']:,.1f}", f"{row['p95']:,.1f}"]
                    cells += [f"{row['first']:.2f}"]
                    print("| " + " | ".join(map(str, cells)) + f" | {bleu.score:.1f} |")
        print("\n| format | export time (s) | size on disk (MB) |")
        print("| --- | --- | --- |")
        print(f"| .keras file (trained) | - | {sizes['.keras file']:.1f} |")
        for name in paths:
            print(f"| {name} | {export_times[name]:.1f} | {sizes[name]:.1f} |")
    print(
        f"\nCTranslate2: inter_threads=1, intra_threads={args.threads}; the others "
        "use TensorFlow's default thread pools on this machine. "
        f"{args.rounds} timing windows per contender."
    )


if __name__ == "__main__":
    main()
