"""The IR builder: one linear pass over the traced, inlined TorchScript graph.

Shapes and dtypes are read from the trace. Parameters are referenced, never copied.
Scalar arithmetic on constants (``x.size(0) * 2``) is folded here; for dynamic axes the
same arithmetic builds symbolic expressions (``SymInt``). Ops whose inputs are all
constants are folded (``fold.py``), in-place writes and views go through the storages of
``functionalize.py``, and every recorded op gets its dynamic dims from ``dynamic.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from fastnnef.dim import DimExpr, Size
from fastnnef.exceptions import T2NErrorIR, T2NErrorNotImplemented
from fastnnef.log import get_logger
from fastnnef.tensor.named import export_labels, storage_labels
from fastnnef.torch_graph.ir import fold as folding
from fastnnef.torch_graph.ir import functionalize, sizes
from fastnnef.torch_graph.ir.data import (
    CUSTOMOP_KIND,
    Const,
    ConstTensor,
    IRGraph,
    IROp,
    IRValue,
    ListValue,
    ModuleRef,
    ParamValue,
    SymInt,
    SymRatio,
    TensorValue,
)
from fastnnef.torch_graph.ir.dynamic import const_ints, propagate_dyn
from fastnnef.torch_graph.module_calls import OP_KIND as MODULE_CALL
from fastnnef.torch_graph.trace import WRAPPED, TracedModel

log = get_logger(__name__)

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
        # Storage of tensors seen through views and in-place writes (torch_graph/ir/functionalize.py).
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

    def tensor_value(self, v: torch._C.Value, dyn: Sequence[DimExpr | None] | None = None) -> IRValue:
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

    def refuse_frozen_sizes(self, inputs: list[TensorValue]) -> None:
        """A size of a dynamic axis turned into a Python number while traced is a constant
        of the graph, wrong at any other length (torch_graph/size_watch.py). Sizes are told
        apart by their traced values, as the generic dynamic-dim rule does."""
        lengths = {t.shape[d]: t.dyn[d] for t in inputs for d in range(t.rank) if t.dyn[d] is not None}
        for conversion in self.traced.size_conversions:
            hit = sorted(conversion.sizes & set(lengths))
            if hit and conversion.branch:
                log.warning(
                    "%s: a size computed from dynamic axis %s (traced as %d) decides %s while traced: "
                    "the exported graph takes the traced branch at every length", conversion.where,
                    lengths[hit[0]], hit[0], conversion.how,
                )
            elif hit:
                raise T2NErrorNotImplemented(
                    f"{conversion.where}: a size computed from dynamic axis {lengths[hit[0]]} (traced as "
                    f"{hit[0]}) is turned into a Python value by {conversion.how}, so the trace has it frozen "
                    "at the traced length. Compute it with torch ops on the size instead (torch.ceil(n / k), "
                    "n // k, n % k, torch.clamp) as transformers do under torch.jit.is_tracing(), or export "
                    "with this axis static. (Sizes are matched by their traced value: if it is a static size "
                    "equal to the traced length by chance, trace with another length.)"
                )

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
            tv.dyn = tuple(None if axes.get(d) is None else DimExpr(axes[d]) for d in range(tv.rank))
            self.set(v, tv)
            inputs.append(tv)
        self.refuse_frozen_sizes(inputs)
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
        elif kind == "prim::PythonOp":
            self.python_op(node)
        elif kind in sizes.CASTS and self.scalar_cast(kind, ins[0], outs[0]):
            pass
        elif kind in sizes.ROUNDING and sizes.is_scalar(self.get(ins[0])):
            floating = _scalar_kind(outs[0]) is False
            self.set(outs[0], sizes.rounding(kind, self.get(ins[0]), outs[0].debugName(), floating))
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
        elif kind in sizes.ARITHMETIC and self.foldable(ins):
            self.set(outs[0], sizes.arithmetic(kind, [self.number(i) for i in ins], outs[0].debugName()))
        else:
            self.op(node, kind, ins, outs)

    def python_op(self, node: torch._C.Node) -> None:
        """A custom ``torch.autograd.Function`` whose forward the trace did not record as a
        subgraph (those are inlined by trace.py)."""
        name = node.pyname() if hasattr(node, "pyname") else "a Python op"
        raise T2NErrorNotImplemented(
            f"{name} ({_source(node)}): a Python op whose forward the trace did not record; "
            "export the module that calls it with a ModuleInfoExtractor, or call its forward's "
            "torch ops directly"
        )

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
            dim = const_ints(inputs[1] if kind == "aten::unbind" else inputs[2])[0]
            for o, step in zip(outs, functionalize.list_view_steps(kind, x, dim, seq.items, site)):
                self.store.view(o.unique(), parent, step, step.template)

    def size(self, ins: list[torch._C.Value], out: torch._C.Value) -> None:
        t = self.peek(ins[0])
        assert isinstance(t, TensorValue)
        name = out.debugName()

        def dim_value(d: int) -> IRValue:
            mark = t.dyn[d]
            return Const(name, t.shape[d]) if mark is None else SymInt(name, t.shape[d], mark)

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
        count: Size = 1
        for size, mark in zip(t.shape, t.dyn):
            count = count * (size if mark is None else mark)
        self.set(out, sizes.size(name, math.prod(t.shape), count))

    def number(self, v: torch._C.Value) -> IRValue:
        """A value for size arithmetic: 0-d int/float tensor constants and 0-d integer
        buffers read as numbers (tracing records ``x.size(1) * 2`` as
        ``mul(NumToTensor(size), tensor(2))``)."""
        value = self.get(v)
        if isinstance(value, ConstTensor) and value.tensor.dim() == 0 and value.tensor.dtype != torch.bool \
                and not value.tensor.is_complex():
            return Const(value.name, value.tensor.item())
        if isinstance(value, ParamValue) and value.tensor.dim() == 0 and not value.tensor.is_floating_point() \
                and not value.tensor.is_complex() and value.tensor.dtype != torch.bool:
            # An integer buffer of the module's configuration (a codec's kernel size), not
            # a learned weight: its value enters size arithmetic.
            return Const(value.name, value.tensor.item())
        return value

    def foldable(self, ins: list[torch._C.Value]) -> bool:
        vals = [self.number(i) for i in ins]
        if len(vals) == 3 and isinstance(vals[2], Const) and isinstance(vals[2].value, str):
            vals = vals[:2]  # aten::div(a, b, rounding_mode)
        return all(isinstance(v, (Const, SymInt, SymRatio)) for v in vals) and any(
            not isinstance(v, Const) or isinstance(v.value, (int, float)) for v in vals
        ) and all(not isinstance(v, Const) or isinstance(v.value, (int, float, bool)) for v in vals)

    def scalar_cast(self, kind: str, src: torch._C.Value, out: torch._C.Value) -> bool:
        """A number, size or ratio converted (``int(n)``, ``torch.tensor(n)``, ``n.to(int64)``):
        the same scalar, rounded to an integer where the output is. Conversions to a
        Python number also read 0-d tensor constants (``int(torch.tensor(3))``). False
        when the input is a tensor: the op is recorded as usual."""
        integral = _scalar_kind(out)
        if integral is None and isinstance(out.type(), torch._C.TensorType):
            return False  # a bool, complex or unknown dtype
        value = self.number(src) if not isinstance(out.type(), torch._C.TensorType) else self.get(src)
        if not sizes.is_scalar(value):
            return False
        self.set(out, sizes.cast(value, out.debugName(), integral))
        return True

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
        inputs = self.scalars_as_tensors(ins, [self.get(i) for i in ins], site)
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

    def scalars_as_tensors(
        self, ins: list[torch._C.Value], inputs: list[IRValue], site: functionalize.Site,
    ) -> list[IRValue]:
        """Numbers and sizes that the trace holds as 0-d tensors, where the op reads a
        tensor: with only constant inputs, a constant tensor (so that the op folds, e.g.
        ``torch.sqrt(torch.tensor(d) * 3)``); a size, where no other input is a tensor
        computed at run time (``torch.sqrt(n)``), or a ratio of sizes anywhere, a tensor
        built in the graph. Next to a run-time tensor (``x * x.size(1)``) a size stays a
        number: handlers write it as a scalar."""
        runtime = any(isinstance(v, TensorValue) and not isinstance(v, ConstTensor) for v in inputs)
        constant = not runtime and not any(sizes.is_symbolic(v) for v in inputs)
        out = list(inputs)
        for k, (src, value) in enumerate(zip(ins, inputs)):
            ty = src.type()
            dtype = ty.dtype() if isinstance(ty, torch._C.TensorType) else None
            if dtype is None or not sizes.is_scalar(value):
                continue
            if isinstance(value, Const) and constant:
                data = torch.tensor(value.value, dtype=dtype)
                out[k] = ConstTensor(value.name, dtype, (), (), self.const_label(site[0]), data)
            elif isinstance(value, SymRatio) or (isinstance(value, SymInt) and not runtime):
                out[k] = self.size_tensor(value, dtype, site)
        return out

    def size_tensor(self, value: IRValue, dtype: torch.dtype, site: functionalize.Site) -> IRValue:
        """A 0-d tensor of ``dtype`` holding a size (``scalar_tensor``), or a ratio of
        sizes (its numerator divided by its denominator)."""
        if isinstance(value, SymRatio):
            num = sizes.size(value.name, value.traced * value.den, value.num)
            numerator = self.size_tensor(num, dtype, site)
            quotient = TensorValue(f"{value.name}.ratio", dtype, ())
            return self.emit("aten::div", [numerator, Const("", value.den)], quotient, site, None)
        if isinstance(value, Const):
            return value
        none = Const("", None)
        tensor = TensorValue(f"{value.name}.tensor", dtype, ())
        return self.emit("aten::scalar_tensor", [value, none, none, none, none], tensor, site, None)

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

    def view_how(self, kind: str, ins: list[torch._C.Value], outs: list[torch._C.Value]) -> str | None:
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
        tensors ``x`` views (torch_graph/ir/functionalize.py)."""
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
                             lambda values: thunk([_writable_copy(values[0], out), *values[1:]]), dyn=False)
        self.store.write(ref, new, kind, site)
        self.store.alias(outs[0].unique(), ref)

    def record(self, op: IROp, thunk: folding.Thunk | None, dyn: bool = True) -> list[IRValue]:
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
             thunk: folding.Thunk | None) -> IRValue:
        """One op the builder makes itself (a view taken again, a write-back): its output
        dims are known already."""
        return self.record(IROp(kind, inputs, [output], *site), thunk, dyn=False)[0]

    def _propagate_list_dyn(self, lst: ListValue) -> None:
        for op in reversed(self.ops):
            if lst in op.outputs:
                propagate_dyn(op)
                return


