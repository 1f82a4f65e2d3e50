"""Functionalization: in-place writes exported with torch's semantics.

The IR holds values, not storage. Every traced tensor reaches its storage through a
``Ref``: the root of a storage (its current value, and a version that every write bumps)
or a view of a parent ``Ref`` by one view op (a ``ViewStep``), with the value it had at
some version. The IR builder (ir/builder.py) reads tensors through ``Storages.resolve`` and hands
in-place ops to ``Storages.write``:

- ``x.add_(1)`` where ``x`` views nothing: ``add(x, 1)`` becomes the root's value;
- ``y[:, 1:3][:, 0] = v``: the written value goes back up the chain of views, each step
  through its inverse (select -> select_scatter into ``y[:, 1:3]``, slice -> slice_scatter
  into ``y``), and the result is ``y``'s new version;
- a view read after a write into its storage is taken again from the new root, since
  torch's views see the write (one read per version).

Views whose elements overlap or interleave (expand, as_strided, unfold, diagonal...) have
no inverse here: a write through one is refused, naming the op, the line and a workaround.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fastnnef.dim import DimExpr
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.torch_graph.ir import data as ir_data
from fastnnef.torch_graph.ir.fold import Thunk, aten_thunk

# Where an op comes from: (module path, user source line), as IROp.scope and IROp.source.
Site = tuple[str, str]
# Records one single-output op (or folds it) and returns its output value.
Emit = Callable[[str, list["ir_data.IRValue"], "ir_data.TensorValue", Site, Thunk | None], "ir_data.IRValue"]

# View ops (output 0 shares input 0's storage), by how a write into the view reaches
# the viewed tensor: the inverse of the view.
_PERMUTES = """aten::transpose aten::swapaxes aten::swapdims aten::t aten::numpy_T aten::T aten::mT
    aten::permute aten::movedim aten::moveaxis"""
_RESHAPES = """aten::view aten::_reshape_alias aten::unflatten aten::view_as aten::squeeze
    aten::reshape aten::flatten aten::reshape_as"""
_OPAQUE = """aten::expand aten::expand_as aten::broadcast_to aten::as_strided
    aten::unfold aten::real aten::imag aten::view_as_real aten::view_as_complex aten::mH aten::H
    aten::adjoint"""
VIEWS: dict[str, str] = {
    "aten::slice": "slice",
    "aten::select": "select",
    "aten::narrow": "narrow",
    "aten::unsqueeze": "unsqueeze",
    "aten::diagonal": "diagonal",
    **dict.fromkeys(_PERMUTES.split(), "permute"),
    **dict.fromkeys(_RESHAPES.split(), "reshape"),
    **dict.fromkeys(_OPAQUE.split(), "opaque"),
}
# These copy instead when the input's strides allow no view (torch.reshape's rule).
MAYBE_VIEWS = frozenset({"aten::reshape", "aten::flatten", "aten::reshape_as"})
# View ops with a list of views as output: each item is a slice (or a select) of input 0.
LIST_VIEWS: dict[str, str] = {
    **dict.fromkeys(
        """aten::split aten::split_with_sizes aten::chunk aten::tensor_split aten::unsafe_chunk
        aten::unsafe_split aten::unsafe_split_with_sizes""".split(), "slice"),
    "aten::unbind": "select",
}
# In-place changes of a tensor's shape, not of its values: the tensor becomes that view.
INPLACE_VIEWS: dict[str, str] = {
    f"{kind}_": kind for kind in
    "aten::unsqueeze aten::squeeze aten::transpose aten::t aten::swapaxes aten::swapdims aten::as_strided".split()
}
# ``x |= m`` and friends: their out-of-place dunder.
_DUNDERS = {f"aten::__i{op}__": f"aten::__{op}__" for op in ("and", "or", "xor", "lshift", "rshift")}

# torch writes "to the end" of an axis as INT64_MAX; anything this large means the same.
_TO_END = 2**62


def is_in_place(kind: str) -> bool:
    """``aten::add_``, ``aten::index_put_``, ``aten::__ior__``... (not ``aten::__and__``)."""
    return (kind.endswith("_") and not kind.endswith("__")) or kind in _DUNDERS


def out_of_place(kind: str) -> str:
    """The kind of the op computing the value an in-place op leaves in its tensor: the
    in-place kind itself (the registry resolves ``op_`` to ``op``; ``copy_``, ``fill_``
    and ``zero_`` have handlers of their own), or the out-of-place dunder of ``x |= m``."""
    return _DUNDERS.get(kind, kind)


def where(kind: str, site: Site) -> str:
    scope, source = site
    return f"{kind} in {scope or '<root module>'}" + (f" ({source})" if source else "")


@dataclass(eq=False)
class ViewStep:
    """One view op from a parent tensor: how to take the view again, and how to undo it."""

    kind: str
    args: list[ir_data.IRValue]  # the op's inputs after the viewed tensor
    template: ir_data.TensorValue  # its traced output: dtype, shape, dynamic dims
    how: str  # VIEWS' category: slice, select, narrow, diagonal, permute, unsqueeze, reshape, opaque
    site: Site
    thunk: Thunk | None  # the op on constant inputs, for folding


@dataclass(eq=False)
class Ref:
    """How a traced tensor reaches its storage: a root (``parent`` is None; ``value`` is
    the current one) or a view of ``parent`` holding ``value`` as of ``version``."""

    value: ir_data.IRValue
    version: int = 0
    parent: Ref | None = None
    step: ViewStep | None = None
    recorded: bool = False  # a root that is a tensor constant of the trace

    def root(self) -> Ref:
        ref = self
        while ref.parent is not None:
            ref = ref.parent
        return ref


class Storages:
    """The storage of every traced tensor the builder has seen through a view or a write."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.refs: dict[int, Ref] = {}  # traced value (``Value.unique()``) -> its ref
        # Traced values that are tensor constants: the trace keeps the tensor, not its value
        # at that point, so one written in forward holds its value after the writes.
        self.recorded: set[int] = set()
        self._renamed = 0

    def root(self, key: int, value: ir_data.IRValue) -> Ref:
        """``value`` is a storage of its own (an input, a computed tensor, a copy)."""
        ref = Ref(value, recorded=key in self.recorded)
        self.refs[key] = ref
        return ref

    def alias(self, key: int, ref: Ref) -> None:
        """Traced value ``key`` is the same tensor as ``ref`` (detach, the result of x.add_)."""
        self.refs[key] = ref

    def view(self, key: int, parent: Ref, step: ViewStep, value: ir_data.IRValue) -> None:
        """Traced value ``key`` is ``value``, a view of ``parent`` by ``step``."""
        self.refs[key] = Ref(value, parent.root().version, parent, step)

    def is_current_view(self, src: Ref, dst: Ref) -> bool:
        """Whether ``src`` holds, as of now, the very elements ``dst`` views: then
        ``dst.copy_(src)`` changes nothing (the ``copy_`` that ends ``y[:, a:b] += v``)."""
        if src.version != src.root().version:
            return False
        a: Ref | None = src
        b: Ref | None = dst
        while a is not None and b is not None:
            if a is b:
                return True
            if a.step is None or b.step is None or a.step.kind != b.step.kind \
                    or [_key(v) for v in a.step.args] != [_key(v) for v in b.step.args]:
                return False
            a, b = a.parent, b.parent
        return False

    def resolve(self, ref: Ref) -> ir_data.IRValue:
        """The value of ``ref`` now: a view older than its storage is taken again."""
        if ref.parent is None:
            return ref.value
        version = ref.root().version
        if ref.version != version:
            step = ref.step
            assert step is not None
            parent = self.resolve(ref.parent)
            ref.value = self.emit(step.kind, [parent, *step.args], self._like(step.template), step.site, step.thunk)
            ref.version = version
        return ref.value

    def write(self, ref: Ref, new: ir_data.IRValue, kind: str, site: Site) -> None:
        """``ref``'s tensor now holds ``new``: write it back into each tensor it views,
        up to the root, whose version is bumped."""
        step_ref: Ref | None = ref
        while step_ref is not None and step_ref.step is not None:
            if step_ref.step.how == "opaque":
                raise T2NErrorNotImplemented(
                    f"{where(kind, site)} writes in place into a view made by {step_ref.step.kind} "
                    f"({where(step_ref.step.kind, step_ref.step.site)}), whose elements do not map "
                    "one to one onto the viewed tensor's, so the write cannot be exported. Build "
                    "the new value out of place (torch.where, torch.cat, index_put on the whole "
                    "tensor) or write into .clone() of the view"
                )
            step_ref = step_ref.parent
        if ref.root().recorded:
            raise T2NErrorNotImplemented(
                f"{where(kind, site)} writes in place into a tensor constant made in forward "
                "(e.g. torch.tensor([...])): the trace records that tensor as it is after the "
                "writes, so the value before them is lost. Write into a copy "
                "(torch.tensor([...]).clone()) or build the value out of place"
            )
        updates = [(ref, new)]
        current = ref
        while current.parent is not None:
            assert current.step is not None
            parent_value = self.resolve(current.parent)
            new = self._write_back(current.step, parent_value, new, site)
            current = current.parent
            updates.append((current, new))
        current.version += 1
        for r, value in updates:
            r.value = value
            r.version = current.version

    # --- inverses of views ----------------------------------------------------------------
    def _like(self, value: ir_data.IRValue) -> ir_data.TensorValue:
        """A new value with the dtype, shape and dynamic dims of ``value``."""
        assert isinstance(value, ir_data.TensorValue)
        self._renamed += 1
        return ir_data.TensorValue(f"{value.name}.v{self._renamed}", value.dtype, value.shape, value.dyn)

    def _write_back(self, step: ViewStep, parent: ir_data.IRValue, new: ir_data.IRValue, site: Site) -> ir_data.IRValue:
        """``parent`` with its view by ``step`` replaced by ``new``."""
        out = self._like(parent)
        assert isinstance(parent, ir_data.TensorValue)
        if step.how == "slice":
            return self.emit("fastnnef::slice_scatter", [parent, new, *step.args], out, site,
                             aten_thunk("aten::slice_scatter"))
        if step.how == "narrow":
            dim, start, length = step.args
            args = [dim, start, _narrow_end(start, length, where(step.kind, step.site)), ir_data.Const("step", 1)]
            return self.emit("fastnnef::slice_scatter", [parent, new, *args], out, site,
                             aten_thunk("aten::slice_scatter"))
        if step.how == "select":
            return self.emit("fastnnef::select_scatter", [parent, new, *step.args], out, site,
                             aten_thunk("aten::select_scatter"))
        if step.how == "diagonal":  # x.diagonal(offset, dim1, dim2).fill_(v)
            return self.emit("aten::diagonal_scatter", [parent, new, *step.args], out, site,
                             aten_thunk("aten::diagonal_scatter"))
        if step.how == "permute":
            perm = permutation(step.kind, step.args, parent.rank)
            inverse = [perm.index(axis) for axis in range(parent.rank)]
            dims = ir_data.ListValue("dims", [ir_data.Const("dim", d) for d in inverse])
            return self.emit("aten::permute", [new, dims], out, site, aten_thunk("aten::permute"))
        if step.how == "unsqueeze":
            axis = _ints(step.args[0])[0] % step.template.rank
            dims = ir_data.ListValue("dims", [ir_data.Const("dim", axis)])
            return self.emit("aten::squeeze", [new, dims], out, site, aten_thunk("aten::squeeze"))
        assert step.how == "reshape", step.how
        return self.emit("aten::reshape_as", [new, parent], out, site, aten_thunk("aten::reshape_as"))


