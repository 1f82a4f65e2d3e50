"""Alike layers captured once: a deep stack of alike blocks costs the capture of a few.

``torch.export`` records a model by running it on fake tensors with symbolic sizes, and
that costs the same for every decoder layer of an LLM (0.6 s a layer on this project's
machine, benches/README.md): most of a 32-layer model's capture repeats one layer's
work. Inside :func:`layers_captured_once`, the layers of each group of alike layers (same
class, same structure, same attributes but their index, same parameter shapes and
dtypes) are captured so:

- the first, the second and the last run as usual, each between two marker ops
  (``fastnnef::layer_begin`` / ``layer_end``, identities) that delimit its nodes in the
  program;
- every other one is one ``fastnnef::layer_repeat`` op taking the call's tensors, the
  layer's state (an LLM's cache tensors, given by the caller's :class:`LayerState`) and the
  layer's own parameters and buffers; its fake kernel gives the outputs the sizes the
  second layer's outputs had (same inputs' sizes, same symbols: the same expressions).

After the capture (:func:`expand_repeats`) the first and last layers' nodes are compared
with the second's, node by node, parameters matched by their name in the layer: the same
ops on the same constants, so a layer whose index changes what it computes (a scale by
depth, a first or last layer of its own) shows. Then each repeat op is replaced by a copy
of the second layer's nodes on that layer's inputs and parameters (a submodule kept whole
for its extractor, ``fastnnef::module_call``, called as that layer's own), and the
markers by their inputs: the program is the one a full capture records. Where the comparison fails,
the caller captures again without repeats (``capture.py``). A call whose arguments differ
from the second layer's (sizes, non-tensor arguments) runs as usual.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from fastnnef.exceptions import T2NErrorTorchExportFailed
from fastnnef.torch_graph.module_calls import OP_KIND as MODULE_CALL
from fastnnef.torch_graph.module_calls import ModuleCall

BEGIN, END, REPEAT = "fastnnef::layer_begin", "fastnnef::layer_end", "fastnnef::layer_repeat"

_LIB = torch.library.Library("fastnnef", "FRAGMENT")  # module_calls.py DEFines the namespace
for _name in ("layer_begin", "layer_end", "layer_repeat"):
    _LIB.define(f"{_name}(Tensor[] tensors, int key) -> Tensor[]")

# A group smaller than this gains nothing: three of its layers are captured in full.
MIN_GROUP = 4
# Attributes that tell layers apart without changing what they compute (the cache index).
_INDEX_ATTRIBUTES = frozenset({"layer_idx"})
_PLAIN = (type(None), bool, int, float, str, bytes, torch.dtype, torch.device)

_TENSOR = object()  # where a recorded call had a tensor (None may be an argument)
_keys = itertools.count()
_live: dict[int, _Group] = {}  # key -> group, while its capture runs
_live_lock = threading.Lock()


# A layer's state: a getter of its tensors and their setter.
StateAccess = tuple[Callable[[], list[torch.Tensor]], Callable[[list[torch.Tensor]], None]]
# What a layer reads and replaces besides its arguments and result, held by an object among
# its arguments (an LLM layer's past keys and values, in the cache object it is given): for
# layer ``index`` and that object, its state, or None when it is not one the caller knows
# (the layer is then captured as usual: it might write into the object).
LayerState = Callable[[int, Any], StateAccess | None]


@dataclass(frozen=True)
class RepeatPlan:
    """Layers to capture once per group (:func:`layers_captured_once`): ``layers[i]`` is
    layer i; ``kinds[i]`` what the caller knows tells it apart (None: always captured in
    full); ``state``: its state, or None when layers take none."""

    layers: Sequence[nn.Module]
    kinds: Sequence[Any]
    state: LayerState | None = None


_PLAN: contextvars.ContextVar[RepeatPlan | None] = contextvars.ContextVar("fastnnef_repeat_plan", default=None)


@contextlib.contextmanager
def layers_captured_once(plan: RepeatPlan | None) -> Iterator[None]:
    """Within this block, ``torch.export`` captures each group of alike layers of ``plan``
    once (the module docstring); the jit front end ignores it. None: every layer as usual."""
    token = _PLAN.set(plan)
    try:
        yield
    finally:
        _PLAN.reset(token)


def active_plan() -> RepeatPlan | None:
    return _PLAN.get()


@dataclass(eq=False)
class _Recorded:
    """The second layer's call, which the repeated ones must match."""

    leaves: list[Any]  # the flattened arguments, tensors as _TENSOR
    spec: Any
    inputs: list[tuple[tuple[Any, ...], torch.dtype]]  # sizes and dtypes of the op's tensors
    out_leaves: list[Any]
    out_spec: Any
    outputs: list[tuple[tuple[Any, ...], tuple[Any, ...], torch.dtype, torch.device]]
    n_state: int


