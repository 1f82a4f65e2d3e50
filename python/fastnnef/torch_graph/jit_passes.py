"""Graph passes that specialize a TorchScript graph for example inputs (torch_to_nnef's
``torch_graph.jit_passes``).

``harden_jit_for_export`` runs them in this order (``SPECIALIZATION_PASSES``); each can also
be used alone. A pass takes a ``torch._C.Graph``, rewrites it in place and returns how many
rewrites it made; a graph without its pattern is left as is (0).

1. ``replace_size_calls_with_constants(graph, example_inputs)``: ``aten::size/dim/len/numel``
   of tensors whose value only decides control flow (an ``If`` condition, a ``Loop`` trip
   count, an exception) becomes the constant it has for the example inputs; sizes that shape
   tensors (``view(x.size(0), -1)``) stay, so dynamic axes keep working.
2. ``fold_constant_scalar_arithmetic``: comparisons, ``__not__``, ``__contains__`` and the
   ``Bool/Int/Float`` casts of constants.
3. ``fold_constant_ifs``: an ``If`` on a constant keeps the branch taken.
4. ``fold_tuple_index_through_tuple_construct`` and
5. ``fold_tuple_unpack_through_tuple_construct``: a tuple built then indexed or unpacked
   (what inlining a method that returns ``(h, c)`` leaves) gives its items directly.
6. ``strip_prim_data``: ``t.data`` is ``t`` for inference.
7. ``strip_assertion_ifs``: an ``If`` whose one branch only raises keeps the other branch.
8. ``fold_data_dependent_ifs(graph, example_inputs)``: every remaining ``If`` keeps the
   branch the example inputs take (evaluated by running the graph in TorchScript's
   interpreter), until none is left at the top level.

Each evaluation runs the graph from the module's state as it was before (``script_state.py``):
the passes of a stateful module (Silero VAD's) see the call the user asked for, not a later one.

``example_inputs`` are the graph's inputs, the module (``module._c``) first for a method.
Size calls and ``If`` conditions are evaluated at the top level of the graph (values inside
an ``If`` or a ``Loop`` can't be observed from outside); nested ones surface as their
enclosing ``If`` is folded.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.torch_graph.script_state import attributes_kept

__all__ = [
    "SPECIALIZATION_PASSES",
    "fold_constant_ifs",
    "fold_constant_scalar_arithmetic",
    "fold_data_dependent_ifs",
    "fold_tuple_index_through_tuple_construct",
    "fold_tuple_unpack_through_tuple_construct",
    "replace_size_calls_with_constants",
    "strip_assertion_ifs",
    "strip_prim_data",
    "walk_nodes",
]

Block = torch._C.Graph | torch._C.Block


# --- graph helpers (shared with jit_inline and jit_mutation) ------------------------------------
def walk_nodes(block: Block) -> Iterator[torch._C.Node]:
    """Every node of ``block``, then of its nodes' blocks, depth first, in order."""
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from walk_nodes(sub)


def is_constant(value: torch._C.Value) -> bool:
    return value.node().kind() == "prim::Constant"


def is_primitive(ty: torch._C.JitType) -> bool:
    """Scalars, strings, None, devices and lists / tuples / optionals of them (no tensor,
    no object)."""
    kind = ty.kind()
    if kind in ("IntType", "FloatType", "BoolType", "StringType", "NoneType", "NumberType", "DeviceObjType"):
        return True
    if kind in ("ListType", "TupleType", "OptionalType"):
        # torch's stubs lack JitType.containedTypes
        return all(is_primitive(t) for t in ty.containedTypes())  # type: ignore[attr-defined]
    return False


def constant_before(graph: torch._C.Graph, node: torch._C.Node, value: Any) -> torch._C.Value:
    """A ``prim::Constant`` holding ``value``, inserted just before ``node``."""
    with graph.insert_point_guard(node):
        # torch's stubs lack Graph.insertConstant
        return graph.insertConstant(value)  # type: ignore[attr-defined]


def replace_node(node: torch._C.Node, values: Sequence[torch._C.Value]) -> None:
    """Point every use of ``node``'s outputs at ``values``, then remove ``node``."""
    for out, new in zip(node.outputs(), values):
        out.replaceAllUsesWith(new)
    node.destroy()


def inline_block(node: torch._C.Node, block: torch._C.Block) -> None:
    """Replace ``node`` (an ``If``) by the nodes of one of its ``block``s."""
    for inner in list(block.nodes()):
        inner.moveBefore(node)
    replace_node(node, list(block.returnNode().inputs()))


