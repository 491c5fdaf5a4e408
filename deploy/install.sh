#!/bin/sh
# Installs what serving an ONNX or CTranslate2 export needs, and nothing
# else: the package with its [serve,onnx] extras (FastAPI, uvicorn,
# onnxruntime, CTranslate2, SentencePiece; Keras comes with the package but
# no Keras backend does, and none is imported for these engines). The
# Dockerfile beside this runs it; so does tests/test_deploy.py, into a fresh
# virtual environment, so the image's install is tested in CI.
# Usage: sh deploy/install.sh VENV [CLONE]   (CLONE: default, this clone)
set -eu
venv="$1"
clone="${2:-$(cd "$(dirname "$0")/.." && pwd)}"
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --quiet "$clone[serve,onnx]"
