"""What each `keras-transformer` command does, once its flags are parsed.

Each command imports what it needs when it runs, so one command never
loads another's libraries (`translate` no training code, `evaluate --hyp`
no model).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_transformer.cli.parser import parse_overrides
from keras_transformer.config import TransformerConfig
from keras_transformer.utils.console import EXIT_INTERRUPTED, EXIT_WRITE_FAILED
from keras_transformer.utils.setting_fields import flag_name


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


def _trees_spec(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """`--train-trees` and the others (train only), refused beside text data."""
    trees = {
        split: (getattr(args, f"{split}_trees"),)
        for split in ("train", "valid", "test")
        if getattr(args, f"{split}_trees", None)
    }
    if trees and args.dataset != "builtin":
        raise ValueError(
            f"--dataset {args.dataset} and --train-trees both give the data: "
            "a treebank is read by --task parsing without --dataset."
        )
    if trees and _files_spec(args):
        raise ValueError("--*-trees and --*-src/--*-tgt/--*-tsv cannot be mixed.")
    if trees and args.lenient_utf8:
        raise ValueError(
            "--lenient-utf8 does not apply to a treebank: the reader needs "
            "valid UTF-8 (it names the file and line of a bad byte)."
        )
    if trees and "train" not in trees:
        raise ValueError("--valid-trees and --test-trees need --train-trees.")
    return trees


def _dataset_spec(args: argparse.Namespace):
    from keras_transformer.data.datasets import DatasetSpec

    trees = _trees_spec(args)
    if trees:
        return DatasetSpec(
            name="treebank",
            files=trees,
            linearization=args.linearization,
            subtree_substitution=args.subtree_substitution,
        )
    if getattr(args, "linearization", "tags") != "tags":
        raise ValueError("--linearization applies to --train-trees (--task parsing).")
    if getattr(args, "subtree_substitution", 0):
        raise ValueError(
            "--subtree-substitution applies to --train-trees (--task parsing)."
        )
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
    from keras_transformer.training.options import TrainOptions

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
    from keras_transformer.utils.cpu import available_cores

    cores = available_cores()
    if count > cores:
        raise ValueError(
            f"--cpu-devices {count}: this machine has {cores} CPU core(s) for "
            f"this process; each simulated device needs a core of its own. "
            f"Use at most --cpu-devices {cores}."
        )


def _train(args: argparse.Namespace) -> int:
    from keras_transformer import training
    from keras_transformer.training.memory import TrainingOutOfMemory

    # Every check that needs no data, before the devices or data are touched.
    options = _train_options(args)
    TransformerConfig.preset(options.preset, **options.overrides)
    if args.cpu_devices:
        from keras_transformer.training.distribution import simulate_cpu_devices

        _check_cpu_devices(args.cpu_devices)
        simulate_cpu_devices(args.cpu_devices)
    try:
        training.train(options)
    except training.TrainingInterrupted as stop:
        print(f"keras-transformer train: {stop}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (training.TrainingDiverged, TrainingOutOfMemory) as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return 1
    except (training.RunWriteError, training.StoreWriteError) as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from keras_transformer.data.prepare import prepare_store
    from keras_transformer.data.store_options import PrepareOptions
    from keras_transformer.data.token_store import StoreWriteError

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
    from keras_transformer.run.directory import RunDirectory

    if not args.run_dir:
        raise ValueError(f"{args.command} needs --run-dir (a trained run).")
    return RunDirectory(args.run_dir)


def _search_settings(args: argparse.Namespace, task: str = "translation"):
    """The search flags' values; a flag left at None takes `task`'s default."""
    from keras_transformer.decoding.settings import SearchSettings, task_search

    names = (field.name for field in dataclasses.fields(SearchSettings))
    given = {name: getattr(args, name) for name in names}
    return task_search(task).replace(
        **{name: value for name, value in given.items() if value is not None}
    )


def _translator(
    args: argparse.Namespace,
    task: str = "translation",
    *,
    sampling=None,
    ensemble: Sequence[str] = (),
):
    """The `Translator` of the model flags; with `ensemble` (paths), of the
    run's model and those together (`decoding.opening.open_model`)."""
    from keras_transformer.decoding.opening import open_model
    from keras_transformer.decoding.translator import Translator

    settings = _search_settings(args, task)  # Refused before the model loads.
    _check_model_source(args)
    if ensemble and args.preset:
        raise ValueError("--ensemble needs --run-dir (not --preset) for the run.")
    opened = open_model(
        args.preset or args.run_dir,
        model=args.model,
        settings=settings,
        quantize=args.quantize,
        ensemble=ensemble,
        task=task,
        kind="preset" if args.preset else "run",
    )
    grammar = None
    if task == "parsing" and getattr(args, "tree_constraints", False):
        from keras_transformer.decoding.tree_grammar import TreeGrammar

        grammar = TreeGrammar.for_tokenizer(
            opened.tokenizer, with_words=_run(args).tree_words
        )
    return Translator(
        opened.model,
        opened.tokenizer,
        opened.settings,
        sampling=sampling,
        grammar=grammar,
    )


