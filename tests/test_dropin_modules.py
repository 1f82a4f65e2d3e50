"""The drop-in-only modules at torch_to_nnef's paths (issue 24): ``dtypes``,
``model_wrapper``, ``console``, ``collect_env``, ``nnef_graph``, ``tensor.utils``.
Their names are pinned by tests/test_reference_surface.py; here, what they do: tables
that agree with what fastnnef writes and tract reads, wrapped models and built graphs run
in the linked tract."""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorIoQuantity, T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from fastnnef.nnef_io.tensor import DatBinHeader
from tests.helpers import TRACER_ALLOWED, export_and_check


# --- dtypes ---------------------------------------------------------------------------------------
def test_tract_names_are_the_dat_encodings_tract_reads(tmp_path: Path) -> None:
    from fastnnef.dtypes import TORCH_DTYPE_TO_NNEF_STR, TORCH_DTYPE_TO_TRACT_STR, TORCH_TO_NUMPY_DTYPE

    for dtype, name in TORCH_DTYPE_TO_TRACT_STR.items():
        if dtype.is_complex:
            continue  # exported as (re, im) pairs: no .dat of its own
        path = tmp_path / f"{name}.dat"
        _native.dat_write(str(path), np.zeros((2, 3), TORCH_TO_NUMPY_DTYPE[dtype]), name)
        assert DatBinHeader.from_dat(path).torch_dtype_or_custom == dtype, name
    assert TORCH_DTYPE_TO_TRACT_STR[torch.complex64] == "complexf64"
    assert TORCH_DTYPE_TO_NNEF_STR[torch.float16] == "scalar" and TORCH_DTYPE_TO_NNEF_STR[torch.uint8] == "integer"
    assert TORCH_DTYPE_TO_NNEF_STR[torch.bool] == "logical"


def test_dtype_helpers() -> None:
    from fastnnef import dtypes

    assert dtypes.str_to_torch_dtype("Float") is torch.float32 and dtypes.str_to_torch_dtype("i64") is torch.int64
    assert dtypes.torch_dtype_to_str(torch.float32) == "float" and dtypes.torch_dtype_to_str(torch.qint8) == "char"
    assert dtypes.numpy_dtype_to_tract_str(np.float16) == "f16" and dtypes.numpy_dtype_to_tract_str(np.uint16) == "u16"
    assert dtypes.is_quantized_dtype(torch.quint8) and not dtypes.is_quantized_dtype(torch.uint8)
    assert dtypes.dtype_is_whole_number(np.int32) and dtypes.dtype_is_whole_number(torch.uint64)
    assert not dtypes.dtype_is_whole_number(torch.bool) and not dtypes.dtype_is_whole_number("not a dtype")
    assert dtypes.dtype_is_floating_point(torch.bfloat16) and dtypes.dtype_is_floating_point(np.float64)
    assert dtypes.NUMPY_TO_TORCH_DTYPE[np.double] is torch.float64
    assert dtypes.SCALAR_TYPE_TO_PYTORCH_TYPE[6] is torch.float32  # c10::ScalarType::Float
    assert dtypes.TORCH_TO_NUMPY_DTYPE[torch.qint32] is np.int32


