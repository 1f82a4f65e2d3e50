"""Dynamic dimensions of the IR: which output dims of an op vary with a dynamic axis.

The builder (``ir_builder.py``) calls ``propagate_dyn`` on every op it records. Every op
kind that may take a dynamic dim has a rule, in one of two tables: ``SHAPE_RULES``
(``ir_dynamic_shape.py``) for the shape ops over their first input (views, reshapes,
slices, pads, fills, reductions, matmul, conv...), ``_KIND_RULES`` here for the others,
over the whole op (elementwise ops by broadcasting, ops keeping their input's dims,
linear, chunks, recurrent layers, pools, module calls by their extractor...). The marks
are sizes over the axes' symbols (``fastnnef.dim``) where they can be written. An op whose
kind has no rule (or whose rule cannot tell) gets every output dim marked ``UNKNOWN``: a
handler that needs a concrete size then refuses it clearly instead of trusting a guess.

Rules place dims by the op's arguments (positions, size lists), never by matching traced
sizes where a dynamic dim is concerned: an axis traced at 1 matches every unit dim, and any
traced size may equal a merged dim by chance. Broadcasting is ``dim.broadcast_all``, the
rule nnef/shapes.py applies to the NNEF ops.

Over ~800 lines: one rule per op family, each short, found by its kind in ``_KIND_RULES``;
splitting the table would scatter the one list of kinds that have a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fastnnef.dim import UNKNOWN, DimExpr, Size, broadcast, broadcast_all, windows
from fastnnef.log import get_logger
from fastnnef.torch_graph.ir_data import CUSTOMOP_KIND, Const, IROp, ListValue, SymInt, TensorValue
from fastnnef.torch_graph.ir_dynamic_shape import (
    SHAPE_RULES,
    DynRule,
    const_ints,
    flat_items,
    int_expr,
    mark,
    per_axis,
    size_list_marks,
    size_of,
    tensor_inputs,
    volume_mark,
)

__all__ = ["DynRule", "const_ints", "propagate_dyn"]

log = get_logger(__name__)


def propagate_dyn(op: IROp) -> None:
    """Mark the dynamic dims of ``op``'s tensor outputs from its inputs' and its size
    arguments, by the rule of its kind (unknown where there is none)."""
    if op.kind == "aten::arange" and _arange_dyn(op):
        return
    if op.kind in ("aten::cat", "aten::concat", "aten::concatenate") and _cat_dyn(op):
        return
    if op.kind in _FILLS and _fill_dyn(op):
        return
    rule = SHAPE_RULES.get(op.kind)
    if rule is not None and op.inputs and isinstance(op.inputs[0], TensorValue):
        out = op.outputs[0]
        sym_args = any(isinstance(v, SymInt) for v in flat_items(op.inputs))
        if isinstance(out, TensorValue) and (
            any(t.is_dynamic() for t in tensor_inputs(op)) or out.is_dynamic() or sym_args
        ):
            marks = rule(op.inputs[0], out, op.inputs[1:])
            if marks is not None:
                out.dyn = marks
                return
        elif isinstance(out, TensorValue):
            return
    tensors = tensor_inputs(op)
    for v in op.inputs:
        if isinstance(v, ListValue):
            tensors += [x for x in v.items if isinstance(x, TensorValue)]
    sym_args = any(isinstance(v, SymInt) for v in flat_items(op.inputs))
    if not any(t.is_dynamic() for t in tensors) and not sym_args:
        return
    outs = _tensor_outputs(op)
    kind_rule = _module_call if op.kind.startswith(CUSTOMOP_KIND) else _KIND_RULES.get(op.kind)
    told = kind_rule(op, outs) if kind_rule is not None else None
    if told is None or len(told) != len(outs) or any(len(m) != o.rank for m, o in zip(told, outs)):
        # No rule tells: every dim may vary. Handlers that need a size refuse such a dim
        # clearly; a kind that must do better gets a rule in _KIND_RULES.
        log.debug("%s: no dynamic-dim rule for %s, its output dims are marked unknown", op.where(), op.kind)
        told = [(UNKNOWN,) * o.rank for o in outs]
    for tensor, dyn in zip(outs, told):
        tensor.dyn = tuple(dyn)


def _tensor_outputs(op: IROp) -> list[TensorValue]:
    """``op``'s tensor outputs, the items of a list output included, in order."""
    outs: list[TensorValue] = []
    for o in op.outputs:
        if isinstance(o, TensorValue):
            outs.append(o)
        elif isinstance(o, ListValue):
            outs += [x for x in o.items if isinstance(x, TensorValue)]
    return outs


def _arange_dyn(op: IROp) -> bool:
    """arange(end), arange(start, end) and arange(start, end, 1) with start and end static
    or dynamic sizes have length end - start: mark it (torch.arange over dynamic sizes builds
    position ids and masks in transformers; arange(P, P+S) has length S). A bound read from
    a tensor makes the length unknown until run time."""
    bounds = {5: 1, 6: 2, 7: 3}.get(len(op.inputs))
    out = op.outputs[0]
    if bounds is None or not isinstance(out, TensorValue) or out.rank != 1:
        return False
    if any(isinstance(v, TensorValue) for v in op.inputs[:bounds]):
        # Bounds read from tensors (model inputs): the length is known only when tract runs.
        out.dyn = (UNKNOWN,)
        return True
    start, end = (Const("", 0), op.inputs[0]) if bounds == 1 else (op.inputs[0], op.inputs[1])
    if bounds == 3 and not (isinstance(op.inputs[2], Const) and op.inputs[2].value == 1):
        return False
    exprs = [int_expr(v) for v in (start, end)]
    if not any(isinstance(v, SymInt) for v in (start, end)) or None in exprs:
        return False
    out.dyn = (mark(exprs[1] - exprs[0]),)  # type: ignore[operator]
    return True