def _guides(args: argparse.Namespace, translator, count: int):
    """The --constraints and --target-prefix files, read against the input
    (None when neither is given)."""
    if not (args.constraints or args.target_prefix):
        return None
    from keras_transformer.decoding.constraint_files import (
        read_constraints,
        read_prefixes,
    )

    options = {
        "allow_unk": translator.settings.allow_unk,
        "input_name": args.input or "<stdin>",
        "lenient_utf8": args.lenient_utf8,
    }
    constraints = prefixes = None
    if args.constraints:
        constraints = read_constraints(
            args.constraints, count, translator.tokenizer, **options
        )
    if args.target_prefix:
        prefixes = read_prefixes(
            args.target_prefix, count, translator.tokenizer, **options
        )
    return constraints, prefixes


def _records(args: argparse.Namespace, translator, lines, guides) -> list[dict]:
    options = {"n_best": args.n_best, "alignment_layer": args.alignment_layer}
    if guides is not None:
        options["constraints"], options["prefixes"] = guides
    return translator.generate(lines, **options)


def _report_unmet(records: list[dict], args: argparse.Namespace) -> None:
    """Name each input line whose constraints or target prefix no
    translation could meet (the translation is still written: the best one
    found, which then holds only the start of the prefix)."""
    for number, record in enumerate(records, 1):
        report = record.get("constraints", {})
        if report.get("unmet"):
            print(
                f"keras-transformer translate: warning: {args.constraints}:"
                f"{number}: no translation within the length limit contains "
                f"{', '.join(repr(p) for p in report['unmet'])}; wrote the best "
                "one found without it.",
                file=sys.stderr,
            )
        if report.get("prefix") == "unmet":
            print(
                f"keras-transformer translate: warning: {args.target_prefix}:"
                f"{number}: the prefix is longer than the length limit (the "
                "source's tokens + --max-extra-length); the translation holds "
                "only its start.",
                file=sys.stderr,
            )


def _check_run_task(args: argparse.Namespace, task: str) -> None:
    """Refuse --run-dir of a run trained for another task."""
    from keras_transformer.decoding.opening import check_task

    check_task(_run(args), task)


def _check_model_source(args: argparse.Namespace) -> None:
    """Exactly one of --run-dir and --preset (with --model only for a run)."""
    if args.preset and (args.run_dir or args.model):
        given = "--run-dir" if args.run_dir else "--model"
        raise ValueError(f"--preset and {given} both name a model: pass one.")
    if not args.preset and not args.run_dir:
        raise ValueError(f"{args.command} needs --run-dir (a trained run) or --preset.")


def _read_lines(path: str, args: argparse.Namespace) -> list[str]:
    from keras_transformer.data.text_files import read_text_lines

    return read_text_lines(path, lenient_utf8=args.lenient_utf8)


