"""Dynamic-dim rules of the IR's shape ops: views, reshapes, flattening, squeezes,
permutations, slices, pads, fills, reductions, matmul, convolutions, expansions (each over
the op's first input, its output and its other arguments; ``dynamic.py``'s one table,
``RULES``, finds them by kind), and the helpers every dynamic-dim rule uses (a dim's size
and mark, size arguments as expressions). The other ops' rules are in ``dynamic_kinds.py``.

Rules place dims by the op's arguments (positions, size lists), never by matching traced
sizes where a dynamic dim is concerned: an axis traced at 1 matches every unit dim, and any
traced size may equal a merged dim by chance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fastnnef.dim import UNKNOWN, DimExpr, Size, broadcast_all, ceil_div, dmin, is_negative, windows
from fastnnef.torch_graph.ir.data import Const, IROp, IRValue, ListValue, SymInt, TensorValue


def mark(size: Size) -> DimExpr | None:
    """A dim's mark: ``None`` when its size is a constant, else its expression."""
    return None if isinstance(size, int) else size


def size_of(t: TensorValue, d: int) -> Size:
    """The size of ``t``'s dim ``d``: its traced value when static, else its expression."""
    mark = t.dyn[d]
    return t.shape[d] if mark is None else mark


def tensor_inputs(op: IROp) -> list[TensorValue]:
    return [v for v in op.inputs if isinstance(v, TensorValue)]


def int_expr(value: IRValue) -> Size | None:
    """The expression of a size argument (a static int or a known dynamic size), else None."""
    if isinstance(value, SymInt):
        return None if value.expr.is_unknown else value.expr
    if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    return None


def size_list_marks(sizes: IRValue, rank: int) -> tuple[DimExpr | None, ...] | None:
    """The dims of a size list: ``None`` for a non-negative constant, the expression of a
    dynamic size (``?`` when unknown); ``None`` for the whole list if anything else (-1)."""
    items = sizes.items if isinstance(sizes, ListValue) else []
    if len(items) != rank:
        return None
    dyn: list[DimExpr | None] = []
    for item in items:
        if isinstance(item, Const) and isinstance(item.value, int) and item.value >= 0:
            dyn.append(None)
        elif isinstance(item, SymInt):
            dyn.append(item.expr)
        else:
            return None
    return tuple(dyn)


def flat_items(values: Sequence[IRValue]) -> list[IRValue]:
    out: list[IRValue] = []
    for v in values:
        out += v.items if isinstance(v, ListValue) else [v]
    return out


def const_ints(value: IRValue) -> list[int]:
    """The int constants of a value or of a list's items (others skipped)."""
    items = value.items if isinstance(value, ListValue) else [value]
    return [int(v.value) for v in items if isinstance(v, Const)]


