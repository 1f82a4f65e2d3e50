"""Weights that stay on disk (torch_to_nnef-api.md §10): export models larger than RAM.

An :class:`OffloadedTensor` is a ``torch.Tensor`` subclass with no storage of its own. It
references one tensor of a ``.safetensors`` checkpoint (file, key, stored dtype, shape)
and the dtype the model sees:

- any torch op on it *materializes* it as a zero-copy view of a private, copy-on-write
  map of just that tensor's bytes (converted with ``.to(dtype)`` when the dtypes differ),
  used for that op and dropped after it; so tracing, and the reference outputs check_io
  compares with, need memory only for the weights in use at once (inside a
  :class:`~fastnnef.tensor.residency.TensorResidencyPool` scope, the pool keeps values
  for their next uses, within its budget); a weight written as Q4_0 materializes as its
  Q4_0 values, computed by Rust block by block from the map straight into ``dtype`` (no
  f32 or packed copy), and an eager embedding lookup reads only the rows it selects;
- an eager f16 ``F.linear`` with an offloaded weight (bf16 too for a Q4_0 one) reads it
  from the map by blocks of rows, in f32 (through Q4_0 and back, block by block, for a
  Q4_0 weight), with no converted copy of the weight (``_half_linear_by_blocks``);
- ``torch.jit.trace`` records the parameter itself (a ``prim::GetAttr``), as for Q4_0
  weights, not a constant; inside :func:`trace_on_stand_ins` the trace gets a value-less
  stand-in of it and reads nothing (for callers that take reference outputs elsewhere);
- at export, the Rust sink streams the tensor from the checkpoint straight into its
  ``.dat`` member, 64 MiB of the file mapped at a time, converting the dtype (bf16/f16/f32)
  or quantizing to Q4_0 on the way; a tensor offloaded from a Q4_0 ``QTensor`` is its
  packed blocks, written as they are.

A :class:`ComposedOffloadedTensor` is one made of several checkpoint tensors, as
transformers stacks experts stored one tensor each into one parameter: ops get the
composed value, and the export writes that value (one parameter in memory at a time).

What binds checkpoint tensors to a model as ``OffloadedTensor``s is ``offload_load.py``
(``load_offloaded_checkpoint``, and the reference's ``t2n_load_checkpoint_and_dispatch``,
served at this path by fastnnef/compat/, with ``ctx_maybe_load_from_disk_as_offloaded``); the
``.safetensors`` dtype table and writer are
``safetensors_file.py``. What stays here is the class and what its torch hooks dispatch to
(materialization, the blocked f16 product, the trace stand-ins): split apart, each piece
would import the class and the class would import it back.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import math
import mmap
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, Self

import numpy as np
import torch
from torch.utils._pytree import tree_map

from fastnnef import _native
from fastnnef.exceptions import (
    T2NErrorCheckpoint,
    T2NErrorInvalidArgument,
    T2NErrorNotImplemented,
)
from fastnnef.log import get_logger
from fastnnef.reference_names import reference_name
from fastnnef.tensor.quant import QTensor, QTensorTractScaleOnly, check_q4_0_shape
from fastnnef.tensor.quant.packed import Q4_0, PackedFormat, of_encoding
from fastnnef.tensor.quant.qtract import FLOAT_DTYPE_NAMES, Q4_0_BLOCK_BYTES, Q4_0_GROUP
from fastnnef.tensor.safetensors_file import SAFETENSORS_DTYPES, PathLike, write_safetensors
from fastnnef.tensor.traced import traced_torch_function

log = get_logger()

_aten = torch.ops.aten

# Conversions the writer does on the way (Rust `dat` plans); others are refused up front.
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
# Ops returning the same tensor under another Python object keep it offloaded.
_SHARING_OPS = {_aten.detach.default, _aten.alias.default, _aten.clone.default}

DEFAULT_OFFLOAD_PREFIX = "t2n_offload_disk"


class MaterializationCache(Protocol):
    """What serves offloaded tensors' values inside a scope, instead of a fresh
    materialization per op: a :class:`~fastnnef.tensor.residency.TensorResidencyPool`."""

    def resolve(self, source: OffloadedTensor, device: torch.device | None = None) -> torch.Tensor:
        """``source``'s value on ``device`` (``None``: its own)."""
        ...