def _read_stdin(args: argparse.Namespace) -> list[str]:
    """Standard input with the checks a file gets (UTF-8, NUL bytes), its
    messages naming <stdin>, its line and byte."""
    from keras_transformer.data.text_files import decode_text_lines

    return decode_text_lines(sys.stdin.buffer.read(), lenient_utf8=args.lenient_utf8)


def _translate(args: argparse.Namespace) -> int:
    sampling = _decoder_features(args)  # Refused before anything loads.
    translate = _onnx_translator(args) if args.onnx else None
    lines = _read_lines(args.input, args) if args.input else _read_stdin(args)
    from keras_transformer.data.text_files import lines_text

    if translate is not None:
        sys.stdout.write(lines_text(translate(lines), "<stdout>"))
        return 0
    translator = _translator(args, sampling=sampling, ensemble=args.ensemble)
    guides = _guides(args, translator, len(lines))
    if args.format == "text" and guides is None:
        sys.stdout.write(lines_text(translator(lines), "<stdout>"))
        return 0
    records = _records(args, translator, lines, guides)
    if args.format == "text":
        texts = [record["translation"] for record in records]
        sys.stdout.write(lines_text(texts, "<stdout>"))
    else:
        for record in records:
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    _report_unmet(records, args)
    return 0


def _decoder_features(args: argparse.Namespace):
    """The `SamplingSettings` of translate's flags, after refusing the
    feature flags that do not go together (nothing is loaded yet)."""
    from keras_transformer.decoding.sampling import SamplingSettings

    names = [field.name for field in dataclasses.fields(SamplingSettings)]
    sampling = SamplingSettings(**{name: getattr(args, name) for name in names})
    features = {
        "--format jsonl": args.format == "jsonl",
        "--sampling": sampling.is_sampling,
        "--ensemble": bool(args.ensemble),
        "--constraints": bool(args.constraints),
        "--target-prefix": bool(args.target_prefix),
    }
    used = [flag for flag, on in features.items() if on]
    if args.onnx and used:
        raise ValueError(
            f"{', '.join(used)} cannot be used with --onnx: an ONNX export "
            "translates to plain text with the search flags only. Use --run-dir."
        )
    if args.format != "jsonl":
        for flag, given in (
            ("--n-best", args.n_best),
            ("--alignment-layer", args.alignment_layer is not None),
            ("--num-samples above 1", sampling.samples > 1),
        ):
            if given:
                raise ValueError(
                    f"{flag} needs --format jsonl: plain text keeps one "
                    "translation per input line."
                )
    guided = args.constraints or args.target_prefix
    if guided and sampling.is_sampling:
        raise ValueError(
            "--constraints and --target-prefix work with the search, not "
            "--sampling: drop one of them."
        )
    return sampling


def _onnx_translator(args: argparse.Namespace):
    """`translate --onnx DIR`: the export's translator with the search flags'
    settings, as a function of the lines. Imports no Keras."""
    from keras_transformer.export.onnx_translator import OnnxTranslator

    given = [flag for flag in ("run_dir", "preset", "model") if getattr(args, flag)]
    if given:
        raise ValueError(
            f"--onnx and {flag_name(given[0])} both name a model: pass one."
        )
    if args.quantize:
        raise ValueError(
            "--quantize does not apply to --onnx: an ONNX export runs the "
            "weights it holds (int8 ones: export --format onnx --quantization int8)."
        )
    settings = _search_settings(args)  # Refused before the export loads.
    translator = OnnxTranslator(args.onnx)
    return lambda lines: translator.translate(lines, settings)


