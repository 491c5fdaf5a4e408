#!/usr/bin/env bash
# The quick start as a test, on one backend alone. The shell blocks of
# docs/quickstart.md ("The command line") run in order as one script, as
# written (scripts/quickstart_blocks.py extracts them and says what it
# changes): the install block makes a fresh .venv-BACKEND with the page's
# `python -m venv` and `pip install -e ".[BACKEND,serve]"` (its extras
# checked), then train (QUICKSTART_STEPS=20 updates, the variable the page
# names), translate, evaluate --split test, average and serve. Any block that
# fails fails this script. Then what a one-backend install must do besides:
# the other backends are absent, the command without KERAS_BACKEND names the
# extra to install, a CTranslate2 export loads, and a SavedModel export fails
# naming the [tensorflow] extra on JAX and torch and works on TensorFlow.
# Usage: bash scripts/smoke_single_backend.sh [jax|tensorflow|torch]
# (default jax). scripts/test.sh runs the JAX route (CI: .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
backend="${1:-jax}"
case "$backend" in
  jax) others="tensorflow torch" ;;
  tensorflow) others="jax torch" ;;
  torch) others="tensorflow jax" ;;
  *) echo "smoke_single_backend.sh: jax, tensorflow or torch, not '$backend'" >&2; exit 2 ;;
esac
venv="$PWD/.venv-$backend"
start=$SECONDS
step() { echo "=== smoke [$backend] $1 ($((SECONDS - start)) s)"; }
fail() { echo "smoke [$backend] FAILED: $1" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "the quick start's blocks (docs/quickstart.md)"
python3 scripts/quickstart_blocks.py --backend "$backend" > "$work/blocks.sh" \
  || fail "the quick start's shell blocks are not as this script expects (above)"
# The page's serve runs until stopped. Here it runs in the background on a
# free port, and flags appended to the page's line limit its warm-up (in
# full it takes minutes) to texts of up to 8 tokens decoded one at a time:
# --port 0 --warmup-tokens 8 --max-text-tokens 8 --max-batch-size 1. Then
# /readyz, one translation over HTTP (4 tokens), SIGTERM, exit status 0.
cat > "$work/quickstart.sh" <<'PRELUDE'
set -euo pipefail
PS4='+ (${SECONDS} s) '  # each command of the page, traced with its start time
quickstart_serve() {
  { set +x; } 2> /dev/null
  echo "serve started at $(date -u +%T)"
  "$@" --port 0 --warmup-tokens 8 --max-text-tokens 8 --max-batch-size 1 \
    > serve.out 2> serve.err &
  server=$! url=""
  trap 'kill "$server" 2> /dev/null || true' EXIT
  for _ in $(seq 600); do
    url=$(grep -o "http://127.0.0.1:[0-9]*/" serve.out) && break
    if ! kill -0 "$server" 2> /dev/null; then
      echo "serve exited: $(tail -5 serve.err)" >&2
      return 1
    fi
    sleep 0.5
  done
  [ -n "$url" ] || { echo "serve printed no address" >&2; return 1; }
  python - "$url" <<'PY'
import json, sys, time, urllib.error, urllib.request
for _ in range(1200):  # Ready once the warm-up has compiled every search.
    try:
        urllib.request.urlopen(sys.argv[1] + "readyz", timeout=10)
        break
    except urllib.error.HTTPError:
        time.sleep(0.5)
request = urllib.request.Request(
    sys.argv[1] + "v1/translate", json.dumps({"texts": ["The children play."]}).encode(),
    {"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request, timeout=300))
assert len(answer["translations"][0]["n_best"]) >= 1, answer
print("serve translated over HTTP:", answer["translations"][0]["translation"])
PY
  kill -TERM "$server"
  wait "$server" || { echo "serve did not exit with 0 after SIGTERM" >&2; return 1; }
  grep -h "Started server\|warm-up done\|serve: stopped" serve.err || true
}
PRELUDE
echo "set -x" >> "$work/quickstart.sh"
cat "$work/blocks.sh" >> "$work/quickstart.sh"

step "the quick start, as written (QUICKSTART_STEPS=${QUICKSTART_STEPS:-20})"
rm -rf "$venv"  # A fresh environment, as the page's install block makes.
mkdir "$work/quickstart"
# No user state: an empty Keras home (no keras.json) and compilation cache;
# KERAS_BACKEND only as the page's install block sets it.
env -u KERAS_BACKEND QUICKSTART_VENV="$venv" QUICKSTART_REPO="$PWD" \
  QUICKSTART_WORK="$work/quickstart" QUICKSTART_STEPS="${QUICKSTART_STEPS:-20}" \
  KERAS_HOME="$work/keras-home" KERAS_TRANSFORMER_CACHE="$work/cache" \
  TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1 bash "$work/quickstart.sh" \
  || fail "a block of the quick start failed (the last '=== quick start block' line names it)"
py="$venv/bin/python" cli="$venv/bin/keras-transformer" run="$work/quickstart/runs/demo"
"$py" -m pip check > /dev/null || fail "pip check in $venv: $("$py" -m pip check)"
export KERAS_HOME="$work/keras-home" KERAS_TRANSFORMER_CACHE="$work/cache"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1

step "the other backends are absent"
for module in $others tensorflow_text keras_hub; do
  if [ "$module" = tensorflow_text ] && [ "$backend" = tensorflow ]; then continue; fi
  if "$py" -c "import $module" 2> /dev/null; then
    fail "import $module works in $venv; it must not be installed there"
  fi
done
if [ "$backend" != tensorflow ]; then
  # Keras's default backend is TensorFlow: without KERAS_BACKEND the command
  # must say what to install or choose, not crash deep inside Keras.
  if message=$(env -u KERAS_BACKEND "$cli" summary 2>&1); then
    fail "keras-transformer ran without TensorFlow and KERAS_BACKEND"
  fi
  grep -qF "pip install -e '.[tensorflow]'" <<< "$message" \
    || fail "no [tensorflow] extra named without KERAS_BACKEND: $message"
fi
export KERAS_BACKEND="$backend"

step "export ctranslate2"
"$cli" export --run-dir "$run" --model "$run/averaged-last-5.keras" \
  --format ctranslate2 --out "$work/ct2"
"$py" -c "import ctranslate2, sys; ctranslate2.Translator(sys.argv[1])" "$work/ct2" \
  || fail "CTranslate2 cannot load the export"

step "export savedmodel"
if [ "$backend" != tensorflow ]; then
  if message=$("$cli" export --run-dir "$run" --out "$work/saved" 2>&1); then
    fail "a SavedModel export worked without TensorFlow"
  fi
  grep -qF "pip install -e '.[tensorflow]'" <<< "$message" \
    || fail "SavedModel export did not name the [tensorflow] extra: $message"
else
  "$cli" export --run-dir "$run" --out "$work/saved"
  test -s "$work/saved/saved_model.pb" || fail "no saved_model.pb"
fi
step "passed: $venv ($(du -sh "$venv" | cut -f1))"
