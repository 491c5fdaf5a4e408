"""The `keras-transformer` parser: every command and flag, from their settings.

Light: `--help` starts no Keras.

`train`'s flags come from `TrainOptions`, `prepare`'s from `PrepareOptions`,
the search flags of `translate`, `evaluate`, `export` and `serve` from
`SearchSettings`, `serve`'s own from `ServeOptions`: each field's help,
default, range and choices (`utils.setting_fields`) become its flag, so a
default cannot drift between Python and the command line. The CLI reference
of the documentation is generated from this parser too.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from keras_transformer.config import TransformerConfig, field_names
from keras_transformer.data.tasks import TASKS
from keras_transformer.utils.setting_fields import flag_name

DESCRIPTION = """The `keras-transformer` command line: prepare, train, translate,
evaluate, average, export, serve, summary, parse.

keras-transformer train                      # tiny model, built-in corpus
keras-transformer train --dataset multi30k --data-dir DIR --preset small
keras-transformer prepare --dataset files --train-src S --train-tgt T --out DIR
keras-transformer train --dataset store:DIR  # a prepared store
keras-transformer translate --run-dir R < input.en > output.de
keras-transformer evaluate --run-dir R --src test.en --ref test.de
keras-transformer average --run-dir R --last 5
keras-transformer serve --run-dir R          # http://127.0.0.1:8080/
keras-transformer train --task parsing --preset parsing --train-trees T --run-dir R
keras-transformer parse --run-dir R < sentences.txt > trees.txt

Exit status: 0 done; 1 training diverged (NaN or Inf loss; the message names
the step) or ran out of memory (it names the flag to lower); 2 bad input or
settings, or a run directory in use by another `train` (nothing was trained);
74 a file of the run or of a store could not be written, a full disk (the
message names the file; the earlier checkpoints are intact, and nothing of a
new store is kept: free space and run it again); 75 training was stopped by
SIGTERM or Ctrl-C after saving a checkpoint: run it again to resume.
"""

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

    parse.bounds = (minimum, maximum)  # For the CLI reference.
    return parse


def _add_option(
    parser: argparse.ArgumentParser,
    field: dataclasses.Field,
    default: Any = dataclasses.MISSING,
    default_text: str | None = None,
) -> None:
    """A flag made from a settings field (one source of truth). `default`
    replaces the field's (a task's own defaults; None: filled in when the
    command runs), `default_text` the "(default: ...)" of the help."""
    meta = field.metadata
    flag = flag_name(field.name)
    if field.type == "bool":
        parser.add_argument(flag, action="store_true", help=meta["help"])
        return
    if default is dataclasses.MISSING:
        default = field.default
    required = default is dataclasses.MISSING
    default_text = default_text or meta.get("shown_default")
    if field.type.startswith("tuple"):  # Values, in one use or several.
        action = parser.add_argument(
            flag,
            action="extend",
            nargs="+",
            default=[],
            metavar=meta.get("metavar"),
            help=f"{meta['help']} (one or more; repeatable) (default: "
            f"{default_text or 'none'})",
        )
        action.setting = field  # For the CLI reference.
        return
    action = parser.add_argument(
        flag,
        type=_flag_type(field),
        default=None if required else default,
        required=required,
        choices=None if meta.get("choices") is None else list(meta["choices"]),
        metavar=meta.get("metavar"),
        help=meta["help"]
        + ("" if required else f" (default: {default_text or default})"),
    )
    action.default_text = default_text  # For the CLI reference.
    action.setting = field  # For the CLI reference: the whole range.


def _flag_type(field: dataclasses.Field):
    """What argparse converts a field's text with: str for text and
    choices, else a number checked against the field's bounds."""
    meta = field.metadata
    if meta.get("choices") is not None or field.type.startswith("str"):
        return str
    kind = float if field.type.startswith("float") else int
    if meta.get("minimum") is not None:
        return _at_least(meta["minimum"], kind)
    return kind


