"""The phases of an exporter run that know nothing of the model family: the destination
checked before anything is loaded, the tract target (a binary that also checks, or the
version asked for), the compressor from its registry, timings per phase, and the export
staged beside its destination then moved into place, or removed on any error.

The LLM exporter (``llm/api.py``) and the exporters built on it (``multimodal/api.py``)
are compositions of these and of the LLM phases (``llm/phases.py``); the NeMo exporter
(``nemo/export.py``) stages and times its subnets with them. The PEFT exporter writes one
archive through the core's sink, which already builds it under a temporary name."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from torch import nn

from fastnnef import _native
from fastnnef.compress import dynamic_load_registry
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.inference_target.base import as_version
from fastnnef.inference_target.tract import TractNNEF
from fastnnef.inference_target.tract_cli import TractCli
from fastnnef.tensor.offload import PathLike
from fastnnef.utils import SemanticVersion


def check_destination(export_dirpath: PathLike, into_existing: bool) -> Path:
    """The export directory, refused when it exists (unless ``into_existing``, -iaed) or
    is not a directory."""
    target = Path(export_dirpath)
    if target.exists() and not into_existing:
        raise T2NErrorInvalidArgument(
            f"export directory {target} already exists: choose another, or pass -iaed "
            "(ignore_already_exist_dir=True) to write into it"
        )
    if target.exists() and not target.is_dir():
        raise T2NErrorInvalidArgument(f"export path {target} exists and is not a directory")
    return target


def tract_target(path: PathLike | None, version: str | None) -> tuple[TractCli | None, SemanticVersion]:
    """The tract binary that also checks the bundles (None: only the linked tract), and the
    version the artefact targets: the binary's, the one asked for, or the latest."""
    if path is not None and version is not None:
        raise T2NErrorInvalidArgument(
            "--tract-specific-path and --tract-specific-version exclude each other (as in torch_to_nnef_llm): the "
            "binary's version is the target version"
        )
    if path is not None:
        binary = TractCli(Path(path))
        return binary, binary.version
    if version is not None:
        return None, as_version(version)
    return None, TractNNEF.latest_version()


def compressor(method: str | None, registry_path: str) -> Callable[..., nn.Module] | None:
    """The registry's function for ``method`` (None: no compression)."""
    if method is None:
        return None
    registry = dynamic_load_registry(registry_path)
    if method not in registry:
        raise T2NErrorInvalidArgument(
            f"compression method {method!r} is not in {registry_path}; available: {', '.join(sorted(registry))}"
        )
    return registry[method]


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Adds the seconds the block took to ``timings[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


@contextmanager
def staged_export(target: Path) -> Iterator[Path]:
    """A fresh directory beside ``target`` to build the export in, moved into place when the
    block ends (``move_into_place``) and removed when it raises: an error leaves nothing.
    Named ``.<name>.tmp-<pid>-<random>``, the core exporter's convention, so that what a
    killed export to this target left is removed here once its process is gone."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _native.remove_stale_temps(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    try:
        yield staging
        move_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def files_in(directory: Path) -> list[str]:
    """Every file under ``directory``, relative to it, sorted (what a report lists)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def move_into_place(staging: Path, target: Path) -> None:
    """Rename the finished directory into place; into an existing one (-iaed), move each
    file, replacing files of the same name."""
    if not target.exists():
        os.replace(staging, target)
        return
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            dest = target / path.relative_to(staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
    shutil.rmtree(staging)
