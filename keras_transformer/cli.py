"""`keras-transformer` command line: prepare, train, translate, evaluate, summary.

keras-transformer train                      # tiny model, built-in corpus
keras-transformer train --dataset multi30k --data-dir DIR --preset small
keras-transformer prepare --dataset files --train-src S --train-tgt T --out DIR
keras-transformer train --dataset store:DIR  # a prepared store
keras-transformer translate --run-dir R < input.en > output.de
keras-transformer evaluate --run-dir R --src test.en --ref test.de
keras-transformer average --run-dir R --last 5
keras-transformer serve --run-dir R          # http://127.0.0.1:8080/

Exit status: 0 done; 1 training diverged (NaN or Inf loss; the message names
the step); 2 bad input or settings, or a run directory in use by another
`train` (nothing was trained); 74 a file of the run or of a store could not
be written, a full disk (the message names the file; the earlier
checkpoints are intact, and nothing of a new store is kept: free space and
run it again); 75 training was stopped by SIGTERM or Ctrl-C after saving a
checkpoint: run it again to resume.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

from keras_transformer._console import quiet_native_start_up
from keras_transformer.config import TransformerConfig, field_names
from keras_transformer.export import DEFAULT_MAX_POSITIONS, QUANTIZATIONS
from keras_transformer.setting_fields import flag_name

_FALSE, _TRUE = {"false", "0", "no", "off"}, {"true", "1", "yes", "on"}

TRAIN_HELP = """Train a Transformer, or resume the run in --run-dir.

Running the same command again after an interruption (SIGTERM, Ctrl-C, a
crash) resumes exactly: weights, optimizer, step, learning rate, dropout RNG
and data position. A run directory holding a run with other settings is
refused before anything is touched; --overwrite moves it aside first.
"""


PREPARE_HELP = """Read a corpus once and write a token store that train reads
through a memory map (--dataset store:DIR): the joint tokenizer, learned from
a seeded sample, and every pair's token ids in flat files, written by
--workers processes into a staging directory and renamed into place when
whole. Running it again on the same inputs and settings reuses the store.
Bad input (unequal line counts, invalid UTF-8, NUL bytes, an empty training
set) is an error naming the file and line; empty and over-long training
pairs are dropped and reported with their line numbers.
"""


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


def _at_least(minimum: float, kind=int, maximum: float | None = None):
    """argparse type: a number >= minimum (and <= maximum, if given), with an
    error naming the bound."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {text}")
        return value

    return parse


def _add_option(parser: argparse.ArgumentParser, field: dataclasses.Field) -> None:
    """A `train` flag made from a TrainOptions field (one source of truth)."""
    meta = field.metadata
    flag = flag_name(field.name)
    if field.type == "bool":
        parser.add_argument(flag, action="store_true", help=meta["help"])
        return
    kind = float if field.type.startswith("float") else int
    if meta.get("choices") is not None:
        kind = str
    if kind is not str and meta.get("minimum") is not None:
        kind = _at_least(meta["minimum"], kind)
    if field.type.startswith("str") and meta.get("choices") is None:
        kind = str
    default = field.default
    parser.add_argument(
        flag,
        type=kind,
        default=default,
        choices=None if meta.get("choices") is None else list(meta["choices"]),
        help=f"{meta['help']} (default: {default})",
    )


def _add_setting_flags(parser: argparse.ArgumentParser, settings) -> None:
    """A flag for each field of the dataclass `settings` that has one."""
    for field in dataclasses.fields(settings):
        if field.metadata.get("flag", True):
            _add_option(parser, field)


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.options import TrainOptions

    _add_setting_flags(parser, TrainOptions)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a TransformerConfig field, e.g. --set d_model=256 "
        "(repeatable; the valid keys are listed on a bad one)",
    )
    parser.add_argument(
        "--cpu-devices",
        type=_at_least(1),
        help="split the host CPU into N devices (simulates N accelerators "
        "for --distribute on a laptop or in tests)",
    )
    _add_data_arguments(parser, store=True)


