"""The intermediate graph: one linear pass over the traced, inlined TorchScript graph.

Shapes and dtypes are read from the trace. Parameters are referenced, never copied.
Scalar arithmetic on constants (``x.size(0) * 2``) is folded here; for dynamic axes the
same arithmetic builds symbolic expressions. Each tensor value carries ``dyn``: per dim,
``None`` (static), a symbol expression (``"S"``) or ``"?"`` (dynamic, expression unknown).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorIR, T2NErrorNotImplemented
from fastnnef.tensor.named import export_labels, storage_labels
from fastnnef.torch_graph import fold as folding
from fastnnef.torch_graph import functionalize, symexpr
from fastnnef.torch_graph.module_calls import OP_KIND as MODULE_CALL
from fastnnef.torch_graph.trace import WRAPPED, TracedModel

# IR kind prefix of a module call converted by its extractor (torch_to_nnef's name).
CUSTOMOP_KIND = "wired_custom::"

UNKNOWN = "?"


class IRValue:
    """Base of every value of the IR."""

    name: str


@dataclass(eq=False)
class TensorValue(IRValue):
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    dyn: tuple[Optional[str], ...] = ()

    def __post_init__(self) -> None:
        if not self.dyn:
            self.dyn = (None,) * len(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_dynamic(self, dim: Optional[int] = None) -> bool:
        if dim is None:
            return any(d is not None for d in self.dyn)
        return self.dyn[dim] is not None


@dataclass(eq=False)
class ParamValue(TensorValue):
    """A parameter or buffer of the model, by its canonical qualified name."""

    qualname: str = ""
    tensor: torch.Tensor = field(default=None)  # type: ignore[assignment]


@dataclass(eq=False)
class ConstTensor(TensorValue):
    """A tensor constant recorded by the trace (created inside ``forward``)."""

    label: str = ""
    tensor: torch.Tensor = field(default=None)  # type: ignore[assignment]


@dataclass(eq=False)
class Const(IRValue):
    """A Python constant: int, float, bool, None, str, dtype code, device..."""

    name: str
    value: Any


@dataclass(eq=False)
class SymInt(IRValue):
    """An integer that depends on a dynamic axis: its traced value and expression."""

    name: str
    traced: int
    expr: str


@dataclass(eq=False)
class ListValue(IRValue):
    name: str
    items: list[IRValue]


@dataclass(eq=False)
class ModuleRef(IRValue):
    """A submodule reached by ``prim::GetAttr`` (only used to resolve parameters)."""

    name: str
    module: nn.Module
    path: str


@dataclass(eq=False)
class IROp:
    """One aten (or custom) call."""

    kind: str
    inputs: list[IRValue]
    outputs: list[IRValue]
    scope: str  # module path, e.g. "layers.0.attn" ("" at the root)
    source: str  # user source location, for errors
    extractor: Optional[Any] = None  # a ModuleInfoExtractor that emits this op (a module call)
    module: Optional[nn.Module] = None  # the module of a module call

    def where(self) -> str:
        scope = self.scope or "<root module>"
        src = f" ({self.source})" if self.source else ""
        return f"{self.kind} in {scope}{src}"


@dataclass
class IRGraph:
    inputs: list[TensorValue]
    outputs: list[IRValue]
    ops: list[IROp]
    param_names: dict[int, str] = field(default_factory=dict)  # id(parameter/buffer) -> its name


# Ops that are identities for export: output = input 0.
NOOP_KINDS = frozenset(
    """aten::detach aten::detach_ aten::contiguous aten::clone aten::dropout aten::dropout_
    aten::feature_dropout aten::feature_dropout_ aten::alpha_dropout aten::alpha_dropout_
    aten::feature_alpha_dropout aten::feature_alpha_dropout_ aten::lift_fresh aten::alias prim::NumToTensor
    aten::Int aten::IntImplicit aten::ScalarImplicit aten::Float aten::FloatImplicit
    aten::Bool prim::data aten::resolve_conj aten::resolve_neg aten::lift_fresh_copy""".split()
)
# Of those, the ones that return a new tensor (contiguous too, of a non-contiguous one);
# the others return input 0 itself, so a write into their output writes into input 0.
_COPIES = frozenset({"aten::clone", "aten::lift_fresh_copy"})

_FOLD: dict[str, Callable[..., Any]] = {
    "aten::add": operator.add,
    "aten::sub": operator.sub,
    "aten::mul": operator.mul,
    "aten::floordiv": operator.floordiv,
    "aten::floor_divide": operator.floordiv,
    "aten::div": operator.truediv,
    "aten::remainder": operator.mod,
    "aten::neg": operator.neg,
    "aten::eq": operator.eq,
    "aten::ne": operator.ne,
    "aten::lt": operator.lt,
    "aten::gt": operator.gt,
    "aten::le": operator.le,
    "aten::ge": operator.ge,
}
_SYM_FMT = {
    "aten::add": "({a}+{b})",
    "aten::sub": "({a}-{b})",
    "aten::mul": "{a}*{b}",
    "aten::floordiv": "({a})/{b}",
    "aten::floor_divide": "({a})/{b}",
}


def scope_path(scope_name: str) -> str:
    """``__module.model/__module.model.l.0`` -> ``l.0`` (the user's module path)."""
    last = scope_name.rsplit("/", 1)[-1]
    if last.startswith("__module."):
        last = last[len("__module.") :]
    if last == WRAPPED:
        return ""
    if last.startswith(WRAPPED + "."):
        return last[len(WRAPPED) + 1 :]
    return last


def _child(obj: nn.Module, name: str) -> tuple[Any, str]:
    """Resolve a TorchScript attribute name on a module; return (object, python key)."""
    for store in (obj._modules, obj._parameters, obj._buffers):
        if name in store:
            return store[name], name
    if name.startswith("_") and name[1:] in obj._modules:  # Sequential/ModuleList "_0"
        return obj._modules[name[1:]], name[1:]
    return getattr(obj, name), name


class _Builder:
    def __init__(self, traced: TracedModel, dynamic_axes: dict[int, dict[int, str]]):
        self.traced = traced
        self.values: dict[int, IRValue] = {}
        self.ops: list[IROp] = []
        self.const_count = 0
        # Labels (.dat names): the first name of each tensor object (tied weights share
        # one), or the nnef_name of a NamedTensor the user built (tensor/named.py).
        model = traced.names_from if traced.names_from is not None else traced.wrapper.model
        self.canonical: dict[int, str] = export_labels(model)
        # Constants recorded by the trace are new tensor objects over the model's storage
        # (TorchScript models, NamedTensor attributes): name them after the weight they view.
        self.by_storage = storage_labels(model, self.canonical)
        self.weights = frozenset(self.by_storage.values())  # constants that are weights: never folded
        self.dynamic_axes = dynamic_axes
        self.pending_lists: dict[int, ListValue] = {}
        # Storage of tensors seen through views and in-place writes (torch_graph/functionalize.py).
        self.store = functionalize.Storages(self.emit)
        self.param_refs: dict[int, functionalize.Ref] = {}  # id(parameter tensor) -> its storage
        self.list_sources: dict[int, list[torch._C.Value]] = {}  # id(constructed list) -> items
        # id(list output of split/chunk/unbind) -> (viewed tensor's ref, kind, inputs, site)
        self.list_views: dict[int, tuple[functionalize.Ref, str, list[IRValue], functionalize.Site]] = {}

    def get(self, v: torch._C.Value) -> IRValue:
        """The value of ``v`` now (after the in-place writes recorded so far)."""
        ref = self.store.refs.get(v.unique())
        if ref is not None:
            return self.store.resolve(ref)
        return self.peek(v)

    def peek(self, v: torch._C.Value) -> IRValue:
        """A value of ``v`` with its dtype and shape, maybe older than the last write."""
        ref = self.store.refs.get(v.unique())
        if ref is not None:
            return ref.value
        try:
            return self.values[v.unique()]
        except KeyError:
            raise T2NErrorIR(f"value %{v.debugName()} is used before it is defined") from None

    def ref_of(self, v: torch._C.Value) -> functionalize.Ref:
        """The storage ``v`` reaches; a tensor seen for the first time is a storage of its own."""
        ref = self.store.refs.get(v.unique())
        return ref if ref is not None else self.store.root(v.unique(), self.peek(v))

    def alias(self, out: torch._C.Value, src: torch._C.Value) -> None:
        """``out`` is ``src`` (the same tensor, so writes into one are seen by the other)."""
        if isinstance(self.peek(src), TensorValue):
            self.store.alias(out.unique(), self.ref_of(src))
        else:
            self.set(out, self.get(src))

    def set(self, v: torch._C.Value, value: IRValue) -> None:
        self.values[v.unique()] = value

    def tensor_value(self, v: torch._C.Value, dyn: Optional[Sequence[Optional[str]]] = None) -> IRValue:
        ty = v.type()
        if isinstance(ty, torch._C.TensorType):
            sizes = ty.sizes()
            dtype = ty.dtype()
            if sizes is None or dtype is None:
                # An output nothing reads (e.g. attention weights not asked for): a
                # placeholder that fails clearly if a handler ever reads it as a tensor.
                return Const(v.debugName(), None)
            return TensorValue(v.debugName(), dtype, tuple(sizes), tuple(dyn) if dyn else ())
        if isinstance(ty, torch._C.ListType) or isinstance(ty, torch._C.TupleType):
            lst = ListValue(v.debugName(), [])
            self.pending_lists[v.unique()] = lst
            return lst
        return Const(v.debugName(), None)

    def build(self) -> IRGraph:
        graph = self.traced.graph
        graph_inputs = list(graph.inputs())
        if self.traced.has_self:
            self.set(graph_inputs[0], ModuleRef("self", self.traced.wrapper, ""))
            graph_inputs = graph_inputs[1:]
        inputs: list[TensorValue] = []
        for i, v in enumerate(graph_inputs):
            tv = self.tensor_value(v)
            assert isinstance(tv, TensorValue)
            axes = self.dynamic_axes.get(i, {})
            tv.dyn = tuple(axes.get(d) for d in range(tv.rank))
            self.set(v, tv)
            inputs.append(tv)
        for node in graph.nodes():
            self.visit(node)
        (ret,) = list(graph.return_node().inputs())
        out = self.get(ret)
        outputs = out.items if isinstance(out, ListValue) else [out]
        return IRGraph(inputs, outputs, self.ops, self.canonical)

    # --- nodes ----------------------------------------------------------------------------
    def visit(self, node: torch._C.Node) -> None:
        kind = node.kind()
        outs = list(node.outputs())
        ins = list(node.inputs())
        if kind == "prim::Constant":
            self.constant(node, outs[0])
        elif kind == "prim::GetAttr":
            self.get_attr(node, ins[0], outs[0])
        elif kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            lst = ListValue(outs[0].debugName(), [self.get(i) for i in ins])
            self.list_sources[id(lst)] = ins
            self.set(outs[0], lst)
        elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            self.unpack(ins[0], outs)
        elif kind in ("prim::TupleIndex", "aten::__getitem__"):
            seq, idx = self.get(ins[0]), self.get(ins[1])
            if not isinstance(seq, ListValue) or not isinstance(idx, Const):
                raise T2NErrorNotImplemented(f"{kind} on a non-constant list at {node.sourceRange()}")
            sources = self.list_sources.get(id(seq))
            if sources is not None:
                self.alias(outs[0], sources[idx.value])
            else:
                self.set(outs[0], seq.items[idx.value])
        elif kind in NOOP_KINDS:
            if kind in _COPIES or (kind == "aten::contiguous" and not _contiguous(ins[0])):
                self.set(outs[0], self.get(ins[0]))  # a new tensor, holding the value as it is now
            else:
                self.alias(outs[0], ins[0])
        elif kind == "aten::size":
            self.size(ins, outs[0])
        elif kind == "aten::dim":
            t = self.peek(ins[0])
            assert isinstance(t, TensorValue)
            self.set(outs[0], Const(outs[0].debugName(), t.rank))
        elif kind == "aten::numel":
            self.numel(ins[0], outs[0])
        elif kind in _FOLD and self.foldable(ins):
            self.fold(kind, ins, outs[0])
        else:
            self.op(node, kind, ins, outs)

    def constant(self, node: torch._C.Node, out: torch._C.Value) -> None:
        value = out.toIValue()
        if isinstance(value, torch.Tensor):
            key = (value.data_ptr(), tuple(value.shape), value.dtype) if value.numel() else None
            label = self.by_storage.get(key) if key else None
            if label is None:
                label = self.const_label(scope_path(node.scopeName()))
            constant = ConstTensor(out.debugName(), value.dtype, tuple(value.shape), (), label, value)
            self.store.recorded.add(out.unique())
            self.set(out, constant)
        else:
            self.set(out, Const(out.debugName(), value))

    def const_label(self, scope: str) -> str:
        """A fresh label for a tensor constant of module ``scope``."""
        self.const_count += 1
        return f"{scope}.c{self.const_count - 1}" if scope else f"c{self.const_count - 1}"

    def get_attr(self, node: torch._C.Node, owner_v: torch._C.Value, out: torch._C.Value) -> None:
        owner = self.get(owner_v)
        if not isinstance(owner, ModuleRef):
            raise T2NErrorIR(f"prim::GetAttr on {owner!r}")
        obj, key = _child(owner.module, node.s("name"))
        path = f"{owner.path}.{key}" if owner.path else key
        if isinstance(obj, torch.Tensor):
            # Strip the wrapper's prefix; tied weights resolve to their first name.
            qualname = self.canonical.get(id(obj), path[len(WRAPPED) + 1 :])
            # One storage per tensor: a write into a buffer is seen by every later read.
            ref = self.param_refs.get(id(obj))
            if ref is None:
                value = ParamValue(out.debugName(), obj.dtype, tuple(obj.shape), (), qualname, obj)
                ref = self.param_refs[id(obj)] = functionalize.Ref(value)
            self.set(out, ref.value)
            self.store.alias(out.unique(), ref)
        elif isinstance(obj, nn.Module):
            self.set(out, ModuleRef(out.debugName(), obj, path))
        else:
            self.set(out, Const(out.debugName(), obj))

    def unpack(self, seq_v: torch._C.Value, outs: list[torch._C.Value]) -> None:
        seq = self.get(seq_v)
        if not isinstance(seq, ListValue):
            raise T2NErrorIR(f"unpacking %{seq_v.debugName()} which is not a list")
        sources = self.list_sources.get(id(seq))
        if sources is not None:  # a constructed list: its items are those values
            for o, src in zip(outs, sources):
                self.alias(o, src)
        elif seq.items:  # an op's output list, folded to constants
            for o, item in zip(outs, seq.items):
                self.set(o, item)
        else:  # an op's output list (split, chunk, unbind): its items are these values
            for o in outs:
                item = self.tensor_value(o)
                seq.items.append(item)
                self.set(o, item)
            self._propagate_list_dyn(seq)
        view = self.list_views.pop(id(seq), None)
        if view is not None:  # each item views the split tensor
            parent, kind, inputs, site = view
            x = inputs[0]
            assert isinstance(x, TensorValue)
            dim = _ints(inputs[1] if kind == "aten::unbind" else inputs[2])[0]
            for o, step in zip(outs, functionalize.list_view_steps(kind, x, dim, seq.items, site)):
                self.store.view(o.unique(), parent, step, step.template)

    def size(self, ins: list[torch._C.Value], out: torch._C.Value) -> None:
        t = self.peek(ins[0])
        assert isinstance(t, TensorValue)
        name = out.debugName()

        def dim_value(d: int) -> IRValue:
            if t.dyn[d] is None:
                return Const(name, t.shape[d])
            return SymInt(name, t.shape[d], t.dyn[d] or UNKNOWN)

        if len(ins) == 1:
            self.set(out, ListValue(name, [dim_value(d) for d in range(t.rank)]))
        else:
            d = self.get(ins[1])
            assert isinstance(d, Const)
            self.set(out, dim_value(d.value % t.rank))

    def numel(self, tensor: torch._C.Value, out: torch._C.Value) -> None:
        """x.numel(): a constant, or for dynamic dims the product of their expressions."""
        t = self.get(tensor)
        assert isinstance(t, TensorValue)
        name = out.debugName()
        if not t.is_dynamic():
            self.set(out, Const(name, math.prod(t.shape)))
            return
        terms = [f"({t.dyn[d]})" if t.dyn[d] is not None else str(t.shape[d]) for d in range(t.rank)]
        expr = UNKNOWN if UNKNOWN in t.dyn else "*".join(terms)
        self.set(out, SymInt(name, math.prod(t.shape), expr))

    def number(self, v: torch._C.Value) -> IRValue:
        """A value for folding: 0-d int/float tensor constants read as numbers (tracing
        records ``x.size(1) * 2`` as ``mul(NumToTensor(size), tensor(2))``)."""
        value = self.get(v)
        if isinstance(value, ConstTensor) and value.tensor.dim() == 0 and value.tensor.dtype != torch.bool \
                and not value.tensor.is_complex():
            return Const(value.name, value.tensor.item())
        return value

    def foldable(self, ins: list[torch._C.Value]) -> bool:
        vals = [self.number(i) for i in ins]
        if len(vals) == 3 and isinstance(vals[2], Const) and isinstance(vals[2].value, str):
            vals = vals[:2]  # aten::div(a, b, rounding_mode)
        return all(isinstance(v, (Const, SymInt)) for v in vals) and any(
            not isinstance(v, Const) or isinstance(v.value, (int, float)) for v in vals
        ) and all(not isinstance(v, Const) or isinstance(v.value, (int, float, bool)) for v in vals)

    def fold(self, kind: str, ins: list[torch._C.Value], out: torch._C.Value) -> None:
        vals = [self.number(i) for i in ins]
        # aten::add(Scalar a, Scalar b, alpha) on NumToTensor values: alpha is 1 here.
        a_b = vals[:2] if kind != "aten::neg" else vals[:1]
        mode = vals[2].value if kind == "aten::div" and len(vals) == 3 and isinstance(vals[2], Const) else None
        if mode is not None:  # torch.div(a, b, rounding_mode="floor" | "trunc")
            if not all(isinstance(v, Const) for v in a_b):
                raise T2NErrorNotImplemented(
                    f"torch.div with rounding_mode on a size that depends on a dynamic axis "
                    f"({_source(out.node())}): use `//` (floor division) instead"
                )
            q = a_b[0].value / a_b[1].value  # type: ignore[union-attr]
            self.set(out, Const(out.debugName(), math.floor(q) if mode == "floor" else math.trunc(q)))
            return
        if all(isinstance(v, Const) for v in a_b):
            self.set(out, Const(out.debugName(), _FOLD[kind](*[v.value for v in a_b])))
            return
        traced = _FOLD[kind](*[v.traced if isinstance(v, SymInt) else v.value for v in a_b])
        fmt = _SYM_FMT.get(kind)
        exprs = [v.expr if isinstance(v, SymInt) else str(v.value) for v in a_b]
        if fmt is None or UNKNOWN in exprs:
            self.set(out, SymInt(out.debugName(), traced, UNKNOWN))
            return
        # Canonical form, so that sizes computed two ways compare equal (P+S vs S+P).
        expr = symexpr.simplify(fmt.format(a=exprs[0], b=exprs[-1]))
        if isinstance(expr, int):  # the symbols cancelled out: a constant after all
            self.set(out, Const(out.debugName(), expr))
            return
        self.set(out, SymInt(out.debugName(), traced, expr))

    def op(self, node: torch._C.Node, kind: str, ins: list[torch._C.Value], outs: list[torch._C.Value]) -> None:
        if kind == MODULE_CALL:
            self.module_call(node, ins, outs)
            return
        site = (scope_path(node.scopeName()), _source(node))
        thunk = folding.node_thunk(node)
        if kind in functionalize.INPLACE_VIEWS:  # x.unsqueeze_(0): x becomes that view of itself
            kind = functionalize.INPLACE_VIEWS[kind]
            thunk = folding.aten_thunk(kind)
        elif functionalize.is_in_place(kind):
            self.write_in_place(node, kind, ins, outs, site, thunk)
            return
        if kind == "aten::to" and self.to_returns_self(node, ins, outs):
            self.alias(outs[0], ins[0])  # so a write into it is a write into its input
            return
        how = self.view_how(kind, ins, outs)
        parent = self.ref_of(ins[0]) if how or kind in functionalize.LIST_VIEWS else None
        inputs = [self.get(i) for i in ins]
        if parent is not None and how == "slice" and isinstance(inputs[0], TensorValue) \
                and functionalize.is_whole_slice(inputs[1:], inputs[0]):
            self.store.alias(outs[0].unique(), parent)  # y[:, i] records y[:] first
            return
        outputs = [self.tensor_value(o) for o in outs]
        results = self.record(IROp(kind, inputs, outputs, *site), thunk)
        for o, value in zip(outs, results):
            self.set(o, value)
        if parent is not None and how is not None:
            view = results[0]
            assert isinstance(view, TensorValue)
            step = functionalize.ViewStep(kind, inputs[1:], view, how, site, thunk)
            self.store.view(outs[0].unique(), parent, step, view)
        elif parent is not None:
            self.list_views[id(results[0])] = (parent, kind, inputs, site)

    def module_call(self, node: torch._C.Node, ins: list[torch._C.Value], outs: list[torch._C.Value]) -> None:
        """A module kept whole by the trace (module_calls.py): one op for its extractor,
        whose inputs are the call's tensor arguments."""
        args, key = (self.get(i) for i in ins)
        assert isinstance(args, ListValue) and isinstance(key, Const)
        call = self.traced.module_calls[key.value]
        outputs = [self.tensor_value(o) for o in outs]
        for o, value in zip(outs, outputs):
            self.set(o, value)
        op = IROp(CUSTOMOP_KIND + type(call.module).__name__, list(args.items), outputs, call.path,
                  _source(node), extractor=call.extractor, module=call.module)
        propagate_dyn(op)
        self.ops.append(op)

    def to_returns_self(self, node: torch._C.Node, ins: list[torch._C.Value], outs: list[torch._C.Value]) -> bool:
        """``x.to(...)`` returns ``x`` itself when nothing changes and no copy is asked for
        (``torch.tensor([...])`` traces as a constant, then such a ``to``)."""
        layout_in, layout_out = _layout(ins[0]), _layout(outs[0])
        if layout_in is None or layout_in != layout_out or ins[0].type().dtype() != outs[0].type().dtype():
            return False
        k = folding.argument_index(node.schema(), "copy")
        flag = self.peek(ins[k]) if k is not None and k < len(ins) else None
        return isinstance(flag, Const) and flag.value is False

    def view_how(self, kind: str, ins: list[torch._C.Value], outs: list[torch._C.Value]) -> Optional[str]:
        """How a write into this op's output reaches input 0 (functionalize.VIEWS), or ``None``
        when the output is a new tensor."""
        how = functionalize.VIEWS.get(kind)
        if how is None:
            return None
        if kind in functionalize.MAYBE_VIEWS:
            layout, out = _layout(ins[0]), _layout(outs[0])
            if layout is not None and out is not None and not functionalize.reshape_is_view(*layout, out[0]):
                return None
        return how

    def write_in_place(
        self, node: torch._C.Node, kind: str, ins: list[torch._C.Value], outs: list[torch._C.Value],
        site: functionalize.Site, thunk: folding.Thunk,
    ) -> None:
        """``x.op_(...)``: ``op(x, ...)`` becomes the value of ``x``, written back into the
        tensors ``x`` views (torch_graph/functionalize.py)."""
        ref = self.ref_of(ins[0])
        source = self.store.refs.get(ins[1].unique()) if kind == "aten::copy_" else None
        if source is not None and self.store.is_current_view(source, ref):
            self.store.alias(outs[0].unique(), ref)  # y[:, a:b] += v ends with y[:, a:b].copy_(itself)
            return
        target = self.get(ins[0])
        rest = [self.get(i) for i in ins[1:]]
        out = self.tensor_value(outs[0])
        if isinstance(out, TensorValue) and isinstance(target, TensorValue):
            out.dyn = target.dyn  # the same tensor
        # Folded: the in-place op itself, run on a copy of the constant it writes into.
        (new,) = self.record(IROp(functionalize.out_of_place(kind), [target, *rest], [out], *site),
                             lambda values: thunk([values[0].clone(), *values[1:]]), dyn=False)
        self.store.write(ref, new, kind, site)
        self.store.alias(outs[0].unique(), ref)

    def record(self, op: IROp, thunk: Optional[folding.Thunk], dyn: bool = True) -> list[IRValue]:
        """Append ``op``, or its outputs as constants when its inputs are (fold.py); with
        ``dyn``, the outputs' dynamic dims are derived from the inputs'."""
        if thunk is not None:
            folded = folding.evaluate(thunk, op.inputs, op.outputs, self.weights, lambda: self.const_label(op.scope))
            if folded is not None:
                return folded
        if dyn:
            propagate_dyn(op)
        self.ops.append(op)
        return op.outputs

    def emit(self, kind: str, inputs: list[IRValue], output: TensorValue, site: functionalize.Site,
             thunk: Optional[folding.Thunk]) -> IRValue:
        """One op the builder makes itself (a view taken again, a write-back): its output
        dims are known already."""
        return self.record(IROp(kind, inputs, [output], *site), thunk, dyn=False)[0]

    def _propagate_list_dyn(self, lst: ListValue) -> None:
        for op in reversed(self.ops):
            if lst in op.outputs:
                propagate_dyn(op)
                return


def _layout(v: torch._C.Value) -> Optional[tuple[list[int], list[int]]]:
    """The traced sizes and strides of a tensor value (``None`` where the trace lacks them)."""
    ty = v.type()
    if not isinstance(ty, torch._C.TensorType):
        return None
    sizes, strides = ty.sizes(), ty.strides()
    return None if sizes is None or strides is None else (sizes, strides)


def _contiguous(v: torch._C.Value) -> bool:
    layout = _layout(v)
    return layout is None or functionalize.is_contiguous(*layout)


def _source(node: torch._C.Node) -> str:
    """The user's source line for a node, best effort (TorchScript's source ranges)."""
    try:
        text = str(node.sourceRange()).strip().splitlines()
    except Exception:  # noqa: BLE001 - not all torch builds keep source ranges
        return ""
    frames = [line.strip() for line in text if line.strip()]
    user = [f for f in frames if "/torch/" not in f and "/fastnnef/" not in f]
    return (user or frames or [""])[0]


# --- dynamic dims ---------------------------------------------------------------------
def _tensor_inputs(op: IROp) -> list[TensorValue]:
    return [v for v in op.inputs if isinstance(v, TensorValue)]


def propagate_dyn(op: IROp) -> None:
    """Mark the dynamic dims of ``op``'s tensor outputs from its inputs'.

    Same-rank outputs follow the inputs dim by dim (broadcasting ops, conv along time,
    norms...). Other outputs: a dim whose traced size equals a dynamic input dim's is
    marked dynamic-unknown, so handlers that need a concrete value refuse it."""
    if op.kind == "aten::arange" and _arange_dyn(op):
        return
    if op.kind == "aten::cat" and _cat_dyn(op):
        return
    if op.kind in _FILLS and _fill_dyn(op):
        return
    rule = _DYN_RULES.get(op.kind)
    if rule is not None and op.inputs and isinstance(op.inputs[0], TensorValue):
        out = op.outputs[0]
        sym_args = any(isinstance(v, SymInt) for v in _flat(op.inputs))
        if isinstance(out, TensorValue) and (
            any(t.is_dynamic() for t in _tensor_inputs(op)) or out.is_dynamic() or sym_args
        ):
            marks = rule(op.inputs[0], out, op.inputs[1:])
            if marks is not None:
                out.dyn = marks
                return
        elif isinstance(out, TensorValue):
            return
    tensors = _tensor_inputs(op)
    for v in op.inputs:
        if isinstance(v, ListValue):
            tensors += [x for x in v.items if isinstance(x, TensorValue)]
    dyn_inputs = [t for t in tensors if t.is_dynamic()]
    sym_args = any(isinstance(v, SymInt) for v in op.inputs) or any(
        isinstance(v, ListValue) and any(isinstance(x, SymInt) for x in v.items) for v in op.inputs
    )
    if not dyn_inputs and not sym_args:
        return
    outs: list[TensorValue] = []
    for o in op.outputs:
        if isinstance(o, TensorValue):
            outs.append(o)
        elif isinstance(o, ListValue):
            outs += [x for x in o.items if isinstance(x, TensorValue)]
    scalar_sym = any(isinstance(v, SymInt) for v in op.inputs)
    base = tensors[0] if tensors else None
    dyn_sizes = {t.shape[d] for t in dyn_inputs for d in range(t.rank) if t.dyn[d] is not None}
    for v in op.inputs:
        items = v.items if isinstance(v, ListValue) else [v]
        dyn_sizes |= {x.traced for x in items if isinstance(x, SymInt)}
    for out in outs:
        dyn: list[Optional[str]] = []
        for d in range(out.rank):
            mark: Optional[str] = None
            for t in dyn_inputs:
                if t.rank == out.rank and t.dyn[d] is not None:
                    if t.shape[d] == out.shape[d]:
                        mark = t.dyn[d]
                    elif out.shape[d] != 1:
                        mark = UNKNOWN
                    # else: reduced to 1 (keepdim reductions, global pools): static
                    break
            if mark is None and out.shape[d] in dyn_sizes and not any(
                t.rank == out.rank for t in dyn_inputs
            ):
                mark = UNKNOWN
            if mark is None and scalar_sym and not (
                base is not None and base.rank == out.rank and base.shape[d] == out.shape[d]
                and base.dyn[d] is None
            ):
                # A size computed from a dynamic axis (arange(2, x.size(1)), x[:, :n]):
                # the dim may vary even though its traced value matches no input dim.
                mark = UNKNOWN
            dyn.append(mark)
        out.dyn = tuple(dyn)


def _arange_dyn(op: IROp) -> bool:
    """arange(end), arange(start, end) and arange(start, end, 1) with start and end static
    or dynamic sizes have length end - start: mark it (torch.arange over dynamic sizes builds
    position ids and masks in transformers; arange(P, P+S) has length S)."""
    bounds = {5: 1, 6: 2, 7: 3}.get(len(op.inputs))
    out = op.outputs[0]
    if bounds is None or not isinstance(out, TensorValue) or out.rank != 1:
        return False
    start, end = (Const("", 0), op.inputs[0]) if bounds == 1 else (op.inputs[0], op.inputs[1])
    if bounds == 3 and not (isinstance(op.inputs[2], Const) and op.inputs[2].value == 1):
        return False
    exprs = [_int_expr(v) for v in (start, end)]
    if not any(isinstance(v, SymInt) for v in (start, end)) or None in exprs:
        return False
    length = symexpr.add(exprs[1], exprs[0], -1)  # type: ignore[arg-type]
    if length is None:
        return False
    out.dyn = (None if isinstance(length, int) else length,)
    return True


def _int_expr(value: IRValue) -> Optional[Union[str, int]]:
    """The expression of a size argument (a static int or a known dynamic size), else None."""
    if isinstance(value, SymInt):
        return None if value.expr == UNKNOWN else value.expr
    if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    return None


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
    total: Optional[Union[str, int]] = 0
    for t in parts:
        size: Union[str, int] = t.shape[axis] if t.dyn[axis] is None else t.dyn[axis]  # type: ignore[assignment]
        total = None if total is None or size == UNKNOWN else symexpr.add(total, size)
    dyn: list[Optional[str]] = []
    for d in range(out.rank):
        if d == axis:
            dyn.append(UNKNOWN if total is None else None if isinstance(total, int) else total)
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
    dyn = _size_list_dyn(op.inputs[0], out.rank)
    if dyn is None:
        return False
    out.dyn = dyn
    return True


def _size_list_dyn(sizes: IRValue, rank: int) -> Optional[tuple[Optional[str], ...]]:
    """The dims of a size list: ``None`` for a non-negative constant, the expression of a
    dynamic size (``?`` when unknown); ``None`` for the whole list if anything else (-1)."""
    items = sizes.items if isinstance(sizes, ListValue) else []
    if len(items) != rank:
        return None
    dyn: list[Optional[str]] = []
    for item in items:
        if isinstance(item, Const) and isinstance(item.value, int) and item.value >= 0:
            dyn.append(None)
        elif isinstance(item, SymInt):
            dyn.append(item.expr)
        else:
            return None
    return tuple(dyn)


def _flat(values: Sequence[IRValue]) -> list[IRValue]:
    out: list[IRValue] = []
    for v in values:
        out += v.items if isinstance(v, ListValue) else [v]
    return out


def _ints(value: IRValue) -> list[int]:
    items = value.items if isinstance(value, ListValue) else [value]
    return [int(v.value) for v in items if isinstance(v, Const)]


def _window_dyn(x: TensorValue, out: TensorValue, _args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """Reshape: dims in the common prefix/suffix keep their marks; the window between is
    dynamic-unknown if it takes a dynamic input dim."""
    pre = 0
    while pre < min(x.rank, out.rank) and x.shape[pre] == out.shape[pre]:
        pre += 1
    suf = 0
    while (
        suf < min(x.rank, out.rank) - pre
        and x.shape[x.rank - 1 - suf] == out.shape[out.rank - 1 - suf]
    ):
        suf += 1
    window_dyn = any(x.dyn[d] is not None for d in range(pre, x.rank - suf))
    dyn: list[Optional[str]] = list(x.dyn[:pre])
    dyn += [UNKNOWN if window_dyn else None] * (out.rank - pre - suf)
    dyn += list(x.dyn[x.rank - suf :]) if suf else []
    return tuple(dyn)


def _sizes_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """view/reshape with an explicit size list: each output dim is static or carries its
    size's expression, and a -1 what is left of x's volume where that is known; else the
    window rule."""
    items = args[0].items if args and isinstance(args[0], ListValue) else []
    free = [d for d, v in enumerate(items) if isinstance(v, Const) and v.value == -1]
    if len(free) == 1 and len(items) == out.rank:
        known = list(items)
        known[free[0]] = Const("", 0)
        dyn = _size_list_dyn(ListValue("", known), out.rank)
        if dyn is not None:
            rest = _remaining(x, known)
            if rest == UNKNOWN:  # where x's dims reach the output unchanged, the window rule knows it
                rest = _window_dyn(x, out, args)[free[0]]
            return dyn[: free[0]] + (rest,) + dyn[free[0] + 1 :]
    dyn = _size_list_dyn(args[0], out.rank) if args else None
    return _window_dyn(x, out, args) if dyn is None else dyn


def _remaining(x: TensorValue, others: Sequence[IRValue]) -> Optional[str]:
    """The size of a reshape's -1: x's volume over the ``others`` sizes (the -1 itself
    given as 0). Static, or one dynamic dim of x scaled, when the others' dynamic sizes
    are x's minus at most that one and the static parts divide; else unknown."""
    x_syms = sorted(d for d in x.dyn if d is not None)
    o_syms = sorted(v.expr for v in others if isinstance(v, SymInt))
    static_x = math.prod(x.shape[d] for d in range(x.rank) if x.dyn[d] is None)
    static_o = math.prod(int(v.value) or 1 for v in others if isinstance(v, Const))
    if UNKNOWN in x_syms or UNKNOWN in o_syms or static_o == 0 or static_x % static_o:
        return UNKNOWN
    left = list(x_syms)
    for expr in o_syms:
        if expr not in left:
            return UNKNOWN
        left.remove(expr)
    factor = static_x // static_o
    if not left:
        return None
    size = symexpr.parse(left[0]) if len(left) == 1 else None
    if size is None:
        return UNKNOWN if len(left) > 1 or factor != 1 else left[0]
    scaled = symexpr.render({k: v * factor for k, v in size.items()})
    return None if isinstance(scaled, int) else scaled


def _new_fill_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """new_zeros/new_full(self, size, ...): the size list's dims (self only gives the dtype)."""
    return _size_list_dyn(args[0], out.rank) if args else None


def _expand_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """expand(self, sizes): -1 keeps self's dim (aligned on the right), a dynamic size its
    expression, a constant is static."""
    items = args[0].items if args and isinstance(args[0], ListValue) else []
    if len(items) != out.rank or out.rank < x.rank:
        return None
    lead = out.rank - x.rank
    dyn: list[Optional[str]] = []
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


def _expand_as_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """expand_as(self, other): other's dims (broadcast_to(self, size) goes by its size list)."""
    other = args[0] if args else None
    if isinstance(other, TensorValue) and other.rank == out.rank:
        return other.dyn
    if isinstance(other, ListValue):
        return _expand_dyn(x, out, args)
    return None


def _permute_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    perm = [p % x.rank for p in _ints(args[0])]
    return tuple(x.dyn[p] for p in perm)


def _transpose_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    if x.rank < 2:
        return x.dyn
    a, b = (_ints(args[0]) + _ints(args[1])) if len(args) >= 2 else (0, 1)
    dyn = list(x.dyn)
    a, b = a % x.rank, b % x.rank
    dyn[a], dyn[b] = dyn[b], dyn[a]
    return tuple(dyn)


def _select_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """select(x, dim, index): x's dims without the selected one."""
    a = _ints(args[0])[0] % x.rank
    return x.dyn[:a] + x.dyn[a + 1 :]


def _movedim_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """movedim(x, source, destination): the moved dims land at their destinations, the
    others fill the remaining places in order (torch's definition)."""
    src = [s % x.rank for s in _ints(args[0])]
    order: list[Optional[int]] = [None] * x.rank
    for s, d in zip(src, _ints(args[1])):
        order[d % x.rank] = s
    rest = iter(a for a in range(x.rank) if a not in src)
    return tuple(x.dyn[a if a is not None else next(rest)] for a in order)


def _matrix_transpose_dyn(x: TensorValue, out: TensorValue, _args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """mT, mH, adjoint: the last two dims swapped."""
    return x.dyn[:-2] + (x.dyn[-1], x.dyn[-2]) if x.rank >= 2 else x.dyn


def _reverse_dyn(x: TensorValue, out: TensorValue, _args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """numpy_T (x.T): every dim reversed."""
    return x.dyn[::-1]


def _rot90_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """rot90(x, k, dims): an odd number of quarter turns swaps the two dims."""
    k, dims = _ints(args[0])[0], [d % x.rank for d in _ints(args[1])]
    dyn = list(x.dyn)
    if k % 2:
        dyn[dims[0]], dyn[dims[1]] = dyn[dims[1]], dyn[dims[0]]
    return tuple(dyn)


def _windows(size: Optional[str], frame: int, step: int) -> Optional[str]:
    """The number of windows of ``frame`` cells every ``step`` over a dynamic ``size``,
    ``(size-frame)/step+1``, written as the handlers write it (tract's integer division)."""
    if size is None or size == UNKNOWN:
        return size
    start = symexpr.add(size, frame, -1)
    if start is None:
        return UNKNOWN
    count = symexpr.add(start, 1) if step == 1 else f"({start})/{step}+1"
    return None if isinstance(count, int) else count


def _unfold_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """unfold(x, dim, size, step): the windows replace the dim, the window axis comes last."""
    if x.rank == 0:
        return (None,)
    dim, size, step = (_ints(a)[0] for a in args[:3])
    dyn = list(x.dyn)
    a = dim % x.rank
    dyn[a] = _windows(dyn[a], size, step)
    return tuple(dyn) + (None,)


def _diagonal_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """diagonal(x, offset, dim1, dim2): the other dims in order, then the diagonal, whose
    length follows a dynamic plane only when both its dims are the same expression."""
    offset, d1, d2 = (_ints(a)[0] for a in args[:3])
    a, b = d1 % x.rank, d2 % x.rank
    rest = tuple(x.dyn[d] for d in range(x.rank) if d not in (a, b))
    ea, eb = x.dyn[a], x.dyn[b]
    if ea is None and eb is None:
        return rest + (None,)
    if ea == eb and ea != UNKNOWN:
        length = symexpr.add(ea, abs(offset), -1)  # type: ignore[arg-type]
        return rest + (UNKNOWN if length is None else None if isinstance(length, int) else length,)
    return rest + (UNKNOWN,)


def _position(v: IRValue, size: Union[str, int], default: Union[str, int]) -> Optional[Union[str, int]]:
    """A slice bound as torch reads it: None -> ``default``, INT64_MAX -> the end,
    negative -> from the end (clamped where the size is static), or a size expression."""
    if isinstance(v, Const) and v.value is None:
        return default
    if isinstance(v, SymInt):
        return None if v.expr == UNKNOWN else v.expr
    if not (isinstance(v, Const) and isinstance(v.value, int)):
        return None
    k = v.value
    if isinstance(size, int):
        return min(max(k + size if k < 0 else k, 0), size)
    if k >= 2**62:
        return size
    return symexpr.add(size, k) if k < 0 else k


def _slice_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """slice(x, dim, start, end, step): the sliced dim is ``end - start`` (over ``step``)
    with bounds that may be dynamic sizes (``x[:, n - 4:]``), the others follow x."""
    a = _ints(args[0])[0] % x.rank
    step = _ints(args[3])[0] if len(args) > 3 and _ints(args[3]) else 1
    size: Union[str, int] = x.shape[a] if x.dyn[a] is None else x.dyn[a]  # type: ignore[assignment]
    if size == UNKNOWN:
        return None
    begin, end = _position(args[1], size, 0), _position(args[2], size, size)
    length = None if begin is None or end is None else symexpr.add(end, begin, -1)
    if length is None:
        return None
    if isinstance(length, int):  # a static piece (of a dynamic axis, bounds within the traced size)
        mark: Optional[str] = None
    elif step == 1:
        mark = length
    else:  # ceil(length / step)
        mark = f"({symexpr.add(length, step - 1)})/{step}"
    return x.dyn[:a] + (mark,) + x.dyn[a + 1 :]


def _narrow_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """narrow(x, dim, start, length): the length, constant or a dynamic size."""
    a = _ints(args[0])[0] % x.rank
    length = args[2]
    mark = length.expr if isinstance(length, SymInt) else None
    return x.dyn[:a] + (mark,) + x.dyn[a + 1 :]


def _pad_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """constant_pad_nd / pad(x, pad, ...): pairs from the last dim backwards, each adding
    ``before + after`` to its dim."""
    pads = _ints(args[0])
    if len(pads) % 2 or len(pads) // 2 > x.rank or out.rank != x.rank:
        return None
    dyn = list(x.dyn)
    for k in range(len(pads) // 2):
        d = x.rank - 1 - k
        if dyn[d] is not None and dyn[d] != UNKNOWN:
            grown = symexpr.add(dyn[d], pads[2 * k] + pads[2 * k + 1])  # type: ignore[arg-type]
            dyn[d] = UNKNOWN if grown is None else None if isinstance(grown, int) else grown
    return tuple(dyn)


def _stft_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> Optional[tuple[Optional[str], ...]]:
    """stft(x, n_fft, hop, ...): [*batch, L] -> [*batch, bins, frames], the frames of a
    dynamic L (padded by n_fft//2 each side when centred)."""
    if out.rank != x.rank + 1 or x.dyn[-1] is None:
        return None
    n_fft = _ints(args[0])[0]
    hop_arg = args[1]
    hop = hop_arg.value if isinstance(hop_arg, Const) and hop_arg.value is not None else n_fft // 4
    center_overload = len(args) > 5 and isinstance(args[5], Const) and isinstance(args[5].value, str)
    length: Optional[str] = x.dyn[-1]
    if center_overload and isinstance(args[4], Const) and args[4].value:
        grown = symexpr.add(x.dyn[-1], 2 * (n_fft // 2))  # type: ignore[arg-type]
        length = UNKNOWN if grown is None or isinstance(grown, int) else grown
    return x.dyn[:-1] + (None, _windows(length, n_fft, hop))


def _unsqueeze_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    d = _ints(args[0])[0] % out.rank
    return x.dyn[:d] + (None,) + x.dyn[d:]


def _embedding_dyn(weight: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """embedding(weight, indices): the indices' dims, then the embedding's."""
    idx = args[0]
    assert isinstance(idx, TensorValue) and idx.rank + weight.rank - 1 == out.rank
    return idx.dyn + weight.dyn[1:]


def _index_select_dyn(x: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """index_select(x, dim, index): x's dims with the indexed one replaced by the index's."""
    idx = args[1]
    assert isinstance(idx, TensorValue) and idx.rank <= 1 and x.rank == out.rank
    a = _ints(args[0])[0] % x.rank
    return x.dyn[:a] + (idx.dyn[0] if idx.rank else None,) + x.dyn[a + 1 :]


def _matmul_dyn(a: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """matmul: broadcast batch dims, then a's rows and b's columns (the contracted dim,
    dynamic or not, never reaches the output)."""
    b = args[0]
    assert isinstance(b, TensorValue)
    if a.rank == 1:  # vector @ matrix: b's batch dims and columns
        return b.dyn[:-2] + b.dyn[-1:] if b.rank > 1 else ()
    if b.rank == 1:  # matrix @ vector: a's batch dims and rows
        return a.dyn[:-1]
    dyn: list[Optional[str]] = []
    for d in range(out.rank - 2):
        mark: Optional[str] = None
        for t in (a, b):
            k = d - (out.rank - t.rank)
            if k >= 0 and t.dyn[k] is not None and t.shape[k] == out.shape[d]:
                mark = t.dyn[k]
        dyn.append(mark)
    return tuple(dyn) + (a.dyn[-2], b.dyn[-1])


def _sdpa_dyn(q: TensorValue, out: TensorValue, args: Sequence[IRValue]) -> tuple[Optional[str], ...]:
    """scaled_dot_product_attention: the query's dims, with the values' last one (the
    mask's key axis never reaches the output)."""
    v = args[1]
    assert isinstance(v, TensorValue) and q.rank == out.rank
    return q.dyn[:-1] + v.dyn[-1:]


DynRule = Callable[[TensorValue, TensorValue, Sequence[IRValue]], Optional[tuple[Optional[str], ...]]]
# A rule returns the output's marks, or None where it cannot tell (the generic rule then applies).
_DYN_RULES: dict[str, DynRule] = {
    "aten::view": _sizes_dyn,
    "aten::reshape": _sizes_dyn,
    "aten::flatten": _window_dyn,
    "aten::unflatten": _window_dyn,
    "aten::squeeze": _window_dyn,
    "aten::permute": _permute_dyn,
    "aten::transpose": _transpose_dyn,
    "aten::t": _transpose_dyn,
    "aten::unsqueeze": _unsqueeze_dyn,
    "aten::embedding": _embedding_dyn,
    "aten::scaled_dot_product_attention": _sdpa_dyn,
    "aten::matmul": _matmul_dyn,
    "aten::mm": _matmul_dyn,
    "aten::bmm": _matmul_dyn,
    "aten::index_select": _index_select_dyn,
    "aten::select": _select_dyn,
    "aten::movedim": _movedim_dyn,
    "aten::moveaxis": _movedim_dyn,
    "aten::mT": _matrix_transpose_dyn,
    "aten::mH": _matrix_transpose_dyn,
    "aten::adjoint": _matrix_transpose_dyn,
    "aten::matrix_H": _matrix_transpose_dyn,
    "aten::numpy_T": _reverse_dyn,
    "aten::rot90": _rot90_dyn,
    "aten::unfold": _unfold_dyn,
    "aten::diagonal": _diagonal_dyn,
    "aten::slice": _slice_dyn,
    "aten::narrow": _narrow_dyn,
    "aten::constant_pad_nd": _pad_dyn,
    "aten::pad": _pad_dyn,
    "aten::stft": _stft_dyn,
    "aten::expand": _expand_dyn,
    "aten::expand_as": _expand_as_dyn,
    "aten::broadcast_to": _expand_as_dyn,
    "aten::new_zeros": _new_fill_dyn,
    "aten::new_ones": _new_fill_dyn,
    "aten::new_empty": _new_fill_dyn,
    "aten::new_full": _new_fill_dyn,
}
# torch.*_copy forms of views: the same dims as the view.
_DYN_RULES.update({f"{kind}_copy": _DYN_RULES[kind] for kind in (
    "aten::view", "aten::permute", "aten::transpose", "aten::t", "aten::unsqueeze", "aten::expand",
    "aten::slice", "aten::select", "aten::narrow", "aten::unfold", "aten::diagonal")})


def build_ir(traced: TracedModel, dynamic_axes: Optional[dict[int, dict[int, str]]] = None) -> IRGraph:
    """Build the IR in one pass; ``dynamic_axes`` maps flat input index -> {dim: symbol}."""
    return _Builder(traced, dynamic_axes or {}).build()
