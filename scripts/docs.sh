#!/usr/bin/env bash
# Build the documentation site (mkdocs, mkdocs-material, mkdocstrings) into
# site/, strictly: a dead link, a missing page or a broken reference fails.
# The tools go into their own environment, .venv-docs (docs/requirements.txt;
# no Keras backend: the API reference is read from the source, the
# command-line reference from the parser, which needs no Keras).
# The site is local: open site/index.html from disk, or serve it with
# `python -m http.server -d site`; search works both ways and no page loads
# anything from the network (tests/test_site.py checks both).
# Usage: bash scripts/docs.sh [extra `mkdocs build` flags]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
venv=.venv-docs
start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r docs/requirements.txt
# mkdocs-material prints a banner about mkdocs 2.0 at every build; this
# site is pinned below 2 (docs/requirements.txt).
NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --clean --site-dir site "$@"
echo "docs.sh: site/ built ($((SECONDS - start)) s); open site/index.html" \
  "(or serve it: python -m http.server -d site)"
