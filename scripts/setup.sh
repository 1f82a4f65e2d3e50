#!/usr/bin/env bash
# Set up everything on a fresh machine: a virtual environment in .venv with the exact
# packages of requirements/test.lock (torch, transformers, the test tools), and fastnnef
# built from source (Rust extension included) into it.
#
# Idempotent and offline once done: the lock is installed only when it changed since the
# last run (its hash is kept in the venv), pip is never upgraded on its own, and cargo
# reuses target/. A second run only rebuilds what changed.
#
# Environment: PYTHON (interpreter for a new venv, default python3), FASTNNEF_VENV (venv
# folder, default .venv), FASTNNEF_DEPS=lock|latest|oldest (default lock):
#   lock    the exact versions we last tested (CI);
#   latest  the newest releases our pyproject ranges allow (scripts/test.sh --latest);
#   oldest  our ranges with transformers at its floor (--oldest; run it with the oldest
#           Python we claim: PYTHON=python3.11).
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
VENV=${FASTNNEF_VENV:-.venv}
DEPS=${FASTNNEF_DEPS:-lock}
LOCK=requirements/test.lock
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"
pip=("$py" -m pip install -q --disable-pip-version-check)

# The lock was made on one Python minor version (its first line): elsewhere its pins may
# not exist, so the ranges of pyproject.toml are resolved instead, with a warning.
lock_python=$(sed -n '1s/^# python \([0-9.]*\).*/\1/p' "$LOCK")
venv_python=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$DEPS" = lock ] && [ "$venv_python" != "$lock_python" ]; then
  echo "setup.sh: $LOCK is for Python $lock_python, this venv has $venv_python: installing the newest releases our ranges allow instead" >&2
  DEPS=latest
fi

stamp="$VENV/.fastnnef-deps"
want="$DEPS $(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -c1-16)"
if [ "$DEPS" != lock ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  case "$DEPS" in
    lock) "${pip[@]}" -r "$LOCK" ;;
    latest|oldest)
      # A fresh resolution from the registry: these two modes need the network.
      "${pip[@]}" --upgrade pip
      floors=()
      [ "$DEPS" = oldest ] && floors=($("$py" scripts/requirements.py floors transformers))
      "${pip[@]}" --upgrade $("$py" scripts/requirements.py ranges) "${floors[@]}" ;;
    *) echo "setup.sh: FASTNNEF_DEPS must be lock, latest or oldest, not '$DEPS'" >&2; exit 2 ;;
  esac
  echo "$want" > "$stamp"
fi
# Build the extension in release mode (the profile cargo test and the benches share,
# so tract compiles once) and install the package in editable mode (its dependencies
# are already satisfied above, so this asks no registry).
VIRTUAL_ENV="$PWD/$VENV" PATH="$PWD/$VENV/bin:$PATH" "$VENV/bin/maturin" develop --release -q
