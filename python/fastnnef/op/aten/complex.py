"""Complex tensors: view_as_real/view_as_complex, real/imag/abs/angle, polar/complex,
conjugation, and the elementwise, matmul, reduction and shape ops that complex graphs use
(RoPE written with ``torch.polar`` and a complex product, spectrogram magnitudes).

A complex value is a real tensor with a trailing (re, im) axis of 2, tract's convention
for ``tract_core_fft`` / ``tract_core_stft``; its datum type is its parts' (op/builder.py).
A node with complex values only reaches handlers registered with ``complex=True``
(op/registry.py). The shape ops here resolve torch's dims against the *logical* rank (the
pair axis excluded) and then reuse the real handlers, which see the pair as one more
trailing axis.
"""

from __future__ import annotations

import math

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import broadcast_shapes, unknown
from fastnnef.op.aten import creation, indexing, linalg, pool, reduce, shape
from fastnnef.op.aten._common import torch_dtype, typed_scalar
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

# A real part or an imaginary part: a tensor, a Python number, or None for an exact zero.
Part = NTensor | float | None


# --- reading complex inputs ---------------------------------------------------------------
def is_complex(ctx: OpContext, index: int) -> bool:
    """Whether node input ``index`` is a complex tensor."""
    dtype = ctx.input_dtype(index)
    return dtype is not None and dtype.is_complex


def logical_rank(ctx: OpContext, index: int = 0) -> int:
    """torch's rank of node input ``index`` (a complex value's pair axis excluded)."""
    return len(ctx.traced_shape(index))


def out_rank(ctx: OpContext) -> int:
    """torch's rank of the node's output."""
    return ctx.out_rank()


def part(ctx: OpContext, z: NTensor, which: int, tag: str = "") -> NTensor:
    """The real (``which=0``) or imaginary (1) part of complex ``z``."""
    axis = z.rank - 1
    name = ("re" if which == 0 else "im") + tag
    s = ctx.tmp("slice", [z], {"axes": [axis], "begin": [which], "end": [which + 1]}, suffix=f"{name}_pair")
    return ctx.tmp("squeeze", [s], {"axes": [axis]}, suffix=name)


def parts(ctx: OpContext, z: NTensor, tag: str = "") -> tuple[NTensor, NTensor]:
    """(real part, imaginary part) of complex ``z``."""
    return part(ctx, z, 0, tag), part(ctx, z, 1, tag)


def to_complex(ctx: OpContext, x: NTensor, final: bool = False) -> NTensor:
    """Real ``x`` as a complex value with a zero imaginary part."""
    u = ctx.tmp("unsqueeze", [x], {"axes": [x.rank]}, suffix="pair")
    attrs = {"padding": [Tuple((0, 0))] * x.rank + [Tuple((0, 1))], "border": "constant", "value": 0.0}
    if final:
        return ctx.emit("pad", [u], attrs)
    return ctx.tmp("pad", [u], attrs, dtype=x.dtype, shape=x.shape + (2,), suffix="complex")


def _operand(ctx: OpContext, index: int) -> tuple[Part, Part]:
    """Node input ``index`` (a complex or real tensor, or a number) as (re, im) parts in
    the output's computation dtype."""
    v = ctx.arg(index, "v")
    dtype = ctx.out_dtype()
    if not isinstance(v, NTensor):
        if isinstance(v, complex):
            return v.real or None, v.imag or None
        if isinstance(v, (int, float, bool)):
            return float(v), None
        raise ctx.unsupported(f"input {index} is {v!r}, not a number or a tensor")
    t = ctx.cast(v, dtype)
    if is_complex(ctx, index):
        return parts(ctx, t, str(index))
    return t, None


# --- arithmetic on parts (None is an exact zero) --------------------------------------------
def _align(ctx: OpContext, a: Part, rank: int) -> Part:
    return ctx.to_rank(a, rank) if isinstance(a, NTensor) else a


