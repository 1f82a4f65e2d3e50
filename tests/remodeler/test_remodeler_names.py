"""Drop-in: ``fastnnef.remodeler`` offers torch_to_nnef 0.24.12's ``torch_to_nnef.remodeler``
names (its ``__all__``, its submodules) with the same parameters, in the same order."""

from __future__ import annotations

import importlib
import inspect

import pytest

from fastnnef import remodeler

REFERENCE_ALL = [
    "Stage", "IODescriptor", "SubnetSignature", "RemodelPlan", "Provider", "plan_from_registry", "save_config",
    "BoundaryAdapter", "RenameOutputs", "apply_eval_symbols", "apply_symbol_renames_to_dyn",
    "drop_assertions_referencing_symbols", "filter_assertions_present_in_dyn", "remove_eval_symbols_from_dyn",
    "rewrite_and_filter_assertions", "rewrite_assertions_with_renames", "PreparedSubnet", "prepare_subnet_export",
]

# (module, name, parameter names in order)
SIGNATURES = [
    ("fastnnef.remodeler", "prepare_subnet_export",
     ["model", "test_input", "input_names", "output_names", "subnet_name", "dyn", "custom_extensions",
      "axis_registry"]),
    ("fastnnef.remodeler", "save_config", ["path", "registry", "flow_seq", "stream"]),
    ("fastnnef.remodeler.adapter", "BoundaryAdapter",
     ["module", "subnet_name", "input_example", "dynamic_axes", "collapse_by_input", "binds_by_input",
      "renamed_map", "outputs_keep", "output_collapse_dims", "apply_symbol_renames", "input_names", "output_names"]),
    ("fastnnef.remodeler.adapter", "RenameOutputs", ["module", "rename_map"]),
    ("fastnnef.remodeler.dyn_axes", "apply_eval_symbols",
     ["test_input", "input_names", "subnet_name", "dyn", "eval_symbols"]),
    ("fastnnef.remodeler.dyn_axes", "rewrite_and_filter_assertions", ["assertions", "rename_map", "dyn"]),
    ("fastnnef.remodeler.serialize", "write_signatures_json", ["sigs", "to_path", "stream", "model_label", "indent"]),
    ("fastnnef.remodeler.serialize", "signatures_to_json_text", ["sigs", "model_label", "indent"]),
    ("fastnnef.remodeler.inspect_utils", "render_diffs_plain", ["groups"]),
    ("fastnnef.remodeler.rich_render", "print_signatures_rich", ["sigs", "to_path", "diff", "rich", "model_label"]),
]


def test_reference_names() -> None:
    assert remodeler.__all__[: len(REFERENCE_ALL)] == REFERENCE_ALL
    for name in remodeler.__all__:
        assert hasattr(remodeler, name), name
    for module in ("schema", "adapter", "dyn_axes", "serialize", "inspect_utils", "rich_render"):
        importlib.import_module(f"fastnnef.remodeler.{module}")


@pytest.mark.parametrize("module, name, params", SIGNATURES, ids=[s[1] for s in SIGNATURES])
def test_signatures(module: str, name: str, params: list[str]) -> None:
    assert list(inspect.signature(getattr(importlib.import_module(module), name)).parameters) == params
