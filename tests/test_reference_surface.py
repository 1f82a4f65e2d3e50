"""The module surface of torch_to_nnef 0.24.12: each of its 83 modules (read from its
wheel) is either provided by fastnnef at the same path (``torch_to_nnef.x.y`` ->
``fastnnef.x.y``) with the public names pinned here, or listed as not provided with the
reason. A module moving from one list to the other must move here too.

Names of the modules ``tests/test_dropin_names.py`` already pins come from its
``MODULE_MAP``; behaviours of the drop-in-only modules added for this list (``dtypes``,
``model_wrapper``, ``console``, ``collect_env``, ``nnef_graph``, ``tensor.utils``) are
tested in ``tests/test_dropin_modules.py``."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from tests.test_dropin_names import MODULE_MAP

# Every module of torch_to_nnef 0.24.12 ("" is the package).
REFERENCE_MODULES = """
    "" collect_env compress console dtypes exceptions export log model_wrapper nnef_graph utils
    inference_target inference_target.base inference_target.khronos inference_target.tract
    nnef_io.tensor nnef_io.writer
    op op.aten op.aten.activation op.aten.attn op.aten.axes_change op.aten.complex op.aten.concat op.aten.expand
    op.aten.fft op.aten.loss op.aten.math op.aten.matmul op.aten.norm op.aten.other op.aten.pad op.aten.pool
    op.aten.qops op.aten.reducer op.aten.rnn op.aten.selector op.aten.split op.aten.tensor_build op.aten.unary
    op.custom_extractors op.custom_extractors.base op.custom_extractors.gdn op.custom_extractors.moe
    op.custom_extractors.rnn op.extras op.extras.exp_norm op.extras.scan_ops op.fragment op.gated_delta op.helper
    op.quantized
    remodeler remodeler.adapter remodeler.dyn_axes remodeler.inspect_utils remodeler.rich_render remodeler.schema
    remodeler.serialize
    tensor tensor.named tensor.offload tensor.opaque tensor.quant tensor.quant.base tensor.quant.qtract
    tensor.residency tensor.updater tensor.utils
    torch_graph torch_graph.dynamic_axes torch_graph.harden torch_graph.ir_data torch_graph.ir_graph
    torch_graph.ir_helpers torch_graph.ir_module_tracer torch_graph.ir_naming torch_graph.ir_op torch_graph.jit_inline
    torch_graph.jit_mutation torch_graph.jit_passes torch_graph.jit_utils torch_graph.torch_const
