"""Constant folding: an op whose inputs are all constants runs once, at export time.

Its outputs become ``ConstTensor`` values (variables of the artefact) instead of ops, e.g.
``torch.hann_window(400)`` or ``torch.arange(10).float() * 0.5`` built in ``forward``. The
IR builder asks ``evaluate`` before it records an op; nothing here re-runs the model.

Not folded: random ops and ``empty`` (their bytes are not the model's), ops that read a
parameter (weights stay weights: named, shared and compressible), and results much larger
than their inputs (``torch.zeros(4096, 4096)`` stays one broadcast op instead of 64 MiB
of zeros written to the artefact).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fastnnef.torch_graph.ir import data as ir_data

# A computation on the inputs' Python values (tensors, numbers, lists...).
Thunk = Callable[[list[Any]], Any]

# A folded result may hold this many elements whatever its inputs hold; beyond, no more
# than its largest constant input (a slice, a cast, an elementwise op of a constant).
FOLD_MAX_ELEMENTS = 1 << 16

# Deterministic for the JIT, but their bytes are arbitrary: the handlers write zeros.
NEVER_FOLDED = frozenset({"aten::empty", "aten::empty_like", "aten::new_empty", "aten::empty_strided"})

_NOT_CONSTANT = object()


class NotFoldable(Exception):
    """Raised by a thunk for an op that must stay an op whatever its inputs."""


def node_thunk(node: torch._C.Node) -> Thunk:
    """How to run a traced aten node on constant inputs (the checks wait for the call:
    most ops never have constant inputs)."""

    def run(values: list[Any]) -> Any:
        kind = node.kind()
        if not kind.startswith("aten::") or kind in NEVER_FOLDED or node.isNondeterministic():
            raise NotFoldable(kind)
        schema = node.schema()
        if schema == "(no schema)":
            raise NotFoldable(kind)
        return _call_schema(schema, values)

    return run


def aten_thunk(kind: str) -> Thunk:
    """How to run ``aten::<name>`` (overload picked from the arguments), for ops the IR
    builder makes itself (the write-back of an in-place op)."""
    packet = getattr(torch.ops.aten, kind.split("::", 1)[1])
    return lambda values: packet(*values)


@functools.cache
def _overload(schema: str) -> tuple[Any, tuple[tuple[str, bool], ...]]:
    parsed = torch._C.parse_schema(schema)
    namespace, name = parsed.name.split("::", 1)
    op = getattr(getattr(getattr(torch.ops, namespace), name), parsed.overload_name or "default")
    return op, tuple((a.name, a.kwarg_only) for a in parsed.arguments)


def argument_index(schema: str, name: str) -> int | None:
    """The position of argument ``name`` in a traced node's schema."""
    names = [n for n, _ in _overload(schema)[1]]
    return names.index(name) if name in names else None


def _call_schema(schema: str, values: list[Any]) -> Any:
    """Call the exact overload the trace recorded: TorchScript passes keyword-only
    arguments (``dtype=``, ``device=``...) by position, torch.ops wants them by name."""
    op, arguments = _overload(schema)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for (name, kwarg_only), value in zip(arguments, values):
        if kwarg_only:
            kwargs[name] = value
        else:
            args.append(value)
    return op(*args, **kwargs)


def python_value(value: ir_data.IRValue, weights: frozenset[str]) -> Any:
    """The Python value of a constant input, or ``_NOT_CONSTANT``."""
    if isinstance(value, ir_data.ConstTensor):
        return _NOT_CONSTANT if value.label in weights else value.tensor
    if isinstance(value, ir_data.TensorValue):  # computed at run time, or a parameter
        return _NOT_CONSTANT
    if isinstance(value, ir_data.Const):
        return value.value
    if isinstance(value, ir_data.ListValue):
        items = [python_value(v, weights) for v in value.items]
        return _NOT_CONSTANT if any(i is _NOT_CONSTANT for i in items) else items
    return _NOT_CONSTANT  # a size of a dynamic axis, a module


def evaluate(
    thunk: Thunk, inputs: Sequence[ir_data.IRValue], outputs: Sequence[ir_data.IRValue], weights: frozenset[str],
    label: Callable[[], str],
) -> list[ir_data.IRValue] | None:
    """The outputs of ``thunk`` on the inputs' values as constants, or ``None`` when the op
    must stay an op (an input not constant, a result too large or not as traced)."""
    values = []
    for v in inputs:  # most ops read a tensor computed at run time: stop at the first
        value = python_value(v, weights)
        if value is _NOT_CONSTANT:
            return None
        values.append(value)
    budget = max([FOLD_MAX_ELEMENTS] + [_numel(v) for v in values])
    if any(isinstance(o, ir_data.TensorValue) and math.prod(o.shape) > budget for o in outputs):
        return None  # known from the trace: never compute what would not be kept
    try:
        with torch.no_grad():
            result = thunk(values)
    except NotFoldable:
        return None
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None  # an overload torch.ops cannot call like the JIT did: keep the op
    results = list(result) if isinstance(result, (tuple, list)) and len(outputs) > 1 else [result]
    if len(results) != len(outputs):
        return None
    folded: list[ir_data.IRValue] = []
    for out, res in zip(outputs, results):
        value = _constant(out, res, budget, label)
        if value is None:
            return None
        folded.append(value)
    return folded


def _numel(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, list):
        return max([_numel(v) for v in value] + [0])
    return 0


def _constant(out: ir_data.IRValue, res: Any, budget: int, label: Callable[[], str]) -> ir_data.IRValue | None:
    if isinstance(out, ir_data.TensorValue):
        if not isinstance(res, torch.Tensor) or res.is_complex() or res.numel() > budget \
                or res.dtype != out.dtype or tuple(res.shape) != tuple(out.shape):
            return None
        # A view of an input would keep the input's storage: store what is seen.
        data = res.detach().clone() if res._is_view() else res.detach().contiguous()
        return ir_data.ConstTensor(out.name, data.dtype, tuple(data.shape), (), label(), data)
    if isinstance(out, ir_data.ListValue) and isinstance(res, (list, tuple)):
        items: list[ir_data.IRValue] = []
        for k, item in enumerate(res):
            template = ir_data.TensorValue(f"{out.name}.{k}", item.dtype, tuple(item.shape)) \
                if isinstance(item, torch.Tensor) else None
            value = _constant(template, item, budget, label) if template is not None else None
            if value is None:
                return None
            items.append(value)
        return ir_data.ListValue(out.name, items)
    if isinstance(out, ir_data.Const) and isinstance(res, (bool, int, float)):
        return ir_data.Const(out.name, res)
    return None
