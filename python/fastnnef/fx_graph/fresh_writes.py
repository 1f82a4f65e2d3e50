"""In-place writes into memory the program made itself, made functional where they stand.

torch.export records the in-place ops a model calls (``relu(inplace=True)``, ``out += x``,
Mixtral's router ``weights /= weights.sum(...)``, ``freqs_t[..., idx] = ...``) as they are,
and a program that writes is functionalized by ``run_decompositions({})``: a second trace
of the whole program (3.0 of the 5.6 s export step of a 4-layer Mixtral, for the one
``div_`` of each layer's router; every layer again where repeats.py captured alike layers
once), which also rewrites what needs no rewriting (``batch_norm`` and the like).

Here, per block of memory that an op of the program made (not an input, weight or
constant), its writes are replayed functionally in graph order: a write becomes its
functional op (``div_`` → ``div``, same node) on the written view's current value; a write
through ``slice``/``select`` views goes back into the block by ``slice_scatter`` /
``select_scatter``; every later reader of the block, of a view of it or of a write's result
reads the current value (a view made before a write is made again on the new block). Who
shares memory with whom is read from the ops' schemas (``Tensor(a)`` results are views of
their ``Tensor(a)`` argument), not from the fake values: the copied layers of repeats.py
share those. A block is left to torch's functionalization (``capture.py`` decides) when an
op whose aliasing the schema does not tell reads it, a view of it is not made from its
first argument (``split``'s items), a value made through an op that may copy (``to``,
``reshape``) before a write is read after it, or a write goes through a view that is
neither a slice nor a select, or has no functional form.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import fx

_OpOverload = torch._ops.OpOverload
_aten = torch.ops.aten
# The view ops a write may go through, and the op that puts the written view back.
_SCATTER: dict[_OpOverload, _OpOverload] = {
    _aten.slice.Tensor: _aten.slice_scatter.default,
    _aten.select.int: _aten.select_scatter.default,
}


def make_fresh_writes_functional(program: torch.export.ExportedProgram) -> int:
    """Replay the writes into the program's own memory functionally; returns how many
    writes were rewritten."""
    graph = program.graph
    blocks = _blocks(graph)
    if not blocks:
        return 0
    block_of = {member: block for block in blocks for member in block.path}
    for node in list(graph.nodes):
        for value in node.all_input_nodes:  # each reads its block's current value
            block = block_of.get(value)
            if block is not None and block.version_of[value] != block.version:
                node.replace_input_with(value, block.now(value, node))
        block = block_of.get(node)
        if block is not None and node in block.writes:
            block.write(node)
        elif block is not None:
            block.version_of[node] = block.version
    program.graph_module.recompile()
    return sum(len(block.writes) for block in blocks)


@dataclass
class _Block:
    """One block of memory the program made: its maker, the views and writes of it, and
    while replaying, which version of the block each member's node holds."""

    graph: fx.Graph
    root: fx.Node
    # member -> the views from the root to it (a write: those to the view it writes)
    path: dict[fx.Node, list[fx.Node]]
    writes: dict[fx.Node, _OpOverload]  # write -> its functional form
    current: fx.Node = field(init=False)
    version: int = 0
    version_of: dict[fx.Node, int] = field(default_factory=dict)
    made: dict[tuple[fx.Node, int], fx.Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.current = self.root
        self.version_of[self.root] = 0

    def now(self, member: fx.Node, before: fx.Node) -> fx.Node:
        """``member``'s current value: its views made again on the current block (inserted
        before ``before``), once per member and version."""
        key = (member, self.version)
        if key not in self.made:
            self.made[key] = self._views(self.path[member], before)[-1]
        return self.made[key]

    def write(self, write: fx.Node) -> None:
        """The write as its functional op (on the written view's current value, which the
        caller gave it), then that value put back into the block through the views."""
        write.target = self.writes[write]
        views = self.path[write]
        bases = self._views(views[:-1], write)
        value = write
        for view, base in zip(reversed(views), reversed(bases)):
            with self.graph.inserting_after(value):
                scatter = _SCATTER[view.target]  # type: ignore[index]  # _blocks kept only these
                value = _like(self.graph.call_function(scatter, (base, value, *view.args[1:]), dict(view.kwargs)), base)
        self.current = value
        self.version += 1
        self.version_of[write] = self.version

    def _views(self, views: list[fx.Node], before: fx.Node) -> list[fx.Node]:
        """The current block, then each of ``views`` made again on the one before."""
        made = [self.current]
        with self.graph.inserting_before(before):
            for view in views:
                op = view.target
                assert callable(op)
                made.append(_like(self.graph.call_function(op, (made[-1], *view.args[1:]), dict(view.kwargs)), view))
        return made


def _like(node: fx.Node, template: fx.Node) -> fx.Node:
    """A new node's metadata (its fake value's shape and dtype): those of one alike."""
    node.meta = dict(template.meta)
    return node


def _blocks(graph: fx.Graph) -> list[_Block]:
    """The blocks of memory that ops of the program made, with their views and writes,
    that can be replayed (at least one write; see the module's docstring)."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    memory: dict[fx.Node, fx.Node] = {}
    refused: set[fx.Node] = set()
    members: dict[fx.Node, list[fx.Node]] = defaultdict(list)
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            memory[node] = node
            refused.add(node)  # an input, weight or constant: not the program's own memory
        elif node.op == "call_function":
            base = _aliased(node, memory)
            written = _written(node)
            if isinstance(base, _Unknown) or (base is not None and node.args[0] is not base) or (
                    written and written != [base]):
                memory[node] = node
                refused.update(memory[arg] for arg in (node, *node.all_input_nodes) if arg in memory)
                continue
            memory[node] = node if base is None else memory[base]
            members[memory[node]].append(node)
    blocks = []
    for root, nodes in members.items():
        if root in refused:
            continue
        path: dict[fx.Node, list[fx.Node]] = {root: []}
        writes: dict[fx.Node, _OpOverload] = {}
        for node in nodes[1:]:
            view_of = node.args[0]
            assert isinstance(view_of, fx.Node)
            if _written(node):
                functional = _functional_form(node)
                if functional is None or any(view.target not in _SCATTER for view in path[view_of]):
                    break
                writes[node] = functional
                path[node] = path[view_of]
            else:
                path[node] = [*path[view_of], node]
        else:
            if writes and not _stale_copies(path, writes, order):
                blocks.append(_Block(graph, root, path, writes))
    return blocks


def _stale_copies(path: dict[fx.Node, list[fx.Node]], writes: dict[fx.Node, _OpOverload],
                  order: dict[fx.Node, int]) -> bool:
    """Whether a member made through an op that may copy (``to``, ``reshape``) before a write
    is read after it: whether it saw the write depends on whether it copied."""
    positions = sorted(order[write] for write in writes)
    for member, views in path.items():
        if member in writes or all(_always_a_view(view) for view in views):
            continue
        made, last_read = order[member], max((order[user] for user in member.users), default=-1)
        if any(made < position < last_read for position in positions):
            return True
    return False


def _always_a_view(node: fx.Node) -> bool:
    """Whether a node's op always gives a view (``view``, ``slice``, ``t``... those that have
    a ``_copy`` form), which made again on the block's current value gives the same: not
    ``to``/``reshape``/``contiguous``, which copy when they must (a copy keeps the values from
    before a later write), nor the strided ``as_strided``/``_reshape_alias``."""
    schema = node.target._schema if isinstance(node.target, _OpOverload) else None
    if schema is None or not schema.name.startswith("aten::") or schema.name in _STRIDED:
        return False
    return hasattr(_aten, schema.name.removeprefix("aten::") + "_copy")


_STRIDED = frozenset({"aten::as_strided", "aten::_reshape_alias"})


def _written(node: fx.Node) -> list[object]:
    """The arguments an op writes into."""
    if not isinstance(node.target, _OpOverload) or not node.target._schema.is_mutable:
        return []
    arguments = node.target._schema.arguments
    return [node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            for i, arg in enumerate(arguments) if arg.alias_info is not None and arg.alias_info.is_write]


class _Unknown:
    """What ``_aliased`` says of an op whose schema does not tell what its result aliases."""


_UNKNOWN = _Unknown()


def _aliased(node: fx.Node, memory: dict[fx.Node, fx.Node]) -> fx.Node | _Unknown | None:
    """The argument whose memory ``node``'s result lives in (a view, a write); None when
    the result is new memory; ``_UNKNOWN`` when the op's schema does not tell."""
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
            return value if isinstance(value, fx.Node) and value in memory else _UNKNOWN
    return _UNKNOWN


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
