"""Small helpers shared by the public API: versions, working-directory changes,
nested-structure flattening and name-keyed collections.

Mirrors ``torch_to_nnef.utils`` (``SemanticVersion``, ``torch_version``, ``cd``,
``flatten_dict_tuple_or_list``, ``NamedItem``, ``ReactiveNamedItemDict``; ``init_empty_weights``,
drop-in only, is served here by fastnnef/compat/empty_weights.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorDataNodeValue, T2NErrorInvalidArgument, T2NErrorMisuse, T2NErrorNotImplemented
from fastnnef.log import get_logger
from fastnnef.reference_names import reference_name

LOGGER = get_logger(__name__)

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
    _parts: tuple[int, int, int]

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

    def _other_parts(self, other: object) -> tuple[int, int, int] | None:
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
def cd(path: str | os.PathLike[str]) -> Iterator[None]:
    """Context manager: run the block with ``path`` as the working directory, then go back
    (even on error). The working directory is process-wide: not for threaded code."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


# --- nested structures ---------------------------------------------------------------------
FlatEntry = tuple[tuple[type, ...], tuple[int | str, ...], Any]


def _is_nested(obj: Any) -> bool:
    """A list, tuple or mapping to walk into (strings and tensors are leaves)."""
    return isinstance(obj, (list, tuple, Mapping)) and not isinstance(obj, (str, torch.Tensor))


def flatten_dict_tuple_or_list(
    obj: Any,
    collected_types: list[type] | None = None,
    collected_idxes: list[int | str] | None = None,
    current_idx: int = 0,
) -> tuple[FlatEntry, ...]:
    """The leaves of nested lists, tuples and dicts, depth first: for each, the types of the
    containers on its path, its index (or key) in each, and the leaf.

    ``[{"a": 1, "b": 3}]`` gives ``(((list, dict), (0, "a"), 1), ((list, dict), (0, "b"), 3))``.
    A leaf at the top (not a container) and empty containers give no entry. The last three
    parameters are the reference's recursion state, kept for its signature: the path above
    ``obj`` and the index of ``obj``'s first item. Unlike the reference, a string inside a
    dict is a leaf (the reference fails on it)."""
    return tuple(_flatten(obj, tuple(collected_types or ()), tuple(collected_idxes or ()), current_idx))


def _flatten(obj: Any, types: tuple[type, ...], idxes: tuple[int | str, ...],
             first_index: int = 0) -> Iterator[FlatEntry]:
    if not _is_nested(obj):
        return
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj, first_index)
    path_types = types + (type(obj),)
    for key, value in items:
        if _is_nested(value):
            yield from _flatten(value, path_types, idxes + (key,))
        else:
            yield path_types, idxes + (key,), value


# --- name-keyed collections -------------------------------------------------------------------
NameListener = Callable[[str, str], None]


class NamedItem:
    """An object with a ``name`` that tells its listeners when the name changes
    (``listener(old_name, new_name)``, before the change): what keeps a
    ``ReactiveNamedItemDict`` holding it keyed right. Subclasses define ``name`` (a
    dataclass field, usually)."""

    name: str

    def _listeners(self) -> list[NameListener]:
        if "_name_listeners" not in self.__dict__:
            object.__setattr__(self, "_name_listeners", [])
        return self.__dict__["_name_listeners"]

    def register_listener_name_change(self, listener: NameListener) -> None:
        if listener in self._listeners():
            raise T2NErrorDataNodeValue(f"listener {listener} already registered on {self.name!r}")
        self._listeners().append(listener)

    def detach_listener_name_change(self, listener: NameListener) -> None:
        self._listeners().remove(listener)

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr == "name" and "name" in self.__dict__:
            for listener in list(self._listeners()):
                listener(self.__dict__["name"], value)
        super().__setattr__(attr, value)


