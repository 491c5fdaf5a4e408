"""The Keras engine's warm-up: programs, memory mappings, RSS and seconds.

Each compiled program of XLA's CPU code holds about 140 memory mappings,
and Linux allows a process `vm.max_map_count` of them (65,530 by default):
past it the next compile aborts the process. This measures, in one process
per row (a fresh process: nothing compiled before), what
`KerasEngine.warm_up` compiles for sources of up to `--tokens` tokens with
the allowed beam sizes: the batch shapes, the programs, the mappings they
added, the RSS after and the seconds. The run: `--run-dir`, else the
tests' untrained run (`tests/shared_runs.make_untrained_run`) in a
temporary directory. The server's full start to /readyz (attention and
details too, over HTTP): `serving_load.py --operations --ready-only`.

    KERAS_BACKEND=jax python benchmarks/serving_warmup.py --tokens 64 256
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mappings() -> int:
    with open("/proc/self/maps", "rb") as lines:
        return sum(1 for _ in lines)


def _rss_gb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return kib / 1e6


def measure(run_dir: str, tokens: int, beams: tuple[int, ...], batch: int) -> dict:
    """One row, in this process: open the run, warm up, count."""
    from keras_transformer.decoding.compile import compilations
    from keras_transformer.decoding.opening import open_model
    from keras_transformer.registry import register_keras_objects
    from keras_transformer.serving.engines.keras_engine import KerasEngine
    from keras_transformer.serving.options import AllowedSettings

    register_keras_objects()
    engine = KerasEngine(open_model(run_dir), batch_size=batch)
    maps, programs, start = _mappings(), compilations(), time.perf_counter()
    shapes = engine.warm_up(AllowedSettings(beams, (0.6,)), tokens)
    return {
        "tokens": tokens,
        "shapes": shapes,
        "programs": compilations() - programs,
        "mappings": _mappings() - maps,
        "rss_gb": round(_rss_gb(), 2),
        "seconds": round(time.perf_counter() - start, 1),
    }


def _untrained_run(directory: Path) -> str:
    sys.path.insert(0, str(ROOT))
    from tests.shared_runs import make_untrained_run

    return str(make_untrained_run(directory / "run"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", help="the run (default: the tests' untrained)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--beam-sizes", default="1,4")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    beams = tuple(int(b) for b in args.beam_sizes.split(","))
    if args.row:  # The child: one row as JSON.
        (tokens,) = args.tokens
        print(json.dumps(measure(args.run_dir, tokens, beams, args.batch_size)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or _untrained_run(Path(scratch))
        print(f"backend {os.environ.get('KERAS_BACKEND', 'tensorflow')}, beams "
              f"{args.beam_sizes}, batches of {args.batch_size}")  # fmt: skip
        print("| tokens | batch shapes | programs | mappings added | RSS GB | s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for tokens in args.tokens:
            child = [sys.executable, __file__, "--row", "--run-dir", run_dir,
                     "--tokens", str(tokens), "--beam-sizes", args.beam_sizes,
                     "--batch-size", str(args.batch_size)]  # fmt: skip
            out = subprocess.run(child, capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            cells = [row["tokens"], row["shapes"], row["programs"],
                     f"{row['mappings']:,}", row["rss_gb"], row["seconds"]]  # fmt: skip
            print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
