#!/usr/bin/env bash
# Set up, lint, build the documentation site strictly, and run the whole
# test suite on the three backends, plus the quick start's commands as
# written on a JAX-only install (scripts/smoke_single_backend.sh jax). CI
# runs this (.ci/run).
# Usage: bash scripts/test.sh [--quick] [extra pytest args]
#   --quick   set up and lint, then one backend's fast tests (KERAS_BACKEND,
#             default torch, whose eager tests are the quickest: about 3.5
#             minutes on 2 cores, JAX's about 10; not the `slow` ones)
#             while developing (docs/contributing.md, "Tests and lint")
#
# Stages: the environments, the documentation site and Debian's chromium
# (for the demo page's browser test) are prepared side by side, then ruff,
# then three lanes run side by side on the machine's cores: the TensorFlow
# suite, the JAX suite, and the torch suite followed by the JAX-only route
# (CI's shortest suite, so the lanes end together). Each suite prints its 30
# slowest tests; the closing table gives every stage's wall time. With
# CI=true the suites' stage fails past TEST_BUDGET_SECONDS (default 2400, 40
# minutes on CI's 2-core machine), naming the slowest tests, so that growth
# shows when it happens, not when a submission no longer lands. Each suite's
# JUnit XML (every test's time) is kept in TEST_REPORTS when it names a
# directory (scripts/slowest_tests.py reads them).
#
# The test modules that do no Keras computation, and the end-to-end flows
# whose code is the same on every backend, run in one suite only
# (tests/conftest.py, KERAS_TRANSFORMER_NEUTRAL_SUITE); the torch suite runs
# torch on one thread (tests/conftest.py says why).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
export TF_CPP_MIN_LOG_LEVEL=2
# XLA's backend optimizations off in the suites (a user's XLA_FLAGS wins):
# JAX compiles each test's small programs afresh, and without them the JAX
# tests of tests/test_model.py and tests/training/test_fine_tune.py took a
# fifth less time (248 s -> 201 s, runs alternated); TensorFlow's tests spend
# their time tracing (unchanged). The tests check the same computations; only
# the generated machine code is less tuned. Users' runs keep XLA's defaults.
export XLA_FLAGS="${XLA_FLAGS:---xla_backend_optimization_level=0}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
reports="${TEST_REPORTS:-$logs}"
mkdir -p "$reports"
stages=()
begin=$SECONDS
# stage NAME COMMAND...: run it, keep its wall time for the closing table.
stage() {
  local name="$1" start=$SECONDS
  shift
  "$@"
  stages+=("$(printf '%-38s %5d s' "$name" $((SECONDS - start)))")
}
print_stages() {
  echo "=== stages (wall time) ==="
  printf '%s\n' "${stages[@]}"
  printf '%-38s %5d s\n' "total" $((SECONDS - begin))
}
lint() {
  .venv/bin/ruff check keras_transformer tests scripts benchmarks notebooks
  .venv/bin/ruff format --check keras_transformer tests scripts benchmarks notebooks
}

if [ $quick = 1 ]; then
  stage "setup (.venv, [dev])" bash scripts/setup.sh
  stage "lint (ruff)" lint
  backend="${KERAS_BACKEND:-torch}"
  stage "$backend suite, fast tests" env KERAS_BACKEND="$backend" \
    .venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow" \
    --durations=10 "$@"
  print_stages
  exit 0
fi

# The documentation's environment and site, and the browser, need nothing
# from .venv: they are prepared while it installs (their output follows).
( bash scripts/docs.sh > "$logs/docs.log" 2>&1; echo $? > "$logs/docs.rc" ) &
docs=$!
( bash scripts/install_browser.sh > "$logs/browser.log" 2>&1 ) &
browser=$!
stage "setup (.venv, [dev])" bash scripts/setup.sh
stage "docs site and browser (beside setup)" wait "$docs" "$browser"
cat "$logs/docs.log" "$logs/browser.log"
[ "$(cat "$logs/docs.rc")" = 0 ] || { echo "scripts/docs.sh failed" >&2; exit 1; }
stage "lint (ruff)" lint

export KERAS_TRANSFORMER_NEUTRAL_SUITE=torch
suite() {  # suite BACKEND [pytest args]: its log and exit code under $logs
  local backend="$1" start=$SECONDS code=0
  shift
  KERAS_BACKEND=$backend .venv/bin/python -m pytest -q -p no:cacheprovider \
    --durations=30 --junitxml "$reports/$backend.xml" \
    --basetemp "$logs/tmp-$backend" "$@" > "$logs/$backend.log" 2>&1 || code=$?
  echo "suite $backend: $((SECONDS - start)) s" >> "$logs/$backend.log"
  echo $((SECONDS - start)) > "$logs/$backend.seconds"
  return $code
}
single_backend() {
  local start=$SECONDS code=0
  bash scripts/smoke_single_backend.sh jax > "$logs/smoke.log" 2>&1 || code=$?
  echo $((SECONDS - start)) > "$logs/smoke.seconds"
  return $code
}
lanes_start=$SECONDS
( suite tensorflow "$@" ) &
tensorflow=$!
( suite jax "$@" ) &
jax=$!
( code=0
  suite torch "$@" || code=1
  single_backend || code=1
  exit $code ) &
torch=$!
status=0
for lane in tensorflow jax torch; do
  wait "${!lane}" || status=1
done
lanes=$((SECONDS - lanes_start))
for backend in tensorflow jax torch; do
  echo "=== KERAS_BACKEND=$backend ==="
  cat "$logs/$backend.log"
done
echo "=== JAX-only install (scripts/smoke_single_backend.sh jax) ==="
cat "$logs/smoke.log"
for backend in tensorflow jax torch; do
  stages+=("$(printf '%-38s %5d s' "  $backend suite" "$(cat "$logs/$backend.seconds")")")
done
stages+=("$(printf '%-38s %5d s' "  JAX-only install (after torch)" "$(cat "$logs/smoke.seconds" 2> /dev/null || echo 0)")")
stages+=("$(printf '%-38s %5d s' "suites side by side (all lanes)" "$lanes")")
print_stages
budget="${TEST_BUDGET_SECONDS:-2400}"
if [ "${CI:-}" = true ] && [ "$lanes" -gt "$budget" ]; then
  echo "test.sh: the suites took $lanes s, over the budget of $budget s" \
    "(docs/contributing.md, \"The time budget\"). The slowest tests:" >&2
  .venv/bin/python scripts/slowest_tests.py "$reports"/*.xml >&2
  status=1
fi
exit $status
