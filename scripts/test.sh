#!/usr/bin/env bash
# Set up the environment, lint, and run the whole test suite on both backends.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/ruff check keras_transformer tests scripts benchmarks
.venv/bin/ruff format --check keras_transformer tests scripts benchmarks
status=0
for backend in tensorflow jax; do
  echo "=== KERAS_BACKEND=$backend ==="
  KERAS_BACKEND=$backend .venv/bin/python -m pytest -q "$@" || status=1
done
exit $status
