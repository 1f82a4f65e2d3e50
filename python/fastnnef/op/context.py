"""What a handler sees: ``OpContext`` (the node, the graph being built, helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import torch

from fastnnef.artefact import PLAIN_ENCODINGS
from fastnnef.exceptions import T2NErrorDataNodeValue, T2NErrorNotImplemented
from fastnnef.nnef.graph import Dim, NNEFGraph, NTensor, Sym
from fastnnef.torch_graph.ir import UNKNOWN, Const, IROp, IRValue, ListValue, SymInt, TensorValue

if TYPE_CHECKING:
    from fastnnef.op.convert import Converter

Scalar = Union[int, float, bool]

# torch dtype -> tract datum type: the .dat encodings (artefact.py), plus bf16, which has
# no tract type and is computed in f32 (an exact upcast).
DTYPES: dict[torch.dtype, str] = {**PLAIN_ENCODINGS, torch.bfloat16: "f32"}
FLOAT_DTYPES = frozenset({"f16", "f32", "f64"})


def tract_dtype(dtype: torch.dtype, where: str = "") -> str:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise T2NErrorNotImplemented(
            f"dtype {dtype} has no tract equivalent{(' (' + where + ')') if where else ''}: "
            "cast the model or this value to a supported dtype (float16/32/64, ints, bool)"
        ) from None


class OpContext:
    """Helpers for one node. Handlers call ``emit`` for the op producing a node output
    (named by the naming scheme) and ``tmp`` for intermediate ops."""

    def __init__(self, converter: "Converter", node: IROp):
        self.converter = converter
        self.node = node
        self.g: NNEFGraph = converter.graph
        self.target = converter.target

    # --- errors --------------------------------------------------------------------------
    def unsupported(self, what: str, hint: str = "") -> T2NErrorNotImplemented:
        """An error naming the aten op, the module path and the user's source line."""
        msg = f"{self.node.where()}: {what}"
        return T2NErrorNotImplemented(msg + (f". {hint}" if hint else ""))

    # --- outputs -------------------------------------------------------------------------
    def out_value(self, index: int = 0) -> TensorValue:
        value = self.node.outputs[index]
        if not isinstance(value, TensorValue):
            raise T2NErrorDataNodeValue(f"{self.node.where()}: output {index} is not a tensor")
        return value

    def out_dtype(self, index: int = 0) -> str:
        return tract_dtype(self.out_value(index).dtype, self.node.where())

    def out_shape(self, index: int = 0) -> tuple[Dim, ...]:
        return shape_of(self.out_value(index))

    def emit(
        self, kind: str, args: Sequence[Any], attrs: Optional[dict[str, Any]] = None, out: int = 0,
        value: Optional[TensorValue] = None, shape: Optional[Sequence[Dim]] = None,
    ) -> NTensor:
        """Emit the op that produces node output ``out`` (or list item ``value``).
        ``shape`` overrides the traced one when the handler knows symbolic dims better."""
        value = value or self.out_value(out)
        return self.g.op(
            kind, args, attrs, name=self.converter.name_for(self.node, value),
            dtype=tract_dtype(value.dtype, self.node.where()),
            shape=shape_of(value) if shape is None else shape,
            exact=id(value) in self.converter.fixed_names,
        )

    def tmp(
        self, kind: str, args: Sequence[Any], attrs: Optional[dict[str, Any]] = None, *,
        dtype: str, shape: Sequence[Dim], suffix: str = "",
    ) -> NTensor:
        """Emit an intermediate op (named after the node, plus ``suffix``)."""
        base = self.converter.name_for(self.node, None) + (f"_{suffix}" if suffix else "")
        return self.g.op(kind, args, attrs, name=base, dtype=dtype, shape=shape)

    # --- inputs --------------------------------------------------------------------------
    def tensor(self, value: IRValue) -> NTensor:
        return self.converter.tensor(value, self.node)

    def cast(self, t: NTensor, dtype: str) -> NTensor:
        """``t`` as ``dtype`` (no-op when equal)."""
        if t.dtype == dtype:
            return t
        return self.tmp("tract_core_cast", [t], {"to": dtype}, dtype=dtype, shape=t.shape, suffix="cast")

    def to_rank(self, t: NTensor, rank: int) -> NTensor:
        """Prepend unit axes: tract broadcasts NNEF-style (trailing), torch leading."""
        if t.rank >= rank:
            return t
        n = rank - t.rank
        return self.tmp(
            "unsqueeze", [t], {"axes": list(range(n))}, dtype=t.dtype,
            shape=(1,) * n + tuple(t.shape), suffix="rank",
        )

    def axis(self, dim: int, rank: int) -> int:
        """A non-negative axis (tract panics on some negative axes)."""
        if not -max(rank, 1) <= dim < max(rank, 1):
            raise self.unsupported(f"axis {dim} out of range for rank {rank}")
        return dim % rank if rank else 0

    def static(self, t: NTensor, dims: Optional[Sequence[int]] = None, what: str = "this op") -> None:
        """Refuse dims that are dynamic (the handler needs their concrete value)."""
        for d in dims if dims is not None else range(t.rank):
            if isinstance(t.shape[d], Sym):
                raise self.unsupported(
                    f"{what} needs axis {d} of {t.name} as a constant, but it follows a dynamic axis",
                    "Export with this axis static, or restructure so the op doesn't use it",
                )


def shape_of(value: TensorValue) -> tuple[Dim, ...]:
    """The traced shape with dynamic dims written as their symbols (``?`` stays marked)."""
    return tuple(
        Sym(dyn) if dyn is not None else size for size, dyn in zip(value.shape, value.dyn)
    )


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
                dims.append(Sym(item.expr))
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
    raise AssertionError(kind)


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
