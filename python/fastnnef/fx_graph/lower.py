"""Lower an ``ExportedProgram``'s FX graph into fastnnef's IR, the one the handlers read.

Every ``call_function`` node of an aten overload becomes the ``IROp`` the jit front end
makes for the same call: its kind is the schema's name (``aten::linear``), its inputs are
the schema's arguments in order, defaults and keyword-only ones included (as TorchScript
passes them), so that a handler never knows which front end fed it. What the jit builder
has to work out, torch gave already:

- shapes and dtypes are the nodes' fake tensors (``meta["val"]``); a size that varies with
  a dynamic axis is a ``SymInt`` whose expression ``sizes.py`` writes as a ``DimExpr``:
  no dynamic-dim rule runs for this front end;
- Python arithmetic on sizes (``x.size(1) * 2``, ``operator.floordiv``) is a node whose
  value is that ``SymInt``: it becomes an IR ``SymInt`` (or a ``Const``) directly;
- the program is functional (functionalized by ``capture.py`` where it writes in place):
  no in-place write, no view to track;
- a submodule kept whole for its module extractor is one ``fastnnef::module_call`` node
  (capture.py): it becomes the one IR op the jit builder makes for it, read by the extractor;
- parameters and buffers are placeholders, bound by name to the user's own tensors (no
  copy), labelled as the jit front end labels them (``tensor/named.py``).

Ops whose inputs are all constants are folded as on the jit path (``torch_graph/ir/fold.py``).
``t.item()`` of a 0-d tensor computed at run time stays that tensor: the op reading it
computes with the value tract has at run time, never the traced one.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.export.graph_signature import InputKind, OutputKind

from fastnnef.dim import UNKNOWN, DimExpr, Size
from fastnnef.exceptions import T2NErrorNotImplemented, T2NErrorTorchExportFailed
from fastnnef.fx_graph.capture import CapturedProgram
from fastnnef.fx_graph.sizes import dim_of, traced_int
from fastnnef.tensor.named import export_labels, storage_labels
from fastnnef.torch_graph.ir import fold as folding
from fastnnef.torch_graph.ir.builder import NOOP_KINDS
from fastnnef.torch_graph.ir.data import (
    CUSTOMOP_KIND,
    Const,
    ConstTensor,
    IRGraph,
    IROp,
    IRValue,
    ListValue,
    ParamValue,
    SymInt,
    TensorValue,
)
from fastnnef.torch_graph.module_calls import OP_KIND as MODULE_CALL
from fastnnef.torch_graph.trace import WRAPPED

# Checks torch records for its own guards (sizes in range, metadata as traced): tract
# checks shapes itself, and the ranges are the program's, not the graph's to compute.
_CHECKS = frozenset({
    "aten::_assert_scalar", "aten::_assert_async", "aten::_assert_tensor_metadata",
    "aten::sym_constrain_range", "aten::sym_constrain_range_for_size", "aten::_functional_assert_async",
})
# A 0-d tensor's value as a Python number: under torch.export an unbacked symbol; in the
# graph the tensor itself, which ops read as the scalar operand it holds.
_ITEM = frozenset({"aten::item", "aten::_local_scalar_dense"})
# Functional forms that torch.export writes where the tracer records another kind with the
# same inputs and result: read by that kind's handler.
_SAME_AS = {
    "aten::_unsafe_view": "aten::view",  # a reshape of a tensor nothing else reads
    "aten::copy": "aten::copy_",  # copy_'s result: src cast and broadcast to self's dtype and shape
}



def _one_sample_loss(node: fx.Node, val: torch.Tensor) -> torch.Tensor:
    """torch's meta kernel gives multilabel_margin_loss of one sample ([C]) with reduction
    'none' the shape [1]; its eager kernel returns a 0-d loss, what the artefact must match."""
    x = node.args[0]
    reduction = node.args[2] if len(node.args) > 2 else node.kwargs.get("reduction", 1)  # torch's default: mean
    one_sample = isinstance(x, fx.Node) and x.meta["val"].dim() == 1
    return val.squeeze(0) if one_sample and reduction == 0 and val.dim() == 1 else val


# Eval batch_norm as functionalization writes it (read as the tracer's aten::batch_norm).
_BATCH_NORM_EVAL = "aten::_native_batch_norm_legit_no_training"


# Results whose fake tensor's shape torch's meta kernel gets otherwise than its eager kernel.
_EAGER_SHAPE: dict[str, Callable[[fx.Node, torch.Tensor], torch.Tensor]] = {
    "aten::multilabel_margin_loss": _one_sample_loss,
}


@dataclass(eq=False)
class _Unwritable(IRValue):
    """A Python number the program computed that the IR cannot hold (a comparison of a
    data-dependent value, a float of sizes): an error only if an op reads it (torch's own
    guards on it are not exported)."""

    name: str
    why: str

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)')


class _Lowering:
    def __init__(self, captured: CapturedProgram):
        self.captured = captured
        model = captured.wrapper.model
        # .dat labels as on the jit path: a weight's first name, or a NamedTensor's.
        self.canonical = export_labels(model)
        self.by_storage = storage_labels(model, self.canonical)
        self.weights = frozenset(self.by_storage.values())  # constants that are weights: never folded
        self.values: dict[fx.Node, IRValue] = {}
        self.symbols: dict[Any, Size] = {}  # torch's symbol of each dynamic axis -> its NNEF symbol
        self.ops: list[IROp] = []
        self.const_count = 0

    # --- values ---------------------------------------------------------------------------
    def size(self, value: int | torch.SymInt, where: str) -> tuple[int, DimExpr | None]:
        """A dim's traced size and its mark (``None``: static)."""
        if isinstance(value, int):
            return value, None
        expr = value.node.expr
        if expr.is_number:
            return int(expr), None
        traced = traced_int(value)
        if traced is None:
            raise T2NErrorNotImplemented(
                f"{where}: a size computed from the values of a tensor ({expr}, data-dependent): "
                "tract needs sizes that follow from the inputs' shapes; compute it from shapes, "
                "or export with that tensor's values fixed"
            )
        dim = dim_of(expr, self.symbols)
        return traced, dim if isinstance(dim, DimExpr) else None

    def tensor(self, name: str, fake: torch.Tensor, where: str) -> TensorValue:
        sized = [self.size(s, where) for s in fake.shape]
        return TensorValue(name, fake.dtype, tuple(s for s, _ in sized), tuple(d for _, d in sized))

    def scalar(self, name: str, value: Any, where: str) -> IRValue:
        """A Python number the program computed (a size, arithmetic on sizes)."""
        if isinstance(value, (bool, int, float)):
            return Const(name, value)
        if isinstance(value, torch.SymInt):
            traced, dim = self.size(value, where)
            return Const(name, traced) if dim is None else SymInt(name, traced, dim)
        expr = value.node.expr if isinstance(value, (torch.SymFloat, torch.SymBool)) else None
        if expr is not None and not expr.free_symbols:
            return Const(name, bool(expr) if isinstance(value, torch.SymBool) else float(expr))
        return _Unwritable(name, (
            f"{where}: a Python {type(value).__name__} computed from sizes or tensor values ({expr}): "
            "only integer sizes are kept in the graph; compute it with torch ops on tensors instead"
        ))

    def result(self, name: str, value: Any, where: str) -> IRValue:
        if isinstance(value, torch.Tensor):
            return self.tensor(name, value, where)
        if value is None:  # an output nothing reads (attention weights not asked for)
            return Const(name, None)
        return self.scalar(name, value, where)

    def arg(self, value: Any) -> IRValue:
        if isinstance(value, fx.Node):
            read = self.values[value]
            if isinstance(read, _Unwritable):
                raise T2NErrorNotImplemented(read.why)
            return read
        if isinstance(value, (list, tuple)):
            return ListValue("", [self.arg(v) for v in value])
        return Const("", value)

    def const_label(self, scope: str) -> str:
        """A fresh label for a tensor constant of module ``scope`` (the jit builder's form)."""
        self.const_count += 1
        return f"{scope}.c{self.const_count - 1}" if scope else f"c{self.const_count - 1}"

    # --- the graph ------------------------------------------------------------------------
    def lower(self) -> IRGraph:
        program = self.captured.program
        graph = program.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        inputs: list[TensorValue] = []
        for node, spec in zip(placeholders, program.graph_signature.input_specs):
            value = self.placeholder(node, spec, len(inputs))
            if spec.kind == InputKind.USER_INPUT:
                assert isinstance(value, TensorValue)
                inputs.append(value)
            self.values[node] = value
        for node in graph.nodes:
            if node.op == "call_function":
                self.call(node)
            elif node.op not in ("placeholder", "output"):
                raise T2NErrorTorchExportFailed(f"{node.op} node {node.name} in the exported program")
        results = graph.output_node().args[0]
        outputs = [
            self.arg(value) for value, spec in zip(results, program.graph_signature.output_specs)
            if spec.kind == OutputKind.USER_OUTPUT  # buffer writes: the graph reads buffers as before them
        ]
        return IRGraph(inputs, outputs, self.ops, self.canonical)

    def placeholder(self, node: fx.Node, spec: Any, index: int) -> IRValue:
        fake = node.meta["val"]
        if spec.kind == InputKind.USER_INPUT:
            axes = self.captured.dynamic_axes.get(index, {})
            for axis, name in axes.items():  # the NNEF symbols of torch's symbols
                size = fake.shape[axis]
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    self.symbols[size.node.expr] = DimExpr(name)
            value = self.tensor(node.name, fake, f"input {self.captured.input_names[index]}")
            unnamed = [d for d, mark in enumerate(value.dyn) if mark is not None and d not in axes]
            if unnamed or UNKNOWN in value.dyn:
                raise T2NErrorTorchExportFailed(
                    f"input {self.captured.input_names[index]}: torch.export made its dims {unnamed or list(axes)} "
                    "sizes other than the dynamic axes' symbols"
                )
            return value
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            path = spec.target
            wrapper = self.captured.wrapper
            tensor = wrapper.get_parameter(path) if spec.kind == InputKind.PARAMETER else wrapper.get_buffer(path)
            qualname = self.canonical.get(id(tensor), path[len(WRAPPED) + 1:])
            return ParamValue(node.name, tensor.dtype, tuple(tensor.shape), (), qualname, tensor)
        if spec.kind == InputKind.CONSTANT_TENSOR:
            tensor = self.captured.program.constants[spec.target]
            assert isinstance(tensor, torch.Tensor)
            key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype) if tensor.numel() else None
            label = (self.by_storage.get(key) if key else None) or self.const_label("")
            return ConstTensor(node.name, tensor.dtype, tuple(tensor.shape), (), label, tensor)
        raise T2NErrorTorchExportFailed(
            f"program input {node.name} of kind {spec.kind.name}, which fastnnef does not read"
        )

    def call(self, node: fx.Node) -> None:
        target = node.target
        scope, source = _site(node)
        where = f"{node.name} in {scope or '<root module>'}" + (f" ({source})" if source else "")
        if target is operator.getitem:
            seq = self.values[node.args[0]]  # type: ignore[index]
            assert isinstance(seq, ListValue)
            self.values[node] = seq.items[node.args[1]]  # type: ignore[index]
            return
        if not isinstance(target, torch._ops.OpOverload):  # Python arithmetic on sizes
            self.values[node] = self.scalar(node.name, node.meta.get("val"), where)
            return
        schema = target._schema
        kind = _SAME_AS.get(schema.name, schema.name)
        if kind in _CHECKS:
            return
        inputs = [self.arg(v) for v in _schema_args(schema, node.args, node.kwargs)]
        if kind in _ITEM:
            x = inputs[0]
            self.values[node] = Const(node.name, x.tensor.item()) if isinstance(x, ConstTensor) else x
            return
        if kind in NOOP_KINDS:
            self.values[node] = inputs[0]
            return
        if kind == MODULE_CALL:
            self.module_call(node, inputs, where)
            return
        if kind == _BATCH_NORM_EVAL:
            self.batch_norm_eval(node, inputs, scope, source, where)
            return
        val: Any = node.meta.get("val")
        if kind in _EAGER_SHAPE:
            val = _EAGER_SHAPE[kind](node, val)
        returns = schema.returns
        if len(returns) == 1 and not isinstance(val, torch.Tensor) and not isinstance(val, (list, tuple)):
            self.values[node] = self.scalar(node.name, val, where)  # sym_size, sym_numel...
            return
        if len(returns) == 1 and isinstance(returns[0].type, torch.ListType):
            outputs: list[IRValue] = [
                ListValue(node.name, [self.result(f"{node.name}.{k}", v, where) for k, v in enumerate(val)])
            ]
        elif len(returns) == 1:
            outputs = [self.result(node.name, val, where)]
        else:
            outputs = [self.result(f"{node.name}.{k}", v, where) for k, v in enumerate(val)]
        op = IROp(kind, inputs, outputs, scope, source)
        folded = folding.evaluate(_thunk(target), inputs, outputs, self.weights, lambda: self.const_label(scope))
        if folded is None:
            self.ops.append(op)
        results = folded if folded is not None else outputs
        self.values[node] = results[0] if len(results) == 1 else ListValue(node.name, list(results))

    def batch_norm_eval(self, node: fx.Node, inputs: list[IRValue], scope: str, source: str, where: str) -> None:
        """What ``run_decompositions`` makes of an eval ``batch_norm`` (in a graph that
        writes in place, e.g. a residual ``out += x``) as the tracer's ``aten::batch_norm``
        in eval; its saved mean and rstd (empty in eval) are an error only if read."""
        x, weight, bias, mean, var, momentum, eps = inputs
        out = self.result(f"{node.name}.0", node.meta["val"][0], where)
        args = [x, weight, bias, mean, var, Const(f"{node.name}.training", False), momentum, eps,
                Const(f"{node.name}.cudnn_enabled", True)]
        self.ops.append(IROp("aten::batch_norm", args, [out], scope, source))
        saved = [_Unwritable(f"{node.name}.{k}", "batch_norm's saved statistics, empty in eval") for k in (1, 2)]
        self.values[node] = ListValue(node.name, [out, *saved])

    def module_call(self, node: fx.Node, inputs: list[IRValue], where: str) -> None:
        """A submodule kept whole (torch_graph/module_calls.py): one op for its extractor,
        whose inputs are the call's tensor arguments, as the jit builder makes it."""
        args, key = inputs
        assert isinstance(args, ListValue) and isinstance(key, Const)
        call = self.captured.module_calls[key.value]
        outputs = [self.result(f"{node.name}.{k}", v, where) for k, v in enumerate(node.meta["val"])]
        self.ops.append(IROp(CUSTOMOP_KIND + type(call.module).__name__, list(args.items), outputs, call.path,
                             _site(node)[1], extractor=call.extractor, module=call.module))
        self.values[node] = ListValue(node.name, outputs)


