#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run every test: the Rust core's cargo tests and the
# Python suite, which loads every exported artefact in the linked tract.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --release --locked
.venv/bin/python -m pytest "$@"
