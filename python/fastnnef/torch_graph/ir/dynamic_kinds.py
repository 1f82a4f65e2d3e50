"""Dynamic-dim rules over a whole op (every tensor output, list items included): elementwise
ops by broadcasting, ops keeping their input's dims, linear, chunks, recurrent layers,
reductions, pools, linear algebra, module calls by their extractor... Each rule is found by
its op's kind in ``dynamic.py``'s one table (``RULES``); the shape ops' rules, over their
first input, are in ``dynamic_shape.py``.

Rules place dims by the op's arguments (positions, size lists), never by matching traced
sizes where a dynamic dim is concerned. Broadcasting is ``dim.broadcast_all``, the rule
nnef/shapes.py applies to the NNEF ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fastnnef.dim import UNKNOWN, DimExpr, Size, broadcast, broadcast_all, windows
from fastnnef.torch_graph.ir.data import Const, IROp, ListValue, TensorValue
from fastnnef.torch_graph.ir.dynamic_shape import (
    const_ints,
    int_expr,
    mark,
    per_axis,
    size_list_marks,
    size_of,
    tensor_inputs,
    volume_mark,
)

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


def same_as_input_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """Every output has input 0's dims (unary elementwise ops, casts, norms, softmax, scans)."""
    x = _input(op, 0)
    return None if x is None else [x.dyn for _ in outs]


def broadcasting_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """Elementwise ops over several tensors: their broadcast (``dim.broadcast_all``, the
    rule nnef/shapes.py applies to the NNEF ops)."""
    tensors = tensor_inputs(op)
    if not tensors:
        return None
    try:
        return [_marks(broadcast_all([_dims(t) for t in tensors]))] * len(outs)
    except ValueError:
        return None


def linear_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """linear(x, weight, bias): x's dims with the last one replaced by the weight's rows."""
    x, w = _input(op, 0), _input(op, 1)
    if x is None or w is None or x.rank == 0:
        return None
    return [x.dyn[:-1] + (w.dyn[:1] if w.rank == 2 else ())]


def addmm_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """addmm(bias, m1, m2): m1's rows by m2's columns (the bias broadcasts to them)."""
    m1, m2 = _input(op, 1), _input(op, 2)
    if m1 is None or m2 is None or m1.rank != 2 or m2.rank != 2:
        return None
    return [(m1.dyn[0], m2.dyn[1])]


def like_input_dyn(i: int) -> KindRule:
    """The output has tensor input ``i``'s dims (view_as: other; gather: the index)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        t = _input(op, i)
        return None if t is None else [t.dyn]

    return rule


def one_hot_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """one_hot(x, num_classes): x's dims, then the classes (a constant)."""
    x, classes = _input(op, 0), _size_arg(op, 1)
    if x is None or classes is None:
        return None
    return [x.dyn + (mark(classes),)]


def eye_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """eye(n[, m], ...): sizes that may be dynamic (``torch.eye(x.size(0))``)."""
    n = _size_arg(op, 0)
    m = _size_arg(op, 1) if len(op.inputs) == 6 else n  # eye.m has one argument more
    return None if n is None or m is None else [(mark(n), mark(m))]


