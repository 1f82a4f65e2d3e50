#!/usr/bin/env bash
# Run the reference's own test suite (tests/ of sonos/torch-to-nnef) unchanged against
# fastnnef. Not part of CI: it needs the reference's sources.
#
#   scripts/run_reference_suite.sh REFERENCE_CHECKOUT [pytest arguments...]
#
# REFERENCE_CHECKOUT holds the reference's tests/ (and its pyproject.toml, which gives
# pytest its markers and options), e.g. from a clone of the reference:
#   git --git-dir=<clone>/.git archive HEAD tests pyproject.toml | tar -x -C /tmp/t2n_tests
#
# The only thing between the two is a module alias: every `torch_to_nnef[.x.y]` import is
# answered with the module `fastnnef[.x.y]` itself (no wrapper, no patched name), so a
# missing module or name fails as it would for a user who changed the import. It runs
# offline (HF_HUB_OFFLINE), and leaves out the files that need a download or NeMo:
#   test_model_zoo.py (albert-base-v2), test_llama.py, test_peft.py, test_llm_cli.py
#   (Hugging Face checkpoints), test_mod.py (NeMo's FilterbankFeatures).
# The suite's own dependencies: nnef and nnef-tools (test_export, test_fix_se), librosa
# (test_mod), torchaudio built for the installed torch (test_dynamic_axes, test_fft), and
# the transformers 4.x its test_tile_and_dyn_dim and test_phi were written against; an
# interpreter with fastnnef's dependencies plus these is what PYTHON should name, e.g. a
# venv over fastnnef's (a .pth file naming its site-packages) with those installed.
# Pytest arguments default to the whole remaining suite; give test files to run a part:
#   scripts/run_reference_suite.sh /tmp/t2n_tests tests/test_export.py -q -p no:cacheprovider
# PYTHON picks the interpreter (default: python3 on PATH, with torch and fastnnef).
set -euo pipefail

REF=$(cd "${1:?usage: $0 REFERENCE_CHECKOUT [pytest arguments...]}" && pwd)
shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
# fastnnef's own python/ first (a checkout's package over an installed one); the reference
# checkout's root makes its `tests` package importable, as in its own CI.
export PYTHONPATH="$REPO/python:$REF"

cd "$REF"
exec "$PY" - "$@" <<'PYTHON'
import importlib
import importlib.abc
import importlib.machinery
import sys

import pytest


class TorchToNnefAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`torch_to_nnef[.x]` is the module `fastnnef[.x]` (the same object)."""

    PREFIX = "torch_to_nnef"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.PREFIX and not fullname.startswith(self.PREFIX + "."):
            return None
        target_name = "fastnnef" + fullname[len(self.PREFIX):]
        if importlib.util.find_spec(target_name) is None:
            return None  # a module fastnnef lacks: ModuleNotFoundError, as for a user
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return importlib.import_module("fastnnef" + spec.name[len(self.PREFIX):])

    def exec_module(self, module):
        pass  # already executed under its fastnnef name


sys.meta_path.insert(0, TorchToNnefAlias())

# Files that need a download (Hugging Face checkpoints) at import or in every test, or NeMo.
LEFT_OUT = ["tests/test_model_zoo.py", "tests/test_llama.py", "tests/test_peft.py", "tests/test_llm_cli.py",
            "tests/test_mod.py"]
args = sys.argv[1:]
if not any(a.startswith("tests") for a in args):
    args = ["tests"] + args
args += [f"--ignore={f}" for f in LEFT_OUT]
# A file that fails at import (a missing module or name) counts as an error; the rest runs.
args += ["--continue-on-collection-errors"]
sys.exit(pytest.main(args))
PYTHON
