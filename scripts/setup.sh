#!/usr/bin/env bash
# Set up everything on a fresh machine: a virtual environment in .venv with torch and the
# test tools, and fastnnef built from source (Rust extension included) into it.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# ISA-L, the .tgz encoder of gzip levels 1-3, is compiled from source by the isal-sys
# crate with make, nasm and autotools: install them where missing (Debian/Ubuntu apt-get).
missing=()
for pair in make:make nasm:nasm autoconf:autoconf automake:automake libtoolize:libtool; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: please install ${missing[*]} (needed to build ISA-L)" >&2
    exit 1
  fi
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  apt_install() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
  # A fresh machine may have no package lists yet: update only when the install needs it.
  apt_install || { "${sudo[@]}" apt-get update -qq >/dev/null && apt_install; }
fi

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