def _binary(ctx: OpContext, kind: str, a: Part, b: Part, tag: str) -> Part:
    """``kind(a, b)`` over parts, folding zeros and numbers."""
    if kind in ("add", "sub"):
        if b is None or (not isinstance(b, NTensor) and b == 0):
            return a
        if a is None or (not isinstance(a, NTensor) and a == 0):
            return b if kind == "add" else _neg(ctx, b, tag)
    if kind == "mul":
        if a is None or b is None:
            return None
        if not isinstance(b, NTensor) and b == 1:
            return a
        if not isinstance(a, NTensor) and a == 1:
            return b
    if kind == "div" and a is None:
        return None
    if not isinstance(a, NTensor) and not isinstance(b, NTensor):
        return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[kind]  # type: ignore[operator]
    rank = max(x.rank for x in (a, b) if isinstance(x, NTensor))
    return ctx.tmp(kind, [_align(ctx, a, rank), _align(ctx, b, rank)], suffix=tag)


def _neg(ctx: OpContext, a: Part, tag: str) -> Part:
    if a is None:
        return None
    if isinstance(a, NTensor):
        return ctx.tmp("neg", [a], suffix=tag)
    return -a


def _tensor_part(ctx: OpContext, a: Part, like: NTensor) -> NTensor:
    """A part as a tensor: numbers and zeros take the shape of the other part."""
    if isinstance(a, NTensor):
        return a
    return ctx.tmp("add", [ctx.tmp("mul", [like, 0.0], suffix="zero"), float(a or 0.0)], suffix="const")


def _finish_parts(ctx: OpContext, re: Part, im: Part) -> NTensor:
    """The node's complex output from its parts, broadcast to one shape."""
    tensors = [p for p in (re, im) if isinstance(p, NTensor)]
    if not tensors:
        raise ctx.unsupported("a complex value made of constants only")
    rank = out_rank(ctx)
    re_t, im_t = (ctx.to_rank(_tensor_part(ctx, p, tensors[0]), rank) for p in (re, im))
    target = broadcast_shapes([re_t.shape, im_t.shape])
    if any(unknown(d) for d in target) and re_t.shape != im_t.shape:
        raise ctx.unsupported("a complex result whose parts broadcast along a dynamic axis of unknown size")
    re_t, im_t = (
        t if t.shape == target else ctx.tmp("tract_core_broadcast", [t], {"shape": list(target)}, suffix="bcast")
        for t in (re_t, im_t)
    )
    return ctx.emit("stack", [[re_t, im_t]], {"axis": rank})


