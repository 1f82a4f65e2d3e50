"""Drop-in names: every module path and name of torch_to_nnef 0.24.12's module map
(torch_to_nnef-api.md §1, with §5's JIT passes, §10's offload modules and §11's exceptions),
plus the names issue 10 lists that user code and test harnesses import, exist in fastnnef
under the same path (``torch_to_nnef.x.y`` -> ``fastnnef.x.y``).

Every name must exist: a missing one fails its case (issue 10: "A test imports every module
path and name listed in §1, and fails on one that is missing"). Signatures are checked in
tests/test_api_signatures.py; behaviours in the tests of each module."""

from __future__ import annotations

import importlib
import logging
import os

import pytest
import torch

_PASSES = """replace_size_calls_with_constants fold_constant_scalar_arithmetic fold_constant_ifs
fold_tuple_index_through_tuple_construct fold_tuple_unpack_through_tuple_construct
strip_prim_data strip_assertion_ifs fold_data_dependent_ifs"""

_EXCEPTIONS = """T2NError T2NErrorImport T2NErrorInvalidArgument T2NErrorNotFoundFile T2NErrorMisuse
T2NErrorTestFailed T2NErrorIoQuantity T2NErrorDataNodeValue T2NErrorInconsistentTensor
T2NErrorConsistency T2NErrorKhronosNNEFModuleLoad T2NErrorKhronosInterpreterDiffValue
T2NErrorDynamicShapeValue T2NErrorBitPacking T2NErrorRuntime T2NErrorNotImplemented
T2NErrorImpossibleQuantization T2NErrorFragmentFile T2NErrorMissingOpEmitter
T2NErrorStrictNNEFSpec T2NErrorIR T2NErrorTorchGraphExtraction T2NErrorTorchJitTraceFailed
T2NErrorTorchUnableToTraceData T2NErrorTorchOpTranslatedDifferently
T2NErrorTorchNotFoundDataNode T2NErrorTorchNotFoundOp T2NErrorTorchCheck
T2NErrorNotFoundModuleExtractor T2NErrorTract T2NErrorTractDownload T2NErrorOnnxExport
T2NErrorTractOnnxToNNEF T2NErrorIOPytorchTractNotISO T2NErrorIRDataConsistency"""

# module (without the package prefix) -> names
MODULE_MAP: dict[str, str] = {
    "": """export_model_to_nnef export_tensors_to_nnef export_tensors_from_disk_to_nnef
        harden_jit_for_export TractNNEF KhronosNNEF VERSION __version__ __author__ __email__""",
    "export": """export_model_to_nnef export_tensors_to_nnef export_tensors_from_disk_to_nnef
        iter_torch_tensors_from_disk""",
    "inference_target": "InferenceTarget KhronosNNEF TractNNEF",
    "inference_target.base": "InferenceTarget",
    "inference_target.tract": """TractNNEF TractCheckTolerance TractFeatureFlag TractCli
        TractBinaryDownloader build_io assert_io assert_io_and_debug_bundle apply_dynamic_shape_in_nnef""",
    "inference_target.khronos": "KhronosNNEF",
    "utils": """SemanticVersion torch_version init_empty_weights cd NamedItem ReactiveNamedItemDict
        flatten_dict_tuple_or_list""",
    "torch_graph": f"""Data FixedTensorList PythonConstant TensorVariable TorchModuleTracer TorchOp
        TorchModuleIRGraph module_tracer_into_ir_graph MAP_TO_NOP harden_jit_for_export {_PASSES}
        inline_unresolvable_submodules functionalize_view_inplace_copy""",
    "torch_graph.harden": "harden_jit_for_export",
    "torch_graph.jit_passes": _PASSES,
    "torch_graph.jit_inline": "inline_unresolvable_submodules",
    "torch_graph.jit_mutation": "functionalize_view_inplace_copy",
    "torch_graph.ir_naming": "VariableNamingScheme DEFAULT_VARNAME_SCHEME",
    "op.custom_extractors": """ModuleInfoExtractor CUSTOMOP_KIND LSTMExtractor GRUExtractor
        RNNExtractor LSTMCellExtractor MoEFFNExtractor Gemma4RoutedExpertsExtractor
        CausalConvUpdateExtractor GatedDeltaNetRecurrentExtractor""",
    "op.extras": "register",
    "op.helper": "IMPLICIT_CAST_SUPPORTED_OPS DTYPES_EXPECTED_IMPLICIT_CAST_ORDER",
    "tensor": """NamedTensor OffloadedTensor OpaqueTensorRef QTensor QScalePerGroupF16
        QTensorTractScaleOnly apply_name_to_tensor_in_module set_opaque_tensor_in_params_as_ref""",
    "tensor.quant": """QTensor QScheme U8Compressor QScalePerGroupF16
        qscale_per_group_f16_min_max_calibration QTensorTract QTensorTractScaleOnly
        fp_to_tract_q4_0_with_min_max_calibration""",
    "tensor.quant.base": "QTENSOR_UNSUPPORTED QTENSOR_UNSUPPORTED_MSG QTensor QScheme U8Compressor",
    "tensor.quant.qtract": "QTensorTract QTensorTractScaleOnly fp_to_tract_q4_0_with_min_max_calibration",
    "tensor.offload": "OffloadedTensor t2n_load_checkpoint_and_dispatch ctx_maybe_load_from_disk_as_offloaded",
    "tensor.residency": "TensorResidencyPool ResidencyStrategy",
    "compress": """DEFAULT_COMPRESSION DEFAULT_COMPRESSION_REGISTRY quantize_weights_min_max_Q4_0
        offloaded_tensor_qtensor dynamic_load_registry""",
    "exceptions": _EXCEPTIONS + " T2NErrorMissUse",
    # the modules and names the reference's own tests import (issue 16)
    "nnef_io.tensor": "DatBinHeader",
    "tensor.updater": "ModTensorUpdater TensorHoldKind",
    "torch_graph.ir_data": "Data FixedTensorList PythonConstant TensorVariable",
    "log": "set_lib_log_level init_log log DEBUG INFO WARNING ERROR CRITICAL",
}

