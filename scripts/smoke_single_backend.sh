#!/usr/bin/env bash
# One backend alone, end to end: build .venv-BACKEND with only that backend's
# extra (and [serve] for CTranslate2 and the HTTP server), check that the
# other backends are absent, then train `tiny` briefly, translate, evaluate,
# average, export to CTranslate2 (and load it), serve over HTTP (one
# translation, then SIGTERM), and export a SavedModel: on JAX and torch that
# must fail naming the [tensorflow] extra, on TensorFlow it must work.
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
venv=".venv-$backend"
start=$SECONDS
step() { echo "=== smoke [$backend] $1 ($((SECONDS - start)) s)"; }
fail() { echo "smoke [$backend] FAILED: $1" >&2; exit 1; }

step "setup"
bash scripts/setup.sh --venv "$venv" --extras "$backend,serve"
py="$venv/bin/python" cli="$venv/bin/keras-transformer"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# No user state: an empty Keras home (no keras.json) and compilation cache.
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
  grep -q "keras-transformer\[tensorflow\]" <<< "$message" \
    || fail "no [tensorflow] extra named without KERAS_BACKEND: $message"
fi
export KERAS_BACKEND="$backend"

step "train"
run="$work/run"
"$cli" train --run-dir "$run" --builtin-size 1000 --vocab-size 400 \
  --max-steps 20 --checkpoint-every 10 --eval-every 0
test -s "$run/model.keras" || fail "train wrote no model.keras"

step "translate"
printf '%s\n' "The old man has bought a red car." "The children play." \
  | "$cli" translate --run-dir "$run" --beam-size 2 > "$work/out.de"
[ "$(wc -l < "$work/out.de")" -eq 2 ] || fail "translate gave not 2 lines"

step "evaluate"
printf '%s\n' "The old man has bought a red car." > "$work/src.en"
printf '%s\n' "Der alte Mann hat ein rotes Auto gekauft." > "$work/ref.de"
"$cli" evaluate --run-dir "$run" --src "$work/src.en" --ref "$work/ref.de" \
  --beam-size 1 | grep -q "sacreBLEU" || fail "evaluate printed no sacreBLEU"

step "average"
"$cli" average --run-dir "$run" --last 2
test -s "$run/averaged-last-2.keras" || fail "average wrote nothing"

step "export ctranslate2"
"$cli" export --run-dir "$run" --model "$run/averaged-last-2.keras" \
  --format ctranslate2 --out "$work/ct2"
"$py" -c "import ctranslate2, sys; ctranslate2.Translator(sys.argv[1])" "$work/ct2" \
  || fail "CTranslate2 cannot load the export"

step "serve"
"$cli" serve --run-dir "$run" --port 0 --beam-size 2 --warmup-tokens 8 \
  --max-text-tokens 32 > "$work/serve.out" 2> "$work/serve.err" &
server=$!
trap 'kill "$server" 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do
  grep -q "http://127.0.0.1:" "$work/serve.out" && break
  kill -0 "$server" 2> /dev/null || fail "serve exited: $(tail -5 "$work/serve.err")"
  sleep 0.5
done
url=$(grep -o "http://127.0.0.1:[0-9]*/" "$work/serve.out") || fail "serve printed no address"
"$py" - "$url" <<'PY' || fail "serve did not translate"
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
PY
kill -TERM "$server"
wait "$server" || fail "serve did not exit with 0 after SIGTERM"

step "export savedmodel"
if [ "$backend" != tensorflow ]; then
  if message=$("$cli" export --run-dir "$run" --out "$work/saved" 2>&1); then
    fail "a SavedModel export worked without TensorFlow"
  fi
  grep -q "keras-transformer\[tensorflow\]" <<< "$message" \
    || fail "SavedModel export did not name the [tensorflow] extra: $message"
else
  "$cli" export --run-dir "$run" --out "$work/saved"
  test -s "$work/saved/saved_model.pb" || fail "no saved_model.pb"
fi
step "passed: $venv ($(du -sh "$venv" | cut -f1))"