def _add_prepare_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.options import PrepareOptions

    _add_setting_flags(parser, PrepareOptions)
    _add_data_arguments(parser, store=False)


def _add_data_arguments(parser: argparse.ArgumentParser, *, store: bool) -> None:
    from keras_transformer.data.datasets import DatasetSpec

    data = parser.add_argument_group("data")
    spec = DatasetSpec()
    names = "builtin (generated offline) | multi30k | files | tfds:NAME"
    if store:
        names += " | store:DIR (made by keras-transformer prepare)"
    data.add_argument(
        "--dataset", default=spec.name, help=f"{names} (default: {spec.name})"
    )
    data.add_argument(
        "--data-dir",
        help="multi30k: a local directory holding its files; tfds:NAME: the "
        "TFDS data directory",
    )
    for split in ("train", "valid", "test"):
        data.add_argument(f"--{split}-src", help=f"files: {split} source text")
        data.add_argument(f"--{split}-tgt", help=f"files: {split} target text")
        data.add_argument(f"--{split}-tsv", help=f"files: {split} pairs as TSV")
    data.add_argument("--source-lang", help="multi30k / tfds source language")
    data.add_argument("--target-lang", help="multi30k / tfds target language")
    data.add_argument(
        "--lenient-utf8",
        action="store_true",
        help="replace invalid UTF-8 with U+FFFD (counted) instead of failing",
    )
    data.add_argument(
        "--builtin-size",
        type=_at_least(40),
        default=spec.builtin_size,
        help=f"builtin: training pairs to generate (default: {spec.builtin_size})",
    )


