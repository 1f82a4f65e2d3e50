#!/usr/bin/env bash
# Run the reference's own test suite (tests/ of sonos/torch-to-nnef) unchanged against
# fastnnef. Not part of CI: it needs the reference's sources.
#
#   scripts/run_reference_suite.sh REFERENCE_CHECKOUT [--front-end=auto|export|jit] [pytest arguments...]
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
#
# --front-end=auto|export|jit (default: fastnnef's own default, "auto") runs the whole suite
# under that front end. The reference's tests never pass `front_end` (the reference has no
# such parameter), so the runner sets, before any test is collected, the *default value* of
# the `front_end` parameter of fastnnef's public exporters (export_model_to_nnef,
# export_model_with_result, dump_llm, dump_multimodal) in this process only: the function
# objects are fastnnef's own, unwrapped; a call that names `front_end` still gets its value.
# fastnnef's API has no environment variable or global for this; only this runner does it.
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


def set_front_end_default(function, front_end):
    """Make `front_end` the default of `function`'s parameter `front_end` (this process)."""
    if function.__kwdefaults__ and "front_end" in function.__kwdefaults__:
        function.__kwdefaults__["front_end"] = front_end
        return
    names = function.__code__.co_varnames[:function.__code__.co_argcount]
    index = names.index("front_end") - (len(names) - len(function.__defaults__))
    function.__defaults__ = function.__defaults__[:index] + (front_end,) + function.__defaults__[index + 1:]


args = sys.argv[1:]
front_ends = [a for a in args if a.startswith("--front-end=")]
args = [a for a in args if not a.startswith("--front-end=")]
if front_ends:
    import fastnnef.export
    import fastnnef.export_options
    import fastnnef.llm.api
    import fastnnef.multimodal.api

    front_end = front_ends[-1].split("=", 1)[1]
    if front_end not in fastnnef.export_options.FRONT_ENDS:
        sys.exit(f"--front-end must be one of {fastnnef.export_options.FRONT_ENDS}, got {front_end!r}")
    for exporter in (fastnnef.export.export_model_to_nnef, fastnnef.export.export_model_with_result,
                     fastnnef.llm.api.dump_llm, fastnnef.multimodal.api.dump_multimodal):
        set_front_end_default(exporter, front_end)
    print(f"reference suite: front_end={front_end!r} is the default of every fastnnef export call")

# Files that need a download (Hugging Face checkpoints) at import or in every test, or NeMo.
LEFT_OUT = ["tests/test_model_zoo.py", "tests/test_llama.py", "tests/test_peft.py", "tests/test_llm_cli.py",
            "tests/test_mod.py"]
if not any(a.startswith("tests") for a in args):
    args = ["tests"] + args
args += [f"--ignore={f}" for f in LEFT_OUT]
# A file that fails at import (a missing module or name) counts as an error; the rest runs.
args += ["--continue-on-collection-errors"]
sys.exit(pytest.main(args))
PYTHON