def without_dim_dyn(dim_arg: int, shrink: int | None) -> KindRule:
    """Input 0's dims with the dim at argument ``dim_arg`` shortened by ``shrink``
    (cumulative_trapezoid: by one), or removed when ``shrink`` is None (trapezoid)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        x, d = _input(op, 0), _int_arg(op, dim_arg)
        if x is None or d is None or x.rank == 0:
            return None
        a = d % x.rank
        return [x.dyn[:a] + (() if shrink is None else (mark(size_of(x, a) - shrink),)) + x.dyn[a + 1 :]]

    return rule


def pair_distance_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def cdist_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def pdist_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """pdist(x, p): the n(n-1)/2 pairs of x's n rows."""
    x = _input(op, 0)
    if x is None or x.rank != 2:
        return None
    n = size_of(x, 0)
    return [(mark(n * (n - 1) // 2),)]


def diag_embed_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """diag_embed(x, offset, dim1, dim2): x's last dim n becomes an (n+|offset|)-square
    plane at dim1 and dim2, x's other dims fill the remaining places in order."""
    x, offset, d1, d2 = _input(op, 0), _int_arg(op, 1), _int_arg(op, 2), _int_arg(op, 3)
    if x is None or x.rank == 0 or offset is None or d1 is None or d2 is None:
        return None
    rank = x.rank + 1
    side = mark(size_of(x, x.rank - 1) + abs(offset))
    rest = iter(x.dyn[:-1])
    return [tuple(side if p in (d1 % rank, d2 % rank) else next(rest) for p in range(rank))]


def view_as_real_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None else [x.dyn + (None,)]


def view_as_complex_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn[:-1]]


def glu_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """glu(x, dim): the dim halved."""
    x, d = _input(op, 0), _int_arg(op, 1)
    if x is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    return [x.dyn[:a] + (mark(size_of(x, a) // 2),) + x.dyn[a + 1 :]]


def conv_tbc_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """conv_tbc(x [T, B, C], weight [k, C, C_out], bias, pad): T + 2 pad - k + 1 frames."""
    x, w, pad = _input(op, 0), _input(op, 1), _int_arg(op, 3)
    if x is None or w is None or pad is None or x.rank != 3:
        return None
    return [(mark(size_of(x, 0) + 2 * pad - w.shape[0] + 1), x.dyn[1], None)]


def pieces_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def unbind_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x, d = _input(op, 0), _int_arg(op, 1)
    if x is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    return [x.dyn[:a] + x.dyn[a + 1 :]] * len(outs)


def meshgrid_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def recurrent_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """lstm / gru / rnn_tanh / rnn_relu (input, hx, params, has_biases, layers, dropout,
    train, bidirectional, batch_first): the output has the input's time and batch dims,
    the final states [layers * directions, batch, hidden] the input's batch."""
    x, batch_first = _input(op, 0), _bool_arg(op, 8)
    if x is None or batch_first is None or x.rank not in (2, 3):
        return None
    batch: Marks = () if x.rank == 2 else (x.dyn[0 if batch_first else 1],)
    return [x.dyn[:-1] + (None,)] + [(None,) + batch + (None,)] * (len(outs) - 1)


def repeat_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """repeat(x, repeats): each dim times its repeat, new leading dims their repeats."""
    x = _input(op, 0)
    repeats = op.inputs[1] if len(op.inputs) > 1 else None
    reps = [int_expr(v) for v in repeats.items] if isinstance(repeats, ListValue) else []
    if x is None or None in reps or len(reps) < x.rank:
        return None
    lead = len(reps) - x.rank
    return [tuple(mark((1 if i < lead else size_of(x, i - lead)) * r) for i, r in enumerate(reps))]  # type: ignore[operator]


def upsample_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """upsample_* / _upsample_*(x, output_size, ...): batch and channels kept, the spatial
    dims the output size's where it is given, else (scale factors) unknown where x's vary."""
    x = _input(op, 0)
    if x is None or x.rank < 3:
        return None
    given = size_list_marks(op.inputs[1], x.rank - 2) if len(op.inputs) > 1 else None
    spatial = given if given is not None else tuple(None if m is None else UNKNOWN for m in x.dyn[2:])
    return [x.dyn[:2] + spatial]




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


def max_like_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """max / min (x, other): broadcast; (x, dim, keepdim): values and indices reduced;
    (x): a 0-d result. aminmax(x, dim=None, keepdim)."""
    x = _input(op, 0)
    if x is None:
        return None
    if _input(op, 1) is not None:
        return broadcasting_dyn(op, outs)
    if len(op.inputs) == 1:
        return [()] * len(outs)
    dims = _dim_list(op, 1, x.rank) if x.rank else set()
    keep = _bool_arg(op, 2)
    if dims is None or keep is None:
        return None
    return [_reduced(x, dims, keep)] * len(outs)


def reduction_of_dyn(dim_arg: int, keep_arg: int) -> KindRule:
    """A reduction over the dims at argument ``dim_arg`` with keepdim at ``keep_arg``."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        x = _input(op, 0)
        if x is None:
            return None
        dims, keep = _dim_list(op, dim_arg, x.rank), _bool_arg(op, keep_arg)
        return None if dims is None or keep is None else [_reduced(x, dims, keep)] * len(outs)

    return rule


def topk_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """topk(x, k, dim, ...): values and indices with k along dim."""
    x, k, d = _input(op, 0), _size_arg(op, 1), _int_arg(op, 2)
    if x is None or k is None or d is None or x.rank == 0:
        return None
    a = d % x.rank
    return [x.dyn[:a] + (mark(k),) + x.dyn[a + 1 :]] * len(outs)


def native_layer_norm_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """native_layer_norm(x, normalized_shape, ...): x's dims, then mean and rstd with the
    normalized dims 1."""
    x = _input(op, 0)
    n = len(op.inputs[1].items) if len(op.inputs) > 1 and isinstance(op.inputs[1], ListValue) else None
    if x is None or n is None:
        return None
    stats = x.dyn[: x.rank - n] + (None,) * n
    return [x.dyn] + [stats] * (len(outs) - 1)


def native_group_norm_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """native_group_norm(x, weight, bias, N, C, HxW, group, eps): x's dims, mean and rstd
    [N, group]."""
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn] + [(x.dyn[0], None)] * (len(outs) - 1)


def mv_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    a = _input(op, 0)
    return None if a is None or a.rank != 2 else [a.dyn[:1]]


def outer_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    a, b = _input(op, 0), _input(op, 1)
    return None if a is None or b is None or a.rank != 1 or b.rank != 1 else [a.dyn + b.dyn]


def scalar_out_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """dot, vdot: a 0-d result."""
    return [()] * len(outs)


def kron_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """kron(a, b): dim by dim products (ranks aligned on the right)."""
    a, b = _input(op, 0), _input(op, 1)
    if a is None or b is None:
        return None
    rank = max(a.rank, b.rank)
    da, db = (1,) * (rank - a.rank) + _dims(a), (1,) * (rank - b.rank) + _dims(b)
    return [_marks([x * y for x, y in zip(da, db)])]


def bilinear_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """bilinear(x1, x2, weight, bias): x1's dims with the last one the weight's rows."""
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn[:-1] + (None,)]


def einsum_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def atleast_2d_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    if x is None:
        return None
    return [(None,) * (2 - x.rank) + x.dyn if x.rank < 2 else x.dyn]


def grid_sampler_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """grid_sampler(x [N, C, *in], grid [N, *out, k], ...): [N, C, *out]."""
    x, grid = _input(op, 0), _input(op, 1)
    return None if x is None or grid is None or x.rank < 3 else [x.dyn[:2] + grid.dyn[1:-1]]


def pool_dyn(kernel_arg: int, stride_arg: int, pad_arg: int, dil_arg: int | None, ceil_arg: int) -> KindRule:
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


def adaptive_pool_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """adaptive_*_pool(x, output_size): the leading dims kept, the output size's after."""
    x = _input(op, 0)
    sizes = op.inputs[1] if len(op.inputs) > 1 else None
    n = len(sizes.items) if isinstance(sizes, ListValue) else 0
    marks = size_list_marks(sizes, n) if sizes is not None and n else None
    return None if x is None or marks is None or x.rank < n else [x.dyn[: x.rank - n] + marks] * len(outs)


def istft_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def im2col_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """im2col(x [N, C, H, W], kernel, ...): [N, C*kh*kw, L], the number of patches L
    unknown where H or W varies."""
    x, kernel = _input(op, 0), const_ints(op.inputs[1]) if len(op.inputs) > 1 else []
    if x is None or x.rank not in (3, 4) or len(kernel) != 2:
        return None
    channels = mark(size_of(x, x.rank - 3) * kernel[0] * kernel[1])
    patches = None if x.dyn[-2] is None and x.dyn[-1] is None else UNKNOWN
    return [x.dyn[: x.rank - 3] + (channels, patches)]


def col2im_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """col2im(x [N, C*k, L], output_size, ...): [N, C, *output_size]."""
    x = _input(op, 0)
    sizes = size_list_marks(op.inputs[1], 2) if x is not None and len(op.inputs) > 1 else None
    return None if x is None or sizes is None or x.rank != 3 else [(x.dyn[0], None) + sizes]


def index_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def repeat_interleave_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def ravel_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None else [(volume_mark(x, range(x.rank)),)]


def fft_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def loss_dyn(reduction_arg: int) -> KindRule:
    """Losses: 0-d when reduced (mean, sum), the operands' broadcast otherwise
    (cross_entropy: the target's dims)."""

    def rule(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
        reduction = _int_arg(op, reduction_arg)
        if reduction is None:
            return None
        if reduction:
            return [()]
        if op.kind == "aten::cross_entropy_loss":
            return like_input_dyn(1)(op, outs)
        return broadcasting_dyn(op, outs)

    return rule


def diff_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def stack_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def broadcast_tensors_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    items = op.inputs[0].items if op.inputs and isinstance(op.inputs[0], ListValue) else []
    if not all(isinstance(t, TensorValue) for t in items):
        return None
    try:
        return [_marks(broadcast_all([_dims(t) for t in items if isinstance(t, TensorValue)]))] * len(outs)
    except ValueError:
        return None


def take_along_dim_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def hsplit_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """hsplit(x, sections): pieces along dim 1 (0 for vectors), unknown where it varies."""
    x = _input(op, 0)
    if x is None or x.rank == 0:
        return None
    a = 0 if x.rank == 1 else 1
    return [x.dyn[:a] + (None if x.dyn[a] is None else UNKNOWN,) + x.dyn[a + 1 :]] * len(outs)


def static_out_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """histc: as many bins as asked, whatever the input."""
    return [(None,) * o.rank for o in outs]


def embedding_bag_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def grouped_mm_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def multi_head_attention_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """_native_multi_head_attention(q [B, L, E], k [B, S, E], ...): the output [B, L, E],
    the weights [B, L, S] (or [B, heads, L, S] not averaged)."""
    q, k = _input(op, 0), _input(op, 1)
    if q is None or k is None or q.rank != 3 or k.rank != 3:
        return None
    marks = [q.dyn[:-1] + (None,)]
    for o in outs[1:]:
        marks.append((q.dyn[0],) + (None,) * (o.rank - 3) + (q.dyn[1], k.dyn[1]) if o.rank >= 3 else (None,) * o.rank)
    return marks


def quantized_conv_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """quantized::conv* (x, packed params, scale, zero point): batch kept, channels static,
    spatial dims unknown where they vary (the kernel sits in the packed parameters)."""
    x = _input(op, 0)
    if x is None or x.rank < 3:
        return None
    return [(x.dyn[0], None) + tuple(None if m is None else UNKNOWN for m in x.dyn[2:])]


def quantized_linear_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    x = _input(op, 0)
    return None if x is None or x.rank == 0 else [x.dyn[:-1] + (None,)]


def quantized_matmul_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    a, b = _input(op, 0), _input(op, 1)
    if a is None or b is None or min(a.rank, b.rank) < 2 or outs[0].rank != max(a.rank, b.rank):
        return None
    return _batched(a, b, a.dyn[-2], b.dyn[-1])


def quantized_cat_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
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


def to_padded_tensor_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """to_padded_tensor(nested, padding, output_size): the output size's dims (a nested
    tensor has no dims in the IR; nn.TransformerEncoder passes its input's sizes)."""
    sizes = size_list_marks(op.inputs[2], outs[0].rank) if len(op.inputs) > 2 and len(outs) == 1 else None
    return None if sizes is None else [sizes]


def module_call_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """A module kept whole (``wired_custom::``): its extractor tells its outputs' dims
    (``ModuleInfoExtractor.output_dims``), from its tensor inputs' marks."""
    if op.extractor is None:
        return None
    marks = op.extractor.output_dims([t.dyn for t in tensor_inputs(op)], [o.rank for o in outs])
    return None if marks is None else [tuple(m) for m in marks]



def _scaled(dim: DimExpr | None, factor: int, divide: bool = False) -> DimExpr | None:
    if dim is None:
        return None
    return mark(dim // factor if divide else dim * factor)


def pixel_shuffle_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """pixel_shuffle(x, r) / pixel_unshuffle(x, r): the last two dims times (divided by) r,
    the channels divided by (times) r*r, the leading ones kept."""
    x, r = _input(op, 0), _int_arg(op, 1)
    if x is None or r is None or x.rank < 3:
        return None
    unshuffle = op.kind == "aten::pixel_unshuffle"
    *lead, c, h, w = x.dyn
    return [(*lead, _scaled(c, r * r, divide=not unshuffle), _scaled(h, r, unshuffle), _scaled(w, r, unshuffle))]


def tile_dyn(op: IROp, outs: list[TensorValue]) -> list[Marks] | None:
    """tile(x, reps): reps aligned to x's last dims (missing ones are 1, extra ones new
    leading dims of their static size); each dim times its repeat."""
    x = _input(op, 0)
    reps = const_ints(op.inputs[1]) if x is not None and len(op.inputs) > 1 else []
    if x is None or not isinstance(op.inputs[1], ListValue) or len(reps) != len(op.inputs[1].items):
        return None
    reps = [1] * (x.rank - len(reps)) + reps
    new = len(reps) - x.rank
    return [tuple([None] * new + [_scaled(m, k) for m, k in zip(x.dyn, reps[new:])])]
