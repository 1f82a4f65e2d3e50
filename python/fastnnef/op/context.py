"""What a handler sees: ``OpContext``, its one way to read the node and build the graph.

A handler reads its inputs as declared in the registry (``args="t i I?"``, see
op/registry.py), emits the ops that produce the node's outputs with ``emit`` /
``emit_multi``, intermediate ops with ``tmp`` / ``tmp_multi`` (datum type and shape derived
by nnef/shapes.py unless given), weights computed at export time with ``constant``, and
fragments with ``fragment``. It asks the target what it can do through ``caps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.dim import DimExpr, Size
from fastnnef.exceptions import T2NErrorDataNodeValue, T2NErrorNotImplemented
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.payload import DATUM_TYPES, TORCH_QUANTIZED, quantized_params
from fastnnef.op.builder import GraphBuilder, shape_of, tract_dtype
from fastnnef.op.registry import HandlerSpec
from fastnnef.tensor.quant.packed import PackedFormat
from fastnnef.torch_graph.ir import (
    UNKNOWN,
    Const,
    IROp,
    IRValue,
    ListValue,
    SymInt,
    TensorValue,
)

Scalar = int | float | bool

# torch dtype -> tract datum type (bf16 is computed in f32): one table, nnef/payload.py's.
DTYPES = DATUM_TYPES
FLOAT_DTYPES = frozenset({"f16", "f32", "f64"})


class OpContext:
    """Helpers for one node, over the export's ``GraphBuilder``."""

    def __init__(self, builder: GraphBuilder, node: IROp):
        self._b = builder
        self.node = node
        self.caps: TargetCapabilities = builder.caps
        self._emitted: dict[int, NTensor] = {}  # id(output value) -> its tensor

    @property
    def strict(self) -> bool:
        """Strict Khronos NNEF: only standard operators (no ``tract_*``)."""
        return self.caps.strict

    @property
    def kind(self) -> str:
        """The node's aten kind (``"aten::std"``): one handler often serves several."""
        return self.node.kind

    # --- errors --------------------------------------------------------------------------
    def where(self) -> str:
        """The aten op, the module path and the user's source line, for messages."""
        return self.node.where()

    def unsupported(self, what: str, hint: str = "") -> T2NErrorNotImplemented:
        """An error naming the aten op, the module path and the user's source line."""
        msg = f"{self.node.where()}: {what}"
        return T2NErrorNotImplemented(msg + (f". {hint}" if hint else ""))

    # --- inputs --------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        return len(self.node.inputs)

    def is_tensor(self, index: int) -> bool:
        """Whether node input ``index`` is a traced tensor (not a constant, a list, or a
        value the trace records no shape for, such as a nested tensor)."""
        return index < len(self.node.inputs) and isinstance(self.node.inputs[index], TensorValue)

    def input_dtype(self, index: int) -> torch.dtype | None:
        """The torch dtype of tensor input ``index`` (complex ones included: the NNEF
        tensor of a complex value is real), ``None`` if that input is not a tensor."""
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        return value.dtype if isinstance(value, TensorValue) else None

    def item_dtypes(self, index: int) -> list[torch.dtype | None]:
        """``input_dtype`` of each item of list input ``index``."""
        value = self.node.inputs[index]
        if not isinstance(value, ListValue):
            raise T2NErrorDataNodeValue(f"{self.node.where()}: input {index} is {describe(value)}, not a list")
        return [v.dtype if isinstance(v, TensorValue) else None for v in value.items]

    def traced_shape(self, index: int) -> tuple[int, ...]:
        """The sizes tensor input ``index`` had in the trace (torch's rank: a complex value's
        pair axis excluded); ``shape`` of its ``NTensor`` gives the symbolic dims."""
        value = self.node.inputs[index]
        if not isinstance(value, TensorValue):
            raise T2NErrorDataNodeValue(f"{self.node.where()}: input {index} is {describe(value)}, not a tensor")
        return tuple(value.shape)

    def arg(self, index: int, kind: str) -> Any:
        """Input ``index`` read as argument kind ``kind`` (for overloads whose inputs the
        declaration cannot fix); ``None`` past the last input."""
        if index >= len(self.node.inputs):
            return None
        return parse_args(self, [kind], [self.node.inputs[index]])[0]

    def tensor(self, value: IRValue) -> NTensor:
        return self._b.tensor(value, self.node)

    def tensor_inputs(self) -> list[NTensor]:
        """Every tensor input of the node, in order (a module call's arguments)."""
        return [self.tensor(v) for v in self.node.inputs if isinstance(v, TensorValue)]

    def parameter(self, tensor: torch.Tensor) -> NTensor:
        """A weight of the model (by its parameter or buffer name), as a variable."""
        return self._b.parameter(tensor, self.node.where())

    # --- outputs -------------------------------------------------------------------------
    def outputs(self) -> list[IRValue]:
        """The node's outputs (the items, when the node returns one list)."""
        outs = self.node.outputs
        return list(outs[0].items) if len(outs) == 1 and isinstance(outs[0], ListValue) else list(outs)

    @property
    def n_outputs(self) -> int:
        """How many outputs the node has (the items, when it returns one list)."""
        return len(self.outputs())

    def out_value(self, index: int = 0) -> TensorValue:
        value = self.outputs()[index]
        if not isinstance(value, TensorValue):
            raise T2NErrorDataNodeValue(f"{self.node.where()}: output {index} is not a tensor")
        return value

    def out_dtype(self, index: int = 0) -> str:
        return tract_dtype(self.out_value(index).dtype, self.node.where())

    def out_torch_dtype(self, index: int = 0) -> torch.dtype:
        """The traced torch dtype of output ``index`` (for data computed at export time)."""
        return self.out_value(index).dtype

    def out_rank(self, index: int = 0) -> int:
        """torch's rank of output ``index`` (a complex value's pair axis excluded)."""
        return self.out_value(index).rank

    def out_traced_shape(self, index: int = 0) -> tuple[int, ...]:
        """The sizes output ``index`` had in the trace (``out_shape``: the symbolic dims)."""
        return tuple(self.out_value(index).shape)

    def out_shape(self, index: int = 0) -> tuple[Size, ...]:
        return shape_of(self.out_value(index))

    # --- building ------------------------------------------------------------------------
    def emit(
        self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None = None, out: int = 0,
        value: TensorValue | None = None, shape: Sequence[Size] | None = None,
        dtype: str | None = None,
    ) -> NTensor:
        """Emit the op that produces node output ``out`` (or list item ``value``), with the
        traced dtype and shape (its dynamic dims as the IR marks them, ir/dynamic.py).
        ``shape`` overrides the traced one where the handler knows symbolic dims better.
        ``dtype`` names a quantized output's type (the trace has no scale or zero point)."""
        value = value or self.out_value(out)
        if shape is None:
            shape = shape_of(value)
        tensor = self._b.op(
            kind, args, attrs, name=self._b.base_name(self.node, value),
            dtype=dtype or self._datum_type(value, args), shape=shape,
            exact=self._b.has_fixed_name(value), by=self.node,
        )
        self._emitted[id(value)] = tensor
        return tensor

    def _datum_type(self, value: TensorValue, args: Sequence[Any]) -> str:
        """The traced dtype as a tract datum type. A torch-quantized value keeps its first
        operand's quantized type: the ops that reach here with one only move data
        (reshape, transpose...); the others ask ``out_dtype()``, which refuses it."""
        if value.dtype in TORCH_QUANTIZED:
            source = next((a for a in args if isinstance(a, NTensor)), None)
            if source is not None and quantized_params(source.dtype) is not None:
                return source.dtype
        return tract_dtype(value.dtype, self.node.where())

    def emit_multi(
        self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None, outs: Sequence[int],
        shapes: Sequence[Sequence[Size]] | None = None,
    ) -> tuple[NTensor, ...]:
        """Emit one op producing several node outputs (``outs``: their indices)."""
        values = [self.out_value(i) for i in outs]
        specs = [
            (self._b.base_name(self.node, v), tract_dtype(v.dtype, self.node.where()),
             shape_of(v) if shapes is None else shapes[k])
            for k, v in enumerate(values)
        ]
        tensors = self._b.op_multi(
            kind, args, attrs, specs, exact=[self._b.has_fixed_name(v) for v in values], by=self.node
        )
        self._emitted.update((id(v), t) for v, t in zip(values, tensors))
        return tensors

    def emitted(self, value: IRValue) -> NTensor | None:
        """The tensor emitted for node output ``value`` so far, if any."""
        return self._emitted.get(id(value))

    def tmp(
        self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None = None, *,
        dtype: str | None = None, shape: Sequence[Size] | None = None, suffix: str = "",
    ) -> NTensor:
        """Emit an intermediate op (named after the node, plus ``suffix``); its dtype and
        shape are derived from the operands unless given."""
        return self._b.op(kind, args, attrs, name=self.name(suffix), dtype=dtype, shape=shape, by=self.node)

    def tmp_multi(
        self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None,
        outputs: Sequence[tuple[str, str, Sequence[Size]]],
    ) -> tuple[NTensor, ...]:
        """An intermediate op with several outputs, each ``(suffix, dtype, shape)``."""
        return self._b.op_multi(
            kind, args, attrs, [(self.name(s), d, sh) for s, d, sh in outputs], by=self.node
        )

    def name(self, suffix: str = "") -> str:
        """A base identifier for something this node produces."""
        base = self._b.base_name(self.node)
        return f"{base}_{suffix}" if suffix else base

    def constant(self, data: torch.Tensor, label: str | None = None, suffix: str = "") -> NTensor:
        """A tensor computed at export time, stored as a variable. With ``label``, equal
        labels share one variable (the caller encodes what the data depends on in it);
        else a new label from the node's name and ``suffix``."""
        return self._b.variable(data, label or self._b.fresh_label(self.name(suffix)), where=self.node.where())

    def fragment(self, name: str, text: str) -> str:
        """Declare an NNEF fragment; returns its name."""
        self._b.fragment(name, text)
        return name

    def has_fragment(self, name: str) -> bool:
        return self._b.has_fragment(name)

    def is_variable(self, t: NTensor) -> bool:
        """Whether ``t`` is a variable: a weight, or a constant computed at export time
        (tract ops whose tensor attributes must be constants need one)."""
        return self._b.is_variable(t)

    def is_packed(self, t: NTensor) -> bool:
        """Whether ``t`` is a weight held as packed blocks (a Q4_0 ``QTensor``; its format:
        ``packed_format``)."""
        return self._b.packed_format(t) is not None

    def packed_format(self, t: NTensor) -> PackedFormat | None:
        """The packed format of a weight held as packed blocks, ``None`` otherwise."""
        return self._b.packed_format(t)

    # --- common transformations -----------------------------------------------------------
    def cast(self, t: NTensor, dtype: str, *, convert_constant: bool = False) -> NTensor:
        """``t`` as ``dtype`` (no-op when equal). Strict NNEF has no cast: a constant is
        converted at export time instead; ``convert_constant`` does the same for any target
        (a norm's f32 weights on an f16 input are stored as f16, no cast op in the graph)."""
        if t.dtype == dtype:
            return t
        data = self._b.plain_data(t) if self.strict or convert_constant else None
        if data is not None:
            torch_dtype = next(k for k, v in DTYPES.items() if v == dtype and k != torch.bfloat16)
            return self.constant(data.to(torch_dtype), f"{t.name}_as_{dtype}")
        return self.tmp("tract_core_cast", [t], {"to": dtype}, suffix="cast")

    def to_rank(self, t: NTensor, rank: int) -> NTensor:
        """Prepend unit axes: tract broadcasts NNEF-style (trailing), torch leading."""
        if t.rank >= rank:
            return t
        return self.tmp("unsqueeze", [t], {"axes": list(range(rank - t.rank))}, suffix="rank")

    def axis(self, dim: int, rank: int) -> int:
        """A non-negative axis (tract panics on some negative axes)."""
        if not -max(rank, 1) <= dim < max(rank, 1):
            raise self.unsupported(f"axis {dim} out of range for rank {rank}")
        return dim % rank if rank else 0

    def static(self, t: NTensor, dims: Sequence[int] | None = None, what: str = "this op") -> None:
        """Refuse dims that are dynamic (the handler needs their concrete value)."""
        for d in dims if dims is not None else range(t.rank):
            if isinstance(t.shape[d], DimExpr):
                raise self.unsupported(
                    f"{what} needs axis {d} of {t.name} as a constant, but it follows a dynamic axis",
                    "Export with this axis static, or restructure so the op doesn't use it",
                )


