"""One subnet made ready for export: the registry's transforms applied to its module, example,
names, dynamic axes and extension lines (``prepare_subnet_export``).

What the result holds is what ``export_model_to_nnef`` takes::

    p = prepare_subnet_export(model, [x, length], ["x", "length"], ["y"], "net", dyn, [], registry)
    export_model_to_nnef(p.model, tuple(p.test_input), path, TractNNEF.latest().with_dynamic_axes(p.dyn),
                         input_names=p.input_names, output_names=p.output_names,
                         custom_extensions=p.custom_extensions)
"""

from __future__ import annotations

import os
import typing as T
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.remodeler.adapter import BoundaryAdapter, flatten_named
from fastnnef.remodeler.axis_registry import AxisSymbolRegistry
from fastnnef.remodeler.dyn_axes import (
    DynAxes,
    apply_eval_symbols,
    apply_symbol_renames_to_dyn,
    drop_assertions_referencing_symbols,
    remove_eval_symbols_from_dyn,
    rewrite_and_filter_assertions,
    rewrite_assertions_with_renames,
)


@dataclass(frozen=True)
class PreparedSubnet:
    """A subnet ready for ``export_model_to_nnef``: module, example, names, axes, extensions."""

    model: torch.nn.Module
    test_input: list
    input_names: list[str]
    output_names: list[str]
    dyn: dict[str, dict[int, str]]
    custom_extensions: list[str]


def dynamic_axes_from_registry(registry: AxisSymbolRegistry, subnet_name: str) -> DynAxes:
    """The dynamic axes the config's ``original_shape`` symbols give ``subnet_name``'s inputs.

    torch_to_nnef takes a subnet's dynamic axes from its provider; a plain module has none, and
    this reads them from the config instead (``{input: {axis: SYMBOL}}``)."""
    prefix = f"{subnet_name}."
    return {q[len(prefix):]: dict(axes) for q, axes in registry.symbols_per_input.items()
            if q.startswith(prefix) and axes}


def _check_registry_fits(
    registry: AxisSymbolRegistry, subnet_name: str, test_input: list, input_names: list[str], dyn: DynAxes
) -> None:
    """Refuse a config whose entries for ``subnet_name`` name inputs, ranks or symbols it lacks."""
    names, tensors, *_ = flatten_named(input_names, test_input, "input_{}")
    flat = dict(zip(names, tensors))
    prefix = f"{subnet_name}."

    def fail(what: str) -> T.NoReturn:
        raise T2NErrorInvalidArgument(f"shape-config does not fit subnet '{subnet_name}' (inputs {list(flat)}): {what}")

    for table in (registry.symbols_per_input, registry.eval_symbols_per_input):
        for qname in table:
            if qname.startswith(prefix) and qname[len(prefix):] not in flat:
                fail(f"it configures '{qname}', which is not an input")
    for qname, dims in registry.original_shape_per_input.items():
        if not qname.startswith(prefix):
            continue
        shape = list(flat[qname[len(prefix):]].shape)
        if len(dims) != len(shape) or any(isinstance(d, int) and d != n for d, n in zip(dims, shape)):
            fail(f"original_shape of '{qname}' is {dims}, the input has shape {shape}")
    present = {str(s).upper() for axes in dyn.values() for s in axes.values()}
    for target, sources in registry.renamed_symbols_per_subnet.get(subnet_name, {}).items():
        missing = [s for s in sources if s not in present]
        if missing:
            fail(f"renamed_symbols {target}: {sources} names {missing}, which no dynamic axis carries "
                 f"{sorted(present)}")
    for qname, pins in registry.eval_symbols_per_input.items():
        if qname.startswith(prefix):
            carried = {str(s).upper() for s in dyn.get(qname[len(prefix):], {}).values()}
            missing = sorted(set(pins) - carried)
            if missing:
                fail(f"eval_symbols of '{qname}' pins {missing}, which are none of its dynamic axes {sorted(carried)}")


