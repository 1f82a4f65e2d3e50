"""fastnnef's loggers, and the log level of one export.

``export_model_to_nnef(..., log_level=...)`` applies its level to that export only: the
level lives in a context variable, so it changes no global logging state and two exports
in two threads (each with its own context) do not see each other's level. Outside an
export, fastnnef's loggers follow the usual configuration (``logging.getLogger("fastnnef")``).

Every module logs through ``get_logger(__name__)``. torch_to_nnef's ``log`` module names are
here too: ``set_lib_log_level`` (the ``fastnnef`` logger's level), ``init_log`` (a
command-line style root handler) and ``log``, the ``logging`` module itself.
"""

from __future__ import annotations

import contextlib
import logging
import logging as log  # torch_to_nnef's ``log`` module is ``import logging as log``
from collections.abc import Iterator
from contextvars import ContextVar

# Re-exported levels, as torch_to_nnef's ``log`` module offers them.
from logging import CRITICAL, DEBUG, ERROR, INFO, WARNING
from types import ModuleType

__all__ = [
    "CRITICAL", "DEBUG", "ERROR", "INFO", "WARNING", "export_log_level", "get_logger", "init_log", "log",
    "set_lib_log_level",
]

_EXPORT_LEVEL: ContextVar[int | None] = ContextVar("fastnnef_export_log_level", default=None)


class _ExportAwareLogger(logging.Logger):
    """A logger whose threshold, inside an export, is that export's ``log_level``."""

    def isEnabledFor(self, level: int) -> bool:
        override = _EXPORT_LEVEL.get()
        if override is None:
            return super().isEnabledFor(level)
        return self.manager.disable < level and level >= override


def get_logger(name: str = "fastnnef") -> logging.Logger:
    """The logger ``name`` (``fastnnef`` or one of its children), honouring the level of
    the export in progress. The class of a logger the user already created is upgraded
    in place; its level, handlers and filters are kept."""
    if name != "fastnnef" and not name.startswith("fastnnef."):
        raise ValueError(f"{name!r} is not a fastnnef logger name")
    logger = logging.getLogger(name)
    if not isinstance(logger, _ExportAwareLogger):
        logger.__class__ = _ExportAwareLogger  # no new state: only isEnabledFor differs
    return logger


@contextlib.contextmanager
def export_log_level(level: int | None) -> Iterator[None]:
    """Within this block (in this thread or task), fastnnef logs at ``level``."""
    token = _EXPORT_LEVEL.set(level)
    try:
        yield
    finally:
        _EXPORT_LEVEL.reset(token)


def set_lib_log_level(log_level: int) -> None:
    """Set the level of fastnnef's loggers (outside exports, which use their own ``log_level``)."""
    get_logger().setLevel(log_level)


def init_log() -> ModuleType:
    """Log to stderr at INFO with file and line, as torch_to_nnef's command lines do (a
    ``logging.basicConfig``: no effect when the root logger already has handlers).
    Returns the ``logging`` module."""
    logging.basicConfig(
        format="%(asctime)s,%(msecs)d %(levelname)-8s [%(filename)s:%(lineno)d] %(message)s",
        datefmt="%Y-%m-%d:%H:%M:%S",
        level=logging.INFO,
    )
    return logging