# --- model_wrapper --------------------------------------------------------------------------------
class _Nested(nn.Module):
    """Structured IO: a dict and a tuple in, a constant among them; a dict among the outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, extra: dict, scale: float) -> tuple:
        a, b = extra["pair"]
        return self.lin(x) * scale + a, {"z": (b - extra["bias"],)}


def test_unfold_model_io_wraps_and_exports(tmp_path: Path) -> None:
    from fastnnef.model_wrapper import WrapStructIO, unfold_model_io

    torch.manual_seed(0)
    model = _Nested().eval()
    args = (torch.randn(2, 4), {"pair": (torch.randn(2, 4), torch.randn(3)), "bias": torch.randn(3)}, 0.5)
    outs = model(*args)
    info = unfold_model_io(model, args, outs, ["x", "extra"], None)
    assert isinstance(info.model, WrapStructIO) and info.original_model is model
    assert info.input_names == ["x", "extra_pair_0", "extra_pair_1", "extra_bias"]
    assert info.output_names == ["output_0", "output_1_z_0"]
    info.validate()
    flat_out = info.model(*info.flat_inputs)
    for got, want in zip(flat_out, info.flat_outputs):
        torch.testing.assert_close(got, want)
    export_and_check(info.model, tuple(info.flat_inputs), tmp_path, input_names=info.input_names,
                     output_names=info.output_names)
    info.write_input_npz(tmp_path / "in.npz", tract_compat=True)
    assert sorted(np.load(tmp_path / "in.npz")) == sorted(info.input_names)
    info.write_output_npz(tmp_path / "out.npz", tract_compat=True)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["output_0"], outs[0].detach().numpy())
    with pytest.raises(T2NErrorNotImplemented, match="already a WrapStructIO"):
        unfold_model_io(info.model, args, outs, None, None)


def test_structured_inputs_round_trip() -> None:
    from fastnnef.model_wrapper import (
        build_structured_inputs,
        flatten_structured_outputs,
        insert_fixed_nontraceable_args,
    )
    from fastnnef.utils import flatten_dict_tuple_or_list

    t = [torch.full((1,), float(i)) for i in range(4)]
    args = (t[0], {"a": [t[1], 7], "b": (t[2], (t[3],))})
    infos = flatten_dict_tuple_or_list(args)
    rebuilt = build_structured_inputs(t, infos)
    assert isinstance(rebuilt, tuple) and isinstance(rebuilt[1]["b"], tuple) and isinstance(rebuilt[1]["b"][1], tuple)
    assert rebuilt[1]["a"][1] == 7 and all(x is y for x, y in zip(
        [rebuilt[0], rebuilt[1]["a"][0], rebuilt[1]["b"][0], rebuilt[1]["b"][1][0]], t))
    assert insert_fixed_nontraceable_args(t, infos)[2] == 7
    assert flatten_structured_outputs({"k": (t[0], 1, t[1])}, flatten_dict_tuple_or_list(({"k": 0},))) == t[:2]


def test_names_of_flattened_elements() -> None:
    from fastnnef.model_wrapper import build_new_names_and_elements

    x = torch.zeros(1)
    names, elms, _, _ = build_new_names_and_elements(["input", "a"], [[x, x, x], {"arm": x, "head": x}], "in_{}")
    assert names == ["input_0", "input_1", "input_2", "a_arm", "a_head"] and len(elms) == 5
    names, _, _, _ = build_new_names_and_elements(["plop"], [[x, x], x, x], "input_{}")
    assert names == ["plop_0", "plop_1", "input_1", "input_2"]
    with pytest.raises(T2NErrorNotImplemented, match=r"duplicate names \['x_0'\]"):
        build_new_names_and_elements(["x", "x_0"], [[x], x], "input_{}")


# --- nnef_graph -----------------------------------------------------------------------------------
@TRACER_ALLOWED  # nnef_graph's TorchToNGraphExtractor builds on the tracer
def test_extractor_builds_a_graph_tract_runs(tmp_path: Path) -> None:
    from fastnnef.nnef.serialize import write_artefact
    from fastnnef.nnef_graph import TorchToNGraphExtractor

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 3)).eval()
    x = torch.randn(4, 5)
    extractor = TorchToNGraphExtractor(model, (x,), TractNNEF.latest(), forced_inputs_names=["x"],
                                       forced_outputs_names=["y"])
    assert extractor.activated_custom_fragment_keys == set()
    graph = extractor.parse()
    assert extractor.parse() is graph is extractor.g
    path = write_artefact(tmp_path / "m.nnef.tgz", "tgz", 0, graph)
    (got,) = TractArtefact.load(path).run({"x": x.numpy()})
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)

    with pytest.raises(T2NErrorIoQuantity, match="2 input names were given but the model has 1 flat inputs"):
        TorchToNGraphExtractor(model, (x,), TractNNEF.latest(), forced_inputs_names=["a", "b"])


# --- console, collect_env, tensor.utils -----------------------------------------------------------
def test_console_prints_without_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from fastnnef.console import Console, striptags

    assert striptags("[bold red]error[/bold red]: x") == "error: x"
    Console({"warn": "yellow"}).print("[warn]careful[/warn]")
    assert capsys.readouterr().out.strip() == "careful"
    Console._degraded_print("[blue]a[/blue]", "b")
    assert capsys.readouterr().out == "a b\n"


def test_collect_env(tmp_path: Path) -> None:
    from fastnnef import collect_env

    assert collect_env.run_lambda(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out", "err")
    assert collect_env.run_lambda(["no-such-program-fastnnef"])[0] == 127
    assert collect_env.run_and_parse_first_match(["echo", "version 1.2"], r"version (\S+)") == "1.2"
    assert collect_env.get_platform() == "linux" and collect_env.get_hostname() == platform.node()
    assert platform.machine() in collect_env.get_uname() and isinstance(collect_env.get_user(), str)
    collect_env.dump_environment_versions(tmp_path, Path("bin/tract"))
    text = (tmp_path / "versions").read_text()
    assert text.startswith(f"tract: {Path('bin/tract').absolute()}\n")
    assert f"torch=={metadata.version('torch')}" in text and f"numpy=={np.__version__}" in text
    assert f"python: {collect_env.python_version()}" in text


def test_named_parameters_of_tied_weights() -> None:
    from fastnnef.tensor.utils import get_named_buffers, get_named_parameters

    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False), nn.BatchNorm1d(5))
    model[1].weight = model[0].weight
    assert [n for n, _ in get_named_parameters(model)] == ["0.weight", "2.weight", "2.bias"]
    assert [n for n, _ in get_named_parameters(model, remove_duplicate=False)] == [
        "0.weight", "1.weight", "2.weight", "2.bias"]
    assert [n for n, _ in get_named_buffers(model)] == ["2.running_mean", "2.running_var", "2.num_batches_tracked"]
