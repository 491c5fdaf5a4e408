#!/usr/bin/env bash
# Set up the environment, lint, build the documentation site strictly,
# prove the JAX-only install, install Debian's chromium for the browser test
# (if missing), and run the whole test suite on the three backends.
# Usage: bash scripts/test.sh [extra pytest args]
#
# The JAX-only route (scripts/smoke_single_backend.sh: its own .venv-jax with
# only the [jax] and [serve] extras, TensorFlow absent) runs first, alone:
# a few minutes, and a broken install fails before the long suites. The
# three backends' suites then run side by side (much of a suite is one Python
# thread compiling and waiting); each one's output is printed when all end.
# The test modules that do no Keras computation run in the TensorFlow suite
# only (KERAS_TRANSFORMER_NEUTRAL_SUITE, tests/conftest.py), and the torch
# suite runs torch on one thread (tests/conftest.py says why).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/ruff check keras_transformer tests scripts benchmarks
.venv/bin/ruff format --check keras_transformer tests scripts benchmarks
# The documentation site, in its own environment (.venv-docs): a dead link,
# a missing page or a broken reference fails here.
bash scripts/docs.sh
bash scripts/smoke_single_backend.sh jax
# Debian's chromium for the demo page's browser test, when missing.
bash scripts/install_browser.sh
logs=$(mktemp -d)
backends="tensorflow jax torch"
export KERAS_TRANSFORMER_NEUTRAL_SUITE=tensorflow
for backend in $backends; do
  start=$SECONDS
  ( code=0
    KERAS_BACKEND=$backend .venv/bin/python -m pytest -q -p no:cacheprovider \
      --durations=15 --basetemp "$logs/tmp-$backend" "$@" > "$logs/$backend.log" \
      2>&1 || code=$?
    echo "suite $backend: $((SECONDS - start)) s" >> "$logs/$backend.log"
    exit $code ) &
  echo $! > "$logs/$backend.pid"
done
status=0
for backend in $backends; do
  wait "$(cat "$logs/$backend.pid")" || status=1
  echo "=== KERAS_BACKEND=$backend ==="
  cat "$logs/$backend.log"
done
rm -rf "$logs"
exit $status
