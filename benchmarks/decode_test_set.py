"""Decoding a real test set: Multi30k test2016 with a trained run, per backend.

For each backend, in its own process: the whole test set translated by the
compiled `Translator` (batches of `--batch-size`), greedy and beam 4, each
two ways: dropping the sentences that are done from the batch between
segments of the search (the default), and running every batch as one
program until its last sentence is done; on torch also compiled with
`torch.compile` (`KERAS_TRANSFORMER_TORCH_COMPILE=1`; the default there is
eager), in a process of its own stopped after `--torch-compile-seconds`
(reported as not done); and CTranslate2 on the same weights, the yardstick for CPU
decoding. The first pass compiles every shape and is reported on its own;
then the contenders take turns over `--rounds` timing windows. It prints sentences
per second, seconds for the whole set (median window) and sacreBLEU. Then the
CLI's time from start to its first translation (`keras-transformer translate`,
one sentence on stdin, beam 4), with an empty and then a warm compilation
cache (both backends keep compiled programs between runs; see
`compilation_cache.py`).

    python benchmarks/decode_test_set.py --run-dir RUN \\
        --multi30k ../shared/data/multi30k
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cli_seconds, machine_line, run_child, write_section  # noqa: E402

SEARCHES = {"greedy": 1, "beam 4": 4}
MODES = {"drop finished": True, "whole batch": False}


def child(
    run_dir: str, multi30k: str, batch_size: int, rounds: int, compiled: bool
) -> dict:
    """Every contender of this backend, or with `compiled` only torch.compile's."""
    import keras

    from keras_transformer.data.multi30k import load_multi30k
    from keras_transformer.decoding.evaluation import corpus_scores
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.run.directory import RunDirectory

    test = load_multi30k("test", data_dir=multi30k)
    run = RunDirectory(run_dir)
    model, tokenizer = run.load_model(), run.load_tokenizer()
    contenders = {}
    for name, beam in SEARCHES.items():
        if compiled:
            contenders[f"{name} / drop finished, torch.compile"] = torch_compiled(
                model, tokenizer, beam_size=beam, batch_size=batch_size
            )
            continue
        for mode, drop in MODES.items():
            contenders[f"{name} / {mode}"] = Translator(
                model,
                tokenizer,
                beam_size=beam,
                batch_size=batch_size,
                drop_finished=drop,
            )
        if beam > 1:
            contenders[f"{name} / drop finished, early stopping"] = Translator(
                model, tokenizer, beam_size=beam, batch_size=batch_size,
                early_stopping=True,
            )  # fmt: skip
        contenders[f"{name} / CTranslate2"] = ctranslate2_translate(
            run_dir, beam, batch_size, tokenizer
        )
    results = {}
    for name, translate in contenders.items():
        start = time.perf_counter()
        hypotheses = translate(test.source)
        results[name] = {
            "first_seconds": time.perf_counter() - start,
            "bleu": corpus_scores(hypotheses, test.target).bleu,
            "windows": [],
        }
    for _ in range(rounds):
        for name, translate in contenders.items():
            start = time.perf_counter()
            translate(test.source)
            results[name]["windows"].append(time.perf_counter() - start)
    return {
        "backend": keras.backend.backend(),
        "sentences": len(test.source),
        "searches": results,
    }


def torch_compiled(model, tokenizer, **settings):
    """A `Translator` whose search runs through torch.compile."""
    from keras_transformer.decoding.compile import TORCH_COMPILE_ENV
    from keras_transformer.decoding.translator import Translator

    os.environ[TORCH_COMPILE_ENV] = "1"
    try:
        return Translator(model, tokenizer, **settings)
    finally:
        del os.environ[TORCH_COMPILE_ENV]


def ctranslate2_translate(run_dir: str, beam_size: int, batch_size: int, tokenizer):
    """CTranslate2 (float32, 2 threads) on the run's exported weights, fed
    the batches `Translator` makes: sorted by length, `batch_size` each, with
    the same output limit (longest source of the batch + 50)."""
    import ctranslate2
    import sentencepiece

    from keras_transformer.export.ctranslate2 import export_ctranslate2

    path = export_ctranslate2(run_dir, tempfile.mkdtemp(), beam_size=beam_size)
    info = json.loads((path / "export.json").read_text())
    options = dict(info["translate_batch"], beam_size=beam_size)
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(path / "sentencepiece.model")
    )
    translator = ctranslate2.Translator(
        str(path), device="cpu", inter_threads=1, intra_threads=os.cpu_count()
    )

    def translate(texts):
        pieces = processor.encode(list(texts), out_type=str)
        order = sorted(range(len(texts)), key=lambda i: len(pieces[i]))
        outputs = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = [pieces[i] for i in chunk]
            results = translator.translate_batch(
                batch,
                **options,
                max_decoding_length=max(map(len, batch)) + info["max_extra_length"],
            )
            for i, result in zip(chunk, results):
                outputs[i] = processor.decode(result.hypotheses[0])
        return outputs

    return translate