CASES = [
    pytest.param(module, name, id=f"{module or 'fastnnef'}.{name}")
    for module, names in MODULE_MAP.items()
    for name in names.split()
]


@pytest.mark.parametrize("module, name", CASES)
def test_name_exists(module, name):
    path = "fastnnef" + (f".{module}" if module else "")
    assert hasattr(importlib.import_module(path), name), f"{path} lacks {name}"


def test_torch_version_compares_with_strings():
    from fastnnef.utils import torch_version

    version = torch_version()
    assert version >= "2.1.0" and version < "3.0.0"
    assert version == ".".join(torch.__version__.split("+")[0].split(".")[:3])


def test_cd_restores_the_working_directory(tmp_path):
    from fastnnef.utils import cd

    before = os.getcwd()
    with pytest.raises(RuntimeError), cd(tmp_path):
        assert os.getcwd() == str(tmp_path)
        raise RuntimeError("inside")
    assert os.getcwd() == before


def test_log_names():
    from fastnnef import log

    logger = logging.getLogger("fastnnef")
    level = logger.level
    try:
        log.set_lib_log_level(logging.ERROR)
        assert logger.level == logging.ERROR
    finally:
        logger.setLevel(level)
    assert log.log is logging and log.init_log() is logging


def test_qtensor_support_flag():
    from fastnnef.tensor.quant.base import QTENSOR_UNSUPPORTED, QTENSOR_UNSUPPORTED_MSG

    assert QTENSOR_UNSUPPORTED is False  # torch >= 1.12
    assert QTENSOR_UNSUPPORTED_MSG == "QTensor is supported only starting pytorch v1.12"


# --- behaviours of the names the reference's own tests use (issue 16) -------------------------
def test_flatten_dict_tuple_or_list():
    from fastnnef.utils import flatten_dict_tuple_or_list

    nested = [{"a": [1, 2], "b": [[3], (4,)]}, {"c": "text"}, 5, []]
    assert flatten_dict_tuple_or_list(nested) == (
        ((list, dict, list), (0, "a", 0), 1),
        ((list, dict, list), (0, "a", 1), 2),
        ((list, dict, list, list), (0, "b", 0, 0), 3),
        ((list, dict, list, tuple), (0, "b", 1, 0), 4),
        ((list, dict), (1, "c"), "text"),
        ((list,), (2,), 5),
    )
    assert flatten_dict_tuple_or_list(torch.ones(2)) == ()