# The cache this context's materializations go through and the scope's device (None: each
# tensor's own). Owned here, where tensors materialize; residency.py sets it.
_ACTIVE_CACHE: contextvars.ContextVar[tuple[MaterializationCache, torch.device | None] | None] = (
    contextvars.ContextVar("fastnnef_tensor_residency", default=None)
)


def active_tensor_residency() -> tuple[MaterializationCache, torch.device | None] | None:
    """The pool whose :meth:`~fastnnef.tensor.residency.TensorResidencyPool.scope` is active
    in this context, and the scope's device (``None``: each tensor's own), or ``None``."""
    return _ACTIVE_CACHE.get()


@contextlib.contextmanager
def materialize_through(cache: MaterializationCache, device: torch.device | None = None) -> Iterator[None]:
    """Inside, offloaded tensors materialize through ``cache`` (on ``device`` if given), in
    this thread or asyncio task only; scopes nest, the innermost serves."""
    token = _ACTIVE_CACHE.set((cache, device))
    try:
        yield
    finally:
        _ACTIVE_CACHE.reset(token)


# Inside trace_on_stand_ins(): a trace gets value-less stand-ins for the weights.
_STAND_INS: contextvars.ContextVar[bool] = contextvars.ContextVar("fastnnef_trace_stand_ins", default=False)
# Results of ops on stand-ins alone from this many elements on stay stand-ins (a weight's
# view or cast); smaller ones, and those of ops with other inputs, are real tensors of zeros.
_STAND_IN_MIN_ELEMENTS = 1 << 20


@contextlib.contextmanager
def trace_on_stand_ins() -> Iterator[None]:
    """Inside, ``torch.jit.trace`` (in this thread or asyncio task) sees each offloaded
    module weight as a stand-in with its shape and dtype but no values: nothing is read
    from the checkpoint, and ops on it give zeros of the right shape (views and casts of
    a weight stay stand-ins). The graph recorded is the same; the values computed are
    not the model's, so the traced run's outputs are no reference: take those from an
    eager run. Use it only where the traced code's control flow does not depend on the
    weights' values (an op a stand-in cannot run on shapes alone reads the weight)."""
    token = _STAND_INS.set(True)
    try:
        yield
    finally:
        _STAND_INS.reset(token)


def on_stand_ins() -> bool:
    """Whether this thread or asyncio task is inside :func:`trace_on_stand_ins`: the
    ``torch.export`` front end then captures without the eager run that reads weights
    (``fx_graph/capture.py``)."""
    return _STAND_INS.get()