def compiled_searches(command: list[str], seconds: float) -> dict:
    """torch.compile's contenders, in a process of their own given `seconds`
    (Dynamo and Inductor may compile for far longer than eager decodes)."""
    result = run_child([*command, "--compiled"], "torch", timeout=seconds)
    if result is not None:
        return result["searches"]
    names = [f"{name} / drop finished, torch.compile" for name in SEARCHES]
    return {name: {"timed_out": seconds} for name in names}


def first_translation_seconds(run_dir: str, backend: str, cache: str) -> float:
    """Wall time of `keras-transformer translate` on one stdin sentence."""
    return cli_seconds(
        ["translate", "--run-dir", run_dir],
        backend,
        cache,
        stdin="A man in a blue shirt is standing on a ladder.\n",
    )


def table(results: list[dict]) -> str:
    lines = [
        "| backend | search / batch | sentences/s | seconds for the set | "
        "first pass s | BLEU | CLI first translation s (cold / warm cache) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for name, search in result["searches"].items():
            if "timed_out" in search:
                lines.append(
                    f"| {result['backend']} | {name} | not done in "
                    f"{search['timed_out']:,.0f} s | | | | |"
                )
                continue
            seconds = statistics.median(search["windows"])
            cli = ""
            # The CLI's default search.
            if name == "beam 4 / drop finished" and "cli" in result:
                cli = "{:.1f} / {:.1f}".format(*result["cli"])
            lines.append(
                f"| {result['backend']} | {name} | "
                f"{result['sentences'] / seconds:.1f} | {seconds:.1f} | "
                f"{search['first_seconds']:.1f} | {search['bleu']:.1f} | "
                f"{cli} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="a trained run directory")
    parser.add_argument("--multi30k", required=True, help="Multi30k directory")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--torch-compile-seconds",
        type=float,
        default=600,
        help="torch: the time the torch.compile process gets (0: not run)",
    )
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1. Received: {args.rounds}")
    if args.child:
        result = child(
            args.run_dir, args.multi30k, args.batch_size, args.rounds, args.compiled
        )
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, "--child", "--run-dir", args.run_dir]
        command += ["--multi30k", args.multi30k, "--rounds", str(args.rounds)]
        command += ["--batch-size", str(args.batch_size)]
        result = run_child(command, backend)
        if backend == "torch" and args.torch_compile_seconds > 0:
            result["searches"].update(
                compiled_searches(command, args.torch_compile_seconds)
            )
        with tempfile.TemporaryDirectory() as cache:
            result["cli"] = [
                first_translation_seconds(args.run_dir, backend, cache)
                for _ in ("cold", "warm")
            ]
        results.append(result)
        print(table(results[-1:]), flush=True)
    text = (
        f"`python benchmarks/decode_test_set.py --run-dir RUN --multi30k DIR` "
        f"on {machine_line()}. RUN: {args.run_dir}. Multi30k test2016, "
        f"{results[0]['sentences']:,} sentences, `Translator` compiled, batches "
        f"of {args.batch_size}, sorted by length; median of {args.rounds} "
        "windows, the contenders taking turns, after a first pass that "
        "compiles. 'drop finished': sentences that are done leave the batch "
        "between 8-step segments (4x fewer rows at a time); 'whole batch': "
        "each batch decodes until its last sentence is done; 'early "
        "stopping': a sentence ends once it has 4 finished hypotheses "
        "(fairseq's rule) instead of the paper's bound; 'CTranslate2': "
        "the run exported with `export_ctranslate2` (float32, inter_threads=1, "
        "intra_threads = the core count), fed the same sorted batches.\n\n"
        + table(results)
        + "\n"
    )
    print("\n" + text)
    if args.write:
        write_section("Decoding Multi30k test2016: a trained small model", text)


if __name__ == "__main__":
    main()