def test_reactive_named_item_dict_follows_renames():
    from dataclasses import dataclass

    from fastnnef.exceptions import T2NErrorDataNodeValue
    from fastnnef.utils import NamedItem, ReactiveNamedItemDict

    @dataclass
    class Item(NamedItem):
        name: str

    a, b, c = Item("a"), Item("b"), Item("c")
    first, second = ReactiveNamedItemDict([a, b, c]), ReactiveNamedItemDict.from_list([a, b])
    assert len(first) == 3 and first[-1] is c and first[0:2] == [a, b]
    b.name = "z"
    for items in (first, second):
        assert items.get_by_name("b") is None and items.get_by_name("z") is b
    assert [i.name for i in first] == ["a", "c", "z"]  # a renamed item moves to the end
    with pytest.raises(T2NErrorDataNodeValue, match="'a' is already in this collection"):
        first.append(Item("a"))
    first.protect_item_names(["a"])
    with pytest.raises(T2NErrorDataNodeValue, match="'a' is protected"):
        a.name = "y"
    assert [i.name for i in first.iter_renamable()] == ["c", "z"]
    first.remove(c)
    c.name = "w"  # no longer followed by first
    assert not first.contains(c) and first.get_by_name("w") is None and len(first) == 2


def test_dat_bin_header_reads_what_fastnnef_writes(tmp_path):
    import numpy as np

    from fastnnef import _native
    from fastnnef.nnef_io.tensor import DatBinHeader

    cases = [("f16", np.zeros((2, 3), np.float16), torch.float16),
             ("i64", np.arange(5, dtype=np.int64), torch.int64),
             ("q4_0", np.ones((2, 64), np.float32), DatBinHeader.TractCustomTypes.Q40)]
    for encoding, array, dtype in cases:
        path = tmp_path / f"{encoding}.dat"
        _native.dat_write(str(path), array, encoding)
        header = DatBinHeader.from_dat(path)
        assert header.dims == list(array.shape) and header.torch_dtype_or_custom == dtype
        assert header.to_bytes() == path.read_bytes()[:128]
    built = DatBinHeader.build_tract_qtensor(DatBinHeader.TractCustomTypes.Q40, (2, 64))
    assert built.to_bytes() == (tmp_path / "q4_0.dat").read_bytes()[:128]


def test_mod_tensor_updater_keeps_ties():
    from torch import nn

    from fastnnef.exceptions import T2NErrorInconsistentTensor, T2NErrorMisuse
    from fastnnef.tensor.updater import ModTensorUpdater

    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    original = model[0].weight
    updater = ModTensorUpdater(model)
    assert sorted(updater.id_to_names[id(original)]) == ["0.weight", "1.weight"]
    new = torch.arange(15.0).reshape(5, 3)
    updater.update_by_name("0.weight", new)
    assert model[0].weight is model[1].weight and isinstance(model[0].weight, nn.Parameter)
    assert torch.equal(model[1].weight, new) and not torch.equal(original, new)  # the old tensor is untouched
    updater.update_by_name("1.weight", torch.zeros(5, 3), tie_replacements=False)
    assert model[0].weight is not model[1].weight and torch.equal(model[0].weight, new)
    with pytest.raises(T2NErrorInconsistentTensor, match="not the same dtype"):
        updater.update_by_ref(model[0].weight, new.half())
    with pytest.raises(T2NErrorMisuse, match="must be an nn.Parameter"):
        ModTensorUpdater(model, add_parameter_if_unset=False).update_by_name("0.weight", new)


def test_build_io_single_bundle_of_older_references(tmp_path):
    """torch_to_nnef <= 0.20's ``build_io(model, x, io_npz_path=...)``: one .npz, inputs and outputs."""
    import numpy as np
    from torch import nn

    from fastnnef.inference_target.tract import build_io

    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    names = build_io(model, x, io_npz_path=tmp_path / "io.npz", input_names=["x"])
    assert names == (["x"], ["output_0"])
    bundle = np.load(tmp_path / "io.npz")
    np.testing.assert_array_equal(bundle["x"], x.numpy())
    np.testing.assert_allclose(bundle["output_0"], model(x).detach().numpy())
