"""The README's Python examples run as written (in a temporary working directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import TRACER_ALLOWED

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@TRACER_ALLOWED  # an example loads a TorchScript file (torch.jit.load), which only the tracer exports
def test_readme_examples_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for block in BLOCKS:  # later blocks use names from earlier ones, as a reader would
        exec(compile(block, str(README), "exec"), namespace)
    assert (tmp_path / "mybeautifulmodel.nnef.tgz").is_file()
