"""Output datum types and shapes of NNEF operations, derived from their operands.

Handlers emit intermediate ops without restating shapes wherever a rule here applies:
elementwise ops with broadcasting, comparisons, ``select``, reductions, casts and the axis
ops (unsqueeze, squeeze, transpose, slice, concat, stack, tile, gather, matmul, einsum),
and conv with explicit padding. Each op's rule is named by its declaration in
nnef/op_table.py (whose ``infer`` applies it); an op without one needs its shape given.

Dims are ints or ``DimExpr`` sizes (``fastnnef.dim``: ``S``, ``P+S``, ``((S+1)/2)``), whose
arithmetic normalizes; ``UNKNOWN_DIM`` marks a dynamic dim whose expression was lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastnnef import dim
from fastnnef.dim import Size
from fastnnef.exceptions import T2NErrorConsistency
from fastnnef.nnef.graph import NTensor

UNKNOWN_DIM = dim.UNKNOWN

Shape = tuple[Size, ...]


# --- dims -------------------------------------------------------------------------------
def is_static(d: Size) -> bool:
    return isinstance(d, int)


def unknown(d: Size) -> bool:
    """A dynamic dim whose expression the IR lost."""
    return isinstance(d, dim.DimExpr) and d.is_unknown


def same_size(a: Size, b: Size) -> bool:
    """Whether two dims are provably one size: equal ints or equal expressions. An unknown
    dim equals nothing, not even another unknown (two lost expressions may differ)."""
    return a == b and not unknown(a)


def plus(d: Size, k: int) -> Size:
    """``d + k`` for a static or symbolic dim."""
    return d + k


def add_dims(a: Size, b: Size) -> Size:
    """``a + b`` for two dims (a concatenation's length)."""
    return a + b


def times(d: Size, k: int) -> Size:
    """``d * k`` (0 for ``k == 0``, even for an unknown ``d``)."""
    return 0 if k == 0 else d * k


def volume(shape: Sequence[Size]) -> Size:
    """The element count of ``shape`` (unknown when one of its dims is)."""
    size: Size = 1
    for d in shape:
        size = size * d
    return size


def broadcast_dim(a: Size, b: Size, kind: str = "") -> Size:
    """The broadcast of two dims (``dim.broadcast``: a 1 yields; a static size wins over a
    symbol), the IR's rule for dynamic marks too."""
    try:
        return dim.broadcast(a, b)
    except ValueError:
        raise T2NErrorConsistency(f"{kind or 'op'}: operand dims {a} and {b} do not broadcast") from None


def broadcast_shapes(shapes: Sequence[Sequence[Size]], kind: str = "") -> Shape:
    """NNEF/tract broadcasting: shapes aligned on their trailing dims (``dim.broadcast_all``)."""
    try:
        return dim.broadcast_all(shapes)
    except ValueError as err:
        raise T2NErrorConsistency(f"{kind or 'op'}: operand {err}") from None


# --- rules -------------------------------------------------------------------------------
# A rule maps ``(kind, args, attrs)`` to the ``(datum type, shape)`` of the op's single
# output, or ``None`` where the operands do not fix it. Which op has which rule is declared
# in nnef/op_table.py, nowhere else.
Rule = Callable[[str, Sequence[Any], dict[str, Any]], tuple[str, Shape] | None]


def _tensors(args: Sequence[Any]) -> list[NTensor]:
    return [a for a in args if isinstance(a, NTensor)]


def _shape(a: Any) -> Shape:
    return a.shape if isinstance(a, NTensor) else ()


def _slice_len(b: Size, e: Size, stride: int) -> Size:
    if isinstance(b, int) and isinstance(e, int):
        return max(0, -(-(e - b) // stride))
    if stride == 1 and isinstance(b, int):
        return e - b
    return UNKNOWN_DIM


def _concat(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    parts = args[0] if args and isinstance(args[0], (list, tuple)) else []
    if not parts or not all(isinstance(p, NTensor) for p in parts):
        return None
    axis = attrs["axis"]
    if kind == "stack":
        return parts[0].dtype, parts[0].shape[:axis] + (len(parts),) + parts[0].shape[axis:]
    length: Size = 0
    for p in parts:
        length = add_dims(length, p.shape[axis])
    return parts[0].dtype, parts[0].shape[:axis] + (length,) + parts[0].shape[axis + 1:]


def _einsum(args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """``tract_core_einsum``: each output letter's dim (unit dims broadcast), in ``acc``."""
    parts = args[0] if args and isinstance(args[0], (list, tuple)) else []
    specs, _, out = str(attrs["expr"]).partition("->")
    if not parts or len(specs.split(",")) != len(parts) or not all(isinstance(p, NTensor) for p in parts):
        return None
    dims: dict[str, Size] = {}
    for spec, part in zip(specs.split(","), parts):
        if len(spec) != part.rank:
            return None
        for letter, d in zip(spec, part.shape):
            dims[letter] = broadcast_dim(dims.get(letter, 1), d, "tract_core_einsum")
    if not all(c in dims for c in out):
        return None
    return attrs.get("acc") or parts[0].dtype, tuple(dims[c] for c in out)


def _conv_shape(x: NTensor, w: NTensor, attrs: dict[str, Any]) -> Shape:
    """NNEF ``conv`` with explicit padding: ``[N, C_out, (n + pads - d*(k-1) - 1) / s + 1 ...]``."""
    spatial: list[Size] = []
    for i, n in enumerate(x.shape[2:]):
        before, after = attrs["padding"][i].items
        stride = attrs["stride"][i] if attrs.get("stride") else 1
        dilation = attrs["dilation"][i] if attrs.get("dilation") else 1
        spatial.append(dim.windows(n, w.shape[2 + i], stride, dilation, before + after))
    return (x.shape[0], w.shape[0]) + tuple(spatial)


def elementwise(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """Unary and binary ops: the first tensor's type, the operands' broadcast shape."""
    tensors = _tensors(args)
    if not tensors:
        return None
    return tensors[0].dtype, broadcast_shapes([_shape(a) for a in args], kind)


def comparison(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    if not _tensors(args):
        return None
    return "bool", broadcast_shapes([_shape(a) for a in args], kind)


def select(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    branches = _tensors(args[1:])
    if not branches:
        return None
    return branches[0].dtype, broadcast_shapes([_shape(a) for a in args], kind)


def concat(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """``concat`` and ``stack``."""
    return _concat(kind, args, attrs)


def einsum(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    return _einsum(args, attrs)


def cast(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    tensors = _tensors(args)
    return attrs["to"], tensors[0].shape if tensors else ()


def _on_first(rule: Callable[[str, NTensor, list[NTensor], dict[str, Any]], tuple[str, Shape] | None]) -> Rule:
    """A rule over the first tensor operand (and the others); ``None`` without one."""

    def apply(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
        tensors = _tensors(args)
        return rule(kind, tensors[0], tensors, attrs) if tensors else None

    apply.__name__ = apply.__qualname__ = rule.__name__
    apply.__doc__ = rule.__doc__
    return apply


def _reduced(x: NTensor, attrs: dict[str, Any]) -> Shape:
    axes = set(attrs.get("axes", ()))
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


@_on_first
def reduction(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """A reduction keeps its input's type; reduced axes become 1."""
    return x.dtype, _reduced(x, attrs)


@_on_first
def index_reduction(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """``argmax_reduce`` / ``argmin_reduce``: i64 indices."""
    return "i64", _reduced(x, attrs)


@_on_first
def unsqueeze(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    shape = list(x.shape)
    for axis in sorted(attrs["axes"]):
        shape.insert(axis, 1)
    return x.dtype, tuple(shape)


@_on_first
def squeeze(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    axes = set(attrs["axes"])
    return x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes)


@_on_first
def transpose(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    perm = list(attrs["axes"])
    return x.dtype, tuple(x.shape[p] for p in perm) + tuple(x.shape[len(perm):])


@_on_first
def slice_(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    shape = list(x.shape)
    strides = attrs.get("stride") or [1] * len(attrs["axes"])
    for axis, b, e, s in zip(attrs["axes"], attrs["begin"], attrs["end"], strides):
        shape[axis] = _slice_len(b, e, s)
    return x.dtype, tuple(shape)


@_on_first
def tile(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    return x.dtype, tuple(times(d, r) for d, r in zip(x.shape, attrs["repeats"]))


@_on_first
def matmul(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    if len(tensors) != 2 or min(t.rank for t in tensors) < 2:
        return None
    a, b = tensors
    rows = a.shape[-1] if attrs.get("transposeA") else a.shape[-2]
    cols = b.shape[-2] if attrs.get("transposeB") else b.shape[-1]
    return a.dtype, broadcast_shapes([a.shape[:-2], b.shape[:-2]], kind) + (rows, cols)


@_on_first
def gather(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    if len(tensors) != 2:
        return None
    axis = attrs["axis"]
    idx = tensors[1]
    return attrs.get("datum_type", x.dtype), x.shape[:axis] + idx.shape + x.shape[axis + 1:]


@_on_first
def gather_elements(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    return (x.dtype, tensors[1].shape) if len(tensors) == 2 else None


@_on_first
def same_as_input(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """The input's type and shape (scatters, FFT)."""
    return x.dtype, x.shape


@_on_first
def broadcast(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    if not isinstance(attrs.get("shape"), list):
        return None
    return x.dtype, broadcast_shapes([x.shape, tuple(attrs["shape"])], kind)


@_on_first
def grid_sample(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    return (x.dtype, x.shape[:2] + tensors[1].shape[1:-1]) if len(tensors) == 2 else None


@_on_first
def shape_of(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    return "tdim", (x.rank,)


@_on_first
def conv(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """With explicit padding only."""
    if len(tensors) < 2 or not attrs.get("padding"):
        return None
    return x.dtype, _conv_shape(x, tensors[1], attrs)


@_on_first
def downsample(kind: str, x: NTensor, tensors: list[NTensor], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    stride = attrs["stride"]
    shape = list(x.shape)
    n = shape[attrs["axis"]]
    if stride != -1:
        shape[attrs["axis"]] = _slice_len(attrs.get("modulo", 0), n, abs(stride))
    return x.dtype, tuple(shape)