@dataclass(eq=False)
class _Member:
    index: int
    module: nn.Module
    names: list[str]  # its parameters' and buffers' names in the layer, in repeat-op order
    role: str  # "full" (marked, compared), "template" (marked, copied) or "repeat"
    key: int = field(default_factory=lambda: next(_keys))
    repeated: bool = False  # ran as a repeat op (else its call did not match: ran as usual)


@dataclass(eq=False)
class _Group:
    members: list[_Member]
    recorded: _Recorded | None = None

    @property
    def template(self) -> _Member:
        return self.members[1]


@dataclass
class Repeats:
    """The groups of one capture, for :func:`expand_repeats`."""

    groups: list[_Group]
    by_key: dict[int, tuple[_Group, _Member]]
    paths: dict[int, str]  # member key -> the layer's path in the exported module


@contextlib.contextmanager
def repeated_calls(root: nn.Module, plan: RepeatPlan | None) -> Iterator[Repeats]:
    """The plan's groups installed on their layers (instance ``forward``s, removed after):
    ``root`` is the module ``torch.export`` is given (for the layers' paths). A layer
    kept whole itself (its extractor's instance ``forward``) is not repeated; submodules
    kept whole inside a layer are (their ops name their module: see ``_expand``)."""
    groups = _groups(plan) if plan is not None else []
    state_of = plan.state if plan is not None else None
    paths_of = {id(m): path for path, m in root.named_modules(remove_duplicate=False)}
    by_key = {m.key: (g, m) for g in groups for m in g.members}
    repeats = Repeats(groups, by_key, {m.key: paths_of.get(id(m.module), "") for g in groups for m in g.members})
    if any(not path for path in repeats.paths.values()):
        groups, by_key = [], {}
        repeats = Repeats([], {}, {})
    with _live_lock:
        _live.update({key: group for key, (group, _) in by_key.items()})
    try:
        for group in groups:
            for member in group.members:
                member.module.__dict__["forward"] = _forward_of(group, member, state_of)
        yield repeats
    finally:
        for group in groups:
            for member in group.members:
                member.module.__dict__.pop("forward", None)
        with _live_lock:
            for key in by_key:
                _live.pop(key, None)


def _groups(plan: RepeatPlan) -> list[_Group]:
    by_signature: dict[Any, list[int]] = {}
    for i, (layer, kind) in enumerate(zip(plan.layers, plan.kinds)):
        if kind is None or "forward" in layer.__dict__:
            continue
        signature = _signature(layer)
        if signature is not None:
            by_signature.setdefault((kind, signature), []).append(i)
    groups: list[_Group] = []
    for indices in by_signature.values():
        if len(indices) < MIN_GROUP:
            continue
        roles = ["full", "template"] + ["repeat"] * (len(indices) - 3) + ["full"]
        members = [_Member(i, plan.layers[i], _tensor_names(plan.layers[i]), role) for i, role in zip(indices, roles)]
        groups.append(_Group(members))
    return groups


def _tensor_names(layer: nn.Module) -> list[str]:
    return sorted(name for name, _ in itertools.chain(layer.named_parameters(remove_duplicate=False),
                                                    layer.named_buffers(remove_duplicate=False)))


def _signature(layer: nn.Module) -> tuple[Any, ...] | None:
    """What makes two layers alike: their modules' classes and attributes (all but the
    index), their tensors' names, shapes and dtypes; None: a layer that cannot be repeated
    (hooks, a plain tensor attribute, an attribute whose value cannot be compared)."""
    parts: list[Any] = []
    for path, module in layer.named_modules(remove_duplicate=False):
        attributes: list[Any] = []
        for name, value in sorted(vars(module).items()):
            if name in ("_parameters", "_buffers", "_modules") or name in _INDEX_ATTRIBUTES:
                continue
            if "hooks" in name:  # forward hooks may do anything; state-dict hooks change no result
                if value and name.startswith(("_forward", "_backward")):
                    return None
                continue
            described = _value(value, module)
            if described is None:
                return None
            attributes.append((name, described))
        tensors = [(n, tuple(t.shape), t.dtype) for n, t in itertools.chain(
            module._parameters.items(), module._buffers.items()) if t is not None]
        parts.append((path, type(module), tuple(attributes), tuple(tensors)))
    return tuple(parts)


