"""Small helpers shared by the public API: versions, empty-weight model construction and
working-directory changes.

Mirrors ``torch_to_nnef.utils`` (``SemanticVersion``, ``torch_version``, ``init_empty_weights``,
``cd``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from typing import Iterator, Optional, Tuple, Union

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument

_TAGS = ("major", "minor", "patch")


@functools.total_ordering
class SemanticVersion:
    """A ``major.minor.patch`` version, totally ordered, comparable with strings.

    Same API as torch_to_nnef's: keyword-only constructor, ``from_str``, ``to_str`` and
    ``repr`` ``<Version X.Y.Z>``; ``==``, ``<`` etc. accept a ``SemanticVersion`` or a
    ``str`` such as ``"0.21.11"``. Differences: instances are immutable and hashable,
    ``str()`` gives ``X.Y.Z``, and bad input raises ``T2NErrorInvalidArgument`` (a
    ``ValueError``) naming the expected form instead of failing an ``assert``.

    Example::

        >>> SemanticVersion.from_str("0.23.0-dev.4") >= "0.21.11"
        True
    """

    __slots__ = ("_parts",)

    def __init__(self, *, major: int, minor: int, patch: int) -> None:
        parts = (major, minor, patch)
        for tag, value in zip(_TAGS, parts):
            # bool is an int subclass; ``major=True`` is a bug in the caller, not version 1.
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise T2NErrorInvalidArgument(
                    f"SemanticVersion {tag} must be a non-negative int, got {value!r}"
                )
        object.__setattr__(self, "_parts", parts)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SemanticVersion is immutable")

    @classmethod
    def from_str(cls, version_str: str, sep: str = ".") -> SemanticVersion:
        """Parse ``X<sep>Y<sep>Z``; a ``-suffix`` (pre-release) or ``+local`` part is dropped."""
        if not isinstance(version_str, str):
            raise T2NErrorInvalidArgument(
                f"a version string like '0.23.9' is expected, got {version_str!r}"
            )
        s = re.escape(sep)
        match = re.fullmatch(rf"(\d+){s}(\d+){s}(\d+)(?:[-+].*)?", version_str.strip())
        if match is None:
            raise T2NErrorInvalidArgument(
                f"cannot parse version {version_str!r}: expected "
                f"'MAJOR{sep}MINOR{sep}PATCH' with an optional '-suffix', e.g. '0.23.9'"
            )
        major, minor, patch = (int(g) for g in match.groups())
        return cls(major=major, minor=minor, patch=patch)

    @property
    def major(self) -> int:
        return self._parts[0]

    @property
    def minor(self) -> int:
        return self._parts[1]

    @property
    def patch(self) -> int:
        return self._parts[2]

    def to_str(self) -> str:
        """``"X.Y.Z"``."""
        return ".".join(str(p) for p in self._parts)

    def _other_parts(self, other: object) -> Union[Tuple[int, int, int], None]:
        if isinstance(other, SemanticVersion):
            return other._parts
        if isinstance(other, str):
            return SemanticVersion.from_str(other)._parts
        return None

    def __eq__(self, other: object) -> bool:
        parts = self._other_parts(other)
        if parts is None:
            return NotImplemented
        return self._parts == parts

    def __lt__(self, other: object) -> bool:
        parts = self._other_parts(other)
        if parts is None:
            return NotImplemented
        return self._parts < parts

    def __hash__(self) -> int:
        return hash(self._parts)

    def __repr__(self) -> str:
        return f"<Version {self.to_str()}>"

    def __str__(self) -> str:
        return self.to_str()

    def __reduce__(self):  # immutable __slots__ class: pickle/deepcopy through the constructor
        return (_from_parts, self._parts)


def _from_parts(major: int, minor: int, patch: int) -> SemanticVersion:
    return SemanticVersion(major=major, minor=minor, patch=patch)


def torch_version() -> SemanticVersion:
    """The installed torch's version; the local part (``+cu121``) and dev tags are dropped."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", torch.__version__)
    if match is None:  # a source build with an unusual tag: say so instead of guessing
        raise T2NErrorInvalidArgument(f"cannot parse torch.__version__ {torch.__version__!r}")
    major, minor, patch = match.groups()
    return SemanticVersion(major=int(major), minor=int(minor), patch=int(patch or 0))


@contextlib.contextmanager
def cd(path: Union[str, "os.PathLike[str]"]) -> Iterator[None]:
    """Context manager: run the block with ``path`` as the working directory, then go back
    (even on error). The working directory is process-wide: not for threaded code."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@contextlib.contextmanager
def init_empty_weights(include_buffers: Optional[bool] = None) -> Iterator[None]:
    """Context manager: modules built inside it get their parameters on the ``meta`` device.

    Builds a model's structure without allocating its weights (each parameter is created,
    then moved to ``meta`` at registration, so peak memory is one parameter). Load real
    weights afterwards, e.g. ``model.load_state_dict(state, assign=True)``. With
    ``include_buffers=True`` registered buffers go to ``meta`` too; by default they stay
    real because buffers computed at construction (rotary tables, ...) are rarely in a
    checkpoint (``None``, the reference's default, means ``False``). Same contract as
    accelerate's ``init_empty_weights``.

    Caveat: like accelerate's, it swaps ``nn.Module.register_parameter`` (and
    ``register_buffer``) process-wide while active; don't build other models in other
    threads meanwhile.

    Example::

        with init_empty_weights():
            model = nn.Linear(4096, 4096)
        assert model.weight.is_meta
    """
    original_parameter = nn.Module.register_parameter
    original_buffer = nn.Module.register_buffer

    def register_parameter(module: nn.Module, name: str, param) -> None:
        original_parameter(module, name, param)
        if param is not None and not param.is_meta:
            registered = module._parameters[name]
            module._parameters[name] = type(registered)(
                registered.to("meta"), requires_grad=registered.requires_grad
            )

    def register_buffer(module: nn.Module, name: str, tensor, persistent: bool = True) -> None:
        original_buffer(module, name, tensor, persistent=persistent)
        if tensor is not None and not tensor.is_meta:
            module._buffers[name] = module._buffers[name].to("meta")

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    if include_buffers:
        nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = original_buffer  # type: ignore[method-assign]
