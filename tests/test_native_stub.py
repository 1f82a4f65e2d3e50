"""``_native.pyi`` matches the built extension (mypy's stubtest), so the contract between
the Python package and the Rust bindings cannot drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_native_stub_matches_the_extension() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "fastnnef._native",
         "--allowlist", str(ROOT / ".mypy-stubtest-allowlist")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