def _writable_copy(value: Any, out: IRValue) -> torch.Tensor:
    """A copy of the constant an in-place op writes into, for folding it. A 0-d tensor made
    from a size (``torch.tensor(x.shape[-1])``, ``prim::NumToTensor``) is folded to a Python
    number: it becomes a 0-d tensor again, of the dtype the trace gives the op's result."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if not isinstance(out, TensorValue):
        raise folding.NotFoldable
    return torch.tensor(value, dtype=out.dtype)


def _layout(v: torch._C.Value) -> tuple[list[int], list[int]] | None:
    """The traced sizes and strides of a tensor value (``None`` where the trace lacks them)."""
    ty = v.type()
    if not isinstance(ty, torch._C.TensorType):
        return None
    sizes, strides = ty.sizes(), ty.strides()
    return None if sizes is None or strides is None else (sizes, strides)


def _contiguous(v: torch._C.Value) -> bool:
    layout = _layout(v)
    return layout is None or functionalize.is_contiguous(*layout)


def _scalar_kind(v: torch._C.Value) -> bool | None:
    """Whether a scalar value (a Python number or a 0-d tensor) is integral (True) or
    floating (False); None for a bool, a complex or a type the trace does not give."""
    ty = v.type()
    if isinstance(ty, torch._C.TensorType):
        dtype = ty.dtype()
        if dtype is None or dtype == torch.bool or dtype.is_complex:
            return None
        return not dtype.is_floating_point
    if isinstance(ty, torch._C.IntType):
        return True
    if isinstance(ty, torch._C.FloatType):
        return False
    return None


def _source(node: torch._C.Node) -> str:
    """The user's source line for a node, best effort (TorchScript's source ranges)."""
    try:
        text = str(node.sourceRange()).strip().splitlines()
    except Exception:  # noqa: BLE001 - not all torch builds keep source ranges
        return ""
    frames = [line.strip() for line in text if line.strip()]
    user = [f for f in frames if "/torch/" not in f and "/fastnnef/" not in f]
    return (user or frames or [""])[0]


def build_ir(traced: TracedModel, dynamic_axes: dict[int, dict[int, str]] | None = None) -> IRGraph:
    """Build the IR in one pass; ``dynamic_axes`` maps flat input index -> {dim: symbol}."""
    return _Builder(traced, dynamic_axes or {}).build()
