"""tests/torch_graph tests the jit front end (``torch_graph/`` is its package): every
``export_and_check`` here uses it whatever ``--front-end`` says, and torch's deprecation
notice of the tracer is allowed (tests/helpers.py ``TRACER_ALLOWED``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import helpers

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _jit_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "FRONT_END", "jit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(helpers.TRACER_ALLOWED)
