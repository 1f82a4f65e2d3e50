"""In-place writes into tensors that nothing else shares, made functional where they stand.

torch.export records the in-place ops a model calls (``relu(inplace=True)``, ``out += x``,
Mixtral's router ``weights /= weights.sum(...)``) as they are, and a graph that writes is
functionalized by ``run_decompositions({})``: a second trace of the whole program (3.0 of
the 5.6 s export step of a 4-layer Mixtral, for the one ``div_`` of each layer's router),
which also rewrites what needs no rewriting (``batch_norm`` and the like).

A write into memory the graph made itself (not an input, weight or constant), which no view
made before the write reads, computes what the op's functional form computes on the same
arguments, and every later reader reads that value: such writes get their functional op in
place (same node, same name), and the readers after them read it. Who shares memory with
whom is read from the ops' schemas (``Tensor(a)`` results are views of their ``Tensor(a)``
argument), not from the fake values: the copied layers of repeats.py share those. The
writes left (into views, inputs, buffers, or where an op of unknown aliasing reads the
memory) are functionalized by torch as before; ``capture.py`` decides.
"""

from __future__ import annotations

import operator
from collections import defaultdict

import torch
from torch import fx

_OpOverload = torch._ops.OpOverload


def make_fresh_writes_functional(program: torch.export.ExportedProgram) -> int:
    """Rewrite the program's writes into fresh unshared memory as functional ops; returns
    how many were rewritten."""
    graph = program.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    memory, unknown = _memory_of(graph)
    sharing: dict[fx.Node, list[fx.Node]] = defaultdict(list)
    for node, root in memory.items():
        sharing[root].append(node)
    rewritten = 0
    for root, members in sharing.items():
        if root in unknown or not _makes_fresh_memory(root):
            continue
        writes = {node: op for node in members if (op := _functional_form(node)) is not None}
        if not writes:
            continue
        last_write = max(order[write] for write in writes)
        views = [node for node in members if node is not root and node not in writes]
        if any(_writes(view) or order[view] < last_write for view in views):
            continue  # a view that sees a write, or a write that torch's functionalization handles
        for write, op in writes.items():
            written = write.args[0]
            assert isinstance(written, fx.Node)
            write.target = op
            for reader in list(written.users):
                if reader is not write and order[reader] > order[write]:
                    reader.replace_input_with(written, write)
            rewritten += 1
    if rewritten:
        program.graph_module.recompile()
    return rewritten


def _memory_of(graph: fx.Graph) -> tuple[dict[fx.Node, fx.Node], set[fx.Node]]:
    """Each tensor node's memory, as the node that made it (a view's and a write's: their
    argument's); and the memory that an op of unknown aliasing reads or gives."""
    memory: dict[fx.Node, fx.Node] = {}
    unknown: set[fx.Node] = set()
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            memory[node] = node  # not fresh: _makes_fresh_memory says no
        elif node.op == "call_function":
            made = _aliased(node, memory)
            memory[node] = made if isinstance(made, fx.Node) else node
            if made is _UNKNOWN:
                unknown.add(node)
                unknown.update(memory[arg] for arg in node.all_input_nodes if arg in memory)
    return memory, unknown


class _Unknown:
    """What ``_aliased`` says of an op whose schema does not tell what its result aliases."""


_UNKNOWN = _Unknown()


def _aliased(node: fx.Node, memory: dict[fx.Node, fx.Node]) -> fx.Node | _Unknown | None:
    """The memory that ``node``'s result lives in, when it is an argument's (a view, a
    write); None when it is new; ``_UNKNOWN`` when the op's schema does not tell."""
    target, index = node.target, node.args[1] if node.target is operator.getitem else 0
    if target is operator.getitem and isinstance(node.args[0], fx.Node):
        node = node.args[0]  # one result of topk, split...: its op's result at index
        target = node.target
    if not isinstance(target, _OpOverload) or not isinstance(index, int):
        return _UNKNOWN
    returns = target._schema.returns
    if not returns:
        return None
    result = returns[index] if index < len(returns) else returns[0]  # Tensor(a)[]: each item
    if result.alias_info is None:
        return None
    for position, arg in enumerate(target._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.before_set & result.alias_info.before_set:
            value = node.args[position] if position < len(node.args) else node.kwargs.get(arg.name)
            return memory[value] if isinstance(value, fx.Node) and value in memory else _UNKNOWN
    return _UNKNOWN


def _makes_fresh_memory(node: fx.Node) -> bool:
    """Whether a memory root is new memory: an op's result (no input, weight or constant)."""
    return node.op == "call_function" and not _writes(node)


def _writes(node: fx.Node) -> bool:
    return isinstance(node.target, _OpOverload) and node.target._schema.is_mutable


def _functional_form(node: fx.Node) -> _OpOverload | None:
    """``aten.div.Tensor`` for a node calling ``aten.div_.Tensor``: the op without the
    trailing underscore, on the same arguments, for an op that writes only its first
    argument and returns it; else None."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, _OpOverload) or not node.args:
        return None
    schema = target._schema
    written = [arg for arg in schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
    if written != schema.arguments[:1] or len(schema.returns) != 1 or not isinstance(node.args[0], fx.Node):
        return None
    namespace, name = schema.name.split("::")
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(getattr(torch.ops, namespace), name[:-1], None)
    functional = getattr(packet, target._overloadname, None) if packet is not None else None
    if not isinstance(functional, _OpOverload):
        return None
    pure = functional._schema
    same = [(a.name, str(a.type), a.kwarg_only) for a in pure.arguments] == [
        (a.name, str(a.type), a.kwarg_only) for a in schema.arguments]
    return functional if same and not pure.is_mutable and len(pure.returns) == 1 else None
