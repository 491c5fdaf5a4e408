#!/usr/bin/env bash
# Resolve the NVIDIA GPU extras without installing them: for [jax-cuda] and
# [tensorflow-cuda], `pip install --dry-run --report` in an empty temporary
# environment (what a fresh GPU machine would get), then print what would be
# installed: the count of packages, the CUDA libraries, and the backend's own
# version. Exit status 1 if either does not resolve.
# Usage: bash scripts/resolve_cuda_extras.sh [EXTRA ...]  (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade pip
extras=("$@")
[ ${#extras[@]} -gt 0 ] || extras=(jax-cuda tensorflow-cuda)
status=0
for one in "${extras[@]}"; do
  start=$SECONDS
  report="$work/$one.json"
  if ! "$work/venv/bin/python" -m pip install --quiet --dry-run \
      --ignore-installed --report "$report" ".[$one]" > "$work/$one.log" 2>&1; then
    echo "[$one] does NOT resolve ($((SECONDS - start)) s):"
    tail -20 "$work/$one.log"
    status=1
    continue
  fi
  "$work/venv/bin/python" - "$report" "$one" "$((SECONDS - start))" <<'PY'
import json, sys

report, extra, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
packages = {
    item["metadata"]["name"].lower(): item["metadata"]["version"]
    for item in json.load(open(report))["install"]
}
cuda = sorted(f"{n}=={v}" for n, v in packages.items() if n.startswith("nvidia-"))
backend = sorted(
    f"{n}=={v}"
    for n, v in packages.items()
    if n in ("jax", "jaxlib", "tensorflow", "tensorflow-text", "keras")
    or n.startswith("jax-cuda")
)
print(f"[{extra}] resolves in {seconds} s: {len(packages)} packages")
print(f"  backend: {', '.join(backend)}")
print(f"  CUDA libraries ({len(cuda)}): {', '.join(cuda)}")
PY
done
exit $status
