"""No deprecation on the default path (issue 25 item 5): under ``PYTHONWARNINGS=error`` (a
common CI setting) the library API with its default front end, a tiny ``fastnnef-llm`` and a
tiny ``fastnnef-multimodal`` run to the end. Each runs in a fresh interpreter, so that no
filter of this test session applies; checkpoints are tiny random-weight models saved here."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_with_warnings_as_errors(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "error",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_a_tiny_model_with_the_default_front_end(tmp_path: Path) -> None:
    done = _run_with_warnings_as_errors(f"""
        import torch
        from fastnnef import export_model_to_nnef
        from fastnnef.inference_target import TractNNEF
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU(), torch.nn.LayerNorm(3))
        target = TractNNEF.latest().with_dynamic_axes({{"x": {{0: "B"}}}})
        export_model_to_nnef(model, torch.randn(2, 4), {str(tmp_path / "m.nnef")!r}, target, input_names=["x"])
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "m.nnef.tar").exists()


@pytest.mark.parametrize("command, family", [("llm", "llama"), ("multimodal", "qwen2_5_vl")])
def test_a_tiny_exporter_cli(command: str, family: str, tmp_path: Path) -> None:
    """``fastnnef-llm`` on a tiny llama, ``fastnnef-multimodal`` on a tiny Qwen2.5-VL."""
    pytest.importorskip("transformers")
    tiny = importlib.import_module(f"tests.{command}.tiny")
    source = tiny.save(family, tmp_path / family)
    out = tmp_path / "out"
    done = _run_with_warnings_as_errors(f"""
        from fastnnef.{command}.cli import main
        raise SystemExit(main(["-d", {str(source)!r}, "-e", {str(out)!r}, "-nv"]))
    """)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"exported {family}" in done.stdout
