"""`keras-transformer` command line: train, translate, evaluate, summary.

keras-transformer train                      # tiny model, built-in corpus
keras-transformer train --dataset multi30k --data-dir DIR --preset small
keras-transformer translate --run-dir R < input.en > output.de
keras-transformer evaluate --run-dir R --src test.en --ref test.de
keras-transformer average --run-dir R --last 5
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

from keras_transformer.config import PRESETS, TransformerConfig, field_names

_FALSE, _TRUE = {"false", "0", "no", "off"}, {"true", "1", "yes", "on"}


def _convert(name: str, text: str, kind: Any) -> Any:
    """Parse `text` as the type of TransformerConfig field `name`."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # Optional[...]
        if text.lower() in {"none", "null"}:
            return None
        kind = next(a for a in args if a is not type(None))
    try:
        if kind is bool:
            if text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            raise ValueError
        return kind(text)
    except ValueError:
        raise ValueError(
            f"--set {name}={text}: expected a value of type {kind.__name__}."
        ) from None


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["d_model=256", "norm_first=true"]` -> typed TransformerConfig fields."""
    hints = typing.get_type_hints(TransformerConfig)
    overrides = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"--set expects key=value. Received: --set {item!r}")
        if name not in hints:
            raise ValueError(
                f"--set {name}: unknown key. Valid keys: {', '.join(field_names())}."
            )
        overrides[name] = _convert(name, text.strip(), hints[name])
    return overrides


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a TransformerConfig field (repeatable)",
    )
    parser.add_argument(
        "--dataset", default="builtin", help="builtin | multi30k | files | tfds:NAME"
    )
    parser.add_argument("--run-dir", default="runs/builtin-tiny")
    parser.add_argument("--data-dir", help="multi30k: local directory of the files")
    for split in ("train", "valid", "test"):
        parser.add_argument(f"--{split}-src")
        parser.add_argument(f"--{split}-tgt")
        parser.add_argument(f"--{split}-tsv")
    parser.add_argument("--source-lang")
    parser.add_argument("--target-lang")
    parser.add_argument("--lenient-utf8", action="store_true")
    parser.add_argument("--builtin-size", type=int, default=20000)
    parser.add_argument("--tokenizer", default="sentencepiece")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    parser.add_argument("--accumulation-steps", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--max-minutes", type=float)
    parser.add_argument("--learning-rate-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eval-every", type=int, default=500, help="dev-subset BLEU every N steps"
    )
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--keep-checkpoints", type=int, default=5)
    parser.add_argument("--beam-size", type=int, default=4, help="for the test score")


def _files_spec(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    files = {}
    for split in ("train", "valid", "test"):
        src, tgt, tsv = (getattr(args, f"{split}_{k}") for k in ("src", "tgt", "tsv"))
        if tsv:
            files[split] = (tsv,)
        elif src or tgt:
            if not (src and tgt):
                raise ValueError(f"--{split}-src and --{split}-tgt go together.")
            files[split] = (src, tgt)
    return files


def _train(args: argparse.Namespace) -> int:
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.training import TrainOptions, train

    options = TrainOptions(
        run_dir=args.run_dir,
        preset=args.preset,
        overrides=parse_overrides(args.overrides),
        data=DatasetSpec(
            name=args.dataset,
            builtin_size=args.builtin_size,
            data_dir=args.data_dir,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            files=_files_spec(args),
            lenient_utf8=args.lenient_utf8,
        ),
        **{
            field.name: getattr(args, field.name)
            for field in dataclasses.fields(TrainOptions)
            if field.name not in {"run_dir", "preset", "overrides", "data"}
            and hasattr(args, field.name)
        },
    )
    # Fail on bad overrides before any data work.
    TransformerConfig.preset(options.preset, **options.overrides)
    train(options)
    return 0


def _translator(args: argparse.Namespace):
    import keras

    from keras_transformer.data.tokenizer import load_tokenizer
    from keras_transformer.translator import Translator

    run = Path(args.run_dir)
    model_path = Path(args.model) if args.model else run / "model.keras"
    if not model_path.exists():
        raise FileNotFoundError(f"{model_path} not found: train a model into {run}.")
    model = keras.saving.load_model(model_path, compile=False)
    return Translator(
        model,
        load_tokenizer(run / "tokenizer"),
        beam_size=args.beam_size,
        alpha=args.alpha,
        max_extra_length=args.max_extra_length,
    )


def _add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--model", help="a .keras file (default: RUN_DIR/model.keras)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty")
    parser.add_argument("--max-extra-length", type=int, default=50)


def _read_lines(path: str) -> list[str]:
    from keras_transformer.data.sources import read_text_lines

    return read_text_lines(path)


def _translate(args: argparse.Namespace) -> int:
    if args.input:
        lines = _read_lines(args.input)
    else:
        lines = [line.rstrip("\r\n") for line in sys.stdin]
    for line in _translator(args)(lines):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from keras_transformer.evaluation import corpus_scores, paper_bleu

    references = _read_lines(args.ref)
    if args.hyp:
        hypotheses = _read_lines(args.hyp)
    else:
        if not args.src:
            raise ValueError("evaluate needs --src (to translate) or --hyp.")
        sources = _read_lines(args.src)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.src} has {len(sources)} lines but {args.ref} has "
                f"{len(references)}: they must match line for line."
            )
        hypotheses = _translator(args)(sources)
    if args.output:
        Path(args.output).write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    print(corpus_scores(hypotheses, references))
    if args.paper_bleu:
        print(
            f"{paper_bleu(hypotheses, references):.2f} "
            "tokenized BLEU with compound splitting (paper convention; "
            "NOT sacreBLEU, not comparable to it)"
        )
    return 0


def _average(args: argparse.Namespace) -> int:
    from keras_transformer.averaging import average_checkpoints
    from keras_transformer.callbacks import list_checkpoints

    checkpoints = list_checkpoints(Path(args.run_dir) / "checkpoints")
    if len(checkpoints) < args.last:
        raise ValueError(
            f"--last {args.last}: only {len(checkpoints)} checkpoints in "
            f"{Path(args.run_dir) / 'checkpoints'}."
        )
    chosen = checkpoints[-args.last :]
    output = Path(
        args.output or Path(args.run_dir) / f"averaged-last-{args.last}.keras"
    )
    average_checkpoints(chosen).save(output)
    print(f"averaged {', '.join(p.name for p in chosen)} -> {output}")
    return 0


def _summary(args: argparse.Namespace) -> int:
    from keras_transformer.model import build_transformer

    for name in args.presets:
        config = TransformerConfig.preset(name, vocab_size=args.vocab_size)
        model = build_transformer(config)
        if args.verbose:
            model.summary()
        print(f"{name}: {model.count_params():,} parameters (vocab {args.vocab_size})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command")
    _add_train_arguments(commands.add_parser("train", help="train a model"))
    translate = commands.add_parser("translate", help="translate lines")
    _add_decoding_arguments(translate)
    translate.add_argument("--input", help="file to translate (default: stdin)")
    evaluate = commands.add_parser("evaluate", help="translate and score")
    _add_decoding_arguments(evaluate)
    evaluate.add_argument("--src", help="source file to translate")
    evaluate.add_argument("--hyp", help="score this file instead of translating")
    evaluate.add_argument("--ref", required=True)
    evaluate.add_argument("--output", help="write the hypotheses here")
    evaluate.add_argument("--paper-bleu", action="store_true")
    average = commands.add_parser("average", help="average the last checkpoints")
    average.add_argument("--run-dir", required=True)
    average.add_argument("--last", type=int, default=5)
    average.add_argument("--output")
    summary = commands.add_parser("summary", help="print preset sizes")
    summary.add_argument("presets", nargs="*", default=["tiny", "base", "big"])
    summary.add_argument("--vocab-size", type=int, default=37000)
    summary.add_argument("--verbose", action="store_true")
    return parser


_COMMANDS = {
    "train": _train,
    "translate": _translate,
    "evaluate": _evaluate,
    "summary": _summary,
    "average": _average,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `keras-transformer` alone trains the default.
        args = parser.parse_args(["train", *(argv or [])])
    try:
        return _COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
