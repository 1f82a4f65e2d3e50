"""Drop-in: torch_to_nnef's ``model_wrapper``, a model whose inputs or outputs are nested
tuples, lists and dicts (or hold constants) turned into one with flat tensor IO, the
names of the flat IO, and ``UnfoldModelInfo``.

fastnnef's exporter flattens IO itself while tracing (``torch_graph/trace.py``); this
module is for code that calls these helpers directly. The structure of a nested value is
described as ``utils.flatten_dict_tuple_or_list`` describes it: one ``(container types,
indexes, leaf)`` entry per leaf ("infos" below).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target.base import UnfoldModelInfo
from fastnnef.log import get_logger
from fastnnef.utils import FlatEntry, flatten_dict_tuple_or_list

__all__ = [
    "UnfoldModelInfo", "WrapStructIO", "build_new_names_and_elements", "build_structured_inputs",
    "cast_tensor_if_int", "flatten_structured_outputs", "has_non_tensor_elements", "has_sub_containers",
    "insert_fixed_nontraceable_args", "tupleize_structure", "unfold_model_io",
]

log = get_logger("fastnnef.model_wrapper")


def insert_fixed_nontraceable_args(flat_args: Sequence[Any], input_infos: Sequence[FlatEntry]) -> tuple[Any, ...]:
    """``flat_args`` (tensors only) with the constant leaves of ``input_infos`` put back at
    their positions: one value per entry."""
    values = iter(flat_args)
    return tuple(next(values) if isinstance(leaf, torch.Tensor) else leaf for _, _, leaf in input_infos)


def build_structured_inputs(flat_args: Sequence[Any], input_infos: Sequence[FlatEntry]) -> tuple[Any, ...]:
    """The positional arguments that ``input_infos`` describes, rebuilt around ``flat_args``
    (its tensors, in order; constants come from the infos). No infos: ``flat_args``."""
    if not input_infos:
        return tuple(flat_args)
    root: list[Any] = []
    for (types, idxes, _), value in zip(input_infos, insert_fixed_nontraceable_args(flat_args, input_infos)):
        node: Any = root
        for depth, key in enumerate(idxes[:-1]):
            node = _child(node, key, types[depth + 1])
        _put(node, idxes[-1], value)
    return tupleize_structure(root, input_infos)


def _child(node: Any, key: Any, kind: type) -> Any:
    """``node[key]``, created empty (a dict for mappings, else a list) when missing."""
    if isinstance(node, list) and key >= len(node):
        _put(node, key, None)
    current = node[key] if isinstance(node, list) else node.get(key)
    if current is None:
        current = {} if issubclass(kind, dict) else []
        node[key] = current
    return current


def _put(node: Any, key: Any, value: Any) -> None:
    if isinstance(node, list) and key >= len(node):
        node.extend([None] * (key + 1 - len(node)))
    node[key] = value


def tupleize_structure(inps: list[Any], input_infos: Sequence[FlatEntry]) -> tuple[Any, ...]:
    """``inps`` (rebuilt with lists) with the containers ``input_infos`` records as tuples
    made tuples again; the top level is always a tuple."""
    tuple_paths = {idxes[:depth] for types, idxes, _ in input_infos
                   for depth, kind in enumerate(types) if depth and issubclass(kind, tuple)}

    def rebuild(node: Any, path: tuple[Any, ...]) -> Any:
        if isinstance(node, dict):
            return {k: rebuild(v, path + (k,)) for k, v in node.items()}
        if isinstance(node, list):
            items = [rebuild(v, path + (i,)) for i, v in enumerate(node)]
            return tuple(items) if path in tuple_paths else items
        return node

    return tuple(rebuild(v, (i,)) for i, v in enumerate(inps))


def flatten_structured_outputs(struct_output: Any, output_infos: Sequence[FlatEntry]) -> Any:
    """The tensors of a structured output, flat; a plain tuple of tensors (or no infos) is
    returned as it is."""
    if not output_infos:
        return struct_output
    if len(output_infos) == 1 and output_infos[0][0] == (tuple,):
        return struct_output
    return [leaf for _, _, leaf in flatten_dict_tuple_or_list(struct_output) if isinstance(leaf, torch.Tensor)]


class WrapStructIO(nn.Module):
    """``model`` called with structured inputs rebuilt from flat tensors, its outputs
    flattened: traced, it adds no op to the graph. Holds ``model`` by reference."""

    def __init__(self, model: nn.Module, input_infos: Sequence[FlatEntry], output_infos: Sequence[FlatEntry]):
        super().__init__()
        self.model = model
        self.input_infos = input_infos
        self.output_infos = output_infos

    @property
    def __wrapped_model__(self) -> nn.Module:  # noqa: N802 (inference_target.base.WRAPPED_MODEL_ATTR)
        """The wrapped model, for ``UnfoldModelInfo.original_model``."""
        return self.model

    def forward(self, *flat_args: Any) -> Any:
        return flatten_structured_outputs(self.model(*build_structured_inputs(flat_args, self.input_infos)),
                                          self.output_infos)


def build_new_names_and_elements(
    original_names: list[str] | None, elms: Collection[Any], default_element_name_tmpl: str,
) -> tuple[list[str], list[Any], tuple[FlatEntry, ...], list[FlatEntry]]:
    """Names of the flat tensors of ``elms`` (a sequence of top-level items): an item's
    name (``original_names``, else ``default_element_name_tmpl.format(index)``), with the
    indexes or keys inside it appended (``input_0``, ``dic_arm``). Constant leaves get no
    name (they are fixed by the trace; logged). Returns (names, tensors, every flat entry,
    the tensors' entries); raises when two flat names are equal."""
    names = list(original_names or [])
    names += [default_element_name_tmpl.format(i) for i in range(len(names), len(elms))]
    flat = flatten_dict_tuple_or_list(elms)
    new_names: list[str] = []
    new_elms: list[Any] = []
    tensor_entries: list[FlatEntry] = []
    for entry in flat:
        _, (root, *inner), leaf = entry
        if not isinstance(root, int):
            raise T2NErrorNotImplemented(
                "build_new_names_and_elements takes a sequence of top-level items, not a mapping"
            )
        if not isinstance(leaf, torch.Tensor):
            log.warning("%s%s = %r is not a tensor: the trace keeps it as a constant", names[root],
                        "".join(f"[{k!r}]" for k in inner), leaf)
            continue
        new_names.append("_".join([names[root], *map(str, inner)]) if names[root] else "_".join(map(str, inner)))
        new_elms.append(leaf)
        tensor_entries.append(entry)
    duplicates = sorted({n for n in new_names if new_names.count(n) > 1})
    if duplicates:
        raise T2NErrorNotImplemented(
            f"flattening gives duplicate names {duplicates}: a name such as 'x_0' collides with the name of "
            "item 0 of container 'x'; rename the inputs or outputs"
        )
    return new_names, new_elms, flat, tensor_entries


def has_sub_containers(flat_elms: Sequence[FlatEntry]) -> bool:
    """Some leaf is inside a container inside the top level."""
    return any(len(types) > 1 for types, _, _ in flat_elms)


def has_non_tensor_elements(flat_elms: Sequence[FlatEntry]) -> bool:
    return any(not isinstance(leaf, torch.Tensor) for _, _, leaf in flat_elms)


def cast_tensor_if_int(inp: Any) -> Any:
    """A Python int as a 0-d tensor; anything else unchanged."""
    return torch.tensor(inp) if isinstance(inp, int) else inp


def unfold_model_io(model: nn.Module, args: Sequence[Any], outs: Any, input_names: list[str] | None,
                    output_names: list[str] | None) -> UnfoldModelInfo:
    """``model``'s IO flattened: names for the flat tensors, and ``model`` wrapped in
    ``WrapStructIO`` when its IO nests containers or holds constants."""
    if isinstance(model, WrapStructIO):
        raise T2NErrorNotImplemented("the model is already a WrapStructIO: wrap the original model once")
    if not isinstance(model, nn.Module):
        raise T2NErrorNotImplemented(f"only an nn.Module can be unfolded, got {type(model).__name__}")
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    in_names, _, in_flat, in_tensors = build_new_names_and_elements(input_names, args, "input_{}")
    out_names, _, out_flat, out_tensors = build_new_names_and_elements(output_names, outs, "output_{}")
    for kind, given, new in (("inputs", input_names, in_names), ("outputs", output_names, out_names)):
        if new != given:
            log.warning("the graph's %s are flattened; their NNEF names: %s", kind, new)
    if any(f(e) for f in (has_sub_containers, has_non_tensor_elements) for e in (in_flat, out_flat)):
        model = WrapStructIO(model, in_flat, out_flat).eval()
    return UnfoldModelInfo(
        model=model, original_inputs=tuple(args), original_outputs=outs,
        flat_inputs=tuple(cast_tensor_if_int(leaf) for _, _, leaf in in_tensors),
        flat_outputs=tuple(cast_tensor_if_int(leaf) for _, _, leaf in out_tensors),
        input_names=in_names, output_names=out_names,
    )

