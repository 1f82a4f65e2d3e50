#!/usr/bin/env bash
# Set up everything on a fresh machine: a virtual environment in .venv with torch and the
# test tools, and fastnnef built from source (Rust extension included) into it.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch from PyPI (the CUDA build runs fine on CPU); the rest are the test extras.
.venv/bin/python -m pip install -q "torch>=2.1,<3" "numpy>=1.26,<3" "maturin>=1.9.4,<2" \
  "pytest>=8" "hypothesis>=6" "safetensors>=0.4" "mypy>=1.10" "transformers>=5,<6"
# Build the extension in release mode (the profile cargo test and the benches share,
# so tract compiles once) and install the package in editable mode.
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop --release -q