def _add_setting_flags(parser: argparse.ArgumentParser, settings) -> None:
    """A flag for each field of the dataclass `settings` that has one."""
    for field in dataclasses.fields(settings):
        if field.metadata.get("flag", True):
            _add_option(parser, field)


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.training.options import TrainOptions

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
    from keras_transformer.data.store_options import PrepareOptions

    _add_setting_flags(parser, PrepareOptions)
    _add_data_arguments(parser, store=False)


def _add_data_arguments(parser: argparse.ArgumentParser, *, store: bool) -> None:
    from keras_transformer.data.datasets import LINEARIZATIONS, DatasetSpec

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
    if store:  # train only: the parsing task reads its treebank itself.
        for split in ("train", "valid", "test"):
            data.add_argument(
                f"--{split}-trees",
                help=f"--task parsing: the {split} treebank (.mrg files, a "
                "directory, a .tar.gz, or one tree per line)",
            )
        data.add_argument(
            "--linearization",
            choices=LINEARIZATIONS,
            default=spec.linearization,
            help="--task parsing: the target's tokens, part-of-speech tags "
            "only (the paper's), each tag followed by its word (learns sooner "
            "on small data), or every tag written XX (the labeled F1 does not "
            "score tags; the parses then carry XX; docs/parsing.md) "
            f"(default: {spec.linearization})",
        )
        data.add_argument(
            "--subtree-substitution",
            type=_at_least(0),
            default=spec.subtree_substitution,
            metavar="N",
            help="--task parsing: also train on N new trees per training "
            "tree, each with one phrase replaced by a phrase of the same "
            "label from another training tree (Shi et al. 2020; "
            "docs/parsing.md); the data report numbers them after the "
            "treebank's trees (default: 0)",
        )
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


def _add_decoding_arguments(
    parser: argparse.ArgumentParser, preset=False, task: str | None = "translation"
) -> None:
    """The model's source and the search flags with `task`'s defaults; with
    task None, the defaults are the --task flag's, filled in at run time."""
    from keras_transformer.decoding.settings import SearchSettings, task_search

    if preset:  # --run-dir or --preset: checked when the command runs.
        parser.add_argument("--run-dir", help="the trained run directory")
        parser.add_argument(
            "--preset",
            help="a preset directory (export --format preset, or "
            "TransformerSeq2SeqLM.save_to_preset), instead of --run-dir",
        )
    else:
        parser.add_argument(
            "--run-dir", required=True, help="the trained run directory"
        )
    parser.add_argument(
        "--model",
        help="a .keras file (default: RUN_DIR/model.keras, else its newest checkpoint)",
    )
    for field in dataclasses.fields(SearchSettings):
        if field.type == "bool":
            _add_option(parser, field)
        elif task is None:
            values = [getattr(task_search(name), field.name) for name in TASKS]
            text = f"{values[0]}; with --task parsing {values[1]}"
            _add_option(parser, field, None, text)
        else:
            _add_option(parser, field, getattr(task_search(task), field.name))


def _add_lenient_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lenient-utf8",
        action="store_true",
        help="replace invalid UTF-8 with U+FFFD (counted) instead of failing",
    )


def _add_tree_constraints_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-tree-constraints",
        dest="tree_constraints",
        action="store_false",
        help="parsing: let the search write any token, and repair what is not "
        "a tree afterwards (default: the search writes only trees over the "
        "sentence's words)",
    )


def _add_ensemble_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ensemble",
        nargs="+",
        metavar="MODEL_OR_RUN",
        default=[],
        help="decode with these models too (run directories or .keras files "
        "sharing the run's tokenizer), averaging their log-probabilities at "
        "every step",
    )