def evaluate(graph: torch._C.Graph, values: Sequence[torch._C.Value], example_inputs: Sequence[Any]) -> list[Any]:
    """The values ``values`` (top-level) take when ``graph`` runs on ``example_inputs``:
    they are returned by the graph for one run of TorchScript's interpreter, then the
    graph's outputs are restored, and so is the state of the module (the first example
    input of a method graph) that the run changed; the graph runs on copies of the tensors."""
    n_outputs = len(list(graph.outputs()))
    for value in values:
        graph.registerOutput(value)
    module = example_inputs[0] if example_inputs else None
    state_kept = attributes_kept(module) if isinstance(module, torch._C.ScriptModule) else contextlib.nullcontext()
    try:
        with state_kept:
            # on copies of the inputs: the graph may write into them, the caller's stay as given
            inputs = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in example_inputs)
            # torch's stubs lack the private torch._C._jit_interpret_graph
            results = torch._C._jit_interpret_graph(graph, inputs)  # type: ignore[attr-defined]
    except RuntimeError as err:
        raise T2NErrorInvalidArgument(
            f"running the TorchScript graph on the example inputs failed: {err}. Give the "
            "forward's arguments (the module itself first for a method graph)"
        ) from err
    finally:
        for _ in values:
            graph.eraseOutput(n_outputs)
    return list(results[n_outputs:])


def _fold_all(graph: torch._C.Graph, find: Callable[[torch._C.Graph], Any], fold: Callable[[Any], None]) -> int:
    """Fold what ``find`` returns until it returns ``None`` (one at a time: a fold may
    remove or create other candidates)."""
    count = 0
    while (found := find(graph)) is not None:
        fold(found)
        count += 1
    return count


# --- 1. size calls --------------------------------------------------------------------------------
_SIZE_KINDS = frozenset({"aten::size", "aten::dim", "aten::len", "aten::numel"})


def _decides_only_control_flow(value: torch._C.Value) -> bool:
    """Whether every path from ``value`` ends in control flow (an ``If`` condition, a
    ``Loop``'s trip count or initial condition, an exception) through primitive values only;
    a path that reaches a tensor-producing node or the graph's outputs disqualifies it."""
    todo, seen = [value], {value.unique()}
    while todo:
        for use in todo.pop().uses():
            user, kind = use.user, use.user.kind()
            if (kind == "prim::If" and use.offset == 0) or (kind == "prim::Loop" and use.offset < 2):
                continue
            if kind == "prim::RaiseException":
                continue
            if kind == "prim::Return":  # a block's result: follow the If's output
                owner = user.owningBlock().owningNode()
                if owner is None or owner.kind() != "prim::If":
                    return False
                outs = [owner.outputsAt(use.offset)]
            else:
                outs = list(user.outputs())
                if not all(is_primitive(o.type()) for o in outs) or user.kind() == "prim::Loop":
                    return False
            for out in outs:
                if out.unique() not in seen:
                    seen.add(out.unique())
                    todo.append(out)
    return True


def replace_size_calls_with_constants(graph: torch._C.Graph, example_inputs: Sequence[Any]) -> int:
    """Fold the top-level size queries of tensors whose values only decide control flow
    into their values for ``example_inputs``; returns the number folded."""
    candidates = [
        node for node in graph.nodes()
        if node.kind() in _SIZE_KINDS
        and isinstance(node.inputsAt(0).type(), torch._C.TensorType)
        and _decides_only_control_flow(node.output())
    ]
    if not candidates:
        return 0
    values = evaluate(graph, [node.output() for node in candidates], example_inputs)
    for node, value in zip(candidates, values):
        replace_node(node, [constant_before(graph, node, value)])
    return len(candidates)


# --- 2. scalar arithmetic on constants ----------------------------------------------------------
_SCALAR_FOLDS: dict[str, Callable[..., Any]] = {
    "aten::eq": operator.eq,
    "aten::ne": operator.ne,
    "aten::lt": operator.lt,
    "aten::le": operator.le,
    "aten::gt": operator.gt,
    "aten::ge": operator.ge,
    "aten::__not__": operator.not_,
    "aten::__contains__": lambda container, item: item in container,
    "aten::Bool": bool,
    "aten::Int": int,
    "aten::Float": float,
}


def _foldable_scalar_op(graph: torch._C.Graph) -> Any:
    for node in walk_nodes(graph):
        if node.kind() in _SCALAR_FOLDS and all(
            is_constant(v) and is_primitive(v.type()) for v in node.inputs()
        ):
            try:
                return node, _SCALAR_FOLDS[node.kind()](*(v.toIValue() for v in node.inputs()))
            except (TypeError, ValueError):  # e.g. None < 1: leave it to TorchScript
                continue
    return None


def fold_constant_scalar_arithmetic(graph: torch._C.Graph) -> int:
    """Fold comparisons, ``__not__``, ``__contains__`` and ``Bool/Int/Float`` casts whose
    inputs are all constants (not tensors); returns the number of nodes folded."""

    def fold(found: tuple[torch._C.Node, Any]) -> None:
        node, result = found
        replace_node(node, [constant_before(graph, node, result)])

    return _fold_all(graph, _foldable_scalar_op, fold)


# --- 3. constant Ifs ------------------------------------------------------------------------------
def _constant_if(graph: torch._C.Graph) -> Any:
    for node in walk_nodes(graph):
        if node.kind() == "prim::If" and is_constant(node.inputsAt(0)):
            return node
    return None


