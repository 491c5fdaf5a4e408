#!/usr/bin/env bash
# The main job on a fresh machine: set up, train the `tiny` Transformer on the
# built-in English->German corpus for 2,400 updates, translate a few
# sentences, and print sacreBLEU on the held-out test split.
# Usage: bash scripts/main.sh [extra `keras-transformer train` flags]
# It installs only the backend it runs on: KERAS_BACKEND (default
# tensorflow, Keras's default) names the extra installed into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export KERAS_BACKEND="${KERAS_BACKEND:-tensorflow}"
bash scripts/setup.sh --extras "$KERAS_BACKEND"
export TF_CPP_MIN_LOG_LEVEL=2
RUN_DIR="${RUN_DIR:-runs/builtin-tiny}"
# A 2,000-piece vocabulary covers the built-in grammar's words whole and keeps
# the output layer cheap.
.venv/bin/keras-transformer train --run-dir "$RUN_DIR" --max-steps 2400 \
  --vocab-size 2000 "$@"
printf '%s\n' "The old man has bought a red car." \
  "Today the children want to play in the garden." \
  | .venv/bin/keras-transformer translate --run-dir "$RUN_DIR"
.venv/bin/python - "$RUN_DIR" <<'PY'
import json, sys
scores = json.load(open(f"{sys.argv[1]}/test_scores.json"))
print(f"held-out test sacreBLEU {scores['bleu']:.1f} ({scores['signature']})")
PY
