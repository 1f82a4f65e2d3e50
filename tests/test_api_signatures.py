"""Drop-in check: public names and signatures equal torch_to_nnef 0.24.12's documented ones.

Source: /work/shared/reference/torch_to_nnef-api.md (§1 module map, §2, §4, §5, §6, §7, §8.1,
§9.1, §9.2, §12). Each row: (module, dotted name, expected parameters, required). A
parameter is (name, default, kind); ``REQ`` marks no default. Rows with required=False
cover names fastnnef may not ship yet: they are skipped while the name is missing, and
checked as soon as it exists.
"""

from __future__ import annotations

import importlib
import inspect
import logging

import pytest
import torch

REQ = inspect.Parameter.empty
P = inspect.Parameter.POSITIONAL_OR_KEYWORD
K = inspect.Parameter.KEYWORD_ONLY
VK = inspect.Parameter.VAR_KEYWORD

# Defaults that are themselves fastnnef objects, compared by value (both are str enums).
NATURAL_VERBOSE = "natural_verbose"
APPROXIMATE = "approximate"

SIGNATURES = [
    # §2; front_end (keyword-only, fastnnef's addition): "auto" (torch.export, the tracer as fallback), issue 25
    ("fastnnef.export", "export_model_to_nnef", [
        ("model", REQ, P), ("args", REQ, P), ("file_path_export", REQ, P),
        ("inference_target", REQ, P), ("input_names", None, P), ("output_names", None, P),
        ("compression_level", 0, P), ("log_level", logging.INFO, P),
        ("nnef_variable_naming_scheme", NATURAL_VERBOSE, P),
        ("check_io_names_qte_match", True, P), ("debug_bundle_path", None, P),
        ("custom_extensions", None, P), ("allow_same_io_names", False, P),
        ("auto_harden_jit", True, P), ("load_extra_op_modules", None, P),
        ("discover_extra_entrypoints", False, P), ("strict_extra_imports", False, P),
        ("skip_eager_forward", False, P), ("front_end", "auto", K),
    ], True),
    # §4
    ("fastnnef.export", "export_tensors_to_nnef", [
        ("name_to_torch_tensors", REQ, P), ("output_dir", REQ, P),
    ], True),
    # weights_only (keyword-only, fastnnef's addition): executing a pickle is an explicit
    # opt-in, never a fallback (issue 9).
    ("fastnnef.export", "export_tensors_from_disk_to_nnef", [
        ("store_filepath", REQ, P), ("output_dir", REQ, P), ("filter_key", None, P),
        ("fn_check_found_tensors", None, P), ("map_location", "cpu", P), ("weights_only", True, K),
    ], True),
    ("fastnnef.export", "iter_torch_tensors_from_disk", [
        ("store_filepath", REQ, P), ("filter_key", None, P), ("map_location", "cpu", P), ("weights_only", True, K),
    ], True),
    # §10
    ("fastnnef.tensor.offload", "t2n_load_checkpoint_and_dispatch", [
        ("model", REQ, P), ("checkpoint", REQ, P), ("device_map", REQ, P), ("offload_dir", REQ, P),
        ("strict", False, P), ("offload_at_load_state_dict", False, P), ("weight_converters", None, P),
        ("hf_quantizer", None, P),
    ], True),
    ("fastnnef.tensor.offload", "ctx_maybe_load_from_disk_as_offloaded", [("offload_dir", None, P)], True),
    ("fastnnef.tensor.offload", "OffloadedTensor.from_original_tensor", [
        ("tensor", REQ, P), ("name", REQ, P), ("offload_dir", None, P), ("suffix_log_msg", "", P),
    ], True),
    ("fastnnef.tensor", "apply_name_to_tensor_in_module", [("model", REQ, P)], True),
    ("fastnnef.tensor", "set_opaque_tensor_in_params_as_ref", [("model", REQ, P)], True),
    ("fastnnef.compress", "offloaded_tensor_qtensor", [
        ("q_fn", REQ, P), ("tensor", REQ, P), ("suffix_name", REQ, P),
    ], True),
    ("fastnnef.utils", "init_empty_weights", [("include_buffers", None, P)], True),
    # §5
    ("fastnnef.torch_graph.harden", "harden_jit_for_export", [
        ("model", REQ, P), ("args", REQ, P), ("freeze", True, K), ("diagnostics", None, K),
    ], False),
    # §6.1
    ("fastnnef.inference_target.base", "InferenceTarget", [
        ("version", REQ, P), ("check_io", False, P),
    ], True),
    ("fastnnef.inference_target.base", "InferenceTarget.pre_trace", [
        ("self", REQ, P), ("model", REQ, P), ("input_names", REQ, P), ("output_names", REQ, P),
    ], True),
    ("fastnnef.inference_target.base", "InferenceTarget.post_trace", [
        ("self", REQ, P), ("nnef_graph", REQ, P), ("active_custom_extensions", REQ, P),
    ], True),
    ("fastnnef.inference_target.base", "InferenceTarget.specific_fragments", [
        ("self", REQ, P), ("model", REQ, P),
    ], True),
    ("fastnnef.inference_target.base", "InferenceTarget.post_export", [
        ("self", REQ, P), ("model_info", REQ, P), ("nnef_graph", REQ, P),
        ("exported_filepath", REQ, P), ("debug_bundle_path", None, P),
    ], True),
    ("fastnnef.inference_target.base", "UnfoldModelInfo", [
        ("model", REQ, P), ("original_inputs", REQ, P), ("original_outputs", REQ, P),
        ("flat_inputs", REQ, P), ("flat_outputs", REQ, P), ("input_names", REQ, P),
        ("output_names", REQ, P),
    ], True),
    # §6.2
    ("fastnnef.inference_target.tract", "TractNNEF", [
        ("version", REQ, P), ("feature_flags", None, P), ("check_io", True, P),
        ("dynamic_axes", None, P), ("specific_tract_binary_path", None, P),
        ("check_io_tolerance", APPROXIMATE, P), ("specific_properties", None, P),
        ("dump_identity_properties", True, P), ("force_attention_inner_in_f32", False, P),
        ("force_linear_accumulation_in_f32", False, P), ("force_norm_in_f32", False, P),
        ("reify_sdpa_operator", None, P), ("upcast_reified_sdpa_inputs_to_f32", True, P),
        ("upsample_with_debox", False, P), ("native_gated_delta_op", None, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.latest_version", [], True),
    ("fastnnef.inference_target.tract", "TractNNEF.latest", [], True),
    ("fastnnef.inference_target.tract", "TractNNEF.with_dynamic_axes", [
        ("self", REQ, P), ("dynamic_axes", REQ, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.with_check_io_tolerance", [
        ("self", REQ, P), ("check_io_tolerance", REQ, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.with_specific_properties", [
        ("self", REQ, P), ("specific_properties", REQ, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.pre_trace", [
        ("self", REQ, P), ("model", REQ, P), ("input_names", REQ, P), ("output_names", REQ, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.post_trace", [
        ("self", REQ, P), ("nnef_graph", REQ, P), ("active_custom_extensions", REQ, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.specific_fragments", [
        ("self", REQ, P), ("model", REQ, P),
    ], True),
    ("fastnnef.inference_target.tract", "TractNNEF.post_export", [
        ("self", REQ, P), ("model_info", REQ, P), ("nnef_graph", REQ, P),
        ("exported_filepath", REQ, P), ("debug_bundle_path", None, P),
    ], True),
    # §6.8
    ("fastnnef.inference_target.khronos", "KhronosNNEF", [
        ("version", REQ, P), ("check_io", True, P),
    ], True),
    ("fastnnef.inference_target.khronos", "KhronosNNEF.latest", [], True),
    ("fastnnef.inference_target.khronos", "KhronosNNEF.post_export", [
        ("self", REQ, P), ("model_info", REQ, P), ("nnef_graph", REQ, P),
        ("exported_filepath", REQ, P), ("debug_bundle_path", None, P),
    ], True),
    # §7
    ("fastnnef.utils", "SemanticVersion", [
        ("major", REQ, K), ("minor", REQ, K), ("patch", REQ, K),
    ], True),
    ("fastnnef.utils", "SemanticVersion.from_str", [
        ("version_str", REQ, P), ("sep", ".", P),
    ], True),
    ("fastnnef.utils", "SemanticVersion.to_str", [("self", REQ, P)], True),
    ("fastnnef.utils", "torch_version", [], True),
    ("fastnnef.torch_graph.ir_naming", "VariableNamingScheme.default", [], True),
    # §8.1
    ("fastnnef.op.custom_extractors", "ModuleInfoExtractor.convert_to_nnef", [
        ("self", REQ, P), ("g", REQ, P), ("node", REQ, P), ("name_to_tensor", REQ, P),
        ("null_ref", REQ, P), ("torch_graph", REQ, P), ("inference_target", REQ, P),
        ("kwargs", REQ, VK),
    ], True),
    ("fastnnef.op.custom_extractors", "ModuleInfoExtractor.get_by_kind", [("kind", REQ, P)], True),
    ("fastnnef.op.custom_extractors", "ModuleInfoExtractor.get_by_module", [("module", REQ, P)], True),
    # §9.1
    ("fastnnef.tensor.quant", "fp_to_tract_q4_0_with_min_max_calibration", [
        ("fp_tensor", REQ, P), ("percentile", 1.0, P),
    ], False),
    ("fastnnef.tensor.quant", "qscale_per_group_f16_min_max_calibration", [
        ("fp_tensor", REQ, P), ("n_bits", REQ, P), ("group_size", REQ, P), ("percentile", 1.0, P),
    ], False),
    ("fastnnef.tensor.quant", "QScalePerGroupF16", [
        ("group_size", REQ, P), ("scale", REQ, P), ("n_bits", REQ, P),
    ], False),
    ("fastnnef.tensor.quant", "QTensor", [
        ("fp_tensor", REQ, P), ("qscheme", REQ, P), ("dequant_to_dtype", torch.float32, P),
        ("u8_compressors", None, P),
    ], False),
    ("fastnnef.tensor.quant", "QTensorTractScaleOnly.write_in_file", [
        ("self", REQ, P), ("dirpath", REQ, P), ("label", REQ, P), ("inference_target", None, P),
    ], False),
    # §9.2
    ("fastnnef.compress", "quantize_weights_min_max_Q4_0", [
        ("model", REQ, P), ("kwargs", REQ, VK),
    ], False),
    # §12
    ("fastnnef.inference_target.tract", "build_io", [
        ("model", REQ, P), ("test_input", REQ, P), ("input_bundle_path", None, P),
        ("output_bundle_path", None, P), ("input_names", None, P), ("output_names", None, P),
        ("io_npz_path", None, K),  # torch_to_nnef <= 0.20's single bundle
    ], False),
    ("fastnnef.inference_target.tract", "TractCli.assert_io", [
        ("self", REQ, P), ("nnef_path", REQ, P), ("input_bundle_path", REQ, P),
        # required in 0.24; None is 0.20's assert_io(nnef_path, io_npz_path, raise_exception)
        ("output_bundle_path", None, P),
        ("raise_exception", True, P), ("check_tolerance", "exact", P),
    ], True),
]

MODULE_MAP = [  # §1: (module, names), restricted to what a drop-in must offer
    ("fastnnef", ["export_model_to_nnef", "export_tensors_to_nnef",
                  "export_tensors_from_disk_to_nnef", "harden_jit_for_export", "TractNNEF",
                  "KhronosNNEF", "VERSION", "__version__"]),
    ("fastnnef.export", ["export_model_to_nnef", "export_tensors_to_nnef",
                         "export_tensors_from_disk_to_nnef", "iter_torch_tensors_from_disk"]),
    ("fastnnef.inference_target", ["InferenceTarget", "KhronosNNEF", "TractNNEF"]),
    ("fastnnef.inference_target.base", ["InferenceTarget"]),
    ("fastnnef.inference_target.tract", ["TractNNEF", "TractCheckTolerance", "TractFeatureFlag"]),
    ("fastnnef.inference_target.khronos", ["KhronosNNEF"]),
    ("fastnnef.utils", ["SemanticVersion", "torch_version", "init_empty_weights"]),
    ("fastnnef.tensor", ["NamedTensor", "OffloadedTensor", "OpaqueTensorRef", "QTensor", "QScalePerGroupF16",
                         "QTensorTractScaleOnly", "apply_name_to_tensor_in_module",
                         "set_opaque_tensor_in_params_as_ref"]),
    ("fastnnef.tensor.offload", ["OffloadedTensor", "t2n_load_checkpoint_and_dispatch",
                                 "ctx_maybe_load_from_disk_as_offloaded"]),
    ("fastnnef.tensor.residency", ["TensorResidencyPool", "ResidencyStrategy"]),
    ("fastnnef.torch_graph.ir_naming", ["VariableNamingScheme", "DEFAULT_VARNAME_SCHEME"]),
    ("fastnnef.op.custom_extractors", ["ModuleInfoExtractor", "CUSTOMOP_KIND"]),
    ("fastnnef.exceptions", ["T2NError"]),
]

ENUMS = [  # §7
    ("fastnnef.inference_target.tract", "TractCheckTolerance", {
        "EXACT": "exact", "APPROXIMATE": "approximate", "CLOSE": "close", "VERY": "very",
        "SUPER": "super", "ULTRA": "ultra",
    }),
    ("fastnnef.inference_target.tract", "TractFeatureFlag", {"DEFAULT": "default", "COMPLEX": "complex"}),
]


def _resolve(module_name: str, dotted: str, required: bool):
    try:
        obj = importlib.import_module(module_name)
        for part in dotted.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        if required:
            raise
        pytest.skip(f"{module_name}.{dotted} is not in fastnnef yet ({err})")
    return obj


@pytest.mark.parametrize(
    "module_name, dotted, expected, required", SIGNATURES, ids=[f"{m}.{d}" for m, d, _, _ in SIGNATURES]
)
def test_signature(module_name, dotted, expected, required):
    obj = _resolve(module_name, dotted, required)
    params = inspect.signature(obj).parameters.values()
    got = [(p.name, p.default, p.kind) for p in params]
    assert [name for name, _, _ in got] == [name for name, _, _ in expected]
    for (name, default, kind), (_, want_default, want_kind) in zip(got, expected):
        assert kind == want_kind, f"{dotted}: parameter {name} is {kind}, expected {want_kind}"
        assert default == want_default, f"{dotted}: default of {name} is {default!r}, expected {want_default!r}"


@pytest.mark.parametrize("module_name, names", MODULE_MAP, ids=[m for m, _ in MODULE_MAP])
def test_module_map(module_name, names):
    module = importlib.import_module(module_name)
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == [], f"{module_name} lacks {missing}"


def test_top_level_reexports_are_the_same_objects():
    fastnnef = importlib.import_module("fastnnef")
    export = importlib.import_module("fastnnef.export")
    targets = importlib.import_module("fastnnef.inference_target")
    assert fastnnef.export_model_to_nnef is export.export_model_to_nnef
    assert fastnnef.TractNNEF is targets.TractNNEF
    assert fastnnef.KhronosNNEF is targets.KhronosNNEF
    assert fastnnef.VERSION == fastnnef.__version__


@pytest.mark.parametrize("module_name, name, members", ENUMS, ids=[n for _, n, _ in ENUMS])
def test_enum_members(module_name, name, members):
    enum_cls = _resolve(module_name, name, True)
    assert {m.name: m.value for m in enum_cls} == members
    assert all(isinstance(m, str) for m in enum_cls)
