#!/usr/bin/env bash
# Set up (scripts/setup.sh), check the contracts (lint, types, dead code, clippy: seconds), then
# run every test: the Rust core's cargo tests (the criterion benches built and run once in
# test mode too), the Python benches' smoke runs, and the Python suite, which loads every
# exported artefact in the linked tract (and checks the import stages: tests/test_import_layers.py).
#
#   bash scripts/test.sh [PYTEST ARGS]           # the locked versions (CI)
#   bash scripts/test.sh --latest [PYTEST ARGS]  # the newest releases our ranges allow, in .venv-latest
#   bash scripts/test.sh --oldest [PYTEST ARGS]  # transformers at its floor, in .venv-oldest
#                                                # (with PYTHON=python3.11: the oldest Python we claim)
#
# --latest is not part of CI: run it before a release and whenever torch or transformers
# publish (every few weeks); when it passes, `bash scripts/update-lock.sh` adopts its
# versions as the new lock (a deliberate commit).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --latest|--oldest)
    mode=${1#--}; shift
    export FASTNNEF_DEPS=$mode FASTNNEF_VENV=.venv-$mode ;;
esac
venv=${FASTNNEF_VENV:-.venv}
bash scripts/setup.sh
# The contracts, first because they are cheap (configured in pyproject.toml): ruff's rules
# (logging.getLogger only in log.py), mypy over python/fastnnef, no dead code (vulture;
# scripts/vulture_whitelist.py names what only the drop-in API or strings use), clippy on
# every target, the extension's PyO3 code included (release profile: the build scripts of
# cargo test's build are reused).
"$venv/bin/ruff" check
"$venv/bin/mypy"
"$venv/bin/python" -m vulture
PYO3_PYTHON="$(cd "$venv/bin" && pwd)/python" cargo clippy --release --locked --all-targets --features python -- -D warnings
cargo test --release --locked
# Each criterion bench once in test mode (criterion runs every benchmark a single time
# when not given --bench): they must compile and run, nothing is measured.
cargo test --release --locked --benches
"$venv/bin/python" -m pytest "$@"
# The run above exports with the default front end, "auto" (torch.export, the tracer where
# fx_graph/fallback.py says). The op tables again with torch.export alone, so that what
# only the tracer passes stays listed (JIT_ONLY in tests/conftest.py, strict xfails there;
# README, "Front ends").
"$venv/bin/python" -m pytest --front-end=export -q tests/op
# The LLM families again with the tracer alone: "auto" captures them with torch.export
# now, and the tracer stays the fallback (and front_end="jit"), so it must stay green.
"$venv/bin/python" -m pytest --front-end=jit -q tests/llm/test_architectures.py
if [ "${FASTNNEF_DEPS:-lock}" != lock ]; then
  echo "tested with (differences from requirements/test.lock):"
  diff <(grep -v '^#' requirements/test.lock | sort -f) \
       <("$venv/bin/python" -m pip freeze --all --exclude-editable | sort -f) | sed -n 's/^> /  /p' || true
fi