def _window_dyn(x: TensorValue, out: TensorValue, _args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """Reshape: static dims in the common prefix/suffix stay static; the window between is
    dynamic-unknown if it takes a dynamic input dim. A dynamic dim never counts as kept
    because its traced size matches: a size traced at 1 matches every unit dim, and any
    traced size may match a merged dim by chance (``[N, 3] -> [N/3, 3, 3]`` at N = 3)."""
    pre = 0
    while pre < min(x.rank, out.rank) and x.dyn[pre] is None and x.shape[pre] == out.shape[pre]:
        pre += 1
    suf = 0
    while (
        suf < min(x.rank, out.rank) - pre
        and x.dyn[x.rank - 1 - suf] is None
        and x.shape[x.rank - 1 - suf] == out.shape[out.rank - 1 - suf]
    ):
        suf += 1
    window_dyn = any(x.dyn[d] is not None for d in range(pre, x.rank - suf))
    dyn: list[DimExpr | None] = list(x.dyn[:pre])
    dyn += [UNKNOWN if window_dyn else None] * (out.rank - pre - suf)
    dyn += list(x.dyn[x.rank - suf :]) if suf else []
    return tuple(dyn)


def sizes_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """view/reshape with an explicit size list: each output dim is static or carries its
    size's expression, and a -1 what is left of x's volume where that is known; else the
    window rule."""
    items = args[0].items if args and isinstance(args[0], ListValue) else []
    free = [d for d, v in enumerate(items) if isinstance(v, Const) and v.value == -1]
    if len(free) == 1 and len(items) == out.rank:
        known = list(items)
        known[free[0]] = Const("", 0)
        dyn = size_list_marks(ListValue("", known), out.rank)
        if dyn is not None:
            rest = _remaining(x, known)
            if rest == UNKNOWN:  # where x's dims reach the output unchanged, the window rule knows it
                rest = _window_dyn(x, out, args)[free[0]]
            return dyn[: free[0]] + (rest,) + dyn[free[0] + 1 :]
    dyn = size_list_marks(args[0], out.rank) if args else None
    return _window_dyn(x, out, args) if dyn is None else dyn


def _remaining(x: TensorValue, others: Sequence[IRValue]) -> DimExpr | None:
    """The size of a reshape's -1: x's volume over the ``others`` sizes (the -1 itself
    given as 0). Static, or one dynamic dim of x scaled, when the others' dynamic sizes
    are x's minus at most that one and the static parts divide; else unknown."""
    x_syms = [d for d in x.dyn if d is not None and not d.is_unknown]
    o_syms = [v.expr for v in others if isinstance(v, SymInt) and not v.expr.is_unknown]
    static_x = math.prod(x.shape[d] for d in range(x.rank) if x.dyn[d] is None)
    static_o = math.prod(int(v.value) or 1 for v in others if isinstance(v, Const))
    # Unknown sizes cancel only in pairs of equal traced sizes other than 1 (``reshape(b,
    # x.size(1), -1)`` of a row count the IR lost); a size traced at 1 proves nothing.
    x_unknown = sorted(x.shape[d] for d in range(x.rank) if x.dyn[d] == UNKNOWN)
    o_unknown = sorted(v.traced for v in others if isinstance(v, SymInt) and v.expr.is_unknown)
    if x_unknown != o_unknown or 1 in x_unknown or static_o == 0 or static_x % static_o:
        return UNKNOWN
    left = list(x_syms)
    for expr in o_syms:
        if expr not in left:
            return UNKNOWN
        left.remove(expr)
    factor = static_x // static_o
    if not left:
        return None
    return UNKNOWN if len(left) > 1 else mark(left[0] * factor)


def volume_mark(x: TensorValue, dims: Sequence[int]) -> DimExpr | None:
    """The mark of the product of ``x``'s ``dims``: static, a linear expression when at
    most one of them is dynamic (``4*TILES``), else unknown."""
    total: Size = 1
    for d in dims:
        total = total * size_of(x, d)
        if isinstance(total, DimExpr) and not total.is_linear:
            return UNKNOWN
    return mark(total)


def flatten_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """flatten(x, start, end): the merged dims' product, the others unchanged (by their
    positions, never by their traced sizes: a dynamic axis traced at 1 stays dynamic)."""
    bounds = [const_ints(a) for a in args[:2]]
    if x.rank == 0 or len(bounds) != 2 or not all(len(b) == 1 for b in bounds):
        return None
    start, end = bounds[0][0] % x.rank, bounds[1][0] % x.rank
    if out.rank != x.rank - (end - start):
        return None
    return x.dyn[:start] + (volume_mark(x, range(start, end + 1)),) + x.dyn[end + 1 :]


def unflatten_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """unflatten(x, dim, sizes): the sizes' marks in place of ``dim``, a -1 taking the
    rest of the dim where the other sizes divide it exactly (else unknown)."""
    dims = const_ints(args[0]) if args else []
    items = args[1].items if len(args) > 1 and isinstance(args[1], ListValue) else []
    if x.rank == 0 or len(dims) != 1 or not items or out.rank != x.rank - 1 + len(items):
        return None
    a = dims[0] % x.rank
    free = [k for k, v in enumerate(items) if isinstance(v, Const) and v.value == -1]
    known = [Const("", 1) if k in free else v for k, v in enumerate(items)]
    marks = size_list_marks(ListValue("", known), len(items))
    if marks is None or len(free) > 1:
        return None
    if free:
        others = math.prod(int(v.value) for v in known if isinstance(v, Const))
        exact = _exact_quotient(size_of(x, a), others) if not any(m is not None for m in marks) else None
        rest = None if isinstance(exact, int) else exact or UNKNOWN
        marks = marks[: free[0]] + (rest,) + marks[free[0] + 1 :]
    return x.dyn[:a] + marks + x.dyn[a + 1 :]


def _exact_quotient(size: Size, k: int) -> Size | None:
    """``size / k`` when ``k`` divides ``size`` at every length of its axes, else None."""
    if k <= 0 or size == UNKNOWN:
        return None
    quotient = size // k
    return quotient if quotient * k == size else None


def squeeze_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """squeeze(x[, dims]): x's marks without the dims the trace removed (the named ones, or
    all, of traced size 1), chosen by position, not by matching sizes."""
    chosen = range(x.rank) if not args or (isinstance(args[0], Const) and args[0].value is None) else [
        d % x.rank for d in const_ints(args[0])]
    if x.rank == 0:
        return None
    gone = {d for d in chosen if x.shape[d] == 1}
    if out.rank != x.rank - len(gone):
        return None
    return tuple(m for d, m in enumerate(x.dyn) if d not in gone)


def reduction_dyn(dim_arg: int) -> DynRule:
    """The rule of a reduction whose dims are argument ``dim_arg`` after self: the reduced
    dims become static (1, or gone without keepdim), the others keep their marks. By the
    dims named, not by sizes: a dynamic axis traced at 1 is then reduced or kept as asked."""

    def rule(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
        if out.rank == 0:
            return ()
        arg = args[dim_arg] if len(args) > dim_arg else None
        if isinstance(arg, Const) and arg.value is None:
            reduced = set(range(x.rank))
        elif isinstance(arg, Const) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
            reduced = {arg.value % x.rank}
        elif isinstance(arg, ListValue) and len(const_ints(arg)) == len(arg.items):
            reduced = {d % x.rank for d in const_ints(arg)} or set(range(x.rank))
        else:
            return None
        if out.rank == x.rank:
            return tuple(None if d in reduced else m for d, m in enumerate(x.dyn))
        if out.rank == x.rank - len(reduced):
            return tuple(m for d, m in enumerate(x.dyn) if d not in reduced)
        return None

    return rule


def new_fill_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """new_zeros/new_full(self, size, ...): the size list's dims (self only gives the dtype)."""
    return size_list_marks(args[0], out.rank) if args else None


def expand_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """expand(self, sizes): -1 keeps self's dim (aligned on the right), a dynamic size its
    expression, a constant is static."""
    items = args[0].items if args and isinstance(args[0], ListValue) else []
    if len(items) != out.rank or out.rank < x.rank:
        return None
    lead = out.rank - x.rank
    dyn: list[DimExpr | None] = []
    for d, item in enumerate(items):
        if isinstance(item, SymInt):
            dyn.append(item.expr)
        elif isinstance(item, Const) and item.value == -1 and d >= lead:
            dyn.append(x.dyn[d - lead])
        elif isinstance(item, Const) and isinstance(item.value, int) and item.value >= 0:
            dyn.append(None)
        else:
            return None
    return tuple(dyn)


def expand_as_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """expand_as(self, other): other's dims (broadcast_to(self, size) goes by its size list)."""
    other = args[0] if args else None
    if isinstance(other, TensorValue) and other.rank == out.rank:
        return other.dyn
    if isinstance(other, ListValue):
        return expand_dyn(x, out, args)
    return None


def permute_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    perm = [p % x.rank for p in const_ints(args[0])]
    return tuple(x.dyn[p] for p in perm)


def transpose_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    if x.rank < 2:
        return x.dyn
    a, b = (const_ints(args[0]) + const_ints(args[1])) if len(args) >= 2 else (0, 1)
    dyn = list(x.dyn)
    a, b = a % x.rank, b % x.rank
    dyn[a], dyn[b] = dyn[b], dyn[a]
    return tuple(dyn)


def select_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """select(x, dim, index): x's dims without the selected one."""
    a = const_ints(args[0])[0] % x.rank
    return x.dyn[:a] + x.dyn[a + 1 :]


def movedim_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """movedim(x, source, destination): the moved dims land at their destinations, the
    others fill the remaining places in order (torch's definition)."""
    src = [s % x.rank for s in const_ints(args[0])]
    order: list[int | None] = [None] * x.rank
    for s, d in zip(src, const_ints(args[1])):
        order[d % x.rank] = s
    rest = iter(a for a in range(x.rank) if a not in src)
    return tuple(x.dyn[a if a is not None else next(rest)] for a in order)


def matrix_transpose_dyn(x: TensorValue, out: TensorValue, _args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """mT, mH, adjoint: the last two dims swapped."""
    return x.dyn[:-2] + (x.dyn[-1], x.dyn[-2]) if x.rank >= 2 else x.dyn


def reverse_dyn(x: TensorValue, out: TensorValue, _args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """numpy_T (x.T): every dim reversed."""
    return x.dyn[::-1]


def rot90_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """rot90(x, k, dims): an odd number of quarter turns swaps the two dims."""
    k, dims = const_ints(args[0])[0], [d % x.rank for d in const_ints(args[1])]
    dyn = list(x.dyn)
    if k % 2:
        dyn[dims[0]], dyn[dims[1]] = dyn[dims[1]], dyn[dims[0]]
    return tuple(dyn)


def window_count(size: DimExpr | None, frame: int, step: int) -> DimExpr | None:
    """The number of windows of ``frame`` cells every ``step`` over a dynamic ``size``
    (``dim.windows``)."""
    if size is None or size == UNKNOWN:
        return size
    return mark(windows(size, frame, step))


def unfold_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """unfold(x, dim, size, step): the windows replace the dim, the window axis comes last."""
    if x.rank == 0:
        return (None,)
    dim, size, step = (const_ints(a)[0] for a in args[:3])
    dyn = list(x.dyn)
    a = dim % x.rank
    dyn[a] = window_count(dyn[a], size, step)
    return tuple(dyn) + (None,)


def diagonal_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """diagonal(x, offset, dim1, dim2): the other dims in order, then the diagonal, whose
    length follows a dynamic plane only when both its dims are the same expression."""
    offset, d1, d2 = (const_ints(a)[0] for a in args[:3])
    a, b = d1 % x.rank, d2 % x.rank
    rest = tuple(x.dyn[d] for d in range(x.rank) if d not in (a, b))
    ea, eb = x.dyn[a], x.dyn[b]
    if ea is None and eb is None:
        return rest + (None,)
    if ea == eb and ea != UNKNOWN:
        return rest + (mark(ea - abs(offset)),)  # type: ignore[operator]
    return rest + (UNKNOWN,)


def _position(v: IRValue, size: Size, default: Size) -> Size | None:
    """A slice bound as torch reads it: None -> ``default``, INT64_MAX -> the end,
    negative -> from the end (clamped where the size is static), or a size expression."""
    if isinstance(v, Const) and v.value is None:
        return default
    if isinstance(v, SymInt):
        if v.expr.is_unknown:
            return None
        return size + v.expr if is_negative(v.expr) else v.expr  # from the end
    if not (isinstance(v, Const) and isinstance(v.value, int)):
        return None
    k = v.value
    if isinstance(size, int):
        return min(max(k + size if k < 0 else k, 0), size)
    if k >= 2**62:
        return size
    return size + k if k < 0 else k


def slice_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """slice(x, dim, start, end, step): the sliced dim is ``end - start`` (over ``step``)
    with bounds that may be dynamic sizes (``x[:, n - 4:]``), the others follow x."""
    a = const_ints(args[0])[0] % x.rank
    step = const_ints(args[3])[0] if len(args) > 3 and const_ints(args[3]) else 1
    size = size_of(x, a)
    if size == UNKNOWN:
        return x.dyn[:a] + (UNKNOWN,) + x.dyn[a + 1 :]
    begin, end = _position(args[1], size, 0), _position(args[2], size, size)
    if isinstance(size, DimExpr) and isinstance(end, int) and end > x.shape[a]:
        end = dmin(size, end)  # torch clamps an end past the axis (the handler writes the same)
    if begin is None or end is None:  # a bound whose expression the IR lost
        return x.dyn[:a] + (UNKNOWN,) + x.dyn[a + 1 :]
    # A static length is a static piece (of a dynamic axis, bounds within the traced size).
    return x.dyn[:a] + (mark(ceil_div(end - begin, step)),) + x.dyn[a + 1 :]


def narrow_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """narrow(x, dim, start, length): the length, constant or a dynamic size."""
    a = const_ints(args[0])[0] % x.rank
    length = args[2]
    mark = length.expr if isinstance(length, SymInt) else None
    return x.dyn[:a] + (mark,) + x.dyn[a + 1 :]


def pad_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """constant_pad_nd / pad(x, pad, ...): pairs from the last dim backwards, each adding
    ``before + after`` to its dim; amounts may be sizes of dynamic axes (window padding)."""
    items = args[0].items if args and isinstance(args[0], ListValue) else []
    amounts = [int_expr(v) for v in items]
    if len(amounts) % 2 or len(amounts) // 2 > x.rank or out.rank != x.rank:
        return None
    dyn = list(x.dyn)
    for k in range(len(amounts) // 2):
        d = x.rank - 1 - k
        before, after = amounts[2 * k], amounts[2 * k + 1]
        if dyn[d] == UNKNOWN or (dyn[d] is None and isinstance(before, int) and isinstance(after, int)):
            continue
        size = x.shape[d] if dyn[d] is None else dyn[d]
        dyn[d] = UNKNOWN if before is None or after is None else mark(size + before + after)  # type: ignore[operator]
    return tuple(dyn)


def stft_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """stft(x, n_fft, hop, ...): [*batch, L] -> [*batch, bins, frames], the frames of a
    dynamic L (padded by n_fft//2 each side when centred)."""
    if out.rank != x.rank + 1 or x.dyn[-1] is None:
        return None
    n_fft = const_ints(args[0])[0]
    hop_arg = args[1]
    hop = hop_arg.value if isinstance(hop_arg, Const) and hop_arg.value is not None else n_fft // 4
    center_overload = len(args) > 5 and isinstance(args[5], Const) and isinstance(args[5].value, str)
    length: DimExpr | None = x.dyn[-1]
    if center_overload and isinstance(args[4], Const) and args[4].value:
        length = x.dyn[-1] + 2 * (n_fft // 2)  # type: ignore[assignment]
    return x.dyn[:-1] + (None, window_count(length, n_fft, hop))


def unsqueeze_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    d = const_ints(args[0])[0] % out.rank
    return x.dyn[:d] + (None,) + x.dyn[d:]


def embedding_dyn(weight: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """embedding(weight, indices): the indices' dims, then the embedding's."""
    idx = args[0]
    assert isinstance(idx, TensorValue) and idx.rank + weight.rank - 1 == out.rank
    return idx.dyn + weight.dyn[1:]


def index_select_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """index_select(x, dim, index): x's dims with the indexed one replaced by the index's."""
    idx = args[1]
    assert isinstance(idx, TensorValue) and idx.rank <= 1 and x.rank == out.rank
    a = const_ints(args[0])[0] % x.rank
    return x.dyn[:a] + (idx.dyn[0] if idx.rank else None,) + x.dyn[a + 1 :]


def matmul_dyn(a: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """matmul: the batch dims' broadcast (``dim.broadcast_all``), then a's rows and b's
    columns (the contracted dim, dynamic or not, never reaches the output)."""
    b = args[0]
    assert isinstance(b, TensorValue)
    if a.rank == 1:  # vector @ matrix: b's batch dims and columns
        return b.dyn[:-2] + b.dyn[-1:] if b.rank > 1 else ()
    if b.rank == 1:  # matrix @ vector: a's batch dims and rows
        return a.dyn[:-1]
    try:
        batch = broadcast_all([[size_of(t, d) for d in range(t.rank - 2)] for t in (a, b)])
    except ValueError:
        return (UNKNOWN,) * out.rank
    return tuple(mark(s) for s in batch) + (a.dyn[-2], b.dyn[-1])


def sdpa_dyn(q: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...]:
    """scaled_dot_product_attention: the query's dims, with the values' last one (the
    mask's key axis never reaches the output)."""
    v = args[1]
    assert isinstance(v, TensorValue) and q.rank == out.rank
    return q.dyn[:-1] + v.dyn[-1:]


def conv_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[DimExpr | None, ...] | None:
    """Convolutions (``_convolution``, ``convNd``, ``conv_transposeNd``): batch and channels
    as in torch, each dynamic spatial size through its window arithmetic, (in + 2p -
    d(k-1) - 1) / s + 1, or (in - 1) s - 2p + d(k-1) + op + 1 transposed (a size: floor
    and integer division agree). String paddings: 'same' keeps the size."""
    weight = args[0] if args else None
    if not isinstance(weight, TensorValue) or out.rank != x.rank or x.rank != weight.rank:
        return None
    n = x.rank - 2
    if len(args) < 4:
        return None
    stride, padding = args[2], args[3]
    dilation: IRValue | None = args[4] if len(args) > 4 else None
    output_padding: IRValue | None = None
    transposed = False
    if len(args) >= 8 and isinstance(args[5], Const) and isinstance(args[5].value, bool):  # _convolution
        output_padding, transposed = args[6], args[5].value
    # else convNd(input, weight, bias, stride, padding, dilation, groups)
    strides, dilations = per_axis(stride, n, 1), per_axis(dilation, n, 1)
    out_pads = per_axis(output_padding, n, 0)
    same = isinstance(padding, Const) and padding.value == "same"
    valid = isinstance(padding, Const) and padding.value == "valid"
    pads = [0] * n if valid or same else per_axis(padding, n, 0)
    if None in (strides, dilations, pads, out_pads):
        return None
    kernel = weight.shape[2:]
    dyn: list[DimExpr | None] = [x.dyn[0], None]
    for a in range(n):
        size = x.dyn[a + 2]
        if size is None or size == UNKNOWN or same:
            dyn.append(size if same or size == UNKNOWN else None)
            continue
        k, s_, d, p = kernel[a], strides[a], dilations[a], pads[a]  # type: ignore[index]
        if transposed:
            grown = (size - 1) * s_ - 2 * p + d * (k - 1) + out_pads[a] + 1  # type: ignore[index]
        else:
            grown = windows(size, k, s_, d, 2 * p)
        dyn.append(mark(grown))
    return tuple(dyn)


def per_axis(value: IRValue | None, n: int, default: int) -> list[int] | None:
    """A convolution's per-axis ints (one value expands to every axis); None if unknown."""
    if value is None or (isinstance(value, Const) and value.value is None):
        return [default] * n
    items = const_ints(value)
    if isinstance(value, ListValue) and len(items) != len(value.items):
        return None
    if len(items) == 1:
        return items * n
    return items if len(items) == n else None


DynRule = Callable[[TensorValue, TensorValue, Sequence[IRValue]], tuple[DimExpr | None, ...] | None]
# A shape rule returns the output's marks, or None where it cannot tell (the op then falls
# to the marks of no rule: unknown).
