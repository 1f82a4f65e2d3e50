"""Inference targets (fastnnef.inference_target): options, gates, metadata, dynamic axes."""

from __future__ import annotations

import importlib.metadata
import logging
import re
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import fastnnef
from fastnnef.exceptions import (
    T2NErrorDynamicShapeValue,
    T2NErrorInvalidArgument,
    T2NErrorIoQuantity,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.inference_target import InferenceTarget, KhronosNNEF, TractNNEF
from fastnnef.inference_target.base import UnfoldModelInfo
from fastnnef.inference_target.properties import properties_fragment
from fastnnef.inference_target.tract import VERSION_GATES, TractCheckTolerance, TractFeatureFlag
from fastnnef.nnef.writer import format_string
from fastnnef.utils import SemanticVersion
from tests.helpers import Fn

# --- construction ---------------------------------------------------------------------------


def test_tract_defaults_match_torch_to_nnef():
    target = TractNNEF("0.23.9")
    assert target.version == SemanticVersion(major=0, minor=23, patch=9)
    assert isinstance(target.version, SemanticVersion)
    assert target.check_io is True
    assert target.feature_flags == set()
    assert target.dynamic_axes == {}
    assert target.specific_tract_binary_path is None
    assert target.check_io_tolerance is TractCheckTolerance.APPROXIMATE
    assert target.specific_properties is None
    assert target.dump_identity_properties is True
    assert target.force_attention_inner_in_f32 is False
    assert target.force_linear_accumulation_in_f32 is False
    assert target.force_norm_in_f32 is False
    assert target.reify_sdpa_operator is None
    assert target.upcast_reified_sdpa_inputs_to_f32 is True
    assert target.upsample_with_debox is False
    assert target.native_gated_delta_op is None
    assert target.has_dynamic_axes is False
    assert repr(target) == "<TractNNEF 0.23.9>"


def test_tract_latest():
    assert TractNNEF.latest_version() == "0.23.9"  # the tract linked into fastnnef
    assert TractNNEF.OFFICIAL_SUPPORTED_VERSIONS == sorted(
        TractNNEF.OFFICIAL_SUPPORTED_VERSIONS, reverse=True
    )
    latest = TractNNEF.latest()
    assert type(latest) is TractNNEF
    assert latest.version == "0.23.9" and latest.check_io is True


def test_khronos_defaults():
    target = KhronosNNEF("1.0.5")
    assert target.check_io is True
    assert repr(target) == "<KhronosNNEF 1.0.5>"
    assert KhronosNNEF.latest_version() == "1.0.5"
    assert KhronosNNEF.latest().version == "1.0.5"
    assert target.specific_fragments(nn.Linear(1, 1)) == {}
    assert target.has_dynamic_axes is False


def test_base_target():
    target = InferenceTarget(SemanticVersion.from_str("1.2.3"))
    assert target.check_io is False
    assert repr(target) == "<InferenceTarget 1.2.3>"
    assert target.specific_fragments(nn.Linear(1, 1)) == {}
    extensions: list = []
    target.post_trace(None, extensions)
    assert extensions == []


def test_version_type_is_checked():
    with pytest.raises(T2NErrorInvalidArgument) as err:
        TractNNEF(0.23)  # type: ignore[arg-type]
    assert str(err.value) == (
        "version must be a SemanticVersion or a string like '0.23.9', got 0.23"
    )


def test_out_of_range_version_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        TractNNEF("0.22.0")
        assert caplog.messages == []
        TractNNEF("0.20.0")
        TractNNEF("0.24.0")
    assert caplog.messages == [
        "TractNNEF: version 0.20.0 is outside the officially supported range 0.21.13..0.23.9",
        "TractNNEF: version 0.24.0 is outside the officially supported range 0.21.13..0.23.9",
    ]


def test_construction_never_touches_network_or_processes(monkeypatch, tmp_path):
    def forbidden(*args, **kwargs):
        raise AssertionError("construction must not use the network or spawn processes")

    monkeypatch.setattr(socket.socket, "connect", forbidden)
    monkeypatch.setattr(socket, "create_connection", forbidden)
    monkeypatch.setattr(subprocess, "Popen", forbidden)
    binary = tmp_path / "tract"
    binary.write_bytes(b"")
    targets = [
        TractNNEF.latest(),
        TractNNEF("0.21.7", check_io=True),
        TractNNEF("0.23.9", feature_flags={TractFeatureFlag.DEFAULT}, specific_tract_binary_path=binary),
        KhronosNNEF.latest(),
    ]
    for target in targets:
        target.pre_trace(nn.Linear(1, 1), ["x"], ["y"])
        target.specific_fragments(nn.Linear(1, 1))


def test_specific_binary_path_must_exist(tmp_path):
    missing = tmp_path / "no-tract"
    with pytest.raises(T2NErrorNotFoundFile) as err:
        TractNNEF("0.23.9", specific_tract_binary_path=missing)
    assert str(err.value) == (
        f"specific_tract_binary_path {str(missing)!r} does not exist: give the path of a "
        "tract CLI, or None to check with the tract linked into fastnnef"
    )
    binary = tmp_path / "tract"
    binary.write_bytes(b"")
    assert TractNNEF("0.23.9", specific_tract_binary_path=str(binary)).specific_tract_binary_path == binary


def test_feature_flags_need_a_binary(tmp_path):
    with pytest.raises(T2NErrorNotImplemented) as err:
        TractNNEF("0.23.9", feature_flags={TractFeatureFlag.DEFAULT})
    assert str(err.value) == (
        "feature_flags ['default'] need a tract built with those features: pass "
        "specific_tract_binary_path=<path of that tract CLI>"
    )
    binary = tmp_path / "tract"
    binary.write_bytes(b"")
    target = TractNNEF("0.23.9", feature_flags={"default"}, specific_tract_binary_path=binary)
    assert target.feature_flags == {TractFeatureFlag.DEFAULT}


@pytest.mark.parametrize("version", ["0.23.9", "0.19.2"])
@pytest.mark.parametrize("with_binary", [False, True])
def test_complex_feature_flag_is_refused_with_the_reason(tmp_path, version, with_binary):
    """Stored and never consulted, the flag would be silent: complex tensors are exported
    as (re, im) pairs whatever the flag says, so it is refused."""
    binary = tmp_path / "tract"
    binary.write_bytes(b"")
    with pytest.raises(T2NErrorNotImplemented, match=r"complex tensors as real ones with a trailing \(re, im\) axis"):
        TractNNEF(version, feature_flags={TractFeatureFlag.COMPLEX},
                  specific_tract_binary_path=binary if with_binary else None)


def test_tolerance_accepts_strings_and_names_allowed_values():
    assert TractNNEF("0.23.9", check_io_tolerance="very").check_io_tolerance is TractCheckTolerance.VERY
    with pytest.raises(T2NErrorInvalidArgument) as err:
        TractNNEF("0.23.9", check_io_tolerance="loose")
    assert str(err.value) == (
        "check_io_tolerance: 'loose' is not one of "
        "['exact', 'approximate', 'close', 'very', 'super', 'ultra']"
    )


def test_with_helpers_return_deep_copies():
    props = {"a": "1"}
    target = TractNNEF("0.23.9", dynamic_axes={"x": {0: "B"}}, specific_properties=props)

    axes = target.with_dynamic_axes({"y": {1: "S"}})
    assert axes.dynamic_axes == {"y": {1: "S"}} and target.dynamic_axes == {"x": {0: "B"}}
    assert target.with_dynamic_axes(None).has_dynamic_axes is False

    tol = target.with_check_io_tolerance(TractCheckTolerance.SUPER)
    assert tol.check_io_tolerance is TractCheckTolerance.SUPER
    assert target.check_io_tolerance is TractCheckTolerance.APPROXIMATE
    assert tol.dynamic_axes == target.dynamic_axes and tol.dynamic_axes is not target.dynamic_axes
    assert tol.specific_properties is not props

    new_props = target.with_specific_properties({"b": "2"})
    assert new_props.specific_properties == {"b": "2"} and target.specific_properties is props
    for copy_ in (axes, tol, new_props):
        assert type(copy_) is TractNNEF and copy_ is not target and copy_.version == target.version


# --- version gates -------------------------------------------------------------------------

GATE_CASES = [  # (feature, last version without it, first version with it) per api.md §6.3
    ("tract_symbol", "0.18.1", "0.18.2"),
    ("multi_char_symbols", "0.18.9", "0.19.0"),
    ("tract_extra", "0.20.19", "0.20.20"),
    ("approx_levels", "0.21.6", "0.21.7"),
    ("approx_very_ultra", "0.21.7", "0.21.8"),
    ("q4_0_ggml_order", "0.21.10", "0.21.11"),
    ("native_log_softmax", "0.21.13", "0.21.14"),
    ("tract_transformers", "0.21.13", "0.22.0"),
    ("reified_sdpa", "0.22.0", "0.22.1"),
    ("scatter_reductions", "0.22.1", "0.23.0"),
    ("debox", "0.22.3", "0.23.0"),
    ("resize_grid_sample", "0.23.1", "0.23.2"),
    ("gated_delta_net", "0.23.4", "0.23.5"),
    ("moe_ffn", "0.23.8", "0.23.9"),
    ("native_cumsum", "0.23.8", "0.23.9"),
    ("cli_input_from_bundle", "0.17.9", "0.18.0"),  # TractCli's command line (tests/inference_target/test_tract_cli.py)
]


def test_gate_table_is_complete():
    assert sorted(VERSION_GATES) == sorted(name for name, _, _ in GATE_CASES)
    assert all(gate.reason for gate in VERSION_GATES.values())


@pytest.mark.parametrize("feature, before, first", GATE_CASES)
def test_version_gates(feature, before, first):
    assert TractNNEF(before, check_io=False).supports(feature) is False
    assert TractNNEF(first, check_io=False).supports(feature) is True


def test_unknown_gate():
    with pytest.raises(T2NErrorInvalidArgument, match=r"^unknown tract feature 'sdpa'; known: \["):
        TractNNEF.latest().supports("sdpa")


@pytest.mark.parametrize(
    "version, option, expected",
    [("0.22.0", None, False), ("0.22.1", None, True), ("0.23.9", False, False), ("0.21.13", True, True)],
)
def test_reify_sdpa_resolution(version, option, expected):
    assert TractNNEF(version, reify_sdpa_operator=option).reify_sdpa is expected


@pytest.mark.parametrize(
    "version, tolerance, expected",
    [
        ("0.21.6", "approximate", "close"),
        ("0.21.6", "ultra", "close"),
        ("0.21.7", "very", "super"),
        ("0.21.7", "ultra", "super"),
        ("0.21.7", "exact", "exact"),
        ("0.21.8", "ultra", "ultra"),
        ("0.23.9", "approximate", "approximate"),
    ],
)
def test_effective_check_io_tolerance(version, tolerance, expected):
    target = TractNNEF(version, check_io_tolerance=tolerance)
    assert target.effective_check_io_tolerance() == expected


def test_ignored_tolerance_warns(caplog):
    close = TractNNEF("0.21.6", check_io_tolerance="close")
    exact = TractNNEF("0.21.6", check_io_tolerance="exact")
    caplog.clear()  # drop the out-of-range version warnings
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        close.effective_check_io_tolerance()
        assert caplog.messages == []
        exact.effective_check_io_tolerance()
    assert caplog.messages == [
        "check_io_tolerance 'exact' is ignored for tract 0.21.6 (< 0.21.7): checking at 'close'"
    ]


def test_post_export_without_check_io_does_nothing(tmp_path):
    info = UnfoldModelInfo(nn.Identity(), (), (), [], [], [], [])
    for target in (TractNNEF("0.23.9", check_io=False), KhronosNNEF("1.0.5", check_io=False)):
        assert target.post_export(info, None, tmp_path / "missing.nnef.tar") is None


# --- UnfoldModelInfo -----------------------------------------------------------------------


class _Wrapper(nn.Module):
    """Stands for the exporter's IO-flattening wrapper."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.__wrapped_model__ = model


def test_unfold_model_info():
    model = nn.Linear(2, 3)
    x = torch.zeros(1, 2)
    info = UnfoldModelInfo(_Wrapper(model), (x,), [model(x)], (x,), (model(x),), ["x"], ["y"])
    assert info.original_model is model
    info.validate()
    plain = UnfoldModelInfo(model, (x,), [], (x,), (), ["x"], ["y"])
    assert plain.original_model is model
    with pytest.raises(T2NErrorIoQuantity) as err:
        plain.validate()
    assert str(err.value) == (
        "1 output names ['y'] for 0 flattened output tensors: give one name per flattened output"
    )


# --- metadata ------------------------------------------------------------------------------


def _installed_transformers():
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def test_properties_keys_and_values():
    target = TractNNEF("0.22.1", dump_identity_properties=False)
    transformers_imported = "transformers" in sys.modules
    props = target.properties(_Wrapper(nn.Conv1d(1, 1, 1)))
    assert ("transformers" in sys.modules) == transformers_imported  # read, never imported
    expected_keys = ["tract_target_version", "torch_to_nnef_version", "fastnnef_version", "torch_version"]
    if _installed_transformers() is not None:
        expected_keys.append("transformers_version")
    expected_keys += ["py_version", "exported_py_class"]
    assert list(props) == expected_keys
    assert props["tract_target_version"] == "0.22.1"
    assert props["torch_to_nnef_version"] == props["fastnnef_version"] == fastnnef.__version__
    assert props["torch_version"] == torch.__version__
    assert props["py_version"] == sys.version
    assert props["exported_py_class"] == "Conv1d"  # the user's class, not the wrapper's
    # reproducibility: nothing that changes from one run to the next
    assert "export_date" not in props and "export_cmd" not in props


def test_identity_properties_only_when_asked():
    keys = list(TractNNEF("0.23.9").properties(nn.Identity()))
    identity = [k for k in keys if k in ("os", "hostname", "user")]
    assert identity[:2] == ["os", "hostname"]
    # identity keys sit between the version keys and py_version
    first = keys.index("os")
    assert keys[first : first + len(identity)] == identity
    assert keys[first + len(identity)] == "py_version"
    without = TractNNEF("0.23.9", dump_identity_properties=False).properties(nn.Identity())
    assert not {"os", "hostname", "user"} & set(without)


def test_specific_properties_override_in_place_and_append():
    target = TractNNEF(
        "0.23.9",
        dump_identity_properties=False,
        specific_properties={"torch_version": "pinned", "export_date": "2026-01-01", "n": 3},
    )
    props = target.properties(nn.Identity())
    assert props["torch_version"] == "pinned"
    assert list(props).index("torch_version") == 3
    assert list(props)[-2:] == ["export_date", "n"]
    assert props["n"] == "3"


@pytest.mark.parametrize(
    "value, literal",
    [  # nnef-format.md §6.2: both quotes and backslashes escaped, no template openers
        ("plain", "'plain'"),
        ("it's", "'it\\'s'"),
        ('say "hi"', "'say \\\"hi\\\"'"),
        ("C:\\path\\x", "'C:\\\\path\\\\x'"),
        ("a\nb\r\nc\td", "'a b  c d'"),
        ("{{ x }} {% y %} {# z #}", "'{ { x }} { % y %} { # z #}'"),
        ("{{{", "'{ { {'"),
        ("{a} {", "'{a} {'"),
        (3.5, "'3.5'"),
    ],
)
def test_nnef_string_literal(value, literal):
    assert format_string(value) == literal
    assert format_string(value, quote='"') == '"' + literal[1:-1] + '"'  # graph.quant's names


def test_properties_fragment_text():
    text = properties_fragment([("k", "v"), ("quote", "it's")])
    assert text == (
        "fragment tract_core_properties(\n"
        ") -> (properties: (string, tensor<scalar>)[])\n"
        "{\n"
        "  properties = [\n"
        '    ("k", "v"),\n'
        "    (\"quote\", \"it\\'s\")\n"
        "  ];\n"
        "}\n"
    )


def test_specific_fragments_never_emit_template_openers():
    target = TractNNEF(
        "0.23.9", specific_properties={"cmd": "python -c 'print({{1}})'\n{%raw%}", "k{#": "\\"}
    )
    fragments = target.specific_fragments(nn.Identity())
    assert list(fragments) == ["tract_core_properties"]
    text = fragments["tract_core_properties"]
    assert not re.search(r"\{[{%#]", text)
    assert '("cmd", "python -c \\\'print({ {1}})\\\' { %raw%}")' in text
    assert '("k{ #", "\\\\")' in text


def test_properties_fragment_round_trips_through_tract(tmp_path):
    native = pytest.importorskip("fastnnef._native", reason="needs the built extension")
    values = {"quote": "it's \"x\"", "slash": "a\\b", "newline": "l1\nl2", "tpl": "{{x}}"}
    target = TractNNEF("0.23.9", dump_identity_properties=False, specific_properties=values)
    fragment = target.specific_fragments(nn.Identity())["tract_core_properties"]
    graph = (
        "version 1.0;\n\nextension tract_registry tract_core;\n\n"
        + fragment
        + "\ngraph network(x) -> (y)\n{\n  x = external<scalar>(shape = [1]);\n"
        "  y = add(x, x);\n}\n"
    )
    (tmp_path / "graph.nnef").write_text(graph)
    loaded = native.TractModel.load(str(tmp_path)).properties()
    assert loaded["quote"] == "it's \"x\""
    assert loaded["slash"] == "a\\b"
    assert loaded["newline"] == "l1 l2"
    assert loaded["tpl"] == "{ {x}}"
    assert loaded["tract_target_version"] == "0.23.9"


# --- dynamic axes ---------------------------------------------------------------------------

DYNAMIC_AXES_ERRORS = [  # (dynamic_axes, version, input_names, exact message)
    (
        {"x": [0, 1]},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'] is a list of axes ([0, 1]); fastnnef needs a symbol per axis: "
        "use a dict such as {0: 'S', 1: 'P'}",
    ),
    ({"x": "B"}, "0.23.9", ["x"], "dynamic_axes['x'] must be a dict {axis: symbol}, got 'B'"),
    (
        {"z": {0: "B"}},
        "0.23.9",
        ["x", "y"],
        "dynamic_axes names 'z', which is not a model input; inputs are ['x', 'y']: "
        "key dynamic_axes by input name",
    ),
    ({0: {0: "B"}}, "0.23.9", None, "dynamic_axes key 0 must be an input name (str)"),
    (
        {"x": {"0": "B"}},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'] has axis '0': axes must be ints (e.g. 0 for the first axis)",
    ),
    (
        {"x": {True: "B"}},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'] has axis True: axes must be ints (e.g. 0 for the first axis)",
    ),
    (
        {"x": {1: "2S"}},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'][1] = '2S' is not a valid NNEF identifier: use ASCII letters, "
        "digits and '_', not starting with a digit, e.g. 'S'",
    ),
    (
        {"x": {1: "seq-len"}},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'][1] = 'seq-len' is not a valid NNEF identifier: use ASCII letters, "
        "digits and '_', not starting with a digit, e.g. 'S'",
    ),
    (
        {"x": {1: 7}},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'][1] = 7 is not a valid NNEF identifier: use ASCII letters, "
        "digits and '_', not starting with a digit, e.g. 'S'",
    ),
    (
        {"x": {0: "graph"}},
        "0.23.9",
        ["x"],
        "dynamic_axes['x'][0] = 'graph' is an NNEF keyword: pick another symbol name, e.g. 'S'",
    ),
    (
        {"x": {0: "SEQ"}},
        "0.18.2",
        ["x"],
        "dynamic_axes['x'][0] = 'SEQ': tract 0.18.2 only accepts single-letter symbols "
        "(multi-character symbols need tract >= 0.19.0)",
    ),
]


@pytest.mark.parametrize("dynamic_axes, version, input_names, message", DYNAMIC_AXES_ERRORS)
def test_dynamic_axes_errors(dynamic_axes, version, input_names, message):
    target = TractNNEF(version, check_io=False, dynamic_axes=dynamic_axes)
    with pytest.raises(T2NErrorDynamicShapeValue) as err:
        target.pre_trace(nn.Identity(), input_names, ["out"])
    assert str(err.value) == message


def test_dynamic_axes_must_be_a_dict():
    for make in (lambda: TractNNEF("0.23.9", dynamic_axes=["x"]), lambda: TractNNEF.latest().with_dynamic_axes(["x"])):
        with pytest.raises(T2NErrorDynamicShapeValue) as err:
            make()
        assert str(err.value) == "dynamic_axes must be a dict {input_name: {axis: symbol}}, got ['x']"


def test_dynamic_axes_valid(caplog):
    target = TractNNEF(
        "0.23.9", dynamic_axes={"x": {0: "B", -1: "SEQ_len"}, "out": {0: "B"}, "y": {}}
    )
    assert target.has_dynamic_axes
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        target.pre_trace(nn.Identity(), ["x", "y"], ["out"])
    assert caplog.messages == [
        "dynamic_axes entry for output 'out' is ignored: output shapes follow from the "
        "inputs' symbols"
    ]
    TractNNEF("0.18.2", dynamic_axes={"x": {0: "B"}}).pre_trace(nn.Identity(), ["x"], None)
    # without input names (traced names are used) only the entries' form is checked
    target.pre_trace(nn.Identity(), None, None)


def test_dynamic_axes_of_input():
    target = TractNNEF("0.23.9", dynamic_axes={"x": {0: "B", -1: "S"}, "bad": {0: "A", -2: "B"}})
    assert target.dynamic_axes_of_input("x", 3) == {0: "B", 2: "S"}
    assert target.dynamic_axes_of_input("other", 2) == {}
    with pytest.raises(T2NErrorDynamicShapeValue) as err:
        target.dynamic_axes_of_input("x", 0)
    assert str(err.value) == (
        "dynamic_axes['x'] has axis 0, but input 'x' has rank 0: use an axis in [0, -1]"
    )
    with pytest.raises(T2NErrorDynamicShapeValue) as err:
        target.dynamic_axes_of_input("bad", 2)
    assert str(err.value) == "dynamic_axes['bad'] names axis 0 twice (as -2 too): give each axis once"


class _Graph:
    def __init__(self, input_names):
        self.input_names = input_names


def test_post_trace_declares_each_symbol_once(caplog):
    target = TractNNEF(
        "0.23.9",
        dynamic_axes={"ids": {1: "S"}, "k": {2: "P", 0: "B"}, "v": {2: "P"}, "out": {1: "T"}},
    )
    extensions = ["tract_symbol B"]
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        target.post_trace(_Graph(["ids", "k", "v"]), extensions)
    assert extensions == ["tract_symbol B", "tract_symbol S", "tract_symbol P"]
    assert caplog.messages == [
        "dynamic_axes entry 'out' is skipped: it is not an input of the traced graph"
    ]


def test_post_trace_legacy_and_empty():
    legacy = TractNNEF("0.18.1", dynamic_axes={"x": {0: "B"}, "y": {0: "C"}})
    extensions: list = []
    legacy.post_trace(_Graph(["x", "y"]), extensions)
    assert extensions == ["tract_pulse_streaming_symbol"]
    extensions = []
    TractNNEF("0.23.9").post_trace(_Graph(["x"]), extensions)
    assert extensions == []
    # a graph object without input names: every entry counts
    extensions = []
    TractNNEF("0.23.9", dynamic_axes={"x": {0: "B"}}).post_trace(object(), extensions)
    assert extensions == ["tract_symbol B"]


def test_hooks_do_not_change_the_target():
    axes = {"x": {0: "B"}, "out": {0: "B"}}
    target = TractNNEF("0.23.9", dynamic_axes=axes)
    target.pre_trace(nn.Identity(), ["x"], ["out"])
    target.post_trace(_Graph(["x"]), [])
    target.specific_fragments(nn.Identity())
    assert target.dynamic_axes == axes



# --- build_io ------------------------------------------------------------------------------


class _TwoOut(nn.Module):
    def forward(self, a, b):
        return a + b, (a * b).to(torch.bfloat16)


def test_build_io_writes_bundles_and_restores_mode(tmp_path):
    from fastnnef.inference_target.tract import build_io

    model = _TwoOut().train()
    a = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    b = torch.full((2, 3), 2.0, dtype=torch.float16)
    names = build_io(model, (a, b), tmp_path / "in.npz", tmp_path / "out.npz")
    assert names == (["input_0", "input_1"], ["output_0", "output_1"])
    assert model.training is True
    with np.load(tmp_path / "in.npz") as inputs, np.load(tmp_path / "out.npz") as outputs:
        assert sorted(inputs) == ["input_0", "input_1"]
        assert inputs["input_0"].dtype == np.float32
        assert inputs["input_0"].tolist() == [[0, 1, 2], [3, 4, 5]]
        assert outputs["output_0"].tolist() == [[2, 3, 4], [5, 6, 7]]
        assert outputs["output_1"].dtype == np.float32  # bf16 saved as f32
        assert outputs["output_1"].tolist() == [[0, 2, 4], [6, 8, 10]]


def test_build_io_names_and_errors(tmp_path):
    from fastnnef.inference_target.tract import build_io

    x = torch.ones(2)
    assert build_io(nn.ReLU(), x, input_names=["x"], output_names=["y"]) == (["x"], ["y"])
    with pytest.raises(T2NErrorIoQuantity) as err:
        build_io(nn.ReLU(), x, output_names=["y", "z"])
    assert str(err.value) == (
        "2 output names were given but the model has 1 flat outputs (after flattening "
        "tuples, lists and dicts): give exactly 1 names"
    )
    with pytest.raises(T2NErrorNotImplemented) as err:
        build_io(Fn(lambda t: (t, 3)), x)
    assert str(err.value) == (
        "build_io: the model returns non-tensor values (int); NNEF outputs are tensors: "
        "return tensors only"
    )