def _add_quantize_argument(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.decoding.settings import WeightOptions

    _add_setting_flags(parser, WeightOptions)


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.serving.options import ServeOptions, ServerSettings

    # The search flags: a request's defaults.
    _add_decoding_arguments(parser, preset=True)
    _add_setting_flags(parser, ServerSettings)
    _add_setting_flags(parser, ServeOptions)


def _add_translate_arguments(parser: argparse.ArgumentParser) -> None:
    _add_decoding_arguments(parser, preset=True)
    parser.add_argument(
        "--onnx",
        metavar="DIR",
        help="translate with an ONNX export (export --format onnx) instead of "
        "--run-dir or --preset: onnxruntime and NumPy, without Keras; the "
        "search flags apply as they do to a run",
    )
    parser.add_argument("--input", help="file to translate (default: stdin)")
    _add_quantize_argument(parser)
    _add_lenient_argument(parser)
    _add_decoder_feature_arguments(parser)


def _add_decoder_feature_arguments(parser: argparse.ArgumentParser) -> None:
    """translate's output details, sampling, ensembles and constraints."""
    from keras_transformer.decoding.sampling import UNSET_MEANS, SamplingSettings

    parser.add_argument(
        "--format",
        choices=("text", "jsonl"),
        default="text",
        help="text: one translation per line; jsonl: one JSON object per line "
        "with the score, tokens, token log-probabilities and word alignment "
        "(docs/decoding-options.md) (default: text)",
    )
    parser.add_argument(
        "--n-best",
        action="store_true",
        help="jsonl: add every hypothesis of the beam with its score",
    )
    parser.add_argument(
        "--alignment-layer",
        type=int,
        help="jsonl: the decoder layer whose cross-attention gives the word "
        "alignment (negative: from the last) (default: the last)",
    )
    for field in dataclasses.fields(SamplingSettings):
        if field.name in UNSET_MEANS:  # None: not given (refused if unused).
            _add_option(parser, field, None, UNSET_MEANS[field.name])
        else:
            _add_option(parser, field)
    _add_ensemble_argument(parser)
    parser.add_argument(
        "--constraints",
        metavar="FILE",
        help="one line per input: target phrases separated by tabs that the "
        "translation must contain (an empty line: none)",
    )
    parser.add_argument(
        "--target-prefix",
        metavar="FILE",
        help="one line per input: the text the translation must start with "
        "(an empty line: none)",
    )


def _add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task",
        choices=TASKS,
        default=TASKS[0],
        help="translation: sacreBLEU and chrF; parsing: labeled bracketing F1 "
        "(EVALB's COLLINS.prm rules) against the treebank --ref, parsing its "
        f"words with --run-dir or scoring --hyp trees (default: {TASKS[0]})",
    )
    _add_decoding_arguments(parser, preset=True, task=None)
    _add_quantize_argument(parser)
    _add_ensemble_argument(parser)
    _add_lenient_argument(parser)
    _add_tree_constraints_argument(parser)
    parser.add_argument(
        "--gold-tags",
        action="store_true",
        help="parsing: the search writes the --ref trees' own part-of-speech "
        "tags and chooses only the phrases (the oracle-tag setting of "
        "benchmarks/parsing_baselines.py); default: the model predicts them",
    )
    parser.add_argument(
        "--src", help="source file to translate (needs --run-dir or --preset)"
    )
    parser.add_argument(
        "--hyp",
        help="score this file of translations (or, parsing, of trees, one per "
        "line) instead (no model needed)",
    )
    parser.add_argument(
        "--ref", help="reference translations (parsing: the gold treebank)"
    )
    parser.add_argument(
        "--split",
        choices=("valid", "test"),
        help="translate and score this held-out split of the data the run "
        "trained on (from its token store), instead of --src and --ref",
    )
    parser.add_argument("--output", help="write the hypotheses here")
    parser.add_argument(
        "--paper-bleu",
        action="store_true",
        help="also print tokenized, compound-split BLEU (not sacreBLEU)",
    )