class ReactiveNamedItemDict:
    """An insertion-ordered collection of ``NamedItem``s keyed by their names, no two with
    the same name, that follows its items' renames. List-like: ``len``, iteration,
    ``[i]`` / ``[a:b]`` (``[-1]`` is the last item appended), ``+`` of an iterable.

    A renamed item takes its new name's place at the end of the order (as in the
    reference). Renaming onto a name already held replaces that entry (logged), or raises
    with ``avoid_name_collision``; names given to ``protect_item_names`` can be neither
    renamed from or to, nor (``raise_exception_if_protected_name``) removed."""

    def __init__(self, items: Iterable[NamedItem] | None = None):
        self._map: dict[str, NamedItem] = {}
        self._last_inserted_item: NamedItem | None = None
        self.avoid_name_collision = False
        self._protected_names: set[str] = set()
        if items is not None:
            self += items

    @classmethod
    def from_list(cls, items: Iterable[NamedItem] | None) -> ReactiveNamedItemDict:
        return cls(items or None)

    def _change_name_hook(self, old_name: str, new_name: str) -> None:
        for name in (old_name, new_name):
            if name in self._protected_names:
                raise T2NErrorDataNodeValue(f"name {name!r} is protected: it cannot be renamed from or to")
        if new_name == old_name:
            return
        if new_name in self._map:
            msg = f"renaming {old_name!r} to {new_name!r} replaces the item already named so in {self}"
            if self.avoid_name_collision:
                raise T2NErrorDataNodeValue(msg)
            LOGGER.debug(msg)
        self._map[new_name] = self._map.pop(old_name)

    def append(self, item: NamedItem) -> None:
        """Add ``item`` (every item must come in through here: it subscribes to renames)."""
        if item.name in self._map:
            raise T2NErrorDataNodeValue(
                f"{item.name!r} is already in this collection ({self._map[item.name]}); cannot add {item}"
            )
        item.register_listener_name_change(self._change_name_hook)
        self._map[item.name] = item
        self._last_inserted_item = item

    def remove(self, item: NamedItem, raise_exception_if_not_found: bool = True,
               raise_exception_if_protected_name: bool = True) -> None:
        if item.name not in self._map:
            msg = f"cannot remove {item.name!r}: not in this collection"
            if raise_exception_if_not_found:
                raise T2NErrorDataNodeValue(msg)
            LOGGER.debug(msg)
            return
        if item.name in self._protected_names and raise_exception_if_protected_name:
            raise T2NErrorDataNodeValue(f"cannot remove {item.name!r}: its name is protected")
        self.detach_listener_name_change_for_item(item)
        del self._map[item.name]

    def detach_listener_name_change_for_item(self, item: NamedItem) -> None:
        self._map[item.name].detach_listener_name_change(self._change_name_hook)

    def get_by_name(self, name: str, default: Any = None) -> Any:
        return self._map.get(name, default)

    def contains(self, item: NamedItem, strict: bool = False) -> bool:
        """Whether an item of ``item``'s name is held (``strict``: and equals ``item``)."""
        held = self._map.get(item.name)
        return held is not None and (not strict or held == item)

    def protect_item_names(self, names: Iterable[str]) -> None:
        self._protected_names.update(names)

    def is_empty(self) -> bool:
        return not self._map

    def iter_renamable(self) -> Iterator[NamedItem]:
        """The items whose names are not protected."""
        return (item for name, item in self._map.items() if name not in self._protected_names)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int) and index == -1:
            if self._last_inserted_item is None:
                raise T2NErrorMisuse("no item was appended yet")
            return self._last_inserted_item
        if isinstance(index, (int, slice)):
            return list(self._map.values())[index]
        raise T2NErrorNotImplemented(f"index {index!r}: use an int, a slice or get_by_name")

    def __setitem__(self, index: Any, value: NamedItem) -> None:
        raise T2NErrorNotImplemented("assigning at an index: remove() and append() instead")

    def __add__(self, items: Iterable[NamedItem]) -> ReactiveNamedItemDict:
        for item in items:
            self.append(item)
        return self

    __iadd__ = __add__

    def __iter__(self) -> Iterator[NamedItem]:
        return iter(list(self._map.values()))

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        protected = f", protected={sorted(self._protected_names)}" if self._protected_names else ""
        return f"<ReactiveNamedItemDict ({len(self._map)}) names={list(self._map)}{protected}>"


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