def _key(value: ir_data.IRValue) -> object:
    """What an argument of a view op says (equal keys: the same view)."""
    if isinstance(value, ir_data.Const):
        return ("const", value.value)
    if isinstance(value, ir_data.SymInt):
        return ("sym", value.expr) if not value.expr.is_unknown else ("value", id(value))
    if isinstance(value, ir_data.ListValue):
        return tuple(_key(v) for v in value.items)
    return ("value", id(value))


def _ints(value: ir_data.IRValue) -> list[int]:
    items = value.items if isinstance(value, ir_data.ListValue) else [value]
    out = []
    for item in items:
        assert isinstance(item, ir_data.Const) and isinstance(item.value, int), item
        out.append(item.value)
    return out


def _narrow_end(start: ir_data.IRValue, length: ir_data.IRValue, what: str) -> ir_data.IRValue:
    """``start + length`` for narrow (``None``, to the end, when a negative start ends there)."""
    if not (isinstance(length, ir_data.Const) and isinstance(length.value, int)):
        raise T2NErrorNotImplemented(f"{what}: a write through narrow with a length that depends on a dynamic axis")
    if isinstance(start, ir_data.SymInt):
        end = start.expr + length.value  # a size plus a constant: still a size
        assert isinstance(end, DimExpr)
        return ir_data.SymInt("end", start.traced + length.value, end)
    end = _ints(start)[0] + length.value
    return ir_data.Const("end", None if end == 0 and length.value > 0 else end)


