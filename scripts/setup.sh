#!/usr/bin/env bash
# Create a virtual environment (if missing) and install keras-transformer (the
# keras-nmt distribution) into it, editable, with the extras asked for
# (docs/install.md).
# Usage: bash scripts/setup.sh [--venv DIR] [--extras LIST] [--gpu BACKEND]
#   --venv DIR       the environment (default .venv)
#   --extras LIST    comma-separated extras (default dev: both CPU backends,
#                    every feature, the test tools); e.g. jax or tensorflow,serve
#   --gpu BACKEND    jax or tensorflow: that backend's NVIDIA GPU build (the
#                    jax-cuda or tensorflow-cuda extra) in .venv-gpu-BACKEND
#                    unless --venv says otherwise
# Prints the environment's size and the setup's wall time at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
venv="" extras=dev
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="$2"; shift 2 ;;
    --extras) extras="$2"; shift 2 ;;
    --gpu)
      case "$2" in
        jax | tensorflow) extras="$2-cuda"; venv="${venv:-.venv-gpu-$2}" ;;
        *) echo "setup.sh: --gpu takes jax or tensorflow, not '$2'" >&2; exit 2 ;;
      esac
      shift 2 ;;
    *) echo "setup.sh: unknown argument '$1' (see the usage at the top)" >&2; exit 2 ;;
  esac
done
venv="${venv:-.venv}"
start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# An environment made before the distribution was renamed keras-nmt holds it
# as keras-transformer (the name of an unrelated PyPI project with the same
# import package): removed first, so one distribution owns keras_transformer.
if "$venv/bin/python" -m pip show --quiet keras-transformer > /dev/null 2>&1; then
  "$venv/bin/python" -m pip uninstall --quiet --yes keras-transformer
fi
"$venv/bin/python" -m pip install --quiet -e ".[$extras]"
# An extra that disagrees with what is already there fails here, not later.
if ! broken=$("$venv/bin/python" -m pip check); then
  echo "setup.sh: pip check in $venv: $broken" >&2
  exit 1
fi
echo "setup.sh: $venv has keras-nmt[$extras]" \
  "($(du -sh "$venv" | cut -f1), $((SECONDS - start)) s)"