def fold_constant_ifs(graph: torch._C.Graph) -> int:
    """Replace each ``If`` on a constant condition by the branch it takes; returns the
    number of ``If`` folded."""

    def fold(node: torch._C.Node) -> None:
        blocks = list(node.blocks())
        inline_block(node, blocks[0] if node.inputsAt(0).toIValue() else blocks[1])

    return _fold_all(graph, _constant_if, fold)


# --- 4, 5. tuples built then taken apart -----------------------------------------------------
def _producer(value: torch._C.Value, kind: str) -> Any:
    node = value.node()
    return node if node.kind() == kind else None


def fold_tuple_index_through_tuple_construct(graph: torch._C.Graph) -> int:
    """``TupleIndex(TupleConstruct(a, b, ...), k)`` with a constant ``k`` becomes the k-th
    item; returns the number folded (the construct stays for its other users)."""
    count = 0
    for node in [n for n in walk_nodes(graph) if n.kind() == "prim::TupleIndex"]:
        construct = _producer(node.inputsAt(0), "prim::TupleConstruct")
        if construct is None or not is_constant(node.inputsAt(1)):
            continue
        items = list(construct.inputs())
        # torch's stubs type toIValue() as an opaque IValue (it is the Python value)
        replace_node(node, [items[node.inputsAt(1).toIValue() % len(items)]])  # type: ignore[operator]
        count += 1
    return count


def fold_tuple_unpack_through_tuple_construct(graph: torch._C.Graph) -> int:
    """``a, b = TupleConstruct(x, y)`` gives ``x, y`` directly; returns the number of
    unpacks folded."""
    count = 0
    for node in [n for n in walk_nodes(graph) if n.kind() == "prim::TupleUnpack"]:
        construct = _producer(node.inputsAt(0), "prim::TupleConstruct")
        if construct is None or construct.inputsSize() != node.outputsSize():
            continue
        replace_node(node, list(construct.inputs()))
        count += 1
    return count


# --- 6. .data ---------------------------------------------------------------------------------------
def strip_prim_data(graph: torch._C.Graph) -> int:
    """``prim::data(t)`` (``t.data``, a detach) becomes ``t``; returns the number removed."""
    nodes = [n for n in walk_nodes(graph) if n.kind() == "prim::data"]
    for node in nodes:
        replace_node(node, [node.inputsAt(0)])
    return len(nodes)


# --- 7. assertions ----------------------------------------------------------------------------------
# What a branch may do besides raising: build the message (no tensor, no side effect).
_MESSAGE_KINDS = frozenset(
    """prim::Constant prim::Uninitialized prim::ListConstruct prim::TupleConstruct aten::format
    aten::str aten::add aten::__getitem__ aten::len aten::size aten::dim aten::Int aten::Float
    aten::Bool""".split()
)


def _only_raises(block: torch._C.Block) -> bool:
    nodes = list(block.nodes())
    return any(n.kind() == "prim::RaiseException" for n in nodes) and all(
        n.kind() == "prim::RaiseException"
        or (n.kind() in _MESSAGE_KINDS and all(is_primitive(o.type()) for o in n.outputs()))
        for n in nodes
    )


def _assertion_if(graph: torch._C.Graph) -> Any:
    for node in walk_nodes(graph):
        if node.kind() != "prim::If":
            continue
        raising = [_only_raises(b) for b in node.blocks()]
        if raising.count(True) == 1:
            return node, list(node.blocks())[raising.index(False)]
    return None


def strip_assertion_ifs(graph: torch._C.Graph) -> int:
    """Replace each ``If`` one of whose branches only raises by its other branch; returns
    the number stripped."""
    return _fold_all(graph, _assertion_if, lambda found: inline_block(*found))


# --- 8. data-dependent Ifs ------------------------------------------------------------------------
def fold_data_dependent_ifs(graph: torch._C.Graph, example_inputs: Sequence[Any]) -> int:
    """Replace each top-level ``If`` by the branch ``example_inputs`` take, repeatedly (the
    Ifs of a kept branch come up to the top level); returns the number of ``If`` folded."""
    count = 0
    while True:
        ifs = [n for n in graph.nodes() if n.kind() == "prim::If"]
        if not ifs:
            return count
        conditions = evaluate(graph, [n.inputsAt(0) for n in ifs], example_inputs)
        for node, condition in zip(ifs, conditions):
            blocks = list(node.blocks())
            inline_block(node, blocks[0] if condition else blocks[1])
        count += len(ifs)


# The chain harden_jit_for_export runs, in order: (pass, whether it takes example inputs).
SPECIALIZATION_PASSES: tuple[tuple[Callable[..., int], bool], ...] = (
    (replace_size_calls_with_constants, True),
    (fold_constant_scalar_arithmetic, False),
    (fold_constant_ifs, False),
    (fold_tuple_index_through_tuple_construct, False),
    (fold_tuple_unpack_through_tuple_construct, False),
    (strip_prim_data, False),
    (strip_assertion_ifs, False),
    (fold_data_dependent_ifs, True),
)