def _refuse_with_hyp(args: argparse.Namespace) -> None:
    """`evaluate --hyp` translates nothing: a flag for translating would be
    ignored without a word, so it is an error."""
    # --run-dir alone is harmless: it may name the run the file came from.
    from keras_transformer.decoding.settings import SearchSettings

    given = [
        flag
        for flag in ("src", "model", "preset", "quantize", "ensemble")
        if getattr(args, flag)
    ]
    given += [] if args.tree_constraints else ["no_tree_constraints"]
    given += ["gold_tags"] if getattr(args, "gold_tags", False) else []
    given += [  # The search flags default to None (the task's) or False.
        field.name
        for field in dataclasses.fields(SearchSettings)
        if getattr(args, field.name) not in (None, False)
    ]
    if given:
        raise ValueError(
            f"{', '.join(flag_name(name) for name in given)} cannot be used with "
            "--hyp, which scores a file of translations without translating "
            "anything. Pass --src and --run-dir to translate, or drop them."
        )


def _evaluate(args: argparse.Namespace) -> int:
    from keras_transformer.decoding.evaluation import corpus_scores, paper_bleu

    if args.task == "parsing":
        return _evaluate_parsing(args)
    if not args.tree_constraints:
        raise ValueError("--no-tree-constraints applies to --task parsing only.")
    if args.gold_tags:
        raise ValueError("--gold-tags applies to --task parsing only.")
    if args.split:
        return _evaluate_split(args)
    if not args.ref:
        raise ValueError(
            "evaluate needs --ref (with --src or --hyp), or --split valid|test "
            "to score the run's own held-out data."
        )
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
        hypotheses = _translator(args, ensemble=args.ensemble)(sources)
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


def _evaluate_split(args: argparse.Namespace) -> int:
    """Score the run on a held-out split of its own data (`--split`)."""
    from keras_transformer.decoding.evaluation import evaluate_split

    for flag in ("src", "hyp", "ref", "preset"):
        if getattr(args, flag):
            raise ValueError(
                f"--split reads the sources and references of the run's own "
                f"data: leave out {flag_name(flag)}."
            )
    corpus = _run(args).evaluation_split(args.split)
    translator = _translator(args, ensemble=args.ensemble)
    print(evaluate_split(translator, corpus, args.output))
    return 0


def _evaluate_parsing(args: argparse.Namespace) -> int:
    """Labeled bracketing F1 of --hyp trees, or of the run's parses of the
    gold trees' words, against the treebank --ref."""
    from keras_transformer.data.treebank import read_treebank
    from keras_transformer.decoding import parse_evaluation as evaluation

    for flag in ("src", "paper_bleu", "preset", "split"):
        if getattr(args, flag):
            raise ValueError(
                f"{flag_name(flag)} is not used by --task parsing: the words "
                "to parse are the --ref trees'."
            )
    if not args.ref:
        raise ValueError("evaluate --task parsing needs --ref (the gold treebank).")
    if args.lenient_utf8 and not args.hyp:
        raise ValueError(
            "--lenient-utf8 applies to --hyp only with --task parsing: the "
            "treebank reader needs valid UTF-8 (it names the file and line)."
        )
    gold = [sentence.tree for sentence in read_treebank(args.ref)]
    if args.hyp:
        _refuse_with_hyp(args)
        parses = evaluation.read_parses(args.hyp, gold, lenient_utf8=args.lenient_utf8)
    else:
        if args.gold_tags and not args.tree_constraints:
            raise ValueError(
                "--gold-tags makes the tree-writing search write the gold tags; "
                "it cannot be used with --no-tree-constraints."
            )
        translator = _translator(args, "parsing", ensemble=args.ensemble)
        parses = evaluation.parse_sentences(
            translator,
            [t.words() for t in gold],
            with_words=_run(args).tree_words,
            given_tags=[t.tags() for t in gold] if args.gold_tags else None,
        )
    if args.output:
        from keras_transformer.utils.atomic_files import atomic_write_text

        atomic_write_text(Path(args.output), evaluation.trees_text(parses))
    print(evaluation.evaluate_parses(parses, gold).report())
    return 0


