"""How every fastnnef command line ends: one place maps errors to exit codes and messages.

A fastnnef error prints ``PROG: error: <type>: <message>`` and exits 2; Ctrl-C exits 130
(exports leave nothing behind when interrupted); anything else is a bug and propagates
with its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from fastnnef.exceptions import T2NError

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def run_command(prog: str, action: Callable[[], int]) -> int:
    """``action()``'s exit code, or the code and message of the error it raised."""
    try:
        return int(action())
    except T2NError as err:
        print(f"{prog}: error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; nothing was left behind", file=sys.stderr)
        return EXIT_INTERRUPTED