def bind_args(ctx: OpContext, overloads: Sequence[HandlerSpec]) -> tuple[HandlerSpec, list[Any]]:
    """The handler of the first schema overload whose
    argument kinds fit the node's inputs, and the inputs read as it declares; with none
    fitting, the first overload's, whose reading then says what is wrong."""
    inputs = ctx.node.inputs
    chosen = next((s for s in overloads if _fits(s.arg_kinds, inputs)), overloads[0])
    return chosen, parse_args(ctx, chosen.arg_kinds, inputs)


def _fits(arg_kinds: Sequence[str], inputs: Sequence[IRValue]) -> bool:
    """Whether ``inputs`` have the shapes ``arg_kinds`` read (tensors, lists, constants of
    the right type); values are not checked beyond that."""
    for i, token in enumerate(arg_kinds):
        kind = token.rstrip("?")
        if kind == "*":
            return True
        if i >= len(inputs):  # an input this overload has and the node lacks
            if not token.endswith("?"):
                return False
            continue
        value = inputs[i]
        if token.endswith("?") and isinstance(value, Const) and value.value is None:
            continue
        if not _fits_kind(kind, value):
            return False
    return len(inputs) <= len(arg_kinds)


def _fits_kind(kind: str, value: IRValue) -> bool:
    const = value.value if isinstance(value, Const) else None
    if kind in ("_", "v"):
        return True
    if kind == "t":
        return isinstance(value, TensorValue)
    if kind == "x":
        return isinstance(value, (TensorValue, SymInt)) or isinstance(const, (int, float, bool))
    if kind in ("i", "f", "b", "s", "n"):
        types = {"i": (int,), "f": (int, float), "b": (bool, int), "s": (str,), "n": (object,)}[kind]
        return isinstance(value, SymInt) and kind == "i" or isinstance(value, Const) and isinstance(const, types)
    if kind in ("I", "D"):
        return isinstance(value, (ListValue, SymInt)) or isinstance(const, int)
    return isinstance(value, ListValue)  # L, O


