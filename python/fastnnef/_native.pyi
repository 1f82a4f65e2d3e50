"""Typed surface of the Rust extension ``fastnnef._native``.

This file is the contract between the Python package and ``rust/python.rs``. Rust errors
arrive as the classes of ``fastnnef.exceptions`` named below each function.

Encodings (the ``encoding`` argument of ``dat_encode`` / ``ArtefactWriter.add_tensor``):

========================  ===========================  =====================================
encoding                  numpy array given            ``.dat`` written
========================  ===========================  =====================================
f16 f32 f64               float16/32/64                code 0, 16/32/64 bits
i8 i16 i32 i64            int8/16/32/64                code 4 (signed int)
u8 u16 u32 u64            uint8/16/32/64               code 1 (unsigned int)
bool                      bool                         code 5, 1 bit packed MSB first
qu8 / qi8 / qi32          uint8 / int8 / int32 codes   code 2 / 3 / 3 (graph.quant by caller)
q4_0                      float16/32 (or bf16 bits)    vendor 0x5452 code 0x3040 (GGML order)
q4_0_legacy               float16/32 (or bf16 bits)    vendor 0x5452 code 0x2040
========================  ===========================  =====================================

``bf16=True`` says the array is int16/uint16 holding bfloat16 bits (numpy has no bf16);
it is then accepted by ``f32`` (exact) and ``f16`` (raises ``T2NErrorDtypeOverflow`` if a
finite value exceeds f16's range) and by the Q4_0 encodings. ``f16`` also takes float32
(overflow checked) and ``f32`` takes float16 (exact).
Arrays may be non-contiguous (any strides); they are read in C order without a copy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import final

import numpy as np
import numpy.typing as npt

__version__: str
TRACT_VERSION: str
"""The tract version linked into this extension, e.g. ``"0.23.9"``."""

DAT_MAX_PAYLOAD: int
ENCODINGS: list[str]
"""Every .dat encoding tag the codec knows (twins: artefact.py's tables, pinned by tests)."""
TOLERANCES: list[str]
"""tract's named --approx levels, strictest first (twin: check.TractCheckTolerance)."""
Q4_0_BLOCK: int
"""Values per Q4_0 block."""
CHECKPOINT_DTYPES: list[str]
"""The safetensors dtype names the checkpoint reader streams (twin: tensor.offload's table)."""

def q4_0_check_shape(label: str, shape: list[int]) -> None:
    """Raise T2NErrorImpossibleQuantization unless ``shape`` can be stored as Q4_0 (rank 2
    to 4, the product of all dims but the first a multiple of Q4_0_BLOCK)."""
"""Largest ``.dat`` payload in bytes (u32::MAX)."""

# --- .dat codec -----------------------------------------------------------------------

def dat_encode(array: npt.NDArray, encoding: str, bf16: bool = False, percentile: float = 1.0) -> bytes:
    """Encode one tensor as ``.dat`` bytes (for small tensors, tests and tools).

    Raises T2NErrorInvalidArgument (unknown encoding, dtype mismatch, rank > 8),
    T2NErrorTensorTooLarge, T2NErrorDtypeOverflow, T2NErrorImpossibleQuantization.
    """

def dat_write(path: str, array: npt.NDArray, encoding: str, bf16: bool = False, percentile: float = 1.0,
              label: str | None = None) -> int:
    """Write one ``.dat`` file at ``path`` straight from ``array`` (no bytes in Python):
    temporary name beside it, then an atomic rename. Returns the bytes written. ``label``
    names the tensor in error messages. Raises as ``dat_encode``, plus T2NErrorArtefactIO."""

def checkpoint_dat_write(path: str, checkpoint: Checkpoint, key: str, encoding: str, percentile: float = 1.0,
                         label: str | None = None) -> int:
    """Write tensor ``key`` of ``checkpoint`` as one ``.dat`` file at ``path``, streamed from
    the mapped file (64 MiB at a time) and converted / quantized on the way; atomic like
    ``dat_write``. Returns the bytes written. Raises as ``Checkpoint.check``."""

def dat_payload_size(label: str, shape: Sequence[int], encoding: str) -> int:
    """Payload bytes of a tensor of ``shape`` stored as ``encoding``; raises the format-limit
    error it would get (T2NErrorTensorTooLarge naming ``label``: over 4 GiB, rank > 8;
    T2NErrorInvalidArgument: empty bool; T2NErrorImpossibleQuantization: bad Q4_0 shape).
    Lets callers check every tensor before writing anything."""

def validate_member_name(name: str) -> None:
    """Raise T2NErrorInvalidArgument unless ``name`` is a safe artefact member name
    (relative, ``/``-separated, no empty/``.``/``..`` component, none starting with ``.``)."""

def remove_stale_temps(target: str | os.PathLike[str]) -> None:
    """Remove ``.<name>.tmp-<pid>-<n>`` entries beside ``target`` (files or directories)
    whose process no longer runs: what killed exports to ``target`` left. Best effort."""

def dat_decode(data: bytes) -> DatTensor:
    """Parse ``.dat`` bytes. Raises T2NErrorDatFormat naming the bad field."""

@final
class DatTensor:
    """A decoded ``.dat`` file."""

    item_type: int
    vendor: int
    bits: int
    shape: list[int]
    encoding: str
    """One of the encodings above (``q4_0``/``q4_0_legacy`` for vendor blocks)."""
    def array(self) -> npt.NDArray:
        """The values: the stored dtype for standard types, float32 (dequantized) for Q4_0."""
    def payload(self) -> bytes:
        """The raw payload bytes after the 128-byte header."""

# --- Q4_0 -----------------------------------------------------------------------------

def q4_0_quantize(array: npt.NDArray, bf16: bool = False, percentile: float = 1.0) -> npt.NDArray[np.uint8]:
    """Quantize a float array (flattened in C order, blocks of 32) to Q4_0 blocks, GGML
    nibble order: ``n_blocks * 18`` bytes. Reference recipe (nnef-format.md §2.1).
    Raises T2NErrorImpossibleQuantization when the element count is not a multiple of 32."""

def q4_0_dequantize(blocks: npt.NDArray[np.uint8], shape: Sequence[int], dtype: str = "f32") -> npt.NDArray:
    """Inverse of ``q4_0_quantize`` (GGML nibble order), as ``dtype``: ``"f32"``,
    ``"f16"``, or ``"bf16"`` (a uint16 array of bfloat16 bits), each value rounded to
    nearest even from its f32 value, with no f32 copy of the tensor."""

def q4_0_round_trip(array: npt.NDArray, bf16: bool = False) -> npt.NDArray:
    """``array`` (float32, float16, or bfloat16 bits with ``bf16``; C-contiguous) through
    min-max Q4_0 and back, in its own dtype and shape: byte-identical to
    ``q4_0_dequantize(q4_0_quantize(array))`` cast back to the array's dtype, computed
    block by block (no packed blocks, no f32 copy)."""

def q4_0_blocks_dat_encode(blocks: npt.NDArray[np.uint8], shape: Sequence[int], encoding: str = "q4_0") -> bytes:
    """A whole ``.dat`` file of already-packed Q4_0 ``blocks`` (GGML order, as
    ``q4_0_quantize`` gives them) for a tensor of logical ``shape``, stored as ``encoding``
    (``q4_0``, or ``q4_0_legacy``: nibbles repacked); never re-quantizes. Raises
    T2NErrorInvalidArgument (length not ``shape``'s payload size, non-Q4_0 encoding,
    non-contiguous blocks), T2NErrorImpossibleQuantization (shape not Q4_0-storable)."""

# --- artefact sink --------------------------------------------------------------------

@final
class ArtefactWriter:
    """Streams ``graph.nnef``, ``graph.quant`` and tensors into a directory, ``.tar`` or
    ``.tgz`` in one pass. A ``.tar``/``.tgz`` is an unnamed file (``O_TMPFILE``) until
    ``finish`` (a killed process leaves nothing); a directory (or an archive where the
    filesystem lacks ``O_TMPFILE``) goes to a temporary name beside ``path``. ``finish``
    renames it into place atomically, ``abort`` (or dropping the writer unfinished)
    removes it. Temporaries left by killed exports to the same target are removed. An
    existing ``path`` is never touched before ``finish``; ``finish`` replaces an existing
    archive file, and refuses (FileExistsError-like T2NErrorArtefactIO) to replace an
    existing non-empty directory.

    Members are written in the order given; callers pass them in a fixed order for
    reproducible output. Members may be added from
    several threads at once: a directory's files are written concurrently, an archive's
    members one at a time; ``finish`` and ``abort`` wait for the members in flight. Archives use fixed metadata
    (mtime 315532800, uid/gid 0, mode 0644) and gzip is one member compressed on all
    cores (deterministic for a given level, whatever the thread count).
    """

    def __new__(cls, path: str, format: str, compression_level: int = 0, past_cache: bool = False) -> ArtefactWriter:
        """``format`` is ``"dir"``, ``"tar"`` or ``"tgz"``; ``compression_level`` 0..9
        (tgz only; 0 = stored deflate blocks). ``past_cache``: large files are written past
        the page cache (``O_DIRECT``, 8 MiB aligned writes, the tail through the cache)
        where the filesystem allows it, for an artefact nothing reads right after."""
    def add_file(self, name: str, data: bytes) -> None:
        """Add a member with the given bytes (``graph.nnef``, ``graph.quant``)."""
    def add_tensor(self, label: str, array: npt.NDArray, encoding: str, bf16: bool = False,
                   percentile: float = 1.0) -> int:
        """Encode ``array`` and add it as ``<label>.dat``; returns the bytes written.
        The GIL is released while encoding and writing. Labels are validated (no empty
        component, no ``..``, no leading ``/`` or ``.`` component)."""
    def add_checkpoint_tensor(self, label: str, checkpoint: Checkpoint, key: str, encoding: str,
                              percentile: float = 1.0) -> int:
        """Stream tensor ``key`` of ``checkpoint`` into ``<label>.dat`` as ``encoding``,
        converted (bf16/f16/f32) or quantized (Q4_0) on the way, 64 MiB of the file mapped
        at a time; returns the bytes written. The GIL is released."""
    def add_q4_0_blocks(self, label: str, blocks: npt.NDArray[np.uint8], shape: Sequence[int],
                        encoding: str = "q4_0") -> int:
        """Add already-packed GGML-order Q4_0 ``blocks`` of a tensor of logical ``shape`` as
        ``<label>.dat`` (no re-quantization; ``q4_0_legacy`` repacks the nibbles); returns
        the bytes written. Raises as ``q4_0_blocks_dat_encode``."""
    def remove_member(self, name: str) -> None:
        """Remove member ``name`` (e.g. ``"w.dat"``) of a directory artefact, written
        earlier, so that it can be written again; an archive's members cannot be removed."""
    def finish(self) -> str:
        """Flush, fsync-free close, atomic rename; returns the final path."""
    def abort(self) -> None:
        """Remove everything written so far. Idempotent."""

# --- tract, in-process ----------------------------------------------------------------

# --- checkpoints ----------------------------------------------------------------------

def write_safetensors(path: str | os.PathLike[str],
                      tensors: Sequence[tuple[str, str, Sequence[int], npt.NDArray[np.uint8]]],
                      metadata: dict[str, str] | None = None) -> None:
    """Write ``(name, safetensors dtype name, shape, bytes)`` tensors (the bytes: a
    C-contiguous uint8 buffer, read in place with the GIL released) and the ``__metadata__``
    strings as a ``.safetensors`` file: header built by the ``safetensors`` crate (tensors
    ordered by descending dtype alignment, then name: the Python package's bytes), written
    beside ``path`` and renamed into place. T2NErrorInvalidArgument for an unknown dtype
    name, a repeated name or a byte count that does not match the shape (nothing written);
    T2NErrorArtefactIO when the folder cannot be written (nothing left)."""

@final
class Checkpoint:
    """A ``.safetensors`` checkpoint opened by its headers: a file, a sharded
    ``*.safetensors.index.json``, or a directory holding ``model.safetensors`` or
    ``model.safetensors.index.json``. Malformed, truncated or inconsistent files raise
    T2NErrorCheckpoint naming the file and the tensor. Tensors are mapped on demand,
    never the whole file."""

    def __new__(cls, path: str) -> Checkpoint: ...
    @property
    def path(self) -> str:
        """The file opened (the index for a sharded checkpoint)."""
    def keys(self) -> list[str]:
        """Tensor names, sorted."""
    def __len__(self) -> int: ...
    def __contains__(self, key: str, /) -> bool: ...
    def info(self, key: str) -> tuple[str, list[int], str]:
        """``(safetensors dtype name, shape, file holding the tensor)``; T2NErrorCheckpoint
        for an unknown key."""
    def check(self, label: str, key: str, encoding: str, percentile: float = 1.0) -> int:
        """Every check writing ``key`` as ``encoding`` would make before its first byte
        (dtype, conversion, ``.dat`` limits); returns the payload size."""
    def metadata(self) -> dict[str, str]:
        """The ``__metadata__`` strings of the file(s)."""
    def raw(self, key: str) -> npt.NDArray[np.uint8]:
        """The tensor's bytes as a writable uint8 array over a private copy-on-write map of
        just that tensor (zero-copy; writes never reach the file; the map is released with
        the last view)."""
    def q4_0_round_trip(self, key: str, dtype: str) -> npt.NDArray:
        """The tensor through min-max Q4_0 and back, flat, as ``dtype`` (``"f32"``,
        ``"f16"``, or ``"bf16"``: uint16 bits): each value rounded to the tensor's own
        dtype, then to ``dtype`` (torch's two casts). Computed block by block from 64 MiB
        windows of the file's map into the new array only. T2NErrorInvalidArgument for a
        non-float tensor or dtype, T2NErrorImpossibleQuantization for a shape or value Q4_0
        cannot hold."""

@final
class _TensorMap:
    """Owner of one tensor's map (the base object of ``Checkpoint.raw`` arrays)."""

@final
class TractModel:
    """An NNEF artefact loaded by the linked tract (registries tract_core, tract_pulse,
    tract_extra, tract_transformers), optimized and planned once, runnable many times."""

    @staticmethod
    def load(path: str, optimize: bool = True) -> TractModel:
        """Load a directory, ``.tar`` or ``.tgz`` (gzip detected by magic bytes).
        Raises T2NErrorTract with tract's full error chain and the path."""
    @staticmethod
    def load_bytes(data: bytes, optimize: bool = True) -> TractModel:
        """Load a ``.tar`` / ``.tgz`` held in memory."""
    def input_names(self) -> list[str]: ...
    def output_names(self) -> list[str]: ...
    def input_facts(self) -> list[tuple[str, list[int | str]]]:
        """(dtype, dims) per input; dtype as in tract (``f32``, ``i64``, ``bool`` ...),
        a symbolic dim as its expression string (e.g. ``"S"``)."""
    def output_facts(self) -> list[tuple[str, list[int | str]]]: ...
    def properties(self) -> dict[str, str]:
        """The ``tract_core_properties`` entries whose values are strings."""
    def run(self, inputs: Sequence[npt.NDArray]) -> list[npt.NDArray]:
        """Run on numpy arrays whose dtypes equal the declared ones exactly (else
        T2NErrorInvalidArgument naming the input, expected and given dtype). Symbolic
        dims are solved from the input shapes. The GIL is released while tract runs."""

def compare(expected: npt.NDArray, got: npt.NDArray, approximation: str) -> CompareReport:
    """tract's ``close_enough`` rule (tract.md §5.2) with a full report. ``approximation``
    is ``exact|close|approximate|very|super|ultra`` or ``custom:ATOL,RTOL,OUTLIERS``.
    ``expected`` is cast to ``got``'s dtype first when both are unquantized floats, and
    the tolerance row is chosen by that dtype."""

@final
class CompareReport:
    ok: bool
    approximation: str
    atol: float
    rtol: float
    max_outlier_fraction: float
    expected_shape: list[int]
    got_shape: list[int]
    expected_dtype: str
    got_dtype: str
    shape_mismatch: bool
    n_elements: int
    n_fail: int
    fail_fraction: float
    max_abs_error: float
    max_rel_error: float
    worst_index: list[int] | None
    worst_expected: float | None
    worst_got: float | None
    def __str__(self) -> str: ...
