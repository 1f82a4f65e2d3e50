"""Linear algebra: linear, matmul/mm/bmm, addmm/baddbmm, einsum; dot/vdot/inner/mv/outer,
tensordot, addmv/addr, chain_matmul/multi_dot, kron, cross, vector and matrix norms
(linalg_norm, matrix_norm, frobenius_norm), renorm, vander, bilinear; _grouped_mm (the
experts of mixture-of-experts layers, rows grouped by expert)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import is_static, times
from fastnnef.op.aten import _math as m
from fastnnef.op.aten._common import accumulation_dtype, finish, literal, operands
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler


def torch_matmul(ctx: OpContext, a: NTensor, b: NTensor, transpose_b: bool = False, final: bool = True) -> NTensor:
    """torch.matmul semantics (1-D promotion, leading batch broadcast) on NNEF matmul.

    Integer products are computed in f64 (tract's matmul has no integer kernels), exact
    while sums stay below 2**53, and cast back. Under ``force_linear_accumulation_in_f32``
    f16 products are a ``tract_core_einsum`` accumulating in f32: with ``final`` the result
    is cast back to f16, without it stays f32 for the caller (which adds its bias, then ends
    with ``finish``)."""
    out_dtype = ctx.out_dtype()
    dtype = out_dtype if out_dtype in FLOAT_DTYPES else "f64"
    acc = accumulation_dtype(ctx, dtype)
    a, b = ctx.cast(a, dtype), ctx.cast(b, dtype)
    squeeze: list[int] = []
    if a.rank == 1:
        a = ctx.tmp("unsqueeze", [a], {"axes": [0]}, suffix="a2d")
        squeeze.append(-2)
    if b.rank == 1:
        b = ctx.tmp("unsqueeze", [b], {"axes": [1]}, suffix="b2d")
        squeeze.append(-1)
    rank = max(a.rank, b.rank)
    a, b = ctx.to_rank(a, rank), ctx.to_rank(b, rank)
    args: list[Any]
    attrs: dict[str, Any]
    if acc != dtype:
        batch = "abcdefgh"[: rank - 2]
        expr = f"{batch}mk,{batch}{'nk' if transpose_b else 'kn'}->{batch}mn"
        kind, args, attrs = "tract_core_einsum", [[a, b]], {"expr": expr, "acc": acc}
    else:
        kind, args, attrs = "matmul", [a, b], {"transposeA": False, "transposeB": transpose_b}
    if squeeze:
        axes = sorted(ax % rank for ax in squeeze)
        kind, args, attrs = "squeeze", [ctx.tmp(kind, args, attrs, suffix="mm")], {"axes": axes}
    if not final:
        product = ctx.tmp(kind, args, attrs, suffix="mm")
        return product if dtype == out_dtype else ctx.cast(product, out_dtype)
    return finish(ctx, kind, args, acc, attrs)


@handler("aten::matmul", "aten::mm", "aten::bmm", args="t t")
def matmul(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::matmul(Tensor self, Tensor other) -> Tensor"""
    return torch_matmul(ctx, a, b)


@handler("aten::linear", args="t t t?")
def linear(ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None) -> NTensor:
    """aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if bias is None:
        return torch_matmul(ctx, x, weight, transpose_b=True)
    y = torch_matmul(ctx, x, weight, transpose_b=True, final=False)
    (b,) = operands(ctx, [bias], y.dtype, y.rank)
    return finish(ctx, "add", [y, b], y)


@handler("aten::addmm", "aten::baddbmm", "aten::addbmm", args="t t t f? f?")
def addmm(ctx: OpContext, bias: NTensor, a: NTensor, b: NTensor, beta: float | None, alpha: float | None) -> NTensor:
    """aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    if ctx.kind == "aten::addbmm":
        raise ctx.unsupported("addbmm (a sum over the batch) is not supported", "use bmm(...).sum(0) + bias")
    y = torch_matmul(ctx, a, b, final=False)
    if alpha not in (None, 1.0):
        y = ctx.tmp("mul", [y, float(alpha)], suffix="alpha")
    (bias,) = operands(ctx, [bias], y.dtype, y.rank)
    if beta not in (None, 1.0):
        bias = ctx.tmp("mul", [bias, float(beta)], suffix="beta")
    return finish(ctx, "add", [y, bias], y)


@handler("aten::einsum", args="s L I?")
def einsum(ctx: OpContext, equation: str, tensors: list[NTensor], _path: list[int] | None) -> NTensor:
    """aten::einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"""
    dtype = ctx.out_dtype()
    expr = equation.replace(" ", "")
    if "->" not in expr:  # implicit output: '...' first, then letters seen once, in alphabetical order
        letters = expr.replace(",", "").replace(".", "")
        expr += "->" + ("..." if "..." in expr else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    if "..." in expr:
        expr = _spell_ellipsis(ctx, expr, tensors)
    inputs = [ctx.cast(t, dtype) for t in tensors]
    acc = accumulation_dtype(ctx, dtype)
    return finish(ctx, "tract_core_einsum", [inputs], acc, {"expr": expr, "acc": acc})


def _spell_ellipsis(ctx: OpContext, expr: str, tensors: Sequence[NTensor]) -> str:
    """``expr`` with each '...' replaced by letters of its own: the broadcast batch axes,
    aligned on the right across operands as torch aligns them (tract's einsum has no '...')."""
    inputs, output = expr.split("->")
    terms = inputs.split(",")
    if len(terms) != len(tensors):
        raise ctx.unsupported(f"einsum equation {expr!r} for {len(tensors)} operands")
    spans = [t.rank - len(term.replace("...", "")) if "..." in term else 0 for term, t in zip(terms, tensors)]
    free = [c for c in _LETTERS + _LETTERS.upper() if c not in expr]
    if max(spans) > len(free) or min(spans) < 0:
        raise ctx.unsupported(f"einsum equation {expr!r} for operands of ranks {[t.rank for t in tensors]}")
    batch = "".join(free[: max(spans)])
    spelled = [term.replace("...", batch[len(batch) - span:] if span else "") for term, span in zip(terms, spans)]
    return ",".join(spelled) + "->" + output.replace("...", batch)


# --- products of vectors and tensors, norms, kron, cross, vander ---------------------------
# tract's matmul and einsum kernels take floats only (an i64 operand panics in tract-linalg):
# integer contractions multiply with broadcasting and sum instead.
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _product_calc(ctx: OpContext) -> m.Calc:
    out = ctx.out_dtype()
    return m.Calc(ctx, m.float_compute(ctx) if out in FLOAT_DTYPES else out)


def _tensordot(c: m.Calc, a: NTensor, b: NTensor, dims_a: Sequence[int], dims_b: Sequence[int]) -> NTensor:
    """Contract ``a``'s axes ``dims_a`` with ``b``'s ``dims_b``: the free axes of ``a``, then
    those of ``b`` (torch.tensordot), as an intermediate in ``c``'s dtype."""
    ctx = c.ctx
    a, b = ctx.cast(a, c.dtype), ctx.cast(b, c.dtype)
    dims_a = [ctx.axis(d, a.rank) for d in dims_a]
    dims_b = [ctx.axis(d, b.rank) for d in dims_b]
    free_a = [i for i in range(a.rank) if i not in dims_a]
    free_b = [i for i in range(b.rank) if i not in dims_b]
    if c.dtype in FLOAT_DTYPES:
        if a.rank + len(free_b) > len(_LETTERS):
            raise ctx.unsupported(f"a contraction of rank-{a.rank} and rank-{b.rank} tensors")
        la = _LETTERS[:a.rank]
        lb = [""] * b.rank
        for da, db in zip(dims_a, dims_b):
            lb[db] = la[da]
        extra = iter(_LETTERS[a.rank:])
        for i in free_b:
            lb[i] = next(extra)
        expr = f"{la},{''.join(lb)}->{''.join(la[i] for i in free_a)}{''.join(lb[i] for i in free_b)}"
        return c("tract_core_einsum", [a, b], expr=expr, acc=c.dtype)
    # [free_a..., 1 (per free_b)..., K...] * [1 (per free_a)..., free_b..., K...], summed over K.
    ta = c("transpose", a, axes=free_a + dims_a) if free_a + dims_a != list(range(a.rank)) else a
    tb = c("transpose", b, axes=free_b + dims_b) if free_b + dims_b != list(range(b.rank)) else b
    if free_b:
        ta = c("unsqueeze", ta, axes=list(range(len(free_a), len(free_a) + len(free_b))))
    if free_a:
        tb = c("unsqueeze", tb, axes=list(range(len(free_a))))
    out_rank = len(free_a) + len(free_b)
    if not dims_a:
        return c("mul", ta, tb)
    contracted = list(range(out_rank, out_rank + len(dims_a)))
    return c("squeeze", c("sum_reduce", c("mul", ta, tb), axes=contracted), axes=contracted)


@handler("aten::dot", "aten::vdot", args="t t")
def dot(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::dot(Tensor self, Tensor tensor) -> Tensor  (and vdot: the same for real tensors)"""
    c = _product_calc(ctx)
    return c.result(_tensordot(c, a, b, [0], [0]))


@handler("aten::inner", args="t t")
def inner(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::inner(Tensor self, Tensor other) -> Tensor  (contracts the last axes; a product with a 0-d operand)"""
    c = _product_calc(ctx)
    if a.rank == 0 or b.rank == 0:
        return c.out("mul", *c.inputs(a, b))
    return c.result(_tensordot(c, a, b, [-1], [-1]))


@handler("aten::tensordot", args="t t I I")
def tensordot(ctx: OpContext, a: NTensor, b: NTensor, dims_a: list[int], dims_b: list[int]) -> NTensor:
    """aten::tensordot(Tensor self, Tensor other, int[] dims_self, int[] dims_other) -> Tensor"""
    c = _product_calc(ctx)
    return c.result(_tensordot(c, a, b, dims_a, dims_b))


@handler("aten::mv", args="t t")
def mv(ctx: OpContext, mat: NTensor, vec: NTensor) -> NTensor:
    """aten::mv(Tensor self, Tensor vec) -> Tensor"""
    c = _product_calc(ctx)
    return c.result(_tensordot(c, mat, vec, [1], [0]))


def _outer(c: m.Calc, a: NTensor, b: NTensor) -> NTensor:
    """``a[:, None] * b[None, :]``: a broadcast product, so a dynamic length stays dynamic."""
    a, b = c.ctx.cast(a, c.dtype), c.ctx.cast(b, c.dtype)
    return c("mul", c("unsqueeze", a, axes=[1]), c("unsqueeze", b, axes=[0]))


@handler("aten::outer", "aten::ger", args="t t")
def outer(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::outer(Tensor self, Tensor vec2) -> Tensor  (and ger)"""
    c = m.Calc(ctx, ctx.out_dtype())
    a, b = ctx.cast(a, c.dtype), ctx.cast(b, c.dtype)
    return c.out("mul", c("unsqueeze", a, axes=[1]), c("unsqueeze", b, axes=[0]))


def _scaled_sum(c: m.Calc, bias: NTensor, product: NTensor, beta: float | None, alpha: float | None) -> NTensor:
    """``beta * bias + alpha * product`` as the node output; ``beta == 0`` ignores ``bias``
    (NaN in it included), as torch does."""
    if alpha is not None and alpha != 1:
        product = c("mul", product, literal(alpha, c.dtype))
    if beta == 0:
        return c.result(product)
    (bias,) = c.inputs(bias, rank=product.rank)
    if beta is not None and beta != 1:
        bias = c("mul", bias, literal(beta, c.dtype))
    return c.out("add", bias, product)


@handler("aten::addmv", args="t t t f? f?")
def addmv(ctx: OpContext, bias: NTensor, mat: NTensor, vec: NTensor, beta: float | None,
          alpha: float | None) -> NTensor:
    """aten::addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    c = _product_calc(ctx)
    return _scaled_sum(c, bias, _tensordot(c, mat, vec, [1], [0]), beta, alpha)


@handler("aten::addr", args="t t t f? f?")
def addr(ctx: OpContext, bias: NTensor, a: NTensor, b: NTensor, beta: float | None, alpha: float | None) -> NTensor:
    """aten::addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    if ctx.out_dtype() == "bool":
        raise ctx.unsupported("addr of bool tensors (torch's logical form)", "cast the vectors to an integer type")
    c = _product_calc(ctx)
    return _scaled_sum(c, bias, _outer(c, a, b), beta, alpha)


@handler("aten::chain_matmul", "aten::linalg_multi_dot", args="L")
def multi_dot(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::linalg_multi_dot(Tensor[] tensors) -> Tensor  (and chain_matmul; a 1-D first or last operand is a row or column vector)"""  # noqa: E501
    if not tensors:
        raise ctx.unsupported("a product of no matrices")
    c = _product_calc(ctx)
    acc = ctx.cast(tensors[0], c.dtype)
    for t in tensors[1:]:
        acc = _tensordot(c, acc, t, [acc.rank - 1], [0])
    return c.result(acc)


@handler("aten::kron", args="t t")
def kron(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::kron(Tensor self, Tensor other) -> Tensor  (out[i*m + j] = a[i] * b[j] on every axis)"""
    c = m.Calc(ctx, ctx.out_dtype())
    rank = max(a.rank, b.rank)
    a, b = c.inputs(a, b, rank=rank)
    # Interleave: a as [a0, 1, a1, 1, ...], b as [1, b0, 1, b1, ...]; the product's axis pairs merge.
    wide = c("mul", c("unsqueeze", a, axes=list(range(1, 2 * rank, 2))),
             c("unsqueeze", b, axes=list(range(0, 2 * rank, 2))))
    sizes: list[Size] = []
    for da, db in zip(a.shape, b.shape):
        if is_static(da) and is_static(db):
            sizes.append(int(da) * int(db))
        elif is_static(da) or is_static(db):
            sizes.append(times(db, int(da)) if is_static(da) else times(da, int(db)))
        else:
            raise ctx.unsupported("kron of two dynamic axes", "make one operand's axes static")
    return ctx.emit("reshape", [wide], {"shape": sizes}, shape=sizes)


@handler("aten::cross", "aten::linalg_cross", args="t t i?")
def cross(ctx: OpContext, a: NTensor, b: NTensor, dim: int | None) -> NTensor:
    """aten::linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> Tensor  (and cross, whose dim=None is the first axis of size 3)"""  # noqa: E501
    out_shape = ctx.out_shape()
    if dim is None:
        dim = next((i for i, d in enumerate(out_shape) if d == 3), -1)
    c = _product_calc(ctx)
    a, b = c.inputs(a, b)
    axis = ctx.axis(dim, len(out_shape))

    def part(t: NTensor, k: int) -> NTensor:
        return c("slice", t, axes=[axis], begin=[k], end=[k + 1])

    pa, pb = [part(a, k) for k in range(3)], [part(b, k) for k in range(3)]
    comps = [c("sub", c("mul", pa[i], pb[j]), c("mul", pa[j], pb[i])) for i, j in ((1, 2), (2, 0), (0, 1))]
    return c.out("concat", comps, axis=axis)


def _vector_or_matrix(ctx: OpContext, x: NTensor, ord: object, dims: list[int] | None) -> bool:
    """linalg.norm's rule: a matrix norm for a string ord, two dims, or an ord with no dims
    on a 2-D input; a vector norm otherwise."""
    if isinstance(ord, str):
        return True
    if dims is not None:
        return len(dims) == 2
    return ord is not None and x.rank == 2


def _matrix_norm(ctx: OpContext, x: NTensor, ord: object, dims: Sequence[int], keepdim: bool) -> NTensor:
    if len(dims) != 2:
        raise ctx.unsupported(f"a matrix norm over {len(dims)} dims", "give two dims")
    c = m.Calc(ctx, m.float_compute(ctx))
    x = ctx.cast(x, c.dtype)
    rows, cols = (ctx.axis(d, x.rank) for d in dims)
    if rows == cols:
        raise ctx.unsupported("a matrix norm over twice the same dim")
    if ord == "fro":
        r = m.norm(c, x, 2, sorted((rows, cols)))
    elif ord in (1, -1, math.inf, -math.inf):
        # ord 1: the largest column sum of |x| (summed along the rows), inf: the largest row sum.
        summed, over = (rows, cols) if abs(ord) == 1 else (cols, rows)
        sums = c("sum_reduce", c("abs", x), axes=[summed])
        r = c("max_reduce" if ord > 0 else "min_reduce", sums, axes=[over])
    else:
        raise ctx.unsupported(
            f"matrix norm ord={ord!r}",
            "it needs singular values and tract has no SVD; 'fro', 1, -1, inf and -inf are supported",
        )
    if keepdim:
        return c.result(r)
    return c.out("squeeze", r, axes=sorted((rows, cols)))


def _vector_norm(ctx: OpContext, x: NTensor, ord: float | None, dims: list[int] | None, keepdim: bool) -> NTensor:
    c = m.Calc(ctx, m.float_compute(ctx))
    x = ctx.cast(x, c.dtype)
    axes = sorted({ctx.axis(d, x.rank) for d in dims}) if dims else list(range(x.rank))
    r = m.norm(c, x, 2.0 if ord is None else float(ord), axes)
    if keepdim or not axes:
        return c.result(r)
    return c.out("squeeze", r, axes=axes)


@handler("aten::linalg_norm", args="t n I? b n?")
def linalg_norm(ctx: OpContext, x: NTensor, ord: object, dims: list[int] | None, keepdim: bool,
                _dtype: object) -> NTensor:
    """aten::linalg_norm(Tensor self, Scalar? ord=None, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (also .ord_str)"""  # noqa: E501
    if _vector_or_matrix(ctx, x, ord, dims):
        return _matrix_norm(ctx, x, "fro" if ord is None else ord, dims or [-2, -1], keepdim)
    return _vector_norm(ctx, x, ord, dims, keepdim)  # type: ignore[arg-type]


@handler("aten::linalg_matrix_norm", args="t n I b n?")
def linalg_matrix_norm(ctx: OpContext, x: NTensor, ord: object, dims: list[int], keepdim: bool,
                       _dtype: object) -> NTensor:
    """aten::linalg_matrix_norm(Tensor self, Scalar ord, int[] dim=[-2,-1], bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (also .str_ord)"""  # noqa: E501
    return _matrix_norm(ctx, x, ord, dims, keepdim)


@handler("aten::frobenius_norm", args="t I b")
def frobenius_norm(ctx: OpContext, x: NTensor, dims: list[int], keepdim: bool) -> NTensor:
    """aten::frobenius_norm.dim(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"""
    return _vector_norm(ctx, x, 2.0, dims, keepdim)


@handler("aten::renorm", args="t f i f")
def renorm(ctx: OpContext, x: NTensor, p: float, dim: int, maxnorm: float) -> NTensor:
    """aten::renorm(Tensor self, Scalar p, int dim, Scalar maxnorm) -> Tensor  (each slice
    along dim whose p-norm exceeds maxnorm is scaled to maxnorm / (norm + 1e-7))"""
    c = m.Calc(ctx, m.float_compute(ctx))
    x = ctx.cast(x, c.dtype)
    axis = ctx.axis(dim, x.rank)
    n = m.norm(c, x, p, [a for a in range(x.rank) if a != axis])
    factor = c.select(c("gt", n, maxnorm), c("div", maxnorm, c("add", n, 1e-7)), 1.0)
    return c.out("mul", x, factor)


@handler("aten::vander", args="t i? b")
def vander(ctx: OpContext, x: NTensor, n: int | None, increasing: bool) -> NTensor:
    """aten::vander(Tensor x, int? N=None, bool increasing=False) -> Tensor"""
    return _vander(ctx, x, n, increasing)


@handler("aten::linalg_vander", args="t i?")
def linalg_vander(ctx: OpContext, x: NTensor, n: int | None) -> NTensor:
    """aten::linalg_vander(Tensor x, *, SymInt? N=None) -> Tensor  (increasing powers, batched)"""
    return _vander(ctx, x, n, True)


def _vander(ctx: OpContext, x: NTensor, n: int | None, increasing: bool) -> NTensor:
    """The powers ``x^0 .. x^(N-1)`` on a new last axis, by repeated products (exact for
    integers, and for negative bases)."""
    c = m.Calc(ctx, ctx.out_dtype())
    x = ctx.cast(x, c.dtype)
    if n is None:
        ctx.static(x, [x.rank - 1], "vander without N")
        n = int(x.shape[-1])
    if n < 1:
        raise ctx.unsupported(f"vander with N={n}", "give N >= 1")
    powers = [c("tract_core_cast", c("not", c("lt", x, x)), to=c.dtype)]  # ones, NaN included
    # Always power * x, never x * x: tract rewrites that as Square, which has no integer kernel.
    for _ in range(n - 1):
        powers.append(c("mul", powers[-1], x))
    if not increasing:
        powers.reverse()
    return ctx.emit("stack", [powers], {"axis": x.rank})


@handler("aten::bilinear", args="t t t t?")
def bilinear(ctx: OpContext, x1: NTensor, x2: NTensor, weight: NTensor, bias: NTensor | None) -> NTensor:
    """aten::bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor  (y_o = x1 W_o x2 + b_o)"""  # noqa: E501
    c = m.Calc(ctx, m.float_compute(ctx))
    rank = max(x1.rank, x2.rank)
    x1, x2 = (ctx.to_rank(ctx.cast(t, c.dtype), rank) for t in (x1, x2))
    batch = "abcdefgh"[:rank - 1]
    if len(batch) != rank - 1:
        raise ctx.unsupported(f"bilinear on rank-{rank} inputs")
    y = c("tract_core_einsum", [x1, ctx.cast(weight, c.dtype), x2], expr=f"{batch}i,oij,{batch}j->{batch}o",
          acc=c.dtype)
    if bias is None:
        return c.result(y)
    (b,) = c.inputs(bias, rank=y.rank)
    return c.out("add", y, b)


@handler("aten::_grouped_mm", args="t t t? t? *")
def grouped_mm(ctx: OpContext, x: NTensor, weights: NTensor, offs: NTensor | None, bias: NTensor | None) -> NTensor:
    """aten::_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor"""  # noqa: E501
    # transformers' grouped experts: rows of x sorted by expert, offs the end of each
    # expert's rows (histc + cumsum). Every expert runs on every row and each row keeps
    # its own expert's result: E times the arithmetic of the routed rows, with no
    # data-dependent shape (a row past the last end, which torch leaves undefined, is 0).
    if offs is None or x.rank != 2 or weights.rank != 3 or offs.rank != 1:
        raise ctx.unsupported(
            f"_grouped_mm of a rank-{x.rank} input by rank-{weights.rank} weights"
            f"{'' if offs is not None else ' without offsets'}",
            "only the 2-D input x 3-D experts form (mixture-of-experts layers) is exported",
        )
    dtype = ctx.out_dtype() if ctx.out_dtype() in FLOAT_DTYPES else "f32"
    experts = weights.shape[0]
    if not is_static(experts):
        raise ctx.unsupported("_grouped_mm with a dynamic number of experts")
    rows = x.shape[0]
    every = ctx.tmp("matmul", [ctx.tmp("unsqueeze", [ctx.cast(x, dtype)], {"axes": [0]}, suffix="x3"),
                               ctx.cast(weights, dtype)], {"transposeA": False, "transposeB": False},
                    dtype=dtype, shape=(experts, rows, weights.shape[2]), suffix="every")  # [E, S, N]
    if bias is not None:
        every = ctx.tmp("add", [every, ctx.tmp("unsqueeze", [ctx.cast(bias, dtype)], {"axes": [1]}, suffix="bias3")],
                        suffix="biased")
    # The expert of row i: how many ends are <= i.
    position = ctx.tmp("tract_core_range", [0, rows, 1], dtype="i64", shape=(rows,), suffix="row")
    ends = ctx.tmp("unsqueeze", [ctx.cast(offs, "i64")], {"axes": [0]}, suffix="ends")  # [1, E]
    passed = ctx.tmp("le", [ends, ctx.tmp("unsqueeze", [position], {"axes": [1]}, suffix="rowcol")], suffix="passed")
    expert = ctx.tmp("sum_reduce", [ctx.tmp("tract_core_cast", [passed], {"to": "i64"}, suffix="passedn")],
                     {"axes": [1]}, suffix="expert")  # [S, 1]
    ids = ctx.constant(torch.arange(int(experts), dtype=torch.int64).reshape(int(experts), 1, 1), suffix="experts")
    own = ctx.tmp("eq", [ctx.tmp("unsqueeze", [expert], {"axes": [0]}, suffix="expert3"), ids], suffix="own")
    kept = ctx.tmp("mul", [every, ctx.tmp("tract_core_cast", [own], {"to": dtype}, suffix="ownf")], suffix="kept")
    total = ctx.tmp("sum_reduce", [kept], {"axes": [0]}, suffix="total")
    out = ctx.tmp("squeeze", [total], {"axes": [0]}, suffix="rows")
    return (ctx.emit("copy", [out]) if ctx.out_dtype() == dtype
            else ctx.emit("tract_core_cast", [out], {"to": ctx.out_dtype()}))
