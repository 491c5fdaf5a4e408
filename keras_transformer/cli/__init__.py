"""The `keras-transformer` command: parse, then run one command.

- `parser`: every command and flag, from the settings that own them (light:
  `keras-transformer --help` starts no Keras and no backend).
- `commands`: what each command does.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from keras_transformer.cli.parser import build_parser, parse_overrides
from keras_transformer.utils import optional_imports
from keras_transformer.utils.atomic_files import WriteFailed
from keras_transformer.utils.console import EXIT_WRITE_FAILED, quiet_native_start_up

__all__ = ["build_parser", "console", "main", "parse_overrides"]

# Commands that never load a model: they do not start Keras.
_WITHOUT_KERAS = ("prepare",)
# Engines that serve an export without Keras.
_ENGINES_WITHOUT_KERAS = ("onnx", "ctranslate2")


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`); the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `keras-transformer` alone trains the default.
        args = parser.parse_args(["train", *(argv or [])])
    given = sys.argv[1:] if argv is None else argv
    args.command_line = shlex.join(["keras-transformer", *given])  # Model cards.
    try:
        if needs_keras(args):
            _start_keras(args.command)
        from keras_transformer.cli.commands import RUNS

        return RUNS[args.command](args)
    except WriteFailed as error:  # A full disk: exit 74, as train and prepare.
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    except (ValueError, OSError, RuntimeError, ImportError) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


def needs_keras(args: argparse.Namespace) -> bool:
    """Whether the command starts Keras (and so needs a backend installed):
    not `prepare`, `translate --onnx`, nor `serve --engine onnx|ctranslate2
    --export-dir X` without a run or preset, which is what a deployment
    installs without any backend (deploy/install.sh: the [serve,onnx] extras)."""
    if args.command in _WITHOUT_KERAS or getattr(args, "onnx", None):
        return False
    if args.command == "serve":
        alone = args.export_dir and not (args.run_dir or args.preset)
        return not (alone and args.engine in _ENGINES_WITHOUT_KERAS)
    return True


def _start_keras(command: str) -> None:
    """A missing backend named with the extra that installs it; the
    compilation caches, and a word about GPUs the backend does not use.
    (The model's classes are registered with Keras where a `.keras` file is
    opened: `run.directory`, `run.averaging`.)"""
    optional_imports.check_backend_installed()
    if command in ("train", "translate", "evaluate", "serve", "parse"):
        from keras_transformer.decoding.compile import enable_compilation_cache

        enable_compilation_cache()
    if command in ("translate", "evaluate", "serve", "parse"):  # train: distribution
        from keras_transformer.training.accelerators import warn_if_gpus_unused

        warn_if_gpus_unused()


def console() -> int:
    """The `keras-transformer` command (and `python -m keras_transformer`)."""
    quiet_native_start_up()
    return main()