def _files_spec(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    files = {}
    for split in ("train", "valid", "test"):
        src, tgt, tsv = (getattr(args, f"{split}_{k}") for k in ("src", "tgt", "tsv"))
        if tsv and (src or tgt):
            raise ValueError(
                f"--{split}-tsv and --{split}-src/--{split}-tgt both give the "
                f"{split} pairs: pass one or the other."
            )
        if tsv:
            files[split] = (tsv,)
        elif src or tgt:
            if not (src and tgt):
                raise ValueError(f"--{split}-src and --{split}-tgt go together.")
            files[split] = (src, tgt)
    return files


def _dataset_spec(args: argparse.Namespace):
    from keras_transformer.data.datasets import DatasetSpec

    return DatasetSpec(
        name=args.dataset,
        builtin_size=args.builtin_size,
        data_dir=args.data_dir,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        files=_files_spec(args),
        lenient_utf8=args.lenient_utf8,
    )


def _setting_values(args: argparse.Namespace, settings) -> dict[str, Any]:
    """The flags' values of the dataclass `settings`'s fields."""
    return {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(settings)
        if field.metadata.get("flag", True)
    }


def _train_options(args: argparse.Namespace):
    from keras_transformer.options import TrainOptions

    return TrainOptions(
        overrides=parse_overrides(args.overrides),
        data=_dataset_spec(args),
        **_setting_values(args, TrainOptions),
    )


def _check_cpu_devices(count: int) -> None:
    """Refuse more simulated devices than cores. Each device runs its step
    on its own threads and every step ends in an all-reduce that waits for
    the slowest: oversubscribed, one step took over 10 minutes (64 devices
    on 2 cores) and a SIGTERM as long to take effect. Capping instead would
    change the replica count, and so the batches, behind the user's back."""
    from keras_transformer.data.block_encoding import available_cores

    cores = available_cores()
    if count > cores:
        raise ValueError(
            f"--cpu-devices {count}: this machine has {cores} CPU core(s) for "
            f"this process; each simulated device needs a core of its own. "
            f"Use at most --cpu-devices {cores}."
        )


def _train(args: argparse.Namespace) -> int:
    from keras_transformer import training

    # Every check that needs no data, before the devices or data are touched.
    options = _train_options(args)
    TransformerConfig.preset(options.preset, **options.overrides)
    if args.cpu_devices:
        from keras_transformer.distribution import simulate_cpu_devices

        _check_cpu_devices(args.cpu_devices)
        simulate_cpu_devices(args.cpu_devices)
    try:
        training.train(options)
    except training.TrainingInterrupted as stop:
        print(f"keras-transformer train: {stop}", file=sys.stderr)
        return training.EXIT_INTERRUPTED
    except training.TrainingDiverged as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return 1
    except (training.RunWriteError, training.StoreWriteError) as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return training.EXIT_WRITE_FAILED
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from keras_transformer.data.prepare import prepare_store
    from keras_transformer.data.token_store import StoreWriteError
    from keras_transformer.options import PrepareOptions
    from keras_transformer.training import EXIT_WRITE_FAILED

    options = PrepareOptions(
        data=_dataset_spec(args), **_setting_values(args, PrepareOptions)
    )
    try:
        store = prepare_store(options)
    except StoreWriteError as error:
        print(f"keras-transformer prepare: error: {error}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    print(f"train on it with: keras-transformer train --dataset store:{store.path}")
    return 0


def _run(args: argparse.Namespace):
    from keras_transformer.run_directory import RunDirectory

    if not args.run_dir:
        raise ValueError(f"{args.command} needs --run-dir (a trained run).")
    return RunDirectory(args.run_dir)


def _search_settings(args: argparse.Namespace):
    from keras_transformer.search_settings import SearchSettings

    names = (field.name for field in dataclasses.fields(SearchSettings))
    return SearchSettings(**{name: getattr(args, name) for name in names})


def _translator(args: argparse.Namespace):
    from keras_transformer.translator import Translator

    settings = _search_settings(args)  # Refused before the model loads.
    run = _run(args).open_for_inference(args.model)
    return Translator(run.model, run.tokenizer, settings)


def _add_decoding_arguments(parser: argparse.ArgumentParser, required=True) -> None:
    from keras_transformer.search_settings import SearchSettings

    parser.add_argument(
        "--run-dir", required=required, help="the trained run directory"
    )
    parser.add_argument(
        "--model",
        help="a .keras file (default: RUN_DIR/model.keras, else its newest checkpoint)",
    )
    for field in dataclasses.fields(SearchSettings):
        _add_option(parser, field)


def _add_lenient_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lenient-utf8",
        action="store_true",
        help="replace invalid UTF-8 with U+FFFD (counted) instead of failing",
    )


def _read_lines(path: str, args: argparse.Namespace) -> list[str]:
    from keras_transformer.data.text_files import read_text_lines

    return read_text_lines(path, lenient_utf8=args.lenient_utf8)


def _read_stdin(args: argparse.Namespace) -> list[str]:
    """Standard input with the checks a file gets (UTF-8, NUL bytes), its
    messages naming <stdin>, its line and byte."""
    from keras_transformer.data.text_files import decode_text_lines

    return decode_text_lines(sys.stdin.buffer.read(), lenient_utf8=args.lenient_utf8)


def _translate(args: argparse.Namespace) -> int:
    lines = _read_lines(args.input, args) if args.input else _read_stdin(args)
    from keras_transformer.data.text_files import lines_text

    sys.stdout.write(lines_text(_translator(args)(lines), "<stdout>"))
    return 0


def _refuse_with_hyp(args: argparse.Namespace) -> None:
    """`evaluate --hyp` translates nothing: a flag for translating would be
    ignored without a word, so it is an error."""
    # --run-dir alone is harmless: it may name the run the file came from.
    given = [flag for flag in ("src", "model") if getattr(args, flag)]
    settings = _search_settings(args)
    given += [
        field.name
        for field in dataclasses.fields(settings)
        if getattr(settings, field.name) != field.default
    ]
    if given:
        raise ValueError(
            f"{', '.join(flag_name(name) for name in given)} cannot be used with "
            "--hyp, which scores a file of translations without translating "
            "anything. Pass --src and --run-dir to translate, or drop them."
        )


def _evaluate(args: argparse.Namespace) -> int:
    from keras_transformer.evaluation import corpus_scores, paper_bleu

    references = _read_lines(args.ref, args)
    if args.hyp:
        _refuse_with_hyp(args)
        hypotheses = _read_lines(args.hyp, args)
    else:
        if not args.src:
            raise ValueError("evaluate needs --src (to translate) or --hyp.")
        sources = _read_lines(args.src, args)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.src} has {len(sources)} lines but {args.ref} has "
                f"{len(references)}: they must match line for line."
            )
        hypotheses = _translator(args)(sources)
    if args.output:
        from keras_transformer.data.text_files import lines_text

        text = lines_text(hypotheses, args.output)
        Path(args.output).write_text(text, encoding="utf-8")
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

    run = _run(args)
    checkpoints = run.checkpoints()
    if len(checkpoints) < args.last:
        raise ValueError(
            f"--last {args.last}: only {len(checkpoints)} checkpoints in "
            f"{run.checkpoint_dir}."
        )
    chosen = [checkpoint.path for checkpoint in checkpoints[-args.last :]]
    output = Path(args.output or run.path / f"averaged-last-{args.last}.keras")
    average_checkpoints(chosen).save(output)
    print(f"averaged {', '.join(p.name for p in chosen)} -> {output}")
    return 0


