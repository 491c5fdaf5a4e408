"""JAX on the CPU under sets of XLA flags, with TensorFlow as the yardstick.

XLA reads `XLA_FLAGS` once, when the backend starts, so each contender is
its own process: TensorFlow (Keras's default compile, XLA) and JAX under
each flag set below. The processes take turns, round after round, so a
change in the machine's load hits every contender alike. Each process times
a training step of one model size (compiled as `train` compiles it, one
fixed batch) over `--windows` windows of `--steps` updates after a warm-up,
and beam-4 decoding of one batch (an untrained model that never ends a
sentence, so every row decodes to the same length). The table gives the
median window and each contender's ratio to TensorFlow.

    python benchmarks/xla_cpu_flags.py --size small --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line, run_child, write_section  # noqa: E402
from backend_throughput import BATCHES  # noqa: E402

# The flag sets (docs/benchmarks.md says what each turns off or on).
NO_XNNPACK = (
    "--xla_cpu_use_xnnpack=false --xla_cpu_experimental_ynn_fusion_type=invalid"
)
ONEDNN = (
    f"{NO_XNNPACK} --xla_cpu_experimental_onednn_custom_call=true "
    "--xla_cpu_experimental_onednn_fusion_type=dot"
)
FLAG_SETS = {
    "jax, default flags": "",
    "jax, no XNNPACK/YNNPACK dots": NO_XNNPACK,
    "jax, oneDNN dots": ONEDNN,
}


def child(size: str, vocab_size: int, windows: int, steps: int) -> dict:
    from backend_throughput import compiled_model, training_windows
    from decoding_throughput import NoEosModel

    from keras_transformer import SequenceGenerator

    model, ids = compiled_model(size, vocab_size)
    train_seconds = training_windows(model, ids, windows, steps)
    generator = SequenceGenerator(NoEosModel(model), beam_size=4, max_extra_length=16)
    source = ids[:16, :16]
    generator(source)  # compile

    def decode_window() -> float:
        start = time.perf_counter()
        generator(source)
        return time.perf_counter() - start

    return {
        "tokens_per_window": ids.size * steps,
        "train_seconds": train_seconds,
        "decode_sentences": len(source),
        "decode_seconds": [decode_window() for _ in range(windows)],
    }


def table(results: dict) -> str:
    def rate(runs, kind, amount):
        return statistics.median(
            r[amount] / s for r in runs for s in r[f"{kind}_seconds"]
        )

    yardstick = results["tensorflow"]
    train_tf = rate(yardstick, "train", "tokens_per_window")
    decode_tf = rate(yardstick, "decode", "decode_sentences")
    lines = [
        "| contender | XLA_FLAGS | training target tok/s | vs TensorFlow | "
        "beam-4 sentences/s | vs TensorFlow | windows |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        train = rate(runs, "train", "tokens_per_window")
        decode = rate(runs, "decode", "decode_sentences")
        flags = f"`{FLAG_SETS[name]}`" if FLAG_SETS.get(name) else "—"
        windows = sum(len(r["train_seconds"]) for r in runs)
        lines.append(
            f"| {name} | {flags} | {train:,.0f} | {train / train_tf:.2f}x | "
            f"{decode:,.1f} | {decode / decode_tf:.2f}x | {windows} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(BATCHES))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="updates per window")
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("rounds", "windows", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.child:
        result = child(args.child, args.vocab_size, args.windows, args.steps)
        print("RESULT " + json.dumps(result), flush=True)
        return
    contenders = {"tensorflow": ("tensorflow", None)}
    contenders.update({name: ("jax", flags) for name, flags in FLAG_SETS.items()})
    user_flags = os.environ.pop("XLA_FLAGS", None)
    results: dict = {}
    for round_ in range(args.rounds):
        for name, (backend, flags) in contenders.items():
            os.environ.pop("XLA_FLAGS", None)
            if flags is not None:
                os.environ["XLA_FLAGS"] = flags
            command = [sys.executable, __file__, "--child", args.size]
            command += ["--vocab-size", str(args.vocab_size)]
            command += ["--windows", str(args.windows), "--steps", str(args.steps)]
            result = run_child(command, backend)
            results.setdefault(name, []).append(result)
            print(f"round {round_ + 1} {name}: {result['train_seconds']}", flush=True)
    if user_flags is not None:
        os.environ["XLA_FLAGS"] = user_flags
    text = (
        f"`python benchmarks/xla_cpu_flags.py --size {args.size} --vocab-size "
        f"{args.vocab_size} --rounds {args.rounds} --windows {args.windows} "
        f"--steps {args.steps}` on "
        f"{machine_line()}. `{args.size}`, vocabulary {args.vocab_size:,}, "
        f"float32, one fixed batch of {BATCHES[args.size][0]} x "
        f"{BATCHES[args.size][1]} tokens, compiled as `train` compiles it; beam 4 "
        "on 16 sentences of 16 tokens to 32; each contender in its own process, "
        "the processes taking turns over the rounds; median window.\n\n"
        + table(results)
        + "\n"
    )
    print("\n" + text)
    if args.write:
        write_section(f"JAX on the CPU: XLA flags ({args.size})", text)


if __name__ == "__main__":
    main()