""".replace('""', "<package>").split()

# Provided modules -> their public names (those of the reference's module that user code
# reaches for; internal helpers of its own implementation are left out).
PROVIDED: dict[str, str] = {
    **MODULE_MAP,
    "dtypes": """WHOLE_NUMBER_DTYPES NUMPY_TO_TORCH_DTYPE TORCH_TO_NUMPY_DTYPE SCALAR_TYPE_TO_PYTORCH_TYPE
        STR_TO_NUMPY_DTYPE NUMPY_DTYPE_TO_STR TORCH_DTYPE_TO_NNEF_STR TORCH_DTYPE_TO_TRACT_STR str_to_torch_dtype
        torch_dtype_to_str numpy_dtype_to_tract_str is_quantized_dtype dtype_is_whole_number dtype_is_floating_point""",
    "model_wrapper": """insert_fixed_nontraceable_args build_structured_inputs tupleize_structure
        flatten_structured_outputs WrapStructIO build_new_names_and_elements has_sub_containers
        has_non_tensor_elements UnfoldModelInfo cast_tensor_if_int unfold_model_io""",
    "console": "striptags Console",
    "collect_env": """run_lambda run_and_read_all python_version get_platform run_and_parse_first_match
        check_release_file get_mac_version get_windows_version get_lsb_version get_hostname get_user get_uname
        get_os get_pip_packages get_gcc_version dump_environment_versions""",
    "nnef_graph": "TorchToNGraphExtractor",
    "tensor.utils": "get_named_parameters get_named_buffers",
    "inference_target.khronos": "KhronosNNEF",
    "op": "",
    "op.aten": "",
    "op.custom_extractors.base": "CUSTOMOP_KIND ModuleInfoExtractor",
    "op.custom_extractors.gdn": "CausalConvUpdateExtractor GatedDeltaNetRecurrentExtractor",
    "tensor.named": "NamedTensor apply_name_to_tensor_in_module",
    "tensor.opaque": "OpaqueTensorRef set_opaque_tensor_in_params_as_ref",
}
PROVIDED["<package>"] = PROVIDED.pop("")

# fastnnef.remodeler is another part of issue 24 (its own branch): pinned here, checked
# once that package is in the tree.
REMODELER: dict[str, str] = {
    "remodeler": """Stage IODescriptor SubnetSignature RemodelPlan Provider plan_from_registry PreparedSubnet
        prepare_subnet_export save_config""",
    "remodeler.adapter": "BoundaryAdapter RenameOutputs",
    "remodeler.dyn_axes": "",
    "remodeler.inspect_utils": "",
    "remodeler.rich_render": "",
    "remodeler.schema": "",
    "remodeler.serialize": "",
}

_HANDLERS = ("the reference's internal op-handler layout: fastnnef's aten handlers are grouped by family "
             "under fastnnef.op.aten (docs/ops.md lists every op) and registered with @handler; handlers are "
             "no user API (own ops: op.extras.register or a ModuleInfoExtractor)")
_IR = ("the reference's internal IR implementation; its user-facing names (TorchModuleTracer, TorchOp, "
       "TorchModuleIRGraph, module_tracer_into_ir_graph, MAP_TO_NOP) are at fastnnef.torch_graph")
# Reference paths where fastnnef has a module of its own, with other contents.
NAMESAKES = {*(f"op.aten.{m}" for m in ("activation", "complex", "loss", "norm", "pool")), "op.custom_extractors.moe"}
NOT_PROVIDED: dict[str, str] = {
    **{f"op.aten.{m}": _HANDLERS for m in
       "attn axes_change concat expand fft math matmul other pad qops reducer rnn selector split tensor_build "
       "unary".split()},
    **{m: _HANDLERS + " (fastnnef has a family module of this name, with its own handlers)" for m in NAMESAKES
       if m.startswith("op.aten.")},
    "op.custom_extractors.moe": ("fastnnef's own MoE extractors are there; the reference's MoEFFNExtractor and "
                                 "Gemma4RoutedExpertsExtractor are importable from op.custom_extractors, where "
                                 "the reference re-exports them"),
    "op.quantized": _HANDLERS + " (quantized ops: fastnnef.op.aten.quantized)",
    "op.gated_delta": ("the reference's gated-delta lowering helpers: fastnnef always exports gated delta nets "
                       "as tract_transformers_gdn_recurrent (op.custom_extractors.gdn)"),
    "op.fragment": ("the reference's mako templates of NNEF fragments: fastnnef's fragments are text its "
                    "handlers and targets add to the graph (NNEFGraph.fragments)"),
    "op.extras.exp_norm": ("the reference's example t2n_extra:: ops: fastnnef's mechanism is op.extras "
                           "(register), its ops are not shipped"),
    "op.extras.scan_ops": ("the reference's SSM and gated-delta scan t2n_extra:: ops: not shipped (gated delta "
                           "nets export as tract_transformers_gdn_recurrent)"),
    "op.custom_extractors.rnn": ("its extractors are importable from op.custom_extractors, where the reference "
                                 "re-exports them; fastnnef exports recurrent layers without one (tract scans)"),
    "nnef_io.writer": ("a writer over nnef_tools' Graph, which fastnnef does not depend on: artefacts are "
                       "written by fastnnef.nnef.serialize.write_artefact through the Rust sink"),
    "torch_graph.dynamic_axes": _IR + " (dynamic dims: fastnnef.torch_graph.ir.dynamic)",
    "torch_graph.ir_graph": _IR,
    "torch_graph.ir_helpers": _IR,
    "torch_graph.ir_module_tracer": _IR,
    "torch_graph.ir_op": _IR,
    "torch_graph.jit_utils": _IR,
    "torch_graph.torch_const": _IR + " (TorchScript kind strings, used where they are needed)",
}


def _path(module: str) -> str:
    return "fastnnef" if module == "<package>" else f"fastnnef.{module}"


def test_every_reference_module_is_listed_once() -> None:
    # The .py files of its wheel (the issue counted 80).
    assert len(REFERENCE_MODULES) == len(set(REFERENCE_MODULES)) == 83
    listed = [*PROVIDED, *REMODELER, *NOT_PROVIDED]
    assert len(listed) == len(set(listed)), "a module is in two lists"
    extra = set(PROVIDED) - set(REFERENCE_MODULES)
    # MODULE_MAP also pins the fastnnef paths of names user code imports (none outside the list).
    assert not extra, extra
    assert set(listed) == set(REFERENCE_MODULES), set(REFERENCE_MODULES) - set(listed)


@pytest.mark.parametrize("module", sorted(PROVIDED))
def test_provided_module_imports_with_its_names(module: str) -> None:
    imported = importlib.import_module(_path(module))
    missing = [name for name in PROVIDED[module].split() if not hasattr(imported, name)]
    assert not missing, f"{_path(module)} lacks {missing}"


@pytest.mark.parametrize("module", sorted(REMODELER))
def test_remodeler_modules(module: str) -> None:
    imported = importlib.import_module(_path(module))
    missing = [name for name in REMODELER[module].split() if not hasattr(imported, name)]
    assert not missing, f"{_path(module)} lacks {missing}"


@pytest.mark.parametrize("module", sorted(NOT_PROVIDED))
def test_not_provided_module_is_absent(module: str) -> None:
    """A module listed as not provided does not import, but for fastnnef's namesakes (so
    that this list stays true)."""
    try:
        found = importlib.util.find_spec(_path(module)) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package (op.extras)
        found = False
    assert found == (module in NAMESAKES), f"{_path(module)}: move it to PROVIDED, or to NAMESAKES"
