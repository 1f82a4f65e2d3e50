"""torch_to_nnef's tract-binary downloader and its late dynamic-shape rewrite, kept so that
their names import and say what to do instead (served at ``inference_target.tract``;
drop-in only): fastnnef never downloads, and applies dynamic axes while building the graph.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

from fastnnef.exceptions import T2NErrorNotImplemented, T2NErrorTractDownload
from fastnnef.inference_target.base import as_version
from fastnnef.utils import SemanticVersion

__all__ = ["DEFAULT_CACHE_DIR", "TractBinaryDownloader", "apply_dynamic_shape_in_nnef"]

# Where torch_to_nnef caches downloaded tract binaries (fastnnef only looks there).
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "svc" / "tract"


class TractBinaryDownloader:
    """torch_to_nnef's tract downloader, without the download: it finds a tract binary in
    the reference's cache (``~/.cache/svc/tract/<version>/tract``) and raises
    ``T2NErrorTractDownload`` where the reference would fetch one."""

    def __init__(self, version: str | SemanticVersion, auto_download: bool = True):
        self.version = as_version(version).to_str()
        self.extract_dir = DEFAULT_CACHE_DIR / self.version
        if auto_download and not self.tract_filepath.exists():
            self.dl_tract()

    @property
    def arch(self) -> str:
        """The tract release's target triple for this machine."""
        machine = platform.machine()
        cpu = {"x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}.get(machine)
        system = {"linux": "unknown-linux-musl", "darwin": "apple-darwin"}.get(sys.platform)
        if cpu is None or system is None:
            raise T2NErrorNotImplemented(f"tract publishes no binary for {sys.platform} {machine}")
        return f"{cpu}-{system}"

    @property
    def archive_name(self) -> str:
        return f"tract-{self.arch}-{self.version}"

    @property
    def binary_url(self) -> str:
        return f"https://github.com/sonos/tract/releases/download/{self.version}/{self.archive_name}.tgz"

    @property
    def tract_filepath(self) -> Path:
        return self.extract_dir / "tract"

    def dl_tract(self) -> None:
        """Raises ``T2NErrorTractDownload``: fastnnef never downloads anything."""
        raise T2NErrorTractDownload(
            f"no tract binary at {self.tract_filepath}, and fastnnef never downloads one "
            f"(the reference would fetch {self.binary_url}): put a tract {self.version} binary "
            "there, pass specific_tract_binary_path, or check with the linked tract"
        )


def apply_dynamic_shape_in_nnef(dynamic_axes: dict[str, dict[int, str]], nnef_graph: Any,
                                tract_version: Any) -> list[str]:
    """Raises ``T2NErrorNotImplemented``: torch_to_nnef rewrites the inputs of a built graph
    here, but fastnnef derives every shape in the graph from the dynamic axes while building
    it, so marking inputs afterwards would leave the other shapes static."""
    raise T2NErrorNotImplemented(
        "apply_dynamic_shape_in_nnef: fastnnef applies dynamic axes while it builds the graph "
        "(so that every shape follows them); pass them to the target instead: "
        "TractNNEF(..., dynamic_axes={'input': {1: 'S'}}) or target.with_dynamic_axes(...)"
    )
