"""Inlining of the submodule calls whose class cannot be imported (torch_to_nnef's
``torch_graph.jit_inline``).

A TorchScript archive shipped without its Python source (``silero_vad.jit``) calls
submodules of classes like ``__torch__.vad.model.vad_annotator.SileroVadBlock``, which no
import resolves. ``inline_unresolvable_submodules`` replaces each such
``prim::CallMethod`` by the body of the method it calls, until none is left; calls of
importable classes (``torch.nn.LSTM``...) stay calls. ``harden_jit_for_export`` uses it
when the module is not frozen (``freeze=False``, or freezing failed).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorTorchGraphExtraction
from fastnnef.torch_graph.jit_passes import replace_node, walk_nodes

__all__ = ["class_is_importable", "inline_unresolvable_submodules"]

_TORCH_PREFIX = "__torch__."
_MANGLE = "___torch_mangle_"


def class_is_importable(qualified_name: str) -> bool:
    """Whether the Python class behind a TorchScript class name (``__torch__.pkg.mod.Cls``,
    possibly with ``___torch_mangle_N`` parts) can be imported."""
    if not qualified_name.startswith(_TORCH_PREFIX):
        return True  # not a Python class of a user package (builtins, torch's own types)
    parts = [p for p in qualified_name[len(_TORCH_PREFIX):].split(".") if not p.startswith(_MANGLE)]
    module_path, class_name = ".".join(parts[:-1]), parts[-1]
    try:
        module = importlib.import_module(module_path)
    except ImportError:
        return False
    return isinstance(getattr(module, class_name, None), type)


def _module_of(value: torch._C.Value, model: torch.nn.Module) -> Any | None:
    """The submodule of ``model`` that ``value`` holds, following its ``prim::GetAttr``
    chain back to the graph's first input (``self``); ``None`` if it comes from elsewhere."""
    path: list[str] = []
    while value.node().kind() == "prim::GetAttr":
        path.append(value.node().s("name"))
        value = value.node().inputsAt(0)
    if value.node().kind() != "prim::Param" or value.offset() != 0:
        return None
    module: Any = model
    for name in reversed(path):
        module = getattr(module, name)
    return module


def inline_unresolvable_submodules(graph: torch._C.Graph, model: torch.nn.Module, max_passes: int = 1024) -> int:
    """Inline every ``prim::CallMethod`` on a submodule whose class is not importable,
    repeatedly (an inlined body may call further such submodules); returns the number of
    calls inlined. ``max_passes`` bounds the rewrites (T2NErrorTorchGraphExtraction past it)."""
    count = 0
    while True:
        found = next(
            (
                (n, module) for n in walk_nodes(graph)
                if n.kind() == "prim::CallMethod"
                # JitType.qualified_name is missing from torch's stubs
                and not class_is_importable(n.inputsAt(0).type().qualified_name())  # type: ignore[attr-defined]
                # a module picked from a list or passed around has no path: the call stays
                and (module := _module_of(n.inputsAt(0), model)) is not None
            ),
            None,
        )
        if found is None:
            return count
        if count >= max_passes:
            raise T2NErrorTorchGraphExtraction(
                f"inline_unresolvable_submodules: more than {max_passes} calls to inline (recursive "
                "module structure?); raise max_passes if the model really is that deep"
            )
        node, module = found
        callee = getattr(module, node.s("name")).graph
        with graph.insert_point_guard(node):
            outputs = graph.insertGraph(callee, list(node.inputs()))
        replace_node(node, outputs)
        count += 1