def permutation(kind: str, args: Sequence[ir_data.IRValue], rank: int) -> list[int]:
    """Axis ``i`` of a permuting view's output is axis ``perm[i]`` of its input."""
    perm = list(range(rank))
    if kind in ("aten::transpose", "aten::swapaxes", "aten::swapdims") or (kind == "aten::mT" and rank >= 2):
        a, b = (_ints(args[0])[0] % rank, _ints(args[1])[0] % rank) if kind != "aten::mT" else (rank - 2, rank - 1)
        perm[a], perm[b] = perm[b], perm[a]
    elif kind in ("aten::t", "aten::numpy_T", "aten::T"):
        perm.reverse()
    elif kind == "aten::permute":
        perm = [d % rank for d in _ints(args[0])]
    elif kind in ("aten::movedim", "aten::moveaxis"):
        src = [d % rank for d in _ints(args[0])]
        dst = [d % rank for d in _ints(args[1])]
        moved = dict(zip(dst, src))
        rest = iter(a for a in range(rank) if a not in src)
        perm = [moved[i] if i in moved else next(rest) for i in range(rank)]
    return perm


def is_whole_slice(args: Sequence[ir_data.IRValue], x: ir_data.TensorValue) -> bool:
    """``x[:]`` along an axis (as ``y[:, i]`` records first): the same tensor, no view."""
    dim, start, end, step = args
    Const = ir_data.Const
    if not (isinstance(dim, Const) and isinstance(start, Const) and isinstance(end, Const)
            and isinstance(step, Const)) or not isinstance(dim.value, int):
        return False
    axis = dim.value % x.rank
    stop = end.value
    to_end = stop is None or stop >= _TO_END or (x.dyn[axis] is None and stop >= x.shape[axis])
    return start.value in (None, 0) and step.value == 1 and to_end