def _add_parse_arguments(parser: argparse.ArgumentParser) -> None:
    _add_decoding_arguments(parser, preset=False, task="parsing")
    parser.set_defaults(preset=None)  # A parsing run only: no preset records a task.
    parser.add_argument(
        "--input",
        help="tokenized sentences, words separated by spaces, one per line "
        "(default: stdin)",
    )
    parser.add_argument(
        "--tagged",
        action="store_true",
        help="each input word carries its part-of-speech tag, word/TAG (a "
        "tagger's output): the trees keep those tags and the model chooses "
        "only the phrases",
    )
    _add_quantize_argument(parser)
    _add_ensemble_argument(parser)
    _add_lenient_argument(parser)
    _add_tree_constraints_argument(parser)


IMPORT_HELP = """Read a MarianMT checkpoint (transformers' format, the OPUS-MT
family) from a directory on this machine and write it as a preset, which
translate, evaluate, serve, export and train --init-from take (--preset).
Nothing is downloaded: get a checkpoint with, for example,
  hf download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de
What the model cannot represent (separate vocabularies, other positions) is
refused, named."""

PARSE_HELP = """Parse tokenized sentences with a model trained by
`train --task parsing`: one bracketed tree per input line, in order, on
stdout (the paper's search: beam 21, alpha 0.3, up to input + 300 tokens).

Every tree holds exactly the line's words. The search writes only tokens
that can still lead to a tree over them (--no-tree-constraints: any token);
output that is still not a well-formed tree (a length limit too short for
the sentence) is repaired (docs/parsing.md gives the rule) and the repairs
are counted on stderr. An empty (or blank) line gives an empty line.
"""


def _add_average_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True, help="the trained run directory")
    parser.add_argument(
        "--last",
        type=_at_least(1),
        default=5,
        help="how many of the newest checkpoints (default: 5)",
    )
    parser.add_argument("--output", help="default: RUN_DIR/averaged-last-N.keras")


def _add_export_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.export.options import ExportOptions

    _add_decoding_arguments(parser)
    _add_setting_flags(parser, ExportOptions)


def _add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        metavar="DIR",
        help="a MarianMT checkpoint on this machine (config.json, "
        "model.safetensors or pytorch_model.bin, source.spm, target.spm, "
        "vocab.json)",
    )
    parser.add_argument(
        "--from",
        dest="source_format",
        choices=["huggingface"],
        default="huggingface",
        help="the checkpoint's format (default: huggingface)",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="the preset directory to write"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing preset (moved aside, not deleted)",
    )


def _add_summary_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("presets", nargs="*", default=["tiny", "base", "big"])
    parser.add_argument(
        "--vocab-size", type=_at_least(1), default=37000, help="(default: 37000)"
    )
    parser.add_argument("--verbose", action="store_true", help="print the layers")


#: Each command: its one-line help, its description (or None) and the
#: function that adds its flags, in the order `--help` lists them.
COMMANDS = {
    "train": (
        "train a model (or resume an interrupted run)",
        TRAIN_HELP,
        _add_train_arguments,
    ),
    "prepare": (
        "read a corpus once into a token store that train memory-maps",
        PREPARE_HELP,
        _add_prepare_arguments,
    ),
    "translate": ("translate lines", None, _add_translate_arguments),
    "evaluate": ("translate and score", None, _add_evaluate_arguments),
    "average": ("average the last checkpoints", None, _add_average_arguments),
    "export": (
        "export a text-in, text-out TensorFlow SavedModel, a CTranslate2 model, "
        "a preset or ONNX graphs",
        None,
        _add_export_arguments,
    ),
    "import": (
        "import a Hugging Face MarianMT checkpoint (OPUS-MT) as a preset",
        IMPORT_HELP,
        _add_import_arguments,
    ),
    "serve": (
        "serve translations over HTTP (API, demo page, dynamic batching)",
        None,
        _add_serve_arguments,
    ),
    "summary": ("print preset sizes", None, _add_summary_arguments),
    "parse": (
        "parse sentences into trees (a --task parsing run)",
        PARSE_HELP,
        _add_parse_arguments,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command with its flags."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command")
    for name, (summary, description, add_arguments) in COMMANDS.items():
        add_arguments(
            commands.add_parser(
                name,
                help=summary,
                description=description,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return parser
