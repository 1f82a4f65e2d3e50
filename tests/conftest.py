"""The front end every ``export_and_check`` uses (tests/helpers.py): ``--front-end=jit``
(the default, torch.jit.trace) or ``--front-end=export`` (torch.export, issue 25), so that
the same op tests run under both. A test that only the jit front end passes carries
``@pytest.mark.jit_only(reason)``: under ``--front-end=export`` it is a strict xfail, listed
with its reason in README.md."""

from __future__ import annotations

import pytest

from tests import helpers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--front-end", choices=("jit", "export", "auto"), default="jit",
                     help="front_end of export_model_to_nnef in export_and_check (default: jit)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "jit_only(reason): only the jit front end passes it (xfail under export)")
    helpers.FRONT_END = config.getoption("--front-end")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--front-end") != "export":
        return
    for item in items:
        mark = item.get_closest_marker("jit_only")
        if mark is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"front_end='export': {mark.args[0]}"))
