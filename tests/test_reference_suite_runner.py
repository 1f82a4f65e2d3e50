"""scripts/run_reference_suite.sh, the runner of the reference's own test suite, on a stand-in
checkout holding one test file written as the reference's are (``torch_to_nnef`` imports, no
``front_end`` argument): its module alias answers those imports with fastnnef's modules,
``--front-end`` makes that front end the default of every export call of the run (the
exported model is checked in tract), and a wrong value is refused before any test runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "scripts" / "run_reference_suite.sh"

# A test as the reference writes them; EXPECTED_FRONT_END says which front end must run.
PROBE = '''
import os
import warnings

import torch

import fastnnef.export
import torch_to_nnef.export
from torch_to_nnef.export import export_model_to_nnef
from torch_to_nnef.inference_target import TractNNEF


def test_export_under_the_chosen_front_end(tmp_path):
    expected = os.environ["EXPECTED_FRONT_END"]
    assert torch_to_nnef.export is fastnnef.export
    target = TractNNEF.latest()
    target.check_io = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = export_model_to_nnef(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()),
                                    torch.randn(2, 4), tmp_path / "m.nnef", target,
                                    input_names=["x"], output_names=["y"])
    assert path.exists()
    # torch.jit.trace warns that it is deprecated on every call; torch.export does not.
    traced = any("torch.jit" in str(w.message) for w in caught)
    assert traced == (expected == "jit"), [str(w.message) for w in caught]
'''


def _run(reference: Path, expected: str, *options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "EXPECTED_FRONT_END": expected}
    return subprocess.run(["bash", str(RUNNER), str(reference), *options, "tests/test_probe.py", "-q",
                           "-p", "no:cacheprovider"], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_probe.py").write_text(textwrap.dedent(PROBE))
    return tmp_path


@pytest.mark.parametrize("options, expected", [((), "auto"), (("--front-end=jit",), "jit")])
def test_the_suite_runs_under_the_chosen_front_end(reference: Path, options: tuple[str, ...], expected: str) -> None:
    done = _run(reference, expected, *options)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "1 passed" in done.stdout


def test_an_unknown_front_end_is_refused(reference: Path) -> None:
    done = _run(reference, "auto", "--front-end=torchscript")
    assert done.returncode != 0
    assert "--front-end must be one of ('auto', 'export', 'jit'), got 'torchscript'" in done.stderr
    assert "passed" not in done.stdout