# --- complex-only ops -----------------------------------------------------------------------
@handler("aten::view_as_real", args="t", complex=True)
def view_as_real(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::view_as_real(Tensor(a) self) -> Tensor(a)  (the pair axis is already there)"""
    return ctx.emit("copy", [z])


@handler("aten::view_as_complex", args="t", complex=True)
def view_as_complex(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::view_as_complex(Tensor(a) self) -> Tensor(a)  (the last axis of 2 is the pair)"""
    return ctx.emit("copy", [x])


@handler("aten::real", args="t", complex=True)
def real(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::real(Tensor(a) self) -> Tensor(a)"""
    if not is_complex(ctx, 0):
        return ctx.emit("copy", [z])
    s = ctx.tmp("slice", [z], {"axes": [z.rank - 1], "begin": [0], "end": [1]}, suffix="pair")
    return ctx.emit("squeeze", [s], {"axes": [z.rank - 1]})


@handler("aten::imag", args="t", complex=True)
def imag(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::imag(Tensor(a) self) -> Tensor(a)"""
    s = ctx.tmp("slice", [z], {"axes": [z.rank - 1], "begin": [1], "end": [2]}, suffix="pair")
    return ctx.emit("squeeze", [s], {"axes": [z.rank - 1]})


@handler("aten::abs", args="t", complex=True)
def abs_(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::abs(Tensor self) -> Tensor  (complex: the magnitude sqrt(re² + im²), real)"""
    axis = z.rank - 1
    power = ctx.tmp("sum_reduce", [ctx.tmp("sqr", [z], suffix="sq")], {"axes": [axis]}, suffix="power")
    return ctx.emit("squeeze", [ctx.tmp("sqrt", [power], suffix="magnitude")], {"axes": [axis]})


@handler("aten::sgn", args="t", complex=True)
def sgn(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::sgn(Tensor self) -> Tensor  (complex: z / |z|, 0 at 0; real: the sign)"""
    if not is_complex(ctx, 0):
        return ctx.emit("sign", [ctx.cast(z, ctx.out_dtype())])
    axis = z.rank - 1
    power = ctx.tmp("sum_reduce", [ctx.tmp("sqr", [z], suffix="sq")], {"axes": [axis]}, suffix="power")
    magnitude = ctx.tmp("sqrt", [power], suffix="magnitude")
    is_zero = ctx.tmp("eq", [magnitude, 0.0], suffix="zero")
    safe = ctx.tmp("select", [is_zero, typed_scalar(ctx, 1.0, z.dtype), magnitude], suffix="divisor")
    return ctx.emit("div", [z, safe])


def _atan2(ctx: OpContext, y: NTensor, x: NTensor) -> NTensor:
    """atan2(y, x) in (-pi, pi] from NNEF's atan: atan(y/x), shifted by ±pi in the left
    half-plane, and 0 at the origin (torch's angle(0) = 0)."""
    dtype = y.dtype
    base = ctx.tmp("atan", [ctx.tmp("div", [y, x], suffix="ratio")], suffix="atan")
    below = ctx.tmp("lt", [y, 0.0], suffix="below")
    shift = ctx.tmp("select", [below, typed_scalar(ctx, -math.pi, dtype), typed_scalar(ctx, math.pi, dtype)],
                    dtype=dtype, shape=y.shape, suffix="shift")
    turned = ctx.tmp("add", [base, shift], suffix="turned")
    half = ctx.tmp("select", [ctx.tmp("lt", [x, 0.0], suffix="left"), turned, base], suffix="half")
    origin = ctx.tmp("and", [ctx.tmp("eq", [x, 0.0], suffix="x0"), ctx.tmp("eq", [y, 0.0], suffix="y0")],
                     suffix="origin")
    return ctx.emit("select", [origin, typed_scalar(ctx, 0.0, dtype), half])


@handler("aten::angle", args="t", complex=True)
def angle(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::angle(Tensor self) -> Tensor  (atan2(imag, real); of a real tensor: pi below 0, else 0)"""
    dtype = ctx.out_dtype()
    if not is_complex(ctx, 0):
        below = ctx.tmp("lt", [ctx.cast(z, dtype), 0.0], suffix="neg")
        return ctx.emit("select", [below, typed_scalar(ctx, math.pi, dtype), typed_scalar(ctx, 0.0, dtype)])
    re, im = parts(ctx, z)
    return _atan2(ctx, im, re)


@handler("aten::polar", args="t t", complex=True)
def polar(ctx: OpContext, magnitude_: NTensor, phase: NTensor) -> NTensor:
    """aten::polar(Tensor abs, Tensor angle) -> Tensor"""
    dtype = ctx.out_dtype()
    rank = out_rank(ctx)
    r, theta = (ctx.to_rank(ctx.cast(t, dtype), rank) for t in (magnitude_, phase))
    re = ctx.tmp("mul", [r, ctx.tmp("cos", [theta], suffix="cos")], suffix="re")
    im = ctx.tmp("mul", [r, ctx.tmp("sin", [theta], suffix="sin")], suffix="im")
    return _finish_parts(ctx, re, im)


@handler("aten::complex", args="t t", complex=True)
def complex_(ctx: OpContext, re: NTensor, im: NTensor) -> NTensor:
    """aten::complex(Tensor real, Tensor imag) -> Tensor"""
    dtype = ctx.out_dtype()
    return _finish_parts(ctx, ctx.cast(re, dtype), ctx.cast(im, dtype))


def conjugate(ctx: OpContext, z: NTensor, final: bool = True) -> NTensor:
    """re - i·im: the pair times (1, -1)."""
    # Rank-matched: tract 0.23.9's optimizer mis-splits a rank-1 [2] operand over this axis.
    values = torch.tensor([1.0, -1.0], dtype=torch_dtype(z.dtype)).reshape([1] * (z.rank - 1) + [2])
    sign = ctx.constant(values, label=f"complex_conj_sign_{z.dtype}_rank{z.rank}")
    if final:
        return ctx.emit("mul", [z, sign])
    return ctx.tmp("mul", [z, sign], suffix="conj")


@handler("aten::conj", "aten::conj_physical", "aten::_conj", "aten::_conj_physical", args="t", complex=True)
def conj(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::conj(Tensor(a) self) -> Tensor(a)  (materialized: the graph has no conjugate bit)"""
    if not is_complex(ctx, 0):
        return ctx.emit("copy", [z])
    return conjugate(ctx, z)


# --- elementwise --------------------------------------------------------------------------
def _sum(ctx: OpContext, kind: str, alpha: float, first: int = 0) -> NTensor:
    """``x kind alpha·y`` with x the node input ``first`` and y the other (rsub: first=1)."""
    (ar, ai), (br, bi) = _operand(ctx, first), _operand(ctx, 1 - first)
    if alpha != 1:
        br, bi = _binary(ctx, "mul", br, float(alpha), "alpha_re"), _binary(ctx, "mul", bi, float(alpha), "alpha_im")
    return _finish_parts(ctx, _binary(ctx, kind, ar, br, "re"), _binary(ctx, kind, ai, bi, "im"))


@handler("aten::add", args="_ _ f?", complex=True)
def add(ctx: OpContext, alpha: float | None) -> NTensor:
    """aten::add(Tensor self, Tensor other, Scalar alpha=1) -> Tensor  (complex)"""
    return _sum(ctx, "add", 1.0 if alpha is None else alpha)


@handler("aten::sub", args="_ _ f?", complex=True)
def sub(ctx: OpContext, alpha: float | None) -> NTensor:
    """aten::sub(Tensor self, Tensor other, Scalar alpha=1) -> Tensor  (complex)"""
    return _sum(ctx, "sub", 1.0 if alpha is None else alpha)


@handler("aten::rsub", args="_ _ f?", complex=True)
def rsub(ctx: OpContext, alpha: float | None) -> NTensor:
    """aten::rsub(Tensor self, Scalar other, Scalar alpha=1) -> Tensor  (complex: other - self*alpha)"""
    return _sum(ctx, "sub", 1.0 if alpha is None else alpha, first=1)


@handler("aten::mul", "aten::multiply", args="_ _", complex=True)
def mul(ctx: OpContext) -> NTensor:
    """aten::mul(Tensor self, Tensor other) -> Tensor  ((a+bi)(c+di) = (ac-bd) + (ad+bc)i)"""
    (a, b), (c, d) = _operand(ctx, 0), _operand(ctx, 1)
    re = _binary(ctx, "sub", _binary(ctx, "mul", a, c, "ac"), _binary(ctx, "mul", b, d, "bd"), "re")
    im = _binary(ctx, "add", _binary(ctx, "mul", a, d, "ad"), _binary(ctx, "mul", b, c, "bc"), "im")
    return _finish_parts(ctx, re, im)


@handler("aten::div", "aten::divide", "aten::true_divide", args="_ _ s?", complex=True)
def div(ctx: OpContext, rounding_mode: str | None) -> NTensor:
    """aten::div(Tensor self, Tensor other) -> Tensor  ((a+bi)/(c+di) = ((ac+bd) + (bc-ad)i) / (c²+d²))"""
    if rounding_mode is not None:
        raise ctx.unsupported(f"complex division with rounding_mode={rounding_mode!r}")
    (a, b), (c, d) = _operand(ctx, 0), _operand(ctx, 1)
    if d is None:  # by a real number or tensor: each part
        return _finish_parts(ctx, _binary(ctx, "div", a, c, "re"), _binary(ctx, "div", b, c, "im"))
    den = _binary(ctx, "add", _binary(ctx, "mul", c, c, "cc"), _binary(ctx, "mul", d, d, "dd"), "den")
    re = _binary(ctx, "add", _binary(ctx, "mul", a, c, "ac"), _binary(ctx, "mul", b, d, "bd"), "num_re")
    im = _binary(ctx, "sub", _binary(ctx, "mul", b, c, "bc"), _binary(ctx, "mul", a, d, "ad"), "num_im")
    return _finish_parts(ctx, _binary(ctx, "div", re, den, "re"), _binary(ctx, "div", im, den, "im"))


@handler("aten::neg", "aten::negative", args="t", complex=True)
def neg(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::neg(Tensor self) -> Tensor  (complex: both parts)"""
    return ctx.emit("neg", [z])


@handler("aten::exp", args="t", complex=True)
def exp(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::exp(Tensor self) -> Tensor  (complex: e^re · (cos im + i sin im))"""
    re, im = parts(ctx, z)
    scale = ctx.tmp("exp", [re], suffix="scale")
    return _finish_parts(ctx, ctx.tmp("mul", [scale, ctx.tmp("cos", [im], suffix="cos")], suffix="re_out"),
                         ctx.tmp("mul", [scale, ctx.tmp("sin", [im], suffix="sin")], suffix="im_out"))


@handler("aten::matmul", "aten::mm", "aten::bmm", args="_ _", complex=True)
def matmul(ctx: OpContext) -> NTensor:
    """aten::matmul(Tensor self, Tensor other) -> Tensor  ((A+Bi)(C+Di) = (AC-BD) + (AD+BC)i)"""
    if logical_rank(ctx, 0) < 2 or logical_rank(ctx, 1) < 2:
        raise ctx.unsupported("complex matmul with a 1-D operand", "unsqueeze it to a matrix first")
    (a, b), (c, d) = _operand(ctx, 0), _operand(ctx, 1)

    def mm(x: Part, y: Part) -> Part:
        if x is None or y is None:
            return None
        assert isinstance(x, NTensor) and isinstance(y, NTensor)
        return linalg.torch_matmul(ctx, x, y, final=False)

    re = _binary(ctx, "sub", mm(a, c), mm(b, d), "re")
    im = _binary(ctx, "add", mm(a, d), mm(b, c), "im")
    return _finish_parts(ctx, re, im)


# --- reductions -----------------------------------------------------------------------------
def _reduce(ctx: OpContext, kind: str, z: NTensor, dims: list[int] | None, keepdim: bool | None) -> NTensor:
    """``kind`` over torch's dims (none or empty: every axis but the pair's)."""
    if not reduce.dim_form(ctx):  # the (self, dtype) overloads reduce every axis
        dims, keepdim = None, False
    rank = logical_rank(ctx)
    axes = sorted({ctx.axis(d, rank) for d in dims}) if dims else list(range(rank))
    return reduce.reduce_to_output(ctx, kind, z, axes, bool(keepdim), ctx.out_dtype())


@handler("aten::sum", args="t I? b? n?", complex=True)
def sum_(ctx: OpContext, z: NTensor, dims: list[int] | None, keepdim: bool | None, _dtype: object) -> NTensor:
    """aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (complex)"""  # noqa: E501
    return _reduce(ctx, "sum_reduce", z, dims, keepdim)


@handler("aten::mean", args="t I? b? n?", complex=True)
def mean(ctx: OpContext, z: NTensor, dims: list[int] | None, keepdim: bool | None, _dtype: object) -> NTensor:
    """aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (complex)"""
    return _reduce(ctx, "mean_reduce", z, dims, keepdim)


# --- shape ops: torch's dims against the logical rank, then the real handlers -----------------
@handler("aten::view", "aten::reshape", "aten::_reshape_alias", "aten::flatten", "aten::unflatten",
         "aten::view_as", "aten::reshape_as", args="t *", complex=True)
def reshape(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)  (complex: to the traced shape, pair kept last)"""
    return shape.reshape(ctx, z)


@handler("aten::expand_as", "aten::broadcast_to", args="t *", complex=True)
def expand_as(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::expand_as(Tensor(a) self, Tensor other) -> Tensor(a)  (complex: to the traced shape)"""
    return shape.expand_as(ctx, z)


@handler("aten::permute", args="t I", complex=True)
def permute(ctx: OpContext, z: NTensor, dims: list[int]) -> NTensor:
    """aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)  (complex)"""
    rank = logical_rank(ctx)
    return shape.permute(ctx, z, [ctx.axis(d, rank) for d in dims] + [rank])


@handler("aten::transpose", "aten::swapaxes", "aten::swapdims", args="t i i", complex=True)
def transpose(ctx: OpContext, z: NTensor, a: int, b: int) -> NTensor:
    """aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)  (complex)"""
    rank = logical_rank(ctx)
    return shape.transpose(ctx, z, ctx.axis(a, rank), ctx.axis(b, rank))


@handler("aten::t", "aten::numpy_T", args="t", complex=True)
def t(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::t(Tensor(a) self) -> Tensor(a)  (complex)"""
    rank = logical_rank(ctx)
    return shape.permute(ctx, z, list(range(rank))[::-1] + [rank])


@handler("aten::squeeze", args="t I?", complex=True)
def squeeze(ctx: OpContext, z: NTensor, dims: list[int] | None) -> NTensor:
    """aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)  (complex; the pair axis is never 1)"""
    rank = logical_rank(ctx)
    return shape.squeeze(ctx, z, None if dims is None else [ctx.axis(d, max(rank, 1)) for d in dims])


@handler("aten::unsqueeze", args="t i", complex=True)
def unsqueeze(ctx: OpContext, z: NTensor, dim: int) -> NTensor:
    """aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)  (complex)"""
    return shape.unsqueeze(ctx, z, ctx.axis(dim, logical_rank(ctx) + 1))


@handler("aten::expand", args="t D *", complex=True)
def expand(ctx: OpContext, z: NTensor, sizes: list[Size]) -> NTensor:
    """aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)  (complex)"""
    return shape.expand(ctx, z, [*sizes, 2])


def _complex_items(ctx: OpContext, tensors: list[NTensor]) -> list[NTensor]:
    """List items as complex values (torch promotes real items of a complex cat/stack)."""
    return [
        t if dtype is not None and dtype.is_complex else to_complex(ctx, ctx.cast(t, ctx.out_dtype()))
        for t, dtype in zip(tensors, ctx.item_dtypes(0))
    ]


@handler("aten::cat", "aten::concat", "aten::concatenate", args="L i", complex=True)
def cat(ctx: OpContext, tensors: list[NTensor], dim: int) -> NTensor:
    """aten::cat(Tensor[] tensors, int dim=0) -> Tensor  (complex)"""
    return shape.cat(ctx, _complex_items(ctx, tensors), ctx.axis(dim, out_rank(ctx)))


@handler("aten::stack", args="L i", complex=True)
def stack(ctx: OpContext, tensors: list[NTensor], dim: int) -> NTensor:
    """aten::stack(Tensor[] tensors, int dim=0) -> Tensor  (complex)"""
    return shape.stack(ctx, _complex_items(ctx, tensors), ctx.axis(dim, out_rank(ctx)))


@handler("aten::split", "aten::split_with_sizes", "aten::chunk", "aten::tensor_split", "aten::unsafe_chunk",
         "aten::unsafe_split", "aten::unsafe_split_with_sizes", args="t _ i", complex=True)
def split(ctx: OpContext, z: NTensor, dim: int) -> list[NTensor]:
    """aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]  (complex)"""
    return shape.split(ctx, z, ctx.axis(dim, logical_rank(ctx)))


@handler("aten::unbind", args="t i", complex=True)
def unbind(ctx: OpContext, z: NTensor, dim: int) -> list[NTensor]:
    """aten::unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]  (complex)"""
    return shape.unbind(ctx, z, ctx.axis(dim, logical_rank(ctx)))


@handler("aten::slice", args="t i D? D? i", complex=True)
def slice_(ctx: OpContext, z: NTensor, dim: int, start: list[Size] | None, end: list[Size] | None,
           step: int) -> NTensor:
    """aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)  (complex)"""  # noqa: E501
    return indexing.slice_(ctx, z, ctx.axis(dim, logical_rank(ctx)), start, end, step)


@handler("aten::select", args="t i D", complex=True)
def select(ctx: OpContext, z: NTensor, dim: int, index: list[Size]) -> NTensor:
    """aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)  (complex)"""
    return indexing.select(ctx, z, ctx.axis(dim, logical_rank(ctx)), index)


@handler("aten::narrow", args="t i D D", complex=True)
def narrow(ctx: OpContext, z: NTensor, dim: int, start: list[Size], length: list[Size]) -> NTensor:
    """aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)  (complex)"""
    return indexing.narrow(ctx, z, ctx.axis(dim, logical_rank(ctx)), start, length)


@handler("aten::index_select", args="t i t", complex=True)
def index_select(ctx: OpContext, z: NTensor, dim: int, index: NTensor) -> NTensor:
    """aten::index_select(Tensor self, int dim, Tensor index) -> Tensor  (complex)"""
    return indexing.index_select(ctx, z, ctx.axis(dim, logical_rank(ctx)), index)


@handler("aten::flip", args="t I", complex=True)
def flip(ctx: OpContext, z: NTensor, dims: list[int]) -> NTensor:
    """aten::flip(Tensor self, int[] dims) -> Tensor  (complex)"""
    rank = logical_rank(ctx)
    return indexing.flip(ctx, z, [ctx.axis(d, rank) for d in dims])


@handler("aten::roll", args="t I I", complex=True)
def roll(ctx: OpContext, z: NTensor, shifts: list[int], dims: list[int]) -> NTensor:
    """aten::roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor  (complex)"""
    if not dims:
        raise ctx.unsupported("roll of a flattened complex tensor (no dims)", "give the dims to roll along")
    rank = logical_rank(ctx)
    return indexing.roll(ctx, z, shifts, [ctx.axis(d, rank) for d in dims])


@handler("aten::pad", args="t I s? f?", complex=True)
def pad(ctx: OpContext, z: NTensor, padding: list[int], mode: str | None, value: float | None) -> NTensor:
    """aten::pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor  (complex)"""
    if value:
        raise ctx.unsupported(f"padding a complex tensor with {value}", "pad with zeros")
    # torch's flat pad list starts at the last axis: the pair axis comes before it.
    return pool.pad_tensor(ctx, z, [0, 0, *padding], mode or "constant", None)


@handler("aten::constant_pad_nd", args="t I f?", complex=True)
def constant_pad_nd(ctx: OpContext, z: NTensor, padding: list[int], value: float | None) -> NTensor:
    """aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor  (complex)"""
    return pad(ctx, z, padding, "constant", value)


@handler("aten::to", "aten::type_as", "aten::_to_copy", "aten::to_dtype", args="t *", complex=True)
def to(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::to.dtype(Tensor(a) self, ScalarType dtype, ...) -> Tensor(a)  (to, from or between complex dtypes)"""
    out_complex = ctx.out_torch_dtype().is_complex
    if out_complex and not is_complex(ctx, 0):
        return to_complex(ctx, ctx.cast(z, ctx.out_dtype()), final=True)
    if not out_complex:  # torch drops the imaginary part (with a warning)
        return creation.to(ctx, part(ctx, z, 0))
    return creation.to(ctx, z)
