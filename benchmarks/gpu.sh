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
#
# Offline, on a machine with its own JAX and PyTorch but no Keras and no
# network (the lent GPU machine): WHEELS=DIR (made here by
# scripts/gpu_wheels.sh) installs those wheels into a folder on the path of
# that machine's python3 (or PYTHON), and runs JAX then torch; every step is
# bounded by STEP_SECONDS (default 200), the whole within 8 minutes.
#   WHEELS=.gpu-wheels bash benchmarks/gpu.sh --steps 5 --windows 2
set -uo pipefail
cd "$(dirname "$0")/.."
backends="jax tensorflow"
step=()
if [ -n "${WHEELS:-}" ]; then
  site=${TMPDIR:-/tmp}/keras-transformer-site
  PYTHON=${PYTHON:-python3}
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  KERAS_BACKEND=jax "$PYTHON" -c "import keras, sys; print('gpu.sh: keras', keras.__version__, 'on Python', sys.version.split()[0])"
  backends="jax torch"
  step=(timeout "${STEP_SECONDS:-200}")
fi
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
for backend in $backends; do
  echo "=== KERAS_BACKEND=$backend ==="
  if ! python=$(python_for "$backend"); then
    echo "gpu.sh: no GPU environment for $backend (scripts/setup.sh --gpu $backend)"
    status=1
    continue
  fi
  KERAS_BACKEND=$backend "${step[@]}" "$python" benchmarks/gpu_benchmark.py "$@" || status=1
done
exit $status
