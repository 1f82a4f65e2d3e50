"""Drop-in: torch_to_nnef's ``console`` module, a console printer that uses ``rich`` when
it is installed and otherwise prints the text with rich's ``[style]`` markup removed.
fastnnef itself prints through ``logging``; this is for code that imports it from here."""

from __future__ import annotations

import re
from typing import Any

_MARKUP = re.compile(r"\[.*?\]")


def striptags(data: str) -> str:
    """``data`` without rich's ``[style]...[/style]`` markup."""
    return _MARKUP.sub("", data)


class Console:
    """``print`` through ``rich.console.Console`` with ``theme`` (a mapping of style names
    to styles) when rich is installed; else plain ``print`` of the text without markup."""

    COLORMAP = {"blue": "34", "grey82": "82", "yellow": "33", "red": "31"}  # ANSI codes, as the reference's

    def __init__(self, theme: dict[str, str] | None) -> None:
        self.theme = theme
        try:
            # rich is optional (not a dependency of fastnnef): the import decides.
            from rich.console import Console as RichConsole
            from rich.theme import Theme
        except ImportError:
            self._printer = self._degraded_print
        else:
            self._printer = RichConsole(theme=Theme(theme)).print

    @staticmethod
    def _degraded_print(*args: Any, **_: Any) -> None:
        print(striptags(" ".join(str(a) for a in args)))

    def print(self, *args: Any, **kwargs: Any) -> None:
        self._printer(*args, **kwargs)