def _schema_args(schema: torch.FunctionSchema, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """A call's arguments in schema order, defaults filled in, keyword-only ones included."""
    out: list[Any] = []
    for k, argument in enumerate(schema.arguments):
        if k < len(args):
            out.append(args[k])
        elif argument.name in kwargs:
            out.append(kwargs[argument.name])
        else:
            out.append(argument.default_value if argument.has_default_value() else None)
    return out


def _thunk(target: torch._ops.OpOverload) -> folding.Thunk:
    """How to run the node's overload on constant inputs (keyword-only ones by name)."""
    names = [(a.name, a.kwarg_only) for a in target._schema.arguments]

    def run(values: list[Any]) -> Any:
        if target._schema.name in folding.NEVER_FOLDED or torch.Tag.nondeterministic_seeded in target.tags:
            raise folding.NotFoldable(target._schema.name)
        args = [v for (_, kw), v in zip(names, values) if not kw]
        kwargs = {name: v for (name, kw), v in zip(names, values) if kw}
        return target(*args, **kwargs)

    return run


def _site(node: fx.Node) -> tuple[str, str]:
    """The node's module path (as the jit front end writes it) and where it was called: the
    user's source line where torch recorded a stack trace, else the module's class
    (``capture.py`` records none: formatting them is a quarter of torch.export's time)."""
    stack = node.meta.get("nn_module_stack") or {}
    path, module_type = list(stack.values())[-1] if stack else ("", "")
    if path == WRAPPED:
        path = ""
    elif path.startswith(WRAPPED + "."):
        path = path[len(WRAPPED) + 1:]
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    user = [f for f in frames if "/torch/" not in f[0] and "/fastnnef/" not in f[0]]
    file, line, code = (user or frames or [("", "", "")])[-1]
    if not file:
        return path, _type_name(module_type) if module_type else ""
    return path, f"{file}({line}): {code.strip()}"


def _type_name(module_type: type | str) -> str:
    """A module's class as ``nn_module_stack`` records it (a class or its qualified name)."""
    return module_type if isinstance(module_type, str) else f"{module_type.__module__}.{module_type.__qualname__}"


def lower_program(captured: CapturedProgram) -> IRGraph:
    """The IR of a captured program, in one pass over its FX graph."""
    return _Lowering(captured).lower()