def prepare_subnet_export(
    model: torch.nn.Module,
    test_input: list,
    input_names: list[str],
    output_names: list[str],
    subnet_name: str,
    dyn: dict[str, dict[int, str]],
    custom_extensions: list[str],
    axis_registry: AxisSymbolRegistry | None = None,
) -> PreparedSubnet:
    """Apply ``axis_registry``'s entries for ``subnet_name`` to one subnet; return what to export.

    In order: inputs resized to their ``eval_symbols``; the module wrapped in a
    ``BoundaryAdapter`` when the config collapses, binds, keeps a subset of outputs or
    squeezes outputs (renames alone only rewrite ``dyn``); pinned symbols removed from ``dyn``;
    ``custom_extensions`` (generated one-symbol assertions) renamed and kept while their
    symbols remain, then the config's ``extensions`` added, renamed, but those naming a
    pinned symbol. ``model`` itself is not changed. A config entry that does not fit the
    subnet raises ``T2NErrorInvalidArgument``.
    """
    if isinstance(test_input, torch.Tensor):
        test_input = [test_input]  # one input given alone, as export_model_to_nnef's args allow
    if isinstance(axis_registry, (str, os.PathLike, Mapping)):
        raise T2NErrorInvalidArgument(
            f"axis_registry must be a parsed registry, got {type(axis_registry).__name__}: read a file with "
            "load_axis_symbol_registry(path), a mapping with parse_axis_symbol_registry(mapping)"
        )
    if axis_registry is None:
        exts = rewrite_and_filter_assertions(list(custom_extensions), None, dyn)
        return PreparedSubnet(model, list(test_input), list(input_names), list(output_names), dyn, exts)
    reg = axis_registry
    prefix = f"{subnet_name}."
    dyn = {name: dict(axes) for name, axes in dyn.items()}  # the caller's mapping stays as given
    _check_registry_fits(reg, subnet_name, list(test_input), list(input_names), dyn)
    test_input = list(test_input)
    if reg.eval_symbols_per_input:
        test_input = apply_eval_symbols(test_input, input_names, subnet_name, dyn, reg.eval_symbols_per_input)

    rename_map = reg.renamed_symbols_per_subnet.get(subnet_name, {})
    outputs_keep = reg.outputs_keep_per_subnet.get(subnet_name, [])
    out_collapse = {q[len(prefix):]: axes for q, axes in reg.output_collapse_dims.items() if q.startswith(prefix)}
    structural = (
        any(q.startswith(prefix) for q in reg.input_collapse_dims)
        or any(q.startswith(prefix) for q in reg.bind_to_dim)
        or (bool(outputs_keep) and outputs_keep != list(output_names))
        or bool(out_collapse)
    )
    if structural:
        adapter = BoundaryAdapter(
            model, subnet_name, test_input, dyn, reg.input_collapse_dims, reg.bind_to_dim, rename_map,
            outputs_keep=outputs_keep, output_collapse_dims=out_collapse,
            input_names=input_names, output_names=output_names,
        )
        model = adapter
        input_names, output_names = adapter.input_names, adapter.output_names
        test_input = list(adapter.input_example())
        dyn = adapter.dynamic_shapes_for_export()
    elif rename_map:
        dyn = apply_symbol_renames_to_dyn(dyn, rename_map)

    if reg.eval_symbols_per_input:
        # Pinned before the assertions are filtered: a pinned axis is static, so a generated
        # `tract_assert SYMBOL >= 1` about it must go.
        remove_eval_symbols_from_dyn(list(input_names), subnet_name, dyn, reg.eval_symbols_per_input)

    exts = rewrite_and_filter_assertions(list(custom_extensions), rename_map, dyn)
    pinned = {s for q, pins in reg.eval_symbols_per_input.items() if q.startswith(prefix) for s in pins}
    declared = rewrite_assertions_with_renames(reg.extensions_per_subnet.get(subnet_name, []), rename_map)
    exts = list(dict.fromkeys([*exts, *drop_assertions_referencing_symbols(declared, pinned)]))
    return PreparedSubnet(model, test_input, list(input_names), list(output_names), dyn, exts)
