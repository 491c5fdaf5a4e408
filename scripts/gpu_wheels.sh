#!/usr/bin/env bash
# The wheels a lent GPU machine lacks to run benchmarks/gpu.sh offline.
# That machine (the device tool's description) has no network and comes with
# Python 3.12, JAX with its CUDA plugin, PyTorch with CUDA, NumPy, h5py,
# ml-dtypes, rich, absl-py, sentencepiece, sacrebleu, protobuf and
# matplotlib, but no Keras: this downloads, here, Keras (the version of this
# checkout's .venv) and the two small packages Keras needs that are missing
# there (namex, optree), for CPython 3.12 on manylinux x86_64, into DIR
# (default .gpu-wheels/, ignored by git; a few MB, under the 64 MiB a device
# call carries). Then: WHEELS=.gpu-wheels bash benchmarks/gpu.sh
# PYTHON_VERSION=3.11 fetches them for this machine's Python instead (the
# CPU rehearsal of the offline mode; tests nothing on a GPU).
# Usage: bash scripts/gpu_wheels.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu-wheels}
python=${PYTHON:-.venv/bin/python}
keras_version=$("$python" -c "import keras; print(keras.__version__)")
rm -rf "$out"
mkdir -p "$out"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$tag")
done
"$python" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version "${PYTHON_VERSION:-3.12}" --implementation cp "${platforms[@]}" -d "$out" \
  "keras==$keras_version" namex optree
echo "gpu_wheels.sh: $(ls "$out" | tr '\n' ' ')($(du -sh "$out" | cut -f1))"