def _export(args: argparse.Namespace) -> int:
    settings = _search_settings(args)
    if args.format == "ctranslate2":
        from keras_transformer.export import export_ctranslate2

        path = export_ctranslate2(
            args.run_dir,
            args.out,
            settings,
            model=args.model,
            quantization=args.quantization,
            max_positions=args.max_positions or DEFAULT_MAX_POSITIONS,
        )
        print(
            f"CTranslate2 model written to {path} (how to call it: {path}/export.json)"
        )
        return 0
    for flag, value in (
        ("--quantization", args.quantization),
        ("--max-positions", args.max_positions),
    ):
        if value is not None:
            raise ValueError(f"{flag} applies to --format ctranslate2 only.")
    from keras_transformer.export import export_translator

    path = export_translator(args.run_dir, args.out, settings, model=args.model)
    print(f"SavedModel written to {path} (signatures: see {path}/assets/export.json)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from keras_transformer.serving.options import ServeOptions
    from keras_transformer.serving.server import serve

    names = (field.name for field in dataclasses.fields(ServeOptions))
    options = ServeOptions(**{name: getattr(args, name) for name in names})
    return serve(
        run_dir=args.run_dir,
        engine=args.engine,
        settings=_search_settings(args),
        options=options,
        host=args.host,
        port=args.port,
        allow_remote=args.allow_remote,
        model=args.model,
        export_dir=args.export_dir,
        access_log=args.access_log,
    )


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.serving.options import ServeOptions
    from keras_transformer.serving.server import DEFAULT_HOST, DEFAULT_PORT

    _add_decoding_arguments(parser)  # The search flags: a request's defaults.
    parser.add_argument(
        "--engine",
        choices=("keras", "ctranslate2", "savedmodel"),
        default="keras",
        help="keras (the run's model, attention plots), ctranslate2 or "
        "savedmodel (an export: --export-dir, or made at start-up) "
        "(default: keras)",
    )
    parser.add_argument(
        "--export-dir",
        help="ctranslate2 / savedmodel: an existing export of the run "
        "(default: export it to a temporary directory at start-up)",
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default: {DEFAULT_HOST}, this machine "
        "only; any other needs --allow-remote)",
    )
    parser.add_argument(
        "--port",
        type=_at_least(0, maximum=65535),  # A larger one wraps around silently.
        default=DEFAULT_PORT,
        help=f"port (0: a free one, printed at start) (default: {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host reachable from other machines (no authentication, "
        "no TLS: put it behind your own proxy)",
    )
    parser.add_argument(
        "--access-log", action="store_true", help="log every request (uvicorn's)"
    )
    for field in dataclasses.fields(ServeOptions):
        _add_option(parser, field)


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
    _add_train_arguments(
        commands.add_parser(
            "train",
            help="train a model (or resume an interrupted run)",
            description=TRAIN_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    _add_prepare_arguments(
        commands.add_parser(
            "prepare",
            help="read a corpus once into a token store that train memory-maps",
            description=PREPARE_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    translate = commands.add_parser("translate", help="translate lines")
    _add_decoding_arguments(translate)
    translate.add_argument("--input", help="file to translate (default: stdin)")
    _add_lenient_argument(translate)
    evaluate = commands.add_parser("evaluate", help="translate and score")
    _add_decoding_arguments(evaluate, required=False)
    _add_lenient_argument(evaluate)
    evaluate.add_argument("--src", help="source file to translate (needs --run-dir)")
    evaluate.add_argument(
        "--hyp", help="score this file of translations instead (no model needed)"
    )
    evaluate.add_argument("--ref", required=True, help="reference translations")
    evaluate.add_argument("--output", help="write the hypotheses here")
    evaluate.add_argument(
        "--paper-bleu",
        action="store_true",
        help="also print tokenized, compound-split BLEU (not sacreBLEU)",
    )
    average = commands.add_parser("average", help="average the last checkpoints")
    average.add_argument("--run-dir", required=True, help="the trained run directory")
    average.add_argument(
        "--last",
        type=_at_least(1),
        default=5,
        help="how many of the newest checkpoints (default: 5)",
    )
    average.add_argument("--output", help="default: RUN_DIR/averaged-last-N.keras")
    export = commands.add_parser(
        "export",
        help="export a text-in, text-out TensorFlow SavedModel, or a CTranslate2 model",
    )
    _add_decoding_arguments(export)
    export.add_argument(
        "--out", required=True, help="the directory to create (must not exist)"
    )
    export.add_argument(
        "--format",
        choices=("savedmodel", "ctranslate2"),
        default="savedmodel",
        help="savedmodel (TensorFlow serving, search inside) or ctranslate2 "
        "(weights for CTranslate2; the search settings are recorded in "
        "export.json) (default: savedmodel)",
    )
    export.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="CTranslate2 weight type (default: float32)",
    )
    export.add_argument(
        "--max-positions",
        type=_at_least(1),
        help="CTranslate2: rows of the sinusoidal position table, the longest "
        f"source or output it can encode (default: {DEFAULT_MAX_POSITIONS})",
    )
    _add_serve_arguments(
        commands.add_parser(
            "serve",
            help="serve translations over HTTP (API, demo page, dynamic batching)",
        )
    )
    summary = commands.add_parser("summary", help="print preset sizes")
    summary.add_argument("presets", nargs="*", default=["tiny", "base", "big"])
    summary.add_argument(
        "--vocab-size", type=_at_least(1), default=37000, help="(default: 37000)"
    )
    summary.add_argument("--verbose", action="store_true", help="print the layers")
    return parser


_COMMANDS = {
    "train": _train,
    "prepare": _prepare,
    "translate": _translate,
    "evaluate": _evaluate,
    "summary": _summary,
    "average": _average,
    "export": _export,
    "serve": _serve,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `keras-transformer` alone trains the default.
        args = parser.parse_args(["train", *(argv or [])])
    try:
        if args.command in ("train", "translate", "evaluate", "serve"):
            from keras_transformer.compile import enable_compilation_cache

            enable_compilation_cache()
        if args.command in ("translate", "evaluate", "serve"):  # train: distribution
            from keras_transformer.accelerators import warn_if_gpus_unused

            warn_if_gpus_unused()
        return _COMMANDS[args.command](args)
    except (ValueError, OSError, RuntimeError, ImportError) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


def console() -> int:
    """The `keras-transformer` command (and `python -m keras_transformer`)."""
    quiet_native_start_up()
    return main()


if __name__ == "__main__":
    sys.exit(console())
