#!/usr/bin/env bash
# One GPU, both backends: `base` in bfloat16 with XLA at ~25,000 target tokens
# per step (training step time, tok/s, MFU vs the bf16 dense peak) and cached
# beam-4 decoding (sentences/s). For a GPU machine only (see docs/benchmarking.md);
# CI never runs it. Extra arguments go to benchmarks/gpu_benchmark.py.
#   bash benchmarks/gpu.sh [--peak-tflops 989] [--tokens-per-step 25000]
# Each backend runs in its own environment with its NVIDIA GPU build:
# scripts/setup.sh --gpu jax|tensorflow builds .venv-gpu-jax ([jax-cuda]) and
# .venv-gpu-tensorflow ([tensorflow-cuda]) if missing. PYTHON=... runs both
# backends in that Python instead (one that already has GPU builds).
set -uo pipefail
cd "$(dirname "$0")/.."
python_for() {  # The Python that runs backend $1, set up if need be.
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  bash scripts/setup.sh --gpu "$1" >&2 || return 1
  echo ".venv-gpu-$1/bin/python"
}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
# JAX: let XLA take most of the GPU memory up front; TF: grow as needed.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
export TF_FORCE_GPU_ALLOW_GROWTH=true
status=0
for backend in jax tensorflow; do
  echo "=== KERAS_BACKEND=$backend ==="
  if ! python=$(python_for "$backend"); then
    echo "gpu.sh: no GPU environment for $backend (scripts/setup.sh --gpu $backend)"
    status=1
    continue
  fi
  KERAS_BACKEND=$backend "$python" benchmarks/gpu_benchmark.py "$@" || status=1
done
exit $status