def _value(value: Any, owner: nn.Module) -> Any:
    """An attribute's value as compared between layers: plain values by value, containers
    of them item by item, a method by its function and its object's type, any other object
    by identity (one config shared by all layers is alike; an object per layer is not);
    None for a tensor held outside parameters and buffers."""
    if isinstance(value, torch.Tensor):
        return None
    if isinstance(value, _PLAIN):
        return ("=", value)
    if isinstance(value, types.MethodType):  # a forward put on the instance (a module kept whole)
        bound = "self" if value.__self__ is owner else type(value.__self__)
        return ("method", id(value.__func__), bound)
    if isinstance(value, functools.partial):  # an activation's partial(gelu, approximate="tanh")
        bound = _value((value.args, value.keywords), owner)
        return None if bound is None else ("partial", id(value.func), bound)
    if isinstance(value, (tuple, list, frozenset, set)):
        ordered = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        items = [_value(v, owner) for v in ordered]
        return None if any(i is None for i in items) else (type(value), tuple(items))
    if isinstance(value, dict):
        pairs = [(k, _value(v, owner)) for k, v in value.items()]
        return None if any(v is None for _, v in pairs) else (dict, tuple(pairs))
    return ("is", id(value))


def _is_leaf(value: Any) -> bool:
    """The arguments are flattened through tuples, lists and dicts only: an object (a
    cache) stays one leaf, even of a type registered with pytree."""
    return not isinstance(value, (tuple, list, dict))


def _forward_of(group: _Group, member: _Member, state_of: LayerState | None) -> Callable[..., Any]:
    """The instance ``forward`` of a group's layer: marked (first, second, last), one repeat
    op (the others, where the call matches the second's), or the layer's own."""
    module = member.module

    def forward(*args: Any, **kwargs: Any) -> Any:
        leaves, spec = pytree.tree_flatten((args, kwargs), is_leaf=_is_leaf)
        state = _state(state_of, member.index, leaves)
        if state is None:
            return type(module).forward(module, *args, **kwargs)
        if member.role == "repeat":
            if group.recorded is not None and _matches(group.recorded, leaves, spec, state[0]()):
                member.repeated = True
                return _repeat(group.recorded, member, leaves, state)
            return type(module).forward(module, *args, **kwargs)
        return _marked(group, member, leaves, spec, state)

    return forward


def _state(of: LayerState | None, index: int, leaves: Sequence[Any]) -> StateAccess | None:
    """The state held by the objects among a call's arguments (each one known to ``of``),
    as one list; None when an object is not known."""
    accesses: list[StateAccess] = []
    for leaf in leaves:
        if isinstance(leaf, (torch.Tensor, *_PLAIN)):
            continue
        access = of(index, leaf) if of is not None else None
        if access is None:
            return None
        accesses.append(access)

    def get() -> list[torch.Tensor]:
        return [t for getter, _ in accesses for t in getter()]

    def put(tensors: list[torch.Tensor]) -> None:
        start = 0
        for getter, setter in accesses:
            count = len(getter())  # as many as it holds: a state keeps its tensor count
            setter(tensors[start:start + count])
            start += count

    return get, put


