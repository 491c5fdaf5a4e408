#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the demo page's browser test
# (tests/serving/test_demo_page.py), installed with apt-get when missing. No
# browser is downloaded by a test tool. Where they cannot be installed (no
# apt-get, not root and no sudo), say so and go on: the browser test then
# skips naming what is missing.
# Usage: bash scripts/install_browser.sh
set -uo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if ! command -v apt-get > /dev/null; then
  echo "install_browser.sh: no apt-get: the browser test will be skipped" >&2
  exit 0
fi
run=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo > /dev/null; then
    echo "install_browser.sh: not root and no sudo: the browser test will be skipped" >&2
    exit 0
  fi
  run=(sudo)
fi
start=$SECONDS
if "${run[@]}" apt-get update -qq \
  && DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y -qq \
    chromium chromium-driver > /dev/null; then
  echo "install_browser.sh: chromium and chromium-driver installed ($((SECONDS - start)) s)"
else
  echo "install_browser.sh: apt-get failed: the browser test will be skipped" >&2
fi
exit 0