class _TraceStandIn(torch.Tensor):
    """A weight (or a view or cast of one) in a trace on stand-ins: shape, strides and
    dtype, no storage. ``realize`` computes its real value, for ops that need values."""

    realize: Callable[[], torch.Tensor]

    @staticmethod
    def __new__(cls, like: torch.Tensor, realize: Callable[[], torch.Tensor]) -> _TraceStandIn:
        self = torch.Tensor._make_wrapper_subclass(cls, like.shape, strides=like.stride(), dtype=like.dtype,
                                                   device=torch.device("cpu"), requires_grad=False)
        self.realize = realize
        return self

    # torch's stubs type these hooks more narrowly than the wrapper-subclass protocol uses them.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None,
    ) -> Any:
        kwargs = kwargs or {}

        def on_meta(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
            return a

        def real(a: Any) -> Any:
            return a.realize() if isinstance(a, _TraceStandIn) else a

        try:
            result = func(*tree_map(on_meta, args), **tree_map(on_meta, kwargs))
        except (NotImplementedError, RuntimeError):  # no meta kernel, or data-dependent: real values
            return func(*tree_map(real, args), **tree_map(real, kwargs))

        def realize() -> Any:
            return func(*tree_map(real, args), **tree_map(real, kwargs))

        # Only what is computed from weights alone stays a stand-in: whatever an input
        # (an activation) enters is a real tensor, as graph outputs must be.
        weights_only = all(isinstance(a, _TraceStandIn) for a in torch.utils._pytree.tree_leaves((args, kwargs))
                           if isinstance(a, torch.Tensor))
        flat, spec = torch.utils._pytree.tree_flatten(result)
        outputs = []
        for i, out in enumerate(flat):
            if isinstance(out, torch.Tensor):
                if weights_only and out.numel() >= _STAND_IN_MIN_ELEMENTS:
                    out = _TraceStandIn(out, functools.partial(_nth_leaf, realize, i))
                else:
                    out = torch.zeros(out.shape, dtype=out.dtype)
            outputs.append(out)
        return torch.utils._pytree.tree_unflatten(outputs, spec)


def _nth_leaf(compute: Callable[[], Any], i: int) -> torch.Tensor:
    """Output ``i`` of a dispatched op, computed on real values when a stand-in is realized."""
    return torch.utils._pytree.tree_flatten(compute())[0][i]


# Weight rows converted at a time by _half_linear_by_blocks: about 1 MiB of f32, in cache.
_LINEAR_BLOCK_ELEMENTS = 1 << 18
_HALVES = (torch.float16, torch.bfloat16)


def _streams_half_linear(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether ``F.linear(*args, **kwargs)`` is an eager product of half values (f16, or
    bf16 with a Q4_0 weight) with an offloaded 2-D weight of the same dtype, outside
    residency scopes: what :func:`_half_linear_by_blocks` computes. A plain bf16 weight
    stored in bf16 is not streamed: it materializes as a view of the map, no copy."""
    x = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    return (type(weight) is OffloadedTensor and not weight.packed
            and (weight.dtype == torch.float16 or (weight.q4_0 and weight.dtype in _HALVES))
            and weight.stored_dtype in _FLOATS and weight.dim() == 2
            and type(x) is torch.Tensor and x.dtype == weight.dtype and x.device.type == "cpu"
            and (bias is None or bias.dtype == weight.dtype)
            and torch._C._get_tracing_state() is None and active_tensor_residency() is None)


def _half_linear_by_blocks(input: torch.Tensor, weight: OffloadedTensor,
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` of half values (f16, bf16) with an offloaded weight of their dtype,
    without a converted copy of the weight: its rows go, a block of about 1 MiB at a time,
    from the checkpoint's map to f32, and f32 products accumulate them, rounded to the
    half dtype once, as torch's half products on the CPU do (f32 accumulation). A plain
    f16 weight: f32 weights through f16, the model's values; bf16 and f16 ones directly (a
    bf16 value is its f16 value but below 2**-17, where f16 keeps fewer bits, a
    difference under 2**-25). A Q4_0 weight: each block of rows through Q4_0 and back as
    :meth:`OffloadedTensor.lookup` reads rows (blocks of 32 never straddle rows), so the
    values are the whole tensor's Q4_0 values, and no Q4_0 copy of a vocabulary-sized head
    is ever held. Torch's f16 GEMM has no fast CPU kernel, and materializing a weight
    allocates and converts all of it: a few times slower, for the test bundles' forward
    of a large model. One thread: the blocks are small, and torch's thread pool spends
    more in waking than in computing."""
    mapped = weight.checkpoint.raw(weight.key)
    _read_ahead(mapped)
    raw = torch.from_numpy(mapped).view(weight.stored_dtype).reshape(weight.shape)
    out_features, in_features = weight.shape
    flat = input.reshape(-1, in_features).float()
    out = torch.empty(flat.shape[0], out_features)
    rows = max(1, _LINEAR_BLOCK_ELEMENTS // max(in_features, 1))
    wide = torch.empty(rows, in_features)
    part = torch.empty(flat.shape[0], rows)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for start in range(0, out_features, rows):
            block = raw[start:start + rows]
            n = block.shape[0]
            if weight.q4_0:
                block = _q4_0_round_trip(block).to(weight.dtype)
            elif block.dtype == torch.float32:
                block = block.to(torch.float16)
            wide[:n].copy_(block)
            torch.mm(flat, wide[:n].t(), out=part[:, :n])
            out[:, start:start + n] = part[:, :n]
        if bias is not None:
            out += bias.to_base_tensor() if isinstance(bias, OffloadedTensor) else bias
    finally:
        torch.set_num_threads(threads)
    return out.to(weight.dtype).reshape(*input.shape[:-1], out_features)


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_MADV_WILLNEED = 3


def _read_ahead(mapped: np.ndarray) -> None:
    """Ask the kernel to read all of a mapped tensor now (``MADV_WILLNEED``), so that a
    checkpoint not in the page cache streams from the disk at its full rate while the
    product computes, instead of one small read per page fault. Only a hint."""
    if _LIBC is None or not mapped.nbytes:
        return
    start = mapped.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE
    _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(mapped.ctypes.data + mapped.nbytes - start), _MADV_WILLNEED)


def _trace_stand_in(tensor: Any) -> torch.Tensor | None:
    """The stand-in of an offloaded module weight in a trace on stand-ins."""
    if not isinstance(tensor, OffloadedTensor):
        return None
    return _TraceStandIn(torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"), tensor.to_base_tensor)


def open_checkpoint(path: PathLike) -> _native.Checkpoint:
    """Open a ``.safetensors`` file, a ``*.safetensors.index.json`` or a directory holding
    one (headers only; malformed or truncated files raise ``T2NErrorCheckpoint`` naming
    the file and the tensor)."""
    return _native.Checkpoint(os.fspath(path))


class OffloadedTensor(torch.Tensor):
    """A tensor whose data stays in a ``.safetensors`` file until an op needs it.

    ``q4_0``: written as Q4_0 (quantized on the way unless ``packed``: the checkpoint
    tensor then holds the packed Q4_0 blocks of a tensor of ``packed_shape``, written as
    they are; see :meth:`from_original_tensor` of a Q4_0 ``QTensor``).
    """

    checkpoint: _native.Checkpoint
    key: str
    stored_dtype: torch.dtype
    q4_0: bool
    packed: bool
    nnef_name: str | None
    _owned_file: str | None

    @staticmethod
    def __new__(
        cls,
        checkpoint: _native.Checkpoint,
        key: str,
        dtype: torch.dtype | None = None,
        q4_0: bool = False,
        *,
        packed_shape: Sequence[int] | None = None,
    ) -> OffloadedTensor:
        name, shape, path = checkpoint.info(key)
        if packed_shape is not None:
            return cls._new_packed(checkpoint, key, dtype or torch.float32, tuple(packed_shape), name, shape, path)
        stored = SAFETENSORS_DTYPES.get(name)
        if stored is None:
            raise T2NErrorCheckpoint(
                f"tensor {key!r} in {path} has dtype {name}, which tract cannot load; convert the "
                "checkpoint to F32, F16 or BF16 first"
            )
        dtype = dtype or stored
        if dtype != stored and not (dtype in _FLOATS and stored in _FLOATS):
            raise T2NErrorCheckpoint(
                f"tensor {key!r} in {path} is {name} but the model expects {dtype}; only float16, "
                "bfloat16 and float32 convert into each other on the way"
            )
        if q4_0:
            check_q4_0_shape(tuple(shape))
            if dtype not in _FLOATS:
                raise T2NErrorInvalidArgument(f"tensor {key!r}: Q4_0 quantizes float tensors, not {dtype}")
        return cls._wrap(tuple(shape), dtype, checkpoint, key, stored, q4_0=q4_0, packed=False)

    @classmethod
    def _wrap(
        cls, shape: tuple[int, ...], dtype: torch.dtype, checkpoint: _native.Checkpoint, key: str,
        stored_dtype: torch.dtype, *, q4_0: bool, packed: bool,
    ) -> Self:
        """A ``shape``/``dtype`` tensor standing for ``key`` of ``checkpoint`` (nothing read)."""
        self = torch.Tensor._make_wrapper_subclass(
            cls, shape, dtype=dtype, device=torch.device("cpu"), requires_grad=False
        )
        self.checkpoint, self.key, self.stored_dtype = checkpoint, key, stored_dtype
        self.q4_0, self.packed = q4_0, packed
        self.nnef_name, self._owned_file = None, None
        return self

    @classmethod
    def _new_packed(
        cls, checkpoint: _native.Checkpoint, key: str, dtype: torch.dtype, shape: tuple[int, ...],
        stored_name: str, stored_shape: Sequence[int], path: str,
    ) -> OffloadedTensor:
        check_q4_0_shape(shape)
        nbytes = math.prod(shape) // Q4_0_GROUP * Q4_0_BLOCK_BYTES
        if stored_name != "U8" or list(stored_shape) != [nbytes]:
            raise T2NErrorCheckpoint(
                f"tensor {key!r} in {path} is {stored_name} {list(stored_shape)}; the Q4_0 blocks of a {shape} "
                f"tensor are U8 [{nbytes}]"
            )
        if dtype not in _FLOATS:
            raise T2NErrorInvalidArgument(
                f"tensor {key!r}: Q4_0 dequantizes to float16, bfloat16 or float32, not {dtype}")
        return cls._wrap(shape, dtype, checkpoint, key, torch.uint8, q4_0=True, packed=True)

    # --- reference API ------------------------------------------------------------------
    @classmethod
    def from_original_tensor(
        cls,
        tensor: torch.Tensor,
        name: str,
        offload_dir: PathLike | None = None,
        suffix_log_msg: str = "",
    ) -> OffloadedTensor:
        """Write ``tensor`` to ``<offload_dir>/<name>_<dtype>_<uuid>.safetensors`` and
        reference it (the file is deleted with the last reference). The default directory
        is a temporary one with prefix ``t2n_offload_disk``.

        A Q4_0 ``QTensorTractScaleOnly`` is written as its packed blocks (18 bytes per 32
        values) and stays Q4_0: ops dequantize them, exports write them as they are. Other
        ``QTensor`` s are written as the values they dequantize to (which is also what an
        export writes for them)."""
        while hasattr(tensor, "opaque_tensor"):  # an OpaqueTensorRef (opaque.py imports this module)
            tensor = tensor.opaque_tensor
        if isinstance(tensor, OffloadedTensor):
            return tensor
        directory = (Path(offload_dir) if offload_dir is not None
                     else Path(tempfile.mkdtemp(prefix=DEFAULT_OFFLOAD_PREFIX)))
        directory.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        kind = "q4_0" if isinstance(tensor, QTensorTractScaleOnly) else str(tensor.dtype).replace("torch.", "")
        path = directory / f"{safe}_{kind}_{uuid.uuid4().hex}.safetensors"
        if isinstance(tensor, QTensorTractScaleOnly):
            write_safetensors(path, {"q4_0_blocks": tensor.blocks})
            off = cls(open_checkpoint(path), "q4_0_blocks", tensor.dtype, packed_shape=tuple(tensor.shape))
        else:
            write_safetensors(path, {"tensor": tensor.decompress() if isinstance(tensor, QTensor) else tensor})
            off = cls(open_checkpoint(path), "tensor")
        log.debug("offloaded %s to %s%s", name, path, suffix_log_msg)
        off.nnef_name = name
        off._owned_file = str(path)
        _FILE_USERS[str(path)] = 1
        return off

    def to_base_tensor(self) -> torch.Tensor:
        """The values as a plain tensor (a view of the file's bytes when no conversion is
        needed; private memory: writing into it never changes the file). Inside a
        :class:`~fastnnef.tensor.residency.TensorResidencyPool` scope, the pool's (shared)
        value."""
        return self.reload()

    def reload(self, device: str | int | torch.device | None = None) -> torch.Tensor:
        """The reference's name for reading the values: :meth:`to_base_tensor`, moved to
        ``device`` when given (this tensor itself is unchanged: it stays on disk, with its
        dtype, including one set by ``.to(dtype)``). Inside a pool scope, the pool's value
        on ``device``, else on the scope's device."""
        active = active_tensor_residency()
        if active is not None:
            pool, scope_device = active
            return pool.resolve(self, torch.device(device) if device is not None else scope_device)
        values = self._materialize()
        return values if device is None else values.to(device)

    def packed_qtensor(self) -> QTensorTractScaleOnly:
        """For a ``packed`` tensor: a Q4_0 ``QTensor`` over its blocks, mapped from the
        file (read when used)."""
        if not self.packed:
            raise T2NErrorInvalidArgument(f"{self.key!r} is not stored as Q4_0 blocks")
        blocks = torch.from_numpy(self.checkpoint.raw(self.key))
        return QTensorTractScaleOnly._from_blocks(blocks, tuple(self.shape), self.dtype)

    def _materialize(self) -> torch.Tensor:
        if self.packed:
            return self.packed_qtensor().decompress()
        if self.q4_0:
            # Rust quantizes and dequantizes block by block from the file's map straight
            # into the values in ``dtype``: memory for those values only, as a plain cast.
            floats = self.checkpoint.q4_0_round_trip(self.key, FLOAT_DTYPE_NAMES[self.dtype])
            return _from_float_array(floats, self.dtype).reshape(self.shape)
        raw = torch.from_numpy(self.checkpoint.raw(self.key))
        values = raw.view(self.stored_dtype).reshape(self.shape)
        return values if values.dtype == self.dtype else values.to(self.dtype)

    # --- export ---------------------------------------------------------------------------
    def check(self, label: str, encoding: str) -> None:
        """Refuse, before anything is written, what the checkpoint cannot give as ``encoding``."""
        self.checkpoint.check(label, self.key, encoding)

    def streams_as(self, encoding: str) -> bool:
        """Whether the Rust writer streams this tensor from the checkpoint as ``encoding``
        (converting dtype or quantizing on the way). Not the floats of a bf16 model stored
        wider: Rust converts dtypes, it does not round through bf16 as torch did."""
        return (of_encoding(encoding) is not None or self.packed or self.dtype != torch.bfloat16
                or self.stored_dtype == torch.bfloat16)

    @property
    def packed_format(self) -> PackedFormat | None:
        """The packed format it is written in (quantized on the way, or its blocks as they
        are when ``packed``), ``None`` when written as plain elements."""
        return Q4_0 if self.q4_0 else None

    def written_values(self) -> torch.Tensor:
        """What the export writes when it does not stream: the values in ``dtype``, before
        any Q4_0 rounding (the writer quantizes). Memory for this one tensor."""
        raw = torch.from_numpy(self.checkpoint.raw(self.key)).view(self.stored_dtype).reshape(self.shape)
        return raw.to(self.dtype)

    def __del__(self) -> None:
        # The file written by from_original_tensor goes with the last tensor using it.
        owned = getattr(self, "_owned_file", None)
        if owned and not _other_owner_alive(owned, self):
            with contextlib.suppress(OSError):
                os.unlink(owned)

    def as_q4_0(self) -> OffloadedTensor:
        """The same checkpoint tensor, written as Q4_0 quantized on the way by the Rust
        writer (min-max per block of 32); torch computes with its Q4_0 values. Nothing is
        read or written now. Raises ``T2NErrorImpossibleQuantization`` for shapes Q4_0
        cannot hold."""
        if self.q4_0:
            return self
        return self._shallow(q4_0=True)

    def _shallow(self, dtype: torch.dtype | None = None, q4_0: bool | None = None) -> OffloadedTensor:
        if self.packed:
            new = OffloadedTensor(self.checkpoint, self.key, dtype or self.dtype, packed_shape=tuple(self.shape))
        else:
            new = OffloadedTensor(self.checkpoint, self.key, dtype or self.dtype, self.q4_0 if q4_0 is None else q4_0)
        new.nnef_name = self.nnef_name
        new._owned_file = self._owned_file
        if new._owned_file:
            _FILE_USERS[new._owned_file] = _FILE_USERS.get(new._owned_file, 1) + 1
        return new

    # torch's signature (its stub's, as mypy reads it, does not match its own code)
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        stored = "q4_0 blocks" if self.packed else self.stored_dtype
        return (
            f"OffloadedTensor(key={self.key!r}, shape={tuple(self.shape)}, dtype={self.dtype}, "
            f"stored={stored}, q4_0={self.q4_0}, file={self.checkpoint.info(self.key)[2]!r})"
        )

    # --- torch integration ----------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        if func is torch.nn.functional.linear and _streams_half_linear(args, kwargs or {}):
            return _half_linear_by_blocks(*args, **(kwargs or {}))
        return traced_torch_function(func, args, kwargs, OffloadedTensor, OffloadedTensor.to_base_tensor,
                                     _trace_stand_in if _STAND_INS.get() else None)

    # torch's stubs type Tensor.__torch_dispatch__ as the disabled impl, not as the
    # classmethod torch calls (this signature, from torch's docs).
    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _SHARING_OPS:
            return args[0]._shallow()
        if func is _aten._to_copy.default and _only_float_dtype_change(args[0], kwargs):
            return args[0]._shallow(kwargs["dtype"])  # converted on the way, still on disk
        for i, arg in enumerate(func._schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            if isinstance(value, OffloadedTensor) and arg.alias_info is not None and arg.alias_info.is_write:
                raise T2NErrorNotImplemented(
                    f"{func} writes into an offloaded tensor ({value.key!r}), whose data is a "
                    "checkpoint on disk; write into a materialized copy (t.to_base_tensor().clone())"
                )

        def plain(a: Any) -> Any:
            return a.to_base_tensor() if isinstance(a, OffloadedTensor) else a

        if func is _aten.embedding.default and type(args[0]) is OffloadedTensor and active_tensor_residency() is None:
            # A lookup reads its rows only: no copy of a vocabulary-sized table (often tied
            # to the LM head) per forward. A pool scope serves whole values instead; composed
            # and sliced tensors are not one checkpoint tensor, they are materialized.
            rest, rest_kwargs = tree_map(plain, args[1:]), tree_map(plain, kwargs)
            return args[0].lookup(lambda table: func(table, *rest, **rest_kwargs))
        return func(*tree_map(plain, args), **tree_map(plain, kwargs))

    def lookup(self, select_rows: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``select_rows(self.to_base_tensor())`` for a ``select_rows`` that picks whole rows
        (dim 0: an embedding lookup), reading only those rows from the file. Equal values:
        Q4_0 blocks never straddle rows, so the picked rows quantize as in the whole tensor."""
        if self.packed:
            return select_rows(self._materialize())
        table = torch.from_numpy(self.checkpoint.raw(self.key)).view(self.stored_dtype).reshape(self.shape)
        picked = select_rows(table)
        if self.q4_0:
            picked = _q4_0_round_trip(picked)
        return picked if picked.dtype == self.dtype else picked.to(self.dtype)


class ComposedOffloadedTensor(OffloadedTensor):
    """A parameter made of several checkpoint tensors, as transformers composes them at
    load (experts stored one tensor each, stacked into one parameter): the pieces of each
    group stacked along ``stack_dim``, then the groups concatenated along ``cat_dim``
    (``None``: one group). Nothing is read until an op needs the value, which is then
    composed from the pieces' maps: memory for one parameter at a time, never for the
    model. The export writes that value, one parameter at a time (``q4_0``: quantized by
    Rust as it goes out, as a plain tensor would be)."""

    groups: tuple[tuple[OffloadedTensor, ...], ...]
    stack_dim: int
    cat_dim: int | None
    _widths: tuple[int, ...]  # each group's extent along cat_dim

    @staticmethod
    def __new__(cls, *args: Any, **kwargs: Any) -> ComposedOffloadedTensor:
        raise T2NErrorInvalidArgument("build a ComposedOffloadedTensor with ComposedOffloadedTensor.compose()")

    @classmethod
    def compose(
        cls,
        groups: Sequence[Sequence[OffloadedTensor]],
        stack_dim: int,
        cat_dim: int | None,
        dtype: torch.dtype | None = None,
        q4_0: bool = False,
    ) -> ComposedOffloadedTensor:
        """``cat([stack(g, stack_dim) for g in groups], cat_dim)`` of pieces of one
        checkpoint, seen as ``dtype`` (the pieces' when None). Pieces whose shapes do not
        compose raise ``T2NErrorCheckpoint``."""
        pieces = [p for g in groups for p in g]
        if not pieces or any(not g for g in groups) or (cat_dim is None and len(groups) != 1):
            raise T2NErrorInvalidArgument("a composed tensor needs one non-empty group, or several with a cat_dim")
        if any(p.packed or p.q4_0 or p.checkpoint is not pieces[0].checkpoint for p in pieces):
            raise T2NErrorInvalidArgument("composed tensors are made of plain pieces of one checkpoint")
        dtype = dtype or pieces[0].dtype
        seen = tuple(tuple(p if p.dtype == dtype else p._shallow(dtype) for p in g) for g in groups)
        try:  # the shape torch would give, from meta stand-ins of the pieces
            stacked = [torch.stack([torch.empty(p.shape, device="meta") for p in g], stack_dim) for g in seen]
            shape = tuple((stacked[0] if cat_dim is None else torch.cat(stacked, cat_dim)).shape)
        except (RuntimeError, IndexError) as err:
            keys = ", ".join(f"{p.key} {list(p.shape)}" for p in pieces[:4])
            raise T2NErrorCheckpoint(f"checkpoint tensors {keys} ... do not compose into one tensor: {err}") from err
        if q4_0:
            check_q4_0_shape(shape)
        # The key names the data (residency pools compare it).
        stacks = ", ".join(f"stack([{', '.join(p.key for p in g)}], {stack_dim})" for g in groups)
        key = stacks if cat_dim is None else f"cat([{stacks}], {cat_dim})"
        self = cls._wrap(shape, dtype, pieces[0].checkpoint, key, dtype, q4_0=q4_0, packed=False)
        self.groups = seen
        self.stack_dim = stack_dim
        self.cat_dim = cat_dim
        self._widths = tuple(g.shape[cat_dim] for g in stacked) if cat_dim is not None else ()
        return self

    def composed_values(self) -> torch.Tensor:
        """The composed value before any Q4_0 rounding (what the export writes). Each piece
        is copied into its place in the result, so the memory needed is the result and one
        piece (not the pieces, their stacks and the result, as torch.stack/cat would)."""
        out = torch.empty(self.shape, dtype=self.dtype)
        offset = 0
        for i, group in enumerate(self.groups):
            region = out if self.cat_dim is None else out.narrow(self.cat_dim, offset, self._widths[i])
            offset += self._widths[i] if self.cat_dim is not None else 0
            for j, piece in enumerate(group):
                region.select(self.stack_dim, j).copy_(piece._materialize())
        return out

    def _materialize(self) -> torch.Tensor:
        values = self.composed_values()
        return _q4_0_round_trip(values) if self.q4_0 else values

    def check(self, label: str, encoding: str) -> None:
        """Refuse, before anything is written, what ``.dat`` cannot hold as ``encoding``
        (the pieces' dtypes were checked when they were made)."""
        _native.dat_payload_size(label, list(self.shape), encoding)

    def streams_as(self, encoding: str) -> bool:
        return False  # several checkpoint tensors make one .dat: written from the value

    @property
    def packed_format(self) -> PackedFormat | None:
        """The packed format it is written in (quantized on the way, or its blocks as they
        are when ``packed``), ``None`` when written as plain elements."""
        return Q4_0 if self.q4_0 else None

    def written_values(self) -> torch.Tensor:
        return self.composed_values()

    def _shallow(self, dtype: torch.dtype | None = None, q4_0: bool | None = None) -> ComposedOffloadedTensor:
        new = ComposedOffloadedTensor.compose(
            self.groups, self.stack_dim, self.cat_dim, dtype or self.dtype, self.q4_0 if q4_0 is None else q4_0
        )
        new.nnef_name = self.nnef_name
        return new

    # torch's signature (its stub's, as mypy reads it, does not match its own code)
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"ComposedOffloadedTensor({self.key}, shape={tuple(self.shape)}, dtype={self.dtype}, q4_0={self.q4_0})"


# Number of OffloadedTensor objects sharing a file written by from_original_tensor.
_FILE_USERS: dict[str, int] = {}


def _other_owner_alive(path: str, _tensor: OffloadedTensor) -> bool:
    left = _FILE_USERS.get(path, 1) - 1
    if left > 0:
        _FILE_USERS[path] = left
        return True
    _FILE_USERS.pop(path, None)
    return False


def _only_float_dtype_change(tensor: OffloadedTensor, kwargs: dict[str, Any]) -> bool:
    dtype = kwargs.get("dtype")
    device = kwargs.get("device")
    others = {k: v for k, v in kwargs.items() if k not in ("dtype", "device", "layout", "memory_format")}
    return (
        dtype in _FLOATS and tensor.dtype in _FLOATS and not others
        and (device is None or torch.device(device).type == "cpu")
        and kwargs.get("memory_format") in (None, torch.preserve_format)
    )


def _q4_0_round_trip(values: torch.Tensor) -> torch.Tensor:
    """``values`` through Q4_0 and back (tract's arithmetic), so torch computes with the
    weights tract will load; computed block by block in Rust, in ``values``' dtype (no
    packed blocks or f32 copy of the tensor)."""
    values = values.contiguous()
    if values.dtype == torch.bfloat16:
        back = _native.q4_0_round_trip(values.view(torch.int16).numpy(), bf16=True)
        return _from_float_array(back, torch.bfloat16)
    array = values.numpy() if values.dtype in _FLOATS else values.float().numpy()
    return torch.from_numpy(_native.q4_0_round_trip(array)).to(values.dtype)


def _from_float_array(array: Any, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over a float array from Rust (no copy): bfloat16 arrives as uint16 bits."""
    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if dtype == torch.bfloat16 else tensor


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