def _cat_dyn(op: IROp) -> bool:
    """cat(tensors, dim): the concatenated dim is the sum of the inputs' (a KV cache of P
    entries grown by S new ones has P+S); every other dim follows the first input that is
    dynamic there. Inputs of size 0 along ``dim`` (torch's legacy empty tensors) are skipped."""
    out = op.outputs[0]
    if not (isinstance(out, TensorValue) and op.inputs and isinstance(op.inputs[0], ListValue)
            and len(op.inputs) > 1 and isinstance(op.inputs[1], Const) and out.rank):
        return False
    parts = [t for t in op.inputs[0].items if isinstance(t, TensorValue) and t.rank == out.rank]
    if len(parts) != len(op.inputs[0].items) or not any(t.is_dynamic() for t in parts):
        return False
    axis = op.inputs[1].value % out.rank
    total: Size = 0
    for t in parts:
        total = total + size_of(t, axis)
    dyn: list[DimExpr | None] = []
    for d in range(out.rank):
        if d == axis:
            dyn.append(mark(total))
        else:
            dyn.append(next((t.dyn[d] for t in parts if t.dyn[d] is not None), None))
    out.dyn = tuple(dyn)
    return True


# Ops whose input 0 is the output's size list (zeros(size), full(size, value)...).
_FILLS = frozenset({"aten::zeros", "aten::ones", "aten::empty", "aten::full"})


def _fill_dyn(op: IROp) -> bool:
    """zeros/ones/empty/full(size, ...): each output dim is static or carries its size's
    expression (``torch.zeros(x.size(1), 4)``)."""
    out = op.outputs[0]
    if not (isinstance(out, TensorValue) and op.inputs and isinstance(op.inputs[0], ListValue)):
        return False
    dyn = size_list_marks(op.inputs[0], out.rank)
    if dyn is None:
        return False
    out.dyn = dyn
    return True


# --- rules over a whole op: every tensor output, list items included ------------------------
Marks = tuple[DimExpr | None, ...]
KindRule = Callable[[IROp, list[TensorValue]], list[Marks] | None]
# A kind rule returns the marks of each of the op's tensor outputs, or None where it cannot
# tell (every output dim is then unknown).


def _dims(t: TensorValue) -> tuple[Size, ...]:
    """``t``'s sizes: traced values where static, expressions where dynamic."""
    return tuple(size_of(t, d) for d in range(t.rank))


def _marks(sizes: Sequence[Size]) -> Marks:
    return tuple(mark(s) for s in sizes)


def _int_arg(op: IROp, i: int) -> int | None:
    """Argument ``i`` as a constant int, else None."""
    v = op.inputs[i] if i < len(op.inputs) else None
    return v.value if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) else None


def _size_arg(op: IROp, i: int) -> Size | None:
    """Argument ``i`` as a size (a constant or a dynamic size's expression), else None."""
    return int_expr(op.inputs[i]) if i < len(op.inputs) else None


def _input(op: IROp, i: int) -> TensorValue | None:
    v = op.inputs[i] if i < len(op.inputs) else None
    return v if isinstance(v, TensorValue) else None