def _parse(args: argparse.Namespace) -> int:
    from keras_transformer.decoding import parse_evaluation as evaluation

    lines = _read_lines(args.input, args) if args.input else _read_stdin(args)
    sentences, tags = _parse_input(args, lines)
    translator = _translator(args, "parsing", ensemble=args.ensemble)
    for number, line_tags in enumerate(tags or [], start=1):
        # Each line's tags checked here, so an error names its line.
        where = f"{args.input or '<stdin>'}:{number}"
        translator.generator.grammar.given_tag_ids(line_tags, where)
    parses = evaluation.parse_sentences(
        translator,
        sentences,
        with_words=_run(args).tree_words,
        given_tags=tags,
    )
    sys.stdout.write(evaluation.trees_text(parses))
    repaired = evaluation.repair_counts(parses)
    if repaired:
        counts = ", ".join(f"{name} {count}" for name, count in repaired.items())
        print(
            f"keras-transformer parse: repaired {evaluation.repaired(parses)} of "
            f"{len(parses)} outputs ({counts}; docs/parsing.md)",
            file=sys.stderr,
        )
    return 0


def _parse_input(args: argparse.Namespace, lines: list[str]):
    """`parse`'s sentences (words per line) and, with --tagged, their tags
    (checked before a model loads)."""
    if not args.tagged:
        return [line.split() for line in lines], None
    if not args.tree_constraints:
        raise ValueError(
            "--tagged makes the tree-writing search write the given tags; it "
            "cannot be used with --no-tree-constraints."
        )
    from keras_transformer.decoding.parse_evaluation import tagged_sentences

    return tagged_sentences(lines, args.input or "<stdin>")


def _average(args: argparse.Namespace) -> int:
    from keras_transformer.run.averaging import average_checkpoints

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
    from keras_transformer.export.options import ExportOptions
    from keras_transformer.export.targets import export_run

    settings = _search_settings(args)
    options = ExportOptions(**_setting_values(args, ExportOptions))
    _check_run_task(args, "translation")  # The exports translate text.
    print(
        export_run(
            args.run_dir,
            options,
            settings,
            model=args.model,
            command=getattr(args, "command_line", None),
        )
    )
    return 0


def _import(args: argparse.Namespace) -> int:
    from keras_transformer.decoding.opening import open_huggingface
    from keras_transformer.decoding.settings import SearchSettings
    from keras_transformer.run.preset_files import write_preset

    backbone, checkpoint = open_huggingface(args.directory)
    path = write_preset(
        args.out,
        backbone,
        checkpoint.tokenizer,
        {},
        SearchSettings(**checkpoint.search).to_dict(),
        training_data=f"imported MarianMT checkpoint {Path(args.directory).resolve()}",
        overwrite=args.overwrite,
    )
    print(
        f"Preset written to {path} (translate --preset {path}, "
        "TransformerSeq2SeqLM.from_preset)"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from keras_transformer.serving.options import ServeOptions, ServerSettings
    from keras_transformer.serving.server import serve

    options, server = (
        settings(**_setting_values(args, settings))
        for settings in (ServeOptions, ServerSettings)
    )
    if server.engine == "keras" or not server.export_dir:
        _check_model_source(args)  # An export (its tokenizer in it) serves alone.
    if args.run_dir:
        _check_run_task(args, "translation")
    return serve(
        run_dir=args.run_dir,
        preset=args.preset,
        model=args.model,
        settings=_search_settings(args),
        options=options,
        server=server,
    )


def _summary(args: argparse.Namespace) -> int:
    from keras_transformer.training.model_setup import preset_model

    for name in args.presets:
        model = preset_model(name, args.vocab_size)
        if args.verbose:
            model.summary()
        print(f"{name}: {model.count_params():,} parameters (vocab {args.vocab_size})")
    return 0


#: The function of each command of `parser.COMMANDS`.
RUNS = {
    "train": _train,
    "prepare": _prepare,
    "translate": _translate,
    "evaluate": _evaluate,
    "summary": _summary,
    "average": _average,
    "export": _export,
    "import": _import,
    "serve": _serve,
    "parse": _parse,
}
