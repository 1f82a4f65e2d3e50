#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the main job: export the bundled example model to
# .nnef.tgz and check it in-process with the linked tract.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/fastnnef demo "$@"
