"""Keep the C heap from growing with the depth of a traced encoder.

glibc serves an allocation from its heap below ``M_MMAP_THRESHOLD`` (128 KiB at start),
from its own ``mmap`` above, and raises the threshold to the size of any mapped block
freed (up to 32 MiB): after the process frees one large buffer (a weight converted, an
eager forward's activations), every activation of an encoder's forward (a vision
tower's, 0.5-2 MiB each) is carved from the heap. ``torch.jit.trace`` allocates small
blocks that outlive the forward (graph nodes, its map of traced values) between those
activations, so the freed activations leave holes that later ones no longer fit: the
heap grew by about one block's activations per block traced (17.5 MiB per Qwen2.5-VL
vision block at 140 patches; 275 MiB of RssAnon for 16 blocks, freed only after the
export), so peak memory grew with the tower's depth. Measured in benches/README.md
("Peak memory against model size").

Fixing the threshold at glibc's own starting value keeps such buffers in their own maps,
returned to the system when freed. It is process-wide and stays set (glibc cannot go back
to the moving threshold); the only cost is a map per allocation of 128 KiB or more. Other
C libraries (musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import functools
import platform

from fastnnef.log import get_logger

log = get_logger("fastnnef.multimodal")

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc malloc.h)
GLIBC_INITIAL_MMAP_THRESHOLD = 128 * 1024


@functools.cache
def map_large_allocations() -> bool:
    """Fix glibc's mmap threshold at its initial 128 KiB (module docstring), once per
    process; True where it was set (glibc), False elsewhere."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):  # pragma: no cover - glibc always exports mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, GLIBC_INITIAL_MMAP_THRESHOLD))
    log.debug("glibc mmap threshold fixed at %d bytes: %s", GLIBC_INITIAL_MMAP_THRESHOLD, done)
    return done