def parse_args(ctx: OpContext, arg_kinds: Sequence[str], inputs: Sequence[IRValue]) -> list[Any]:
    """Read the node's inputs as the handler declared (see op/registry.py)."""
    out: list[Any] = []
    for i, token in enumerate(arg_kinds):
        kind, optional = token.rstrip("?"), token.endswith("?")
        if kind == "*":
            return out
        if i >= len(inputs):
            out.append(None)
            continue
        value = inputs[i]
        if kind == "_":
            continue
        if optional and isinstance(value, Const) and value.value is None:
            out.append(None)
            continue
        out.append(_read(ctx, kind, value, i))
    if len(inputs) > len(arg_kinds):
        raise ctx.unsupported(
            f"{len(inputs)} inputs where the handler reads {len(arg_kinds)} (another overload?)"
        )
    return out


def _read(ctx: OpContext, kind: str, value: IRValue, index: int) -> Any:
    def bad(expected: str) -> T2NErrorDataNodeValue:
        return T2NErrorDataNodeValue(
            f"{ctx.node.where()}: input {index} should be {expected}, got {describe(value)}"
        )

    if kind == "t":
        if isinstance(value, TensorValue):
            return ctx.tensor(value)
        raise bad("a tensor")
    if kind == "x":
        if isinstance(value, TensorValue):
            return ctx.tensor(value)
        if isinstance(value, Const) and isinstance(value.value, (int, float, bool)):
            return value.value
        if isinstance(value, SymInt) and value.expr != UNKNOWN:
            return DimExpr(value.expr)  # a size of a dynamic axis, as a number (x + x.size(1))
        raise bad("a tensor or a number")
    if kind in ("i", "f", "b", "s", "n"):
        if isinstance(value, SymInt):
            raise ctx.unsupported(
                f"input {index} depends on a dynamic axis ({value.expr}) where a constant is needed"
            )
        if not isinstance(value, Const):
            raise bad("a constant")
        v = value.value
        if kind == "n":
            return v
        types = {"i": (int,), "f": (int, float), "b": (bool, int), "s": (str,)}[kind]
        if not isinstance(v, types):
            raise bad({"i": "an int", "f": "a float", "b": "a bool", "s": "a string"}[kind])
        return float(v) if kind == "f" else (bool(v) if kind == "b" else v)
    if kind in ("I", "D"):
        items = value.items if isinstance(value, ListValue) else [value]
        dims: list[Any] = []
        for item in items:
            if isinstance(item, Const) and isinstance(item.value, int):
                dims.append(item.value)
            elif isinstance(item, SymInt) and kind == "D" and item.expr != UNKNOWN:
                dims.append(DimExpr(item.expr))
            elif isinstance(item, SymInt):
                raise ctx.unsupported(
                    f"input {index} holds a size that depends on a dynamic axis ({item.expr})"
                )
            else:
                raise bad("a list of ints")
        return dims
    if kind == "L":
        if not isinstance(value, ListValue):
            raise bad("a list of tensors")
        return [ctx.tensor(v) for v in value.items]
    if kind == "O":
        if not isinstance(value, ListValue):
            raise bad("a list of tensors or None")
        tensors: list[NTensor | None] = []
        for item in value.items:
            if isinstance(item, Const) and item.value is None:
                tensors.append(None)
            elif isinstance(item, TensorValue):
                tensors.append(ctx.tensor(item))
            else:
                raise bad("a list of tensors or None")
        return tensors
    if kind == "v":
        return _raw(ctx, value, index)
    raise AssertionError(kind)


def _raw(ctx: OpContext, value: IRValue, index: int) -> Any:
    """Argument kind ``v``: a value as it is (see op/registry.py)."""
    bound = ctx._b.bound(value)  # a value a handler gave a tensor (a nested tensor's padded form)
    if bound is not None:
        return bound
    if isinstance(value, Const):
        return value.value
    if isinstance(value, SymInt):
        if value.expr == UNKNOWN:
            raise ctx.unsupported(f"input {index} is a size of a dynamic axis whose expression is unknown")
        return DimExpr(value.expr)
    if isinstance(value, ListValue):
        return [_raw(ctx, item, index) for item in value.items]
    if isinstance(value, TensorValue):
        return ctx.tensor(value)
    raise ctx.unsupported(f"input {index} is {describe(value)}, which this op cannot read")


def describe(value: IRValue) -> str:
    if isinstance(value, TensorValue):
        return f"tensor {value.name} {tuple(value.shape)} {value.dtype}"
    if isinstance(value, Const):
        return f"constant {value.value!r}"
    if isinstance(value, SymInt):
        return f"dynamic size {value.expr}"
    if isinstance(value, ListValue):
        return f"list of {len(value.items)}"
    return type(value).__name__