def list_view_steps(kind: str, x: ir_data.TensorValue, dim: int, items: Sequence[ir_data.IRValue],
                    site: Site) -> list[ViewStep]:
    """The view step of each item of split/chunk/unbind: a slice (or a select) of ``x``."""
    axis = dim % x.rank
    steps = []
    begin = 0
    for k, item in enumerate(items):
        assert isinstance(item, ir_data.TensorValue)
        if LIST_VIEWS[kind] == "select":
            args: list[ir_data.IRValue] = [ir_data.Const("dim", axis), ir_data.Const("index", k)]
            steps.append(ViewStep("aten::select", args, item, "select", site, aten_thunk("aten::select")))
            continue
        end = begin + item.shape[axis]
        args = [ir_data.Const("dim", axis), ir_data.Const("start", begin), ir_data.Const("end", end),
                ir_data.Const("step", 1)]
        steps.append(ViewStep("aten::slice", args, item, "slice", site, aten_thunk("aten::slice")))
        begin = end
    return steps


def is_contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def reshape_is_view(sizes: Sequence[int], strides: Sequence[int], out_sizes: Sequence[int]) -> bool:
    """Whether torch.reshape of a tensor with these sizes and strides returns a view (it
    copies when no strides can express the new shape): asked of a meta tensor, no data."""
    x = torch.empty_strided(tuple(sizes), tuple(strides), device="meta")
    return x.reshape(tuple(out_sizes))._base is x
