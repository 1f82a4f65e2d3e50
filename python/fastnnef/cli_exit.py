"""How every fastnnef command line ends: one place maps errors to exit codes and messages,
and ends the process.

A fastnnef error prints ``PROG: error: <type>: <message>`` and exits 2; Ctrl-C exits 130
(exports leave nothing behind when interrupted); anything else is a bug and propagates
with its traceback.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

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


def end_process(code: int) -> NoReturn:
    """End a console script's process with ``code`` without the interpreter's teardown of
    its modules: after an export, clearing torch's, transformers' and sympy's modules and
    collecting their half a million objects takes 1.4 s after a two-layer MLP and 2.2-2.7 s
    after a 70B-dimension LLM slice (benches/README.md), for a process that is ending.
    The exit handlers still run (``atexit``: logging's flush, temporary directories'
    removal...) and the standard streams are flushed. While another non-daemon thread
    runs, the interpreter's own exit waits for it as usual."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)