def _marked(group: _Group, member: _Member, leaves: list[Any], spec: Any,
            state: StateAccess) -> Any:
    """The layer's own forward between the marker ops; the template's call is recorded."""
    get_state, set_state = state
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    before = get_state()
    marked = list(torch.ops.fastnnef.layer_begin(tensors + before, member.key))
    set_state(marked[len(tensors):])
    given = iter(marked)
    args, kwargs = pytree.tree_unflatten([next(given) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves],
                                         spec)
    result = type(member.module).forward(member.module, *args, **kwargs)
    out_leaves, out_spec = pytree.tree_flatten(result)
    outs = [leaf for leaf in out_leaves if isinstance(leaf, torch.Tensor)]
    after = get_state()
    ended = list(torch.ops.fastnnef.layer_end(outs + after, member.key))
    set_state(ended[len(outs):])
    if member is group.template:
        group.recorded = _Recorded(
            [_TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec,
            [(tuple(t.shape), t.dtype) for t in tensors + before],
            [_TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in out_leaves], out_spec,
            [(tuple(t.shape), tuple(t.stride()), t.dtype, t.device) for t in ended], len(after),
        )
    results = iter(ended)
    return pytree.tree_unflatten([next(results) if isinstance(leaf, torch.Tensor) else leaf for leaf in out_leaves],
                                 out_spec)


def _repeat(recorded: _Recorded, member: _Member, leaves: list[Any],
            state: StateAccess) -> Any:
    get_state, set_state = state
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    own = dict(itertools.chain(member.module.named_parameters(remove_duplicate=False),
                               member.module.named_buffers(remove_duplicate=False)))
    outs = list(torch.ops.fastnnef.layer_repeat(tensors + get_state() + [own[n] for n in member.names], member.key))
    n_out = len(outs) - recorded.n_state
    set_state(outs[n_out:])
    results = iter(outs[:n_out])
    return pytree.tree_unflatten([next(results) if leaf is _TENSOR else leaf for leaf in recorded.out_leaves],
                                 recorded.out_spec)


def _matches(recorded: _Recorded, leaves: list[Any], spec: Any, state: list[torch.Tensor]) -> bool:
    """Whether a call is the template's but for its tensors' values: the same structure,
    the same plain arguments, tensors of the same sizes (same expressions) and dtypes."""
    if spec != recorded.spec or len(leaves) != len(recorded.leaves):
        return False
    for leaf, known in zip(leaves, recorded.leaves):
        if isinstance(leaf, torch.Tensor) != (known is _TENSOR):
            return False
        if known is not _TENSOR and not _same(leaf, known):
            return False
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)] + state
    return len(tensors) == len(recorded.inputs) and all(
        t.dtype == dtype and len(t.shape) == len(shape) and all(_same(a, b) for a, b in zip(t.shape, shape))
        for t, (shape, dtype) in zip(tensors, recorded.inputs))


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        return (isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt)
                and a.node.expr == b.node.expr)  # comparing SymInts with == would add a guard
    if isinstance(a, _PLAIN) and isinstance(b, _PLAIN):
        return type(a) is type(b) and a == b
    return False