def _same_as_input(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """Every output has input 0's dims (unary elementwise ops, casts, norms, softmax, scans)."""
    x = _input(op, 0)
    return None if x is None else [x.dyn for _ in outs]


def _broadcasting(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """Elementwise ops over several tensors: their broadcast (``dim.broadcast_all``, the
    rule nnef/shapes.py applies to the NNEF ops)."""
    tensors = tensor_inputs(op)
    if not tensors:
        return None
    try:
        return [_marks(broadcast_all([_dims(t) for t in tensors]))] * len(outs)
    except ValueError:
        return None


def _linear(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """linear(x, weight, bias): x's dims with the last one replaced by the weight's rows."""
    x, w = _input(op, 0), _input(op, 1)
    if x is None or w is None or x.rank == 0:
        return None
    return [x.dyn[:-1] + (w.dyn[:1] if w.rank == 2 else ())]


def _addmm(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """addmm(bias, m1, m2): m1's rows by m2's columns (the bias broadcasts to them)."""
    m1, m2 = _input(op, 1), _input(op, 2)
    if m1 is None or m2 is None or m1.rank != 2 or m2.rank != 2:
        return None
    return [(m1.dyn[0], m2.dyn[1])]


def _like_input(i: int) -> KindRule:
    """The output has tensor input ``i``'s dims (view_as: other; gather: the index)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        t = _input(op, i)
        return None if t is None else [t.dyn]

    return rule


def _one_hot(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """one_hot(x, num_classes): x's dims, then the classes (a constant)."""
    x, classes = _input(op, 0), _size_arg(op, 1)
    if x is None or classes is None:
        return None
    return [x.dyn + (mark(classes),)]


def _eye(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """eye(n[, m], ...): sizes that may be dynamic (``torch.eye(x.size(0))``)."""
    n = _size_arg(op, 0)
    m = _size_arg(op, 1) if len(op.inputs) == 6 else n  # eye.m has one argument more
    return None if n is None or m is None else [(mark(n), mark(m))]


def _without_dim(dim_arg: int, shrink: int | None) -> KindRule:
    """Input 0's dims with the dim at argument ``dim_arg`` shortened by ``shrink``
    (cumulative_trapezoid: by one), or removed when ``shrink`` is None (trapezoid)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        x, d = _input(op, 0), _int_arg(op, dim_arg)
        if x is None or d is None or x.rank == 0:
            return None
        a = d % x.rank
        return [x.dyn[:a] + (() if shrink is None else (mark(size_of(x, a) - shrink),)) + x.dyn[a + 1 :]]

    return rule


def _pair_distance(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """pairwise_distance(x1, x2, p, eps, keepdim), cosine_similarity(x1, x2, dim, eps): the
    operands' broadcast without the reduced dim (pairwise_distance: the last, kept as 1
    with keepdim)."""
    x1, x2 = _input(op, 0), _input(op, 1)
    if x1 is None or x2 is None:
        return None
    try:
        dims = broadcast_all([_dims(x1), _dims(x2)])
    except ValueError:
        return None
    if not dims:
        return None
    if op.kind == "aten::cosine_similarity":
        d = _int_arg(op, 2)
        if d is None:
            return None
        a = d % len(dims)
        return [_marks(dims[:a] + dims[a + 1 :])]
    keep = isinstance(op.inputs[4], Const) and bool(op.inputs[4].value) if len(op.inputs) > 4 else False
    return [_marks(dims[:-1] + ((1,) if keep else ()))]


def _cdist(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """cdist(x1, x2, ...): the batch dims' broadcast, x1's rows, x2's rows."""
    x1, x2 = _input(op, 0), _input(op, 1)
    if x1 is None or x2 is None or min(x1.rank, x2.rank) < 2:
        return None
    return _batched(x1, x2, x1.dyn[-2], x2.dyn[-2])


def _batched(a: TensorValue, b: TensorValue, rows: DimExpr | None, cols: DimExpr | None) -> list[Marks] | None:
    """The broadcast of ``a``'s and ``b``'s batch dims (all but their last two), then
    ``rows`` and ``cols``: the output of a batched product or distance."""
    try:
        batch = broadcast_all([_dims(a)[:-2], _dims(b)[:-2]])
    except ValueError:
        return None
    return [_marks(batch) + (rows, cols)]


def _pdist(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """pdist(x, p): the n(n-1)/2 pairs of x's n rows."""
    x = _input(op, 0)
    if x is None or x.rank != 2:
        return None
    n = size_of(x, 0)
    return [(mark(n * (n - 1) // 2),)]


def _diag_embed(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """diag_embed(x, offset, dim1, dim2): x's last dim n becomes an (n+|offset|)-square
    plane at dim1 and dim2, x's other dims fill the remaining places in order."""
    x, offset, d1, d2 = _input(op, 0), _int_arg(op, 1), _int_arg(op, 2), _int_arg(op, 3)
    if x is None or x.rank == 0 or offset is None or d1 is None or d2 is None:
        return None
    rank = x.rank + 1
    side = mark(size_of(x, x.rank - 1) + abs(offset))
    rest = iter(x.dyn[:-1])
    return [tuple(side if p in (d1 % rank, d2 % rank) else next(rest) for p in range(rank))]


def _view_as_real(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None else [x.dyn + (None,)]


def _view_as_complex(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn[:-1]]


def _glu(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """glu(x, dim): the dim halved."""
    x, d = _input(op, 0), _int_arg(op, 1)
    if x is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    return [x.dyn[:a] + (mark(size_of(x, a) // 2),) + x.dyn[a + 1 :]]


def _conv_tbc(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """conv_tbc(x [T, B, C], weight [k, C, C_out], bias, pad): T + 2 pad - k + 1 frames."""
    x, w, pad = _input(op, 0), _input(op, 1), _int_arg(op, 3)
    if x is None or w is None or pad is None or x.rank != 3:
        return None
    return [(mark(size_of(x, 0) + 2 * pad - w.shape[0] + 1), x.dyn[1], None)]


def _pieces(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """chunk / split / split_with_sizes (x, how, dim): x's dims in every piece, the split
    dim static where x's is, a constant piece of split_with_sizes static, else unknown."""
    x, d = _input(op, 0), _int_arg(op, 2)
    if x is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    sizes = op.inputs[1].items if op.kind == "aten::split_with_sizes" and isinstance(op.inputs[1], ListValue) else []
    marks: list[Marks] = []
    for k in range(len(outs)):
        piece: DimExpr | None = None if x.dyn[a] is None else UNKNOWN
        if k < len(sizes):
            size = int_expr(sizes[k])
            piece = UNKNOWN if size is None else mark(size)
        marks.append(x.dyn[:a] + (piece,) + x.dyn[a + 1 :])
    return marks


def _unbind(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x, d = _input(op, 0), _int_arg(op, 1)
    if x is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    return [x.dyn[:a] + x.dyn[a + 1 :]] * len(outs)


def _meshgrid(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """meshgrid(tensors[, indexing]): every grid has the vectors' lengths ('xy' swaps the
    first two)."""
    items = op.inputs[0].items if op.inputs and isinstance(op.inputs[0], ListValue) else []
    if not all(isinstance(t, TensorValue) and t.rank <= 1 for t in items):
        return None
    lengths = [t.dyn[0] if t.rank else None for t in items if isinstance(t, TensorValue)]
    xy = len(op.inputs) > 1 and isinstance(op.inputs[1], Const) and op.inputs[1].value == "xy"
    if xy and len(lengths) >= 2:
        lengths[0], lengths[1] = lengths[1], lengths[0]
    return [tuple(lengths)] * len(outs)


def _recurrent(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """lstm / gru / rnn_tanh / rnn_relu (input, hx, params, has_biases, layers, dropout,
    train, bidirectional, batch_first): the output has the input's time and batch dims,
    the final states [layers * directions, batch, hidden] the input's batch."""
    x, batch_first = _input(op, 0), _bool_arg(op, 8)
    if x is None or batch_first is None or x.rank not in (2, 3):
        return None
    batch: Marks = () if x.rank == 2 else (x.dyn[0 if batch_first else 1],)
    return [x.dyn[:-1] + (None,)] + [(None,) + batch + (None,)] * (len(outs) - 1)


def _repeat(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """repeat(x, repeats): each dim times its repeat, new leading dims their repeats."""
    x = _input(op, 0)
    repeats = op.inputs[1] if len(op.inputs) > 1 else None
    reps = [int_expr(v) for v in repeats.items] if isinstance(repeats, ListValue) else []
    if x is None or None in reps or len(reps) < x.rank:
        return None
    lead = len(reps) - x.rank
    return [tuple(mark((1 if i < lead else size_of(x, i - lead)) * r) for i, r in enumerate(reps))]  # type: ignore[operator]


def _upsample(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """upsample_* / _upsample_*(x, output_size, ...): batch and channels kept, the spatial
    dims the output size's where it is given, else (scale factors) unknown where x's vary."""
    x = _input(op, 0)
    if x is None or x.rank < 3:
        return None
    given = size_list_marks(op.inputs[1], x.rank - 2) if len(op.inputs) > 1 else None
    spatial = given if given is not None else tuple(None if m is None else UNKNOWN for m in x.dyn[2:])
    return [x.dyn[:2] + spatial]


# Output dims equal to input 0's: unary elementwise ops, casts, normalizations, softmax,
# scans, masks of a matrix, *_like creations.
_SAME_AS_INPUT = (
    "abs", "neg", "sign", "sgn", "ceil", "floor", "round", "trunc", "frac", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "square", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "sigmoid", "relu", "relu6", "gelu", "silu",
    "mish", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "softplus", "softsign",
    "threshold", "logit", "nan_to_num", "bitwise_not", "logical_not", "isnan", "isinf", "isfinite", "clamp_min",
    "clamp_max", "to", "type_as", "clone", "contiguous", "detach", "dropout", "alpha_dropout", "feature_dropout",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "tril", "triu", "softmax",
    "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "cumsum", "cumprod",
    "logcumsumexp", "cummax", "cummin", "prelu", "diagonal_scatter", "slice_scatter", "select_scatter",
    "scatter", "scatter_add", "scatter_reduce", "index_put", "index_fill", "masked_scatter", "flip", "roll",
    "fill", "local_response_norm", "angle", "conj", "real", "imag", "deg2rad", "digamma", "lgamma", "mvlgamma",
    "hardshrink", "softshrink", "log_sigmoid", "positive", "signbit", "sinc", "special_entr", "special_erfcx",
    "special_log_ndtr", "special_ndtr", "special_ndtri", "renorm", "zero", "zero_", "copy_", "alias_copy",
    "_weight_norm", "fft_fftshift", "fft_ifftshift",
)
# Elementwise ops over several tensors: the broadcast of their shapes.
_BROADCASTING = (
    "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "minimum",
    "maximum", "fmin", "fmax", "atan2", "hypot", "copysign", "xlogy", "lerp", "addcmul", "addcdiv", "where",
    "masked_fill", "clamp", "clip", "eq", "ne", "lt", "le", "gt", "ge", "__and__", "__or__", "__xor__",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
    "__lshift__", "__rshift__", "logical_and", "logical_or", "logical_xor", "polar", "complex", "heaviside",
    "ldexp", "logaddexp", "float_power", "isclose", "special_xlog1py",
)
_KIND_RULES: dict[str, KindRule] = {
    **{f"aten::{k}": _same_as_input for k in _SAME_AS_INPUT},
    **{f"aten::{k}": _broadcasting for k in _BROADCASTING},
    "aten::linear": _linear,
    "aten::addmm": _addmm,
    "aten::view_as": _like_input(1),
    "aten::gather": _like_input(2),
    "aten::one_hot": _one_hot,
    "aten::eye": _eye,
    "aten::cumulative_trapezoid": _without_dim(2, 1),
    "aten::trapezoid": _without_dim(2, None),
    "aten::pairwise_distance": _pair_distance,
    "aten::cosine_similarity": _pair_distance,
    "aten::cdist": _cdist,
    "aten::pdist": _pdist,
    "aten::diag_embed": _diag_embed,
    "aten::view_as_real": _view_as_real,
    "aten::view_as_complex": _view_as_complex,
    "aten::glu": _glu,
    "aten::conv_tbc": _conv_tbc,
    "aten::chunk": _pieces,
    "aten::unsafe_chunk": _pieces,
    "aten::split": _pieces,
    "aten::split_with_sizes": _pieces,
    "aten::unbind": _unbind,
    "aten::meshgrid": _meshgrid,
    "aten::lstm": _recurrent,
    "aten::gru": _recurrent,
    "aten::rnn_tanh": _recurrent,
    "aten::rnn_relu": _recurrent,
    "aten::repeat": _repeat,
    **{f"aten::{k}": _upsample for k in (
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
        "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "_upsample_bilinear2d_aa",
        "_upsample_bicubic2d_aa")},
}


def _bool_arg(op: IROp, i: int) -> bool | None:
    v = op.inputs[i] if i < len(op.inputs) else None
    return bool(v.value) if isinstance(v, Const) and isinstance(v.value, (bool, int)) else None


def _dim_list(op: IROp, i: int, rank: int) -> set[int] | None:
    """Argument ``i`` as a set of dims (an int, a list of ints; None or [] for all)."""
    v = op.inputs[i] if i < len(op.inputs) else None
    if v is None or (isinstance(v, Const) and v.value is None):
        return set(range(rank))
    ints = const_ints(v)
    if isinstance(v, ListValue) and len(ints) != len(v.items):
        return None
    if not isinstance(v, ListValue) and len(ints) != 1:
        return None
    return {d % rank for d in ints} if ints else set(range(rank))


def _reduced(x: TensorValue, dims: set[int], keep: bool) -> Marks:
    """x's marks with ``dims`` reduced: static 1 with ``keep``, else gone."""
    return tuple(None if d in dims else m for d, m in enumerate(x.dyn) if keep or d not in dims)


def _max_like(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """max / min (x, other): broadcast; (x, dim, keepdim): values and indices reduced;
    (x): a 0-d result. aminmax(x, dim=None, keepdim)."""
    x = _input(op, 0)
    if x is None:
        return None
    if _input(op, 1) is not None:
        return _broadcasting(op, outs)
    if len(op.inputs) == 1:
        return [()] * len(outs)
    dims = _dim_list(op, 1, x.rank) if x.rank else set()
    keep = _bool_arg(op, 2)
    if dims is None or keep is None:
        return None
    return [_reduced(x, dims, keep)] * len(outs)


def _reduction_of(dim_arg: int, keep_arg: int) -> KindRule:
    """A reduction over the dims at argument ``dim_arg`` with keepdim at ``keep_arg``."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        x = _input(op, 0)
        if x is None:
            return None
        dims, keep = _dim_list(op, dim_arg, x.rank), _bool_arg(op, keep_arg)
        return None if dims is None or keep is None else [_reduced(x, dims, keep)] * len(outs)

    return rule


def _topk(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """topk(x, k, dim, ...): values and indices with k along dim."""
    x, k, d = _input(op, 0), _size_arg(op, 1), _int_arg(op, 2)
    if x is None or k is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    return [x.dyn[:a] + (mark(k),) + x.dyn[a + 1 :]] * len(outs)


def _native_layer_norm(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """native_layer_norm(x, normalized_shape, ...): x's dims, then mean and rstd with the
    normalized dims 1."""
    x = _input(op, 0)
    n = len(op.inputs[1].items) if len(op.inputs) > 1 and isinstance(op.inputs[1], ListValue) else None
    if x is None or n is None:
        return None
    stats = x.dyn[: x.rank - n] + (None,) * n
    return [x.dyn] + [stats] * (len(outs) - 1)


def _native_group_norm(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """native_group_norm(x, weight, bias, N, C, HxW, group, eps): x's dims, mean and rstd
    [N, group]."""
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn] + [(x.dyn[0], None)] * (len(outs) - 1)


def _mv(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    a = _input(op, 0)
    return None if a is None or a.rank != 2 else [a.dyn[:1]]


def _outer(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    a, b = _input(op, 0), _input(op, 1)
    return None if a is None or b is None or a.rank != 1 or b.rank != 1 else [a.dyn + b.dyn]


def _scalar_out(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """dot, vdot: a 0-d result."""
    return [()] * len(outs)


def _kron(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """kron(a, b): dim by dim products (ranks aligned on the right)."""
    a, b = _input(op, 0), _input(op, 1)
    if a is None or b is None:
        return None
    rank = max(a.rank, b.rank)
    da, db = (1,) * (rank - a.rank) + _dims(a), (1,) * (rank - b.rank) + _dims(b)
    return [_marks([x * y for x, y in zip(da, db)])]


def _bilinear(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """bilinear(x1, x2, weight, bias): x1's dims with the last one the weight's rows."""
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn[:-1] + (None,)]


def _einsum(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """einsum(equation, tensors): each output letter's size (broadcast over the operands
    that have it), '...' the operands' broadcast batch dims. Explicit outputs only."""
    eq = op.inputs[0].value if op.inputs and isinstance(op.inputs[0], Const) else None
    items = op.inputs[1].items if len(op.inputs) > 1 and isinstance(op.inputs[1], ListValue) else []
    if not isinstance(eq, str) or "->" not in eq or not all(isinstance(t, TensorValue) for t in items):
        return None
    specs, out_spec = eq.replace(" ", "").split("->")
    letters: dict[str, Size] = {}
    ellipses: list[tuple[Size, ...]] = []
    try:
        for spec, t in zip(specs.split(","), items):
            assert isinstance(t, TensorValue)
            dims = _dims(t)
            if "..." in spec:
                head, tail = spec.split("...")
                ellipses.append(dims[len(head) : t.rank - len(tail)])
                spec_dims = list(zip(head, dims[: len(head)])) + list(zip(tail, dims[t.rank - len(tail) :]))
            else:
                spec_dims = list(zip(spec, dims))
            for letter, size in spec_dims:
                letters[letter] = broadcast(letters.get(letter, 1), size)
        batch = broadcast_all(ellipses)
    except ValueError:
        return None
    head, _, tail = out_spec.partition("...")
    if not all(c in letters for c in head + tail):
        return None
    middle = list(batch) if "..." in out_spec else []
    return [_marks([letters[c] for c in head] + middle + [letters[c] for c in tail])]


def _atleast_2d(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    if x is None:
        return None
    return [(None,) * (2 - x.rank) + x.dyn if x.rank < 2 else x.dyn]


def _grid_sampler(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """grid_sampler(x [N, C, *in], grid [N, *out, k], ...): [N, C, *out]."""
    x, grid = _input(op, 0), _input(op, 1)
    return None if x is None or grid is None or x.rank < 3 else [x.dyn[:2] + grid.dyn[1:-1]]


def _pool(kernel_arg: int, stride_arg: int, pad_arg: int, dil_arg: int | None, ceil_arg: int) -> KindRule:
    """max/avg pooling: each dynamic spatial size through the window arithmetic of
    convolutions (unknown with ceil_mode)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        x = _input(op, 0)
        kernel = const_ints(op.inputs[kernel_arg]) if x is not None else []
        if x is None or not kernel or x.rank < len(kernel):
            return None
        n = len(kernel)
        strides = per_axis(op.inputs[stride_arg], n, 1) if const_ints(op.inputs[stride_arg]) else kernel
        pads = per_axis(op.inputs[pad_arg], n, 0)
        dils = per_axis(op.inputs[dil_arg], n, 1) if dil_arg is not None else [1] * n
        ceil_mode = _bool_arg(op, ceil_arg)
        if strides is None or pads is None or dils is None or ceil_mode is None:
            return None
        spatial: list[DimExpr | None] = []
        for a in range(n):
            size = x.dyn[x.rank - n + a]
            if size is None or size == UNKNOWN or ceil_mode:
                spatial.append(None if size is None else UNKNOWN)
            else:
                spatial.append(mark(windows(size, kernel[a], strides[a], dils[a], 2 * pads[a])))
        return [x.dyn[: x.rank - n] + tuple(spatial)] * len(outs)

    return rule


def _adaptive_pool(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """adaptive_*_pool(x, output_size): the leading dims kept, the output size's after."""
    x = _input(op, 0)
    sizes = op.inputs[1] if len(op.inputs) > 1 else None
    n = len(sizes.items) if isinstance(sizes, ListValue) else 0
    marks = size_list_marks(sizes, n) if sizes is not None and n else None
    return None if x is None or marks is None or x.rank < n else [x.dyn[: x.rank - n] + marks] * len(outs)


def _istft(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """istft(z [B?, F, T], n_fft, hop, win_length, window, center, normalized, onesided,
    length, ...): the batch, then the samples, ``length`` or n_fft + hop (T - 1) less
    n_fft // 2 each side when centred."""
    z, n_fft, center = _input(op, 0), _int_arg(op, 1), _bool_arg(op, 5)
    if z is None or n_fft is None or center is None or z.rank not in (2, 3):
        return None
    hop = _int_arg(op, 2) or n_fft // 4
    length_arg = op.inputs[8] if len(op.inputs) > 8 else None
    if isinstance(length_arg, Const) and length_arg.value is None:
        length: Size | None = n_fft + hop * (size_of(z, z.rank - 1) - 1) - (2 * (n_fft // 2) if center else 0)
    else:
        length = _size_arg(op, 8)
    return None if length is None else [z.dyn[: z.rank - 2] + (mark(length),)]


def _im2col(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """im2col(x [N, C, H, W], kernel, ...): [N, C*kh*kw, L], the number of patches L
    unknown where H or W varies."""
    x, kernel = _input(op, 0), const_ints(op.inputs[1]) if len(op.inputs) > 1 else []
    if x is None or x.rank not in (3, 4) or len(kernel) != 2:
        return None
    channels = mark(size_of(x, x.rank - 3) * kernel[0] * kernel[1])
    patches = None if x.dyn[-2] is None and x.dyn[-1] is None else UNKNOWN
    return [x.dyn[: x.rank - 3] + (channels, patches)]


def _col2im(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """col2im(x [N, C*k, L], output_size, ...): [N, C, *output_size]."""
    x = _input(op, 0)
    sizes = size_list_marks(op.inputs[1], 2) if x is not None and len(op.inputs) > 1 else None
    return None if x is None or sizes is None or x.rank != 3 else [(x.dyn[0], None) + sizes]


def _index(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """index(x, indices): integer index tensors at adjacent dims replace them by their
    broadcast dims (a boolean mask: a count known only at run time)."""
    x = _input(op, 0)
    items = op.inputs[1].items if x is not None and len(op.inputs) > 1 and isinstance(op.inputs[1], ListValue) else []
    given = [(k, t) for k, t in enumerate(items) if isinstance(t, TensorValue)]
    if x is None or not given or len(items) > x.rank:
        return None
    if any(t.dtype in (torch.bool, torch.uint8) for _, t in given):
        return None
    positions = [k for k, _ in given]
    if positions != list(range(positions[0], positions[-1] + 1)):
        return None  # torch moves separated index dims to the front
    try:
        idx = _marks(broadcast_all([_dims(t) for _, t in given]))
    except ValueError:
        return None
    return [x.dyn[: positions[0]] + idx + x.dyn[positions[-1] + 1 :]]


def _repeat_interleave(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """repeat_interleave(x, repeats int, dim): the dim times the repeats (flattened
    without dim); tensor repeats: unknown."""
    x, reps = _input(op, 0), _size_arg(op, 1)
    if x is None:
        return None
    d = _int_arg(op, 2)
    if d is None:
        total: Size = reps * _volume(x) if reps is not None else UNKNOWN
        return [(mark(total),)]
    a = d % x.rank
    return [x.dyn[:a] + (UNKNOWN if reps is None else mark(size_of(x, a) * reps),) + x.dyn[a + 1 :]]


def _volume(x: TensorValue) -> Size:
    total: Size = 1
    for size in _dims(x):
        total = total * size
    return total


def _ravel(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None else [(volume_mark(x, range(x.rank)),)]


def _fft(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """fft_fft / fft_ifft / fft_rfft(x, n, dim, norm): the dim n long (rfft: n//2+1)."""
    x, d = _input(op, 0), _int_arg(op, 2)
    if x is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    n_arg = op.inputs[1] if len(op.inputs) > 1 else None
    n = size_of(x, a) if isinstance(n_arg, Const) and n_arg.value is None else _size_arg(op, 1)
    if n is None:
        return None
    return [x.dyn[:a] + (mark(n // 2 + 1 if op.kind == "aten::fft_rfft" else n),) + x.dyn[a + 1 :]]


def _loss(reduction_arg: int) -> KindRule:
    """Losses: 0-d when reduced (mean, sum), the operands' broadcast otherwise
    (cross_entropy: the target's dims)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        reduction = _int_arg(op, reduction_arg)
        if reduction is None:
            return None
        if reduction:
            return [()]
        if op.kind == "aten::cross_entropy_loss":
            return _like_input(1)(op, outs)
        return _broadcasting(op, outs)

    return rule


def _diff(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """diff(x, n, dim, prepend, append): the dim n shorter, longer by what is added."""
    x, n, d = _input(op, 0), _int_arg(op, 1), _int_arg(op, 2)
    if x is None or n is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    size = size_of(x, a) - n
    for extra in (_input(op, 3), _input(op, 4)):
        if extra is not None:
            size = size + size_of(extra, a)
    return [x.dyn[:a] + (mark(size),) + x.dyn[a + 1 :]]


def _stack(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """stack(tensors, dim): the tensors' (equal) dims with their count at dim; hstack:
    concatenated along dim 1 (0 for vectors)."""
    items = op.inputs[0].items if op.inputs and isinstance(op.inputs[0], ListValue) else []
    parts = [t for t in items if isinstance(t, TensorValue)]
    if not parts or len(parts) != len(items) or any(t.rank != parts[0].rank for t in parts):
        return None
    rank = parts[0].rank
    common = tuple(next((t.dyn[d] for t in parts if t.dyn[d] is not None), None) for d in range(rank))
    if op.kind == "aten::hstack":
        a = 0 if rank == 1 else 1
        total: Size = 0
        for t in parts:
            total = total + size_of(t, a)
        return [common[:a] + (mark(total),) + common[a + 1 :]]
    d = _int_arg(op, 1)
    if d is None:
        return None
    a = d % (rank + 1)
    return [common[:a] + (None,) + common[a:]]


def _broadcast_tensors(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    items = op.inputs[0].items if op.inputs and isinstance(op.inputs[0], ListValue) else []
    if not all(isinstance(t, TensorValue) for t in items):
        return None
    try:
        return [_marks(broadcast_all([_dims(t) for t in items if isinstance(t, TensorValue)]))] * len(outs)
    except ValueError:
        return None


def _take_along_dim(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """take_along_dim(x, indices, dim): the broadcast of both, the indices' size at dim."""
    x, idx, d = _input(op, 0), _input(op, 1), _int_arg(op, 2)
    if x is None or idx is None or d is None or x.rank != idx.rank:
        return None
    a = d % x.rank
    try:
        dims = [broadcast(p, q) if k != a else q for k, (p, q) in enumerate(zip(_dims(x), _dims(idx)))]
    except ValueError:
        return None
    return [_marks(dims)]


def _hsplit(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """hsplit(x, sections): pieces along dim 1 (0 for vectors), unknown where it varies."""
    x = _input(op, 0)
    if x is None or x.rank == 0:
        return None
    a = 0 if x.rank == 1 else 1
    return [x.dyn[:a] + (None if x.dyn[a] is None else UNKNOWN,) + x.dyn[a + 1 :]] * len(outs)


def _static_out(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """histc: as many bins as asked, whatever the input."""
    return [(None,) * o.rank for o in outs]


def _embedding_bag(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """embedding_bag(weight, indices, offsets, scale_grad, mode, sparse, per_sample_weights,
    include_last_offset, ...): the output [bags, D] (bags: the offsets, one fewer with
    include_last_offset; or the rows of 2-D indices); the auxiliary outputs unknown."""
    weight, indices, offsets, last = _input(op, 0), _input(op, 1), _input(op, 2), _bool_arg(op, 7)
    if weight is None or indices is None or weight.rank != 2 or not outs or outs[0].rank != 2:
        return None
    if indices.rank == 2:
        bags: DimExpr | None = indices.dyn[0]
    elif offsets is not None and offsets.rank == 1 and last is not None:
        bags = mark(size_of(offsets, 0) - int(last))
    else:
        return None
    return [(bags, weight.dyn[1])] + [(UNKNOWN,) * o.rank for o in outs[1:]]


def _grouped_mm(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """_grouped_mm(a, b, offs, ...): a's rows by b's columns, one matrix per group ([M, N]
    for 2-D a and 3-D b, [G, M, N] with the groups' broadcast or offsets)."""
    a, b = _input(op, 0), _input(op, 1)
    if a is None or b is None or len(outs) != 1 or min(a.rank, b.rank) < 2:
        return None
    matrix = (a.dyn[-2], b.dyn[-1])
    if outs[0].rank == 2:
        return [matrix]
    if a.rank == 3 and b.rank == 3:
        try:
            return [_marks(broadcast_all([_dims(a)[:1], _dims(b)[:1]])) + matrix]
        except ValueError:
            return None
    return [(None,) + matrix] if outs[0].rank == 3 else None


def _multi_head_attention(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """_native_multi_head_attention(q [B, L, E], k [B, S, E], ...): the output [B, L, E],
    the weights [B, L, S] (or [B, heads, L, S] not averaged)."""
    q, k = _input(op, 0), _input(op, 1)
    if q is None or k is None or q.rank != 3 or k.rank != 3:
        return None
    marks = [q.dyn[:-1] + (None,)]
    for o in outs[1:]:
        marks.append((q.dyn[0],) + (None,) * (o.rank - 3) + (q.dyn[1], k.dyn[1]) if o.rank >= 3 else (None,) * o.rank)
    return marks


def _quantized_conv(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """quantized::conv* (x, packed params, scale, zero point): batch kept, channels static,
    spatial dims unknown where they vary (the kernel sits in the packed parameters)."""
    x = _input(op, 0)
    if x is None or x.rank < 3:
        return None
    return [(x.dyn[0], None) + tuple(None if m is None else UNKNOWN for m in x.dyn[2:])]


def _quantized_linear(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn[:-1] + (None,)]


def _quantized_matmul(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    a, b = _input(op, 0), _input(op, 1)
    if a is None or b is None or min(a.rank, b.rank) < 2 or outs[0].rank != max(a.rank, b.rank):
        return None
    return _batched(a, b, a.dyn[-2], b.dyn[-1])


def _quantized_cat(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """quantized::cat(tensors, dim, scale, zero point): as aten::cat."""
    items = op.inputs[0].items if op.inputs and isinstance(op.inputs[0], ListValue) else []
    parts = [t for t in items if isinstance(t, TensorValue)]
    d = _int_arg(op, 1)
    if not parts or len(parts) != len(items) or d is None or any(t.rank != outs[0].rank for t in parts):
        return None
    a = d % outs[0].rank
    total: Size = 0
    for t in parts:
        total = total + size_of(t, a)
    dims = tuple(next((t.dyn[k] for t in parts if t.dyn[k] is not None), None) for k in range(outs[0].rank))
    return [dims[:a] + (mark(total),) + dims[a + 1 :]]


def _to_padded_tensor(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """to_padded_tensor(nested, padding, output_size): the output size's dims (a nested
    tensor has no dims in the IR; nn.TransformerEncoder passes its input's sizes)."""
    sizes = size_list_marks(op.inputs[2], outs[0].rank) if len(op.inputs) > 2 and len(outs) == 1 else None
    return None if sizes is None else [sizes]


def _module_call(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """A module kept whole (``wired_custom::``): its extractor tells its outputs' dims
    (``ModuleInfoExtractor.output_dims``), from its tensor inputs' marks."""
    if op.extractor is None:
        return None
    marks = op.extractor.output_dims([t.dyn for t in tensor_inputs(op)], [o.rank for o in outs])
    return None if marks is None else [tuple(m) for m in marks]


_KIND_RULES.update({f"aten::{k}": _same_as_input for k in (
    "rsqrt", "sigmoid", "hardsigmoid", "floor", "special_i0e", "special_gammaln", "empty_like", "flipud",
    "fliplr", "index_copy", "index_add", "frexp", "channel_shuffle", "native_channel_shuffle",
    "quantize_per_tensor", "quantize_per_channel", "dequantize", "bucketize", "argsort", "sort",
    "_transformer_encoder_layer_fwd", "_nested_tensor_from_mask")})
_KIND_RULES.update({
    "aten::max": _max_like,
    "aten::min": _max_like,
    "aten::aminmax": _reduction_of(1, 2),
    "aten::linalg_matrix_norm": _reduction_of(2, 3),
    "aten::topk": _topk,
    "aten::native_layer_norm": _native_layer_norm,
    "aten::native_group_norm": _native_group_norm,
    "aten::mv": _mv,
    "aten::outer": _outer,
    "aten::ger": _outer,
    "aten::dot": _scalar_out,
    "aten::vdot": _scalar_out,
    "aten::kron": _kron,
    "aten::bilinear": _bilinear,
    "aten::einsum": _einsum,
    "aten::atleast_2d": _atleast_2d,
    "aten::grid_sampler": _grid_sampler,
    "aten::max_pool1d": _pool(1, 2, 3, 4, 5),
    "aten::max_pool2d": _pool(1, 2, 3, 4, 5),
    "aten::max_pool3d": _pool(1, 2, 3, 4, 5),
    "aten::max_pool1d_with_indices": _pool(1, 2, 3, 4, 5),
    "aten::max_pool2d_with_indices": _pool(1, 2, 3, 4, 5),
    "aten::avg_pool1d": _pool(1, 2, 3, None, 4),
    "aten::avg_pool2d": _pool(1, 2, 3, None, 4),
    "aten::avg_pool3d": _pool(1, 2, 3, None, 4),
    "aten::adaptive_avg_pool1d": _adaptive_pool,
    "aten::adaptive_avg_pool2d": _adaptive_pool,
    "aten::adaptive_avg_pool3d": _adaptive_pool,
    "aten::adaptive_max_pool1d": _adaptive_pool,
    "aten::adaptive_max_pool2d": _adaptive_pool,
    "aten::im2col": _im2col,
    "aten::istft": _istft,
    "aten::col2im": _col2im,
    "aten::index": _index,
    "aten::repeat_interleave": _repeat_interleave,
    "aten::ravel": _ravel,
    "aten::fft_fft": _fft,
    "aten::fft_ifft": _fft,
    "aten::fft_rfft": _fft,
    "aten::mse_loss": _loss(2),
    "aten::cross_entropy_loss": _loss(3),
    "aten::binary_cross_entropy_with_logits": _loss(4),
    "aten::diff": _diff,
    "aten::stack": _stack,
    "aten::hstack": _stack,
    "aten::broadcast_tensors": _broadcast_tensors,
    "aten::take_along_dim": _take_along_dim,
    "aten::hsplit": _hsplit,
    "aten::histc": _static_out,
    "aten::linalg_cross": _broadcasting,
    "aten::_native_multi_head_attention": _multi_head_attention,
    "aten::embedding_bag": _embedding_bag,
    "aten::_embedding_bag": _embedding_bag,
    "aten::_grouped_mm": _grouped_mm,
    "aten::to_padded_tensor": _to_padded_tensor,
    "quantized::conv1d": _quantized_conv,
    "quantized::conv2d": _quantized_conv,
    "quantized::conv2d_relu": _quantized_conv,
    "quantized::linear": _quantized_linear,
    "quantized::linear_relu": _quantized_linear,
    "quantized::matmul": _quantized_matmul,
    "quantized::cat": _quantized_cat,
    **{f"quantized::{k}": _same_as_input for k in (
        "batch_norm2d", "hardswish", "relu6", "leaky_relu", "mul_scalar", "add_scalar", "sigmoid", "hardsigmoid")},
    **{f"quantized::{k}": _broadcasting for k in ("mul", "add", "add_relu")},
})

def _scaled(dim: DimExpr | None, factor: int, divide: bool = False) -> DimExpr | None:
    if dim is None:
        return None
    return mark(dim // factor if divide else dim * factor)


def _pixel_shuffle(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """pixel_shuffle(x, r) / pixel_unshuffle(x, r): the last two dims times (divided by) r,
    the channels divided by (times) r*r, the leading ones kept."""
    x, r = _input(op, 0), _int_arg(op, 1)
    if x is None or r is None or x.rank < 3:
        return None
    unshuffle = op.kind == "aten::pixel_unshuffle"
    *lead, c, h, w = x.dyn
    return [(*lead, _scaled(c, r * r, divide=not unshuffle), _scaled(h, r, unshuffle), _scaled(w, r, unshuffle))]


def _tile(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """tile(x, reps): reps aligned to x's last dims (missing ones are 1, extra ones new
    leading dims of their static size); each dim times its repeat."""
    x = _input(op, 0)
    reps = const_ints(op.inputs[1]) if x is not None and len(op.inputs) > 1 else []
    if x is None or not isinstance(op.inputs[1], ListValue) or len(reps) != len(op.inputs[1].items):
        return None
    reps = [1] * (x.rank - len(reps)) + reps
    new = len(reps) - x.rank
    return [tuple([None] * new + [_scaled(m, k) for m, k in zip(x.dyn, reps[new:])])]


_KIND_RULES.update({"aten::pixel_shuffle": _pixel_shuffle, "aten::pixel_unshuffle": _pixel_shuffle,
                    "aten::tile": _tile, "aten::cross": _broadcasting})

# Aliases and private/copy forms of kinds that have a rule: the same rule.
_KIND_ALIASES = {
    "aten::divide": "aten::div", "aten::multiply": "aten::mul", "aten::greater": "aten::gt",
    "aten::greater_equal": "aten::ge", "aten::less": "aten::lt", "aten::less_equal": "aten::le",
    "aten::not_equal": "aten::ne", "aten::arctan2": "aten::atan2", "aten::negative": "aten::neg",
    "aten::fix": "aten::trunc", "aten::rad2deg": "aten::deg2rad", "aten::_softmax": "aten::softmax",
    "aten::_log_softmax": "aten::log_softmax", "aten::special_softmax": "aten::softmax",
    "aten::special_log_softmax": "aten::log_softmax", "aten::_to_copy": "aten::to", "aten::to_dtype": "aten::to",
    "aten::detach_copy": "aten::detach", "aten::_conj": "aten::conj", "aten::_conj_physical": "aten::conj",
    "aten::conj_physical": "aten::conj", "aten::_prelu_kernel": "aten::prelu", "aten::special_erf": "aten::erf",
    "aten::special_erfc": "aten::erfc", "aten::special_erfinv": "aten::erfinv", "aten::special_exp2": "aten::exp2",
    "aten::special_expm1": "aten::expm1", "aten::special_log1p": "aten::log1p", "aten::special_logit": "aten::logit",
    "aten::special_psi": "aten::digamma", "aten::special_digamma": "aten::digamma", "aten::special_sinc": "aten::sinc",
    "aten::special_xlogy": "aten::xlogy", "aten::logaddexp2": "aten::logaddexp", "aten::i0": "aten::abs",
    "aten::special_i0": "aten::abs", "aten::special_i1": "aten::abs", "aten::special_i1e": "aten::abs",
    "aten::isneginf": "aten::isinf", "aten::isposinf": "aten::isinf", "aten::unsafe_split": "aten::split",
    "aten::split_copy": "aten::split", "aten::unbind_copy": "aten::unbind", "aten::reshape_as": "aten::view_as",
    "aten::_adaptive_avg_pool2d": "aten::adaptive_avg_pool2d",
    "aten::_adaptive_avg_pool3d": "aten::adaptive_avg_pool3d",
    "aten::adaptive_max_pool3d": "aten::adaptive_max_pool2d", "aten::max_pool3d_with_indices": "aten::max_pool3d",
}
_KIND_RULES.update({alias: _KIND_RULES[kind] for alias, kind in _KIND_ALIASES.items()})