def _identity(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    del key
    return [t.clone() for t in tensors]  # a custom op's outputs must not alias its inputs


def _repeat_kernel(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    del tensors, key
    raise T2NErrorTorchExportFailed("fastnnef::layer_repeat ran outside torch.export's capture")


def _repeat_fake(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    del tensors
    with _live_lock:
        group = _live[key]
    assert group.recorded is not None  # a repeat op is recorded only after its template's call
    return [torch.empty_strided(shape, stride, dtype=dtype, device=device)
            for shape, stride, dtype, device in group.recorded.outputs]


for _name, _kernel, _fake in (("layer_begin", _identity, _identity), ("layer_end", _identity, _identity),
                              ("layer_repeat", _repeat_kernel, _repeat_fake)):
    _LIB.impl(_name, _kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"fastnnef::{_name}", _fake, lib=_LIB)


# --- after the capture --------------------------------------------------------------------

@dataclass
class _Span:
    """One marked layer's nodes in the program."""

    begin: fx.Node
    end: fx.Node
    inputs: dict[fx.Node, int]  # the begin op's outputs (getitem nodes) -> their index
    body: list[fx.Node]  # the nodes computed from the inputs or the layer's tensors, in order
    tensors: dict[fx.Node, str]  # the layer's parameter/buffer placeholders -> name in the layer
    calls: dict[int, str]  # module_call keys of the submodules kept whole -> their path in the layer


def expand_repeats(program: torch.export.ExportedProgram, repeats: Repeats,
                   module_calls: dict[int, ModuleCall]) -> str | None:
    """The repeat ops replaced by copies of their template's nodes and the markers by their
    inputs (the module docstring); returns why not, when the layers turn out not alike
    (the program is then unusable: capture again without repeats). ``module_calls``: the
    call each ``fastnnef::module_call`` key names (torch_graph/module_calls.py)."""
    graph = program.graph
    ops = {BEGIN: {}, END: {}, REPEAT: {}}  # type: dict[str, dict[int, fx.Node]]
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            name = node.target._schema.name
            if name in ops:
                ops[name][node.args[1]] = node
    if not ops[BEGIN]:
        return None
    by_name = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    placeholders = _layer_tensors(program, repeats, by_name)
    constants = {by_name[spec.arg.name]: program.constants[spec.target]
                 for spec in program.graph_signature.input_specs
                 if spec.kind == InputKind.CONSTANT_TENSOR and spec.target in program.constants}
    calls = {key: _calls_in(member.module, module_calls) for key, (_, member) in repeats.by_key.items()}
    spans = {key: _span(node, ops[END][key], placeholders.get(key, {}), calls[key])
             for key, node in ops[BEGIN].items()}
    layered: set[fx.Node] = set()  # what any layer computes: another layer reads it as an argument only
    for span in spans.values():
        layered |= {span.begin, span.end, *span.body, *span.inputs, *span.end.users}
    for node in ops[REPEAT].values():
        layered |= {node, *node.users}
    for group in repeats.groups:
        if not any(member.repeated for member in group.members):
            continue  # its marked layers stay as captured; only the markers go
        unmarked = [m.index for m in group.members if m.role != "repeat" and m.key not in spans]
        if unmarked:  # called with an object the plan does not know: nothing to compare with
            return f"layers {unmarked} ran unmarked, alike layers of theirs repeated"
        template = spans[group.template.key]
        for member in group.members:
            if member.role == "repeat":
                continue
            span = spans[member.key]
            why = _not_isolated(span, layered) or (
                _differs(template, span, constants) if member.role == "full" else None)
            if why is not None:
                return f"layer {member.index} (alike layers captured once from layer {group.template.index}): {why}"
        for member in group.members:
            if member.repeated:
                own_calls = {path: module_calls[key] for key, path in calls[member.key].items()}
                _expand(graph, template, ops[REPEAT][member.key], member, own_calls, module_calls,
                        repeats.paths[group.template.key], repeats.paths[member.key])
    for span_ops in (ops[BEGIN], ops[END]):
        for node in span_ops.values():
            _unmark(graph, node)
    graph.lint()
    program.graph_module.recompile()
    return None


def _layer_tensors(program: torch.export.ExportedProgram, repeats: Repeats,
                   by_name: dict[str, fx.Node]) -> dict[int, dict[fx.Node, str]]:
    """Each marked layer's parameter and buffer placeholders (``by_name``: the program's
    placeholders by name), by their name in the layer."""
    prefixes = {f"{path}.": key for key, path in repeats.paths.items()}
    found: dict[int, dict[fx.Node, str]] = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER) or spec.target is None:
            continue
        for prefix, key in prefixes.items():
            if spec.target.startswith(prefix):
                found.setdefault(key, {})[by_name[spec.arg.name]] = spec.target[len(prefix):]
    return found


def _calls_in(layer: nn.Module, module_calls: dict[int, ModuleCall]) -> dict[int, str]:
    paths = {id(module): path for path, module in layer.named_modules(remove_duplicate=False)}
    return {key: paths[id(call.module)] for key, call in module_calls.items() if id(call.module) in paths}


def _span(begin: fx.Node, end: fx.Node, tensors: dict[fx.Node, str], calls: dict[int, str]) -> _Span:
    inputs = {user: user.args[1] for user in begin.users}
    body: list[fx.Node] = []
    reached = set(inputs) | set(tensors)
    node = begin.next
    while node is not end:
        if node not in inputs and any(arg in reached for arg in node.all_input_nodes):
            reached.add(node)
            body.append(node)
        node = node.next
    return _Span(begin, end, inputs, body, tensors, calls)  # type: ignore[arg-type]


def _not_isolated(span: _Span, layered: set[fx.Node]) -> str | None:
    """Why the layer's nodes are not a function of its arguments and tensors alone: one
    reads what another layer computed, not given as an argument (Python state between
    layers), or is read outside the layer other than as its result."""
    own = set(span.body) | set(span.inputs) | set(span.tensors)
    for node in span.body:
        for arg in node.all_input_nodes:
            if arg not in own and arg in layered:
                return f"{node.name} reads {arg.name}, computed by another layer and not given to this one"
        if any(user not in own and user is not span.end for user in node.users):
            return f"{node.name} is read outside the layer"
    return None


def _differs(a: _Span, b: _Span, constants: dict[fx.Node, torch.Tensor]) -> str | None:
    """Why span ``b`` computes otherwise than ``a``, or None: the same ops in the same
    order on the same constants, inputs matched by position, tensors by name."""
    if len(a.body) != len(b.body):
        return f"{len(b.body)} nodes where the template has {len(a.body)}"
    b_tensors = {name: node for node, name in b.tensors.items()}
    b_inputs = {index: node for node, index in b.inputs.items()}
    mapping: dict[fx.Node, fx.Node] = {}
    for node, index in a.inputs.items():
        if index not in b_inputs:
            return f"marker output {index} missing"
        mapping[node] = b_inputs[index]
    for node, name in a.tensors.items():
        if name in b_tensors:
            mapping[node] = b_tensors[name]
    for x, y in zip(a.body, b.body):
        if x.op != y.op or x.target != y.target:
            return f"{y.name} ({y.target}) where the template has {x.name} ({x.target})"
        if _is_module_call(x):  # its key names its module: the same submodule of each layer
            if a.calls.get(x.args[1]) is None or a.calls.get(x.args[1]) != b.calls.get(y.args[1]):  # type: ignore[arg-type]
                return f"{y.name} calls another module kept whole than {x.name}"
            same = _same_args(x.args[0], y.args[0], mapping, constants)
        else:
            same = _same_args((x.args, x.kwargs), (y.args, y.kwargs), mapping, constants)
        if not same:
            return f"{y.name} ({y.target}) has other arguments than {x.name}"
        mapping[x] = y
    if not _same_args(a.end.args[0], b.end.args[0], mapping, constants):
        return "other results"
    return None


def _same_args(x: Any, y: Any, mapping: dict[fx.Node, fx.Node], constants: dict[fx.Node, torch.Tensor]) -> bool:
    if isinstance(x, fx.Node):
        if not isinstance(y, fx.Node):
            return False
        if mapping.get(x, x) is y:
            return True
        if x in mapping:
            return False
        if x in constants and y in constants:  # a tensor each layer makes (torch.tensor(...)), lifted
            a, b = constants[x], constants[y]
            alike = a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
        else:
            # Two nodes outside the layers' own (each layer's arange of its expert count):
            # alike when they compute the same on alike arguments.
            alike = (x.op == y.op == "call_function" and x.target == y.target
                     and _same_args((x.args, x.kwargs), (y.args, y.kwargs), mapping, constants))
        if alike:
            mapping[x] = y
        return alike
    if isinstance(x, (list, tuple)):
        return (isinstance(y, type(x)) and len(x) == len(y)
                and all(_same_args(i, j, mapping, constants) for i, j in zip(x, y)))
    if isinstance(x, dict):
        return (isinstance(y, dict) and x.keys() == y.keys()
                and all(_same_args(x[k], y[k], mapping, constants) for k in x))
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (x != x and y != y)  # NaN constants alike
    return type(x) is type(y) and x == y


def _expand(graph: fx.Graph, template: _Span, repeat: fx.Node, member: _Member, calls: dict[str, ModuleCall],
            module_calls: dict[int, ModuleCall], template_path: str, path: str) -> None:
    """``repeat`` replaced by the template's nodes on its inputs and the layer's tensors, a
    module kept whole called as the layer's own (``calls``: its path in the layer -> its call)."""
    given: list[fx.Node] = list(repeat.args[0])  # type: ignore[arg-type]
    n_inputs = len(given) - len(member.names)
    env: dict[fx.Node, Any] = {node: given[index] for node, index in template.inputs.items()}
    by_name = dict(zip(member.names, given[n_inputs:]))
    env.update({node: by_name[name] for node, name in template.tensors.items()})
    with graph.inserting_before(repeat):
        for node in template.body:
            copy = graph.node_copy(node, lambda arg: env.get(arg, arg))
            if _is_module_call(node):
                own = calls[template.calls[node.args[1]]]  # type: ignore[index]
                own.called_as(module_calls[node.args[1]])  # type: ignore[index]
                copy.args = (copy.args[0], own.key)
            stack = copy.meta.get("nn_module_stack")
            if stack:
                copy.meta["nn_module_stack"] = {
                    key: (_moved(p, template_path, path), t) for key, (p, t) in stack.items()}
            env[node] = copy
    results: list[Any] = list(template.end.args[0])  # type: ignore[arg-type]
    for user in list(repeat.users):
        result = results[user.args[1]]  # type: ignore[index]
        user.replace_all_uses_with(env.get(result, result))
        graph.erase_node(user)
    graph.erase_node(repeat)


def _is_module_call(node: fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name == MODULE_CALL


def _moved(module_path: str, template_path: str, path: str) -> str:
    if module_path == template_path or module_path.startswith(template_path + "."):
        return path + module_path[len(template_path):]
    return module_path


def _unmark(graph: fx.Graph, marker: fx.Node) -> None:
    """A marker op's outputs replaced by its inputs."""
    inputs: list[Any] = list(marker.args[0])  # type: ignore[arg-type]
    for user in list(marker.users):
        user.replace_all_uses_with(inputs[user.args[1]])  # type: ignore[index]
        graph.erase_node(user)
    graph.erase_node(marker)
