"""ExportOptions: the public parameters checked once into one frozen object, which the
export's stages read (export_options.py); an export run from it is the public functions'."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.export import export_model_to_nnef, export_model_with_result, export_with_options
from fastnnef.export_options import ExportOptions
from fastnnef.inference_target import TractNNEF


def _public_defaults(**changes: Any) -> dict[str, Any]:
    """export_model_to_nnef's parameters but the model, its args and the target, at their
    public defaults, with ``changes``."""
    params = inspect.signature(export_model_to_nnef).parameters
    kwargs = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
    return {**kwargs, "file_path_export": "m.nnef", **changes}


def test_built_from_every_public_parameter_but_model_args_and_target():
    params = set(inspect.signature(export_model_to_nnef).parameters) - {"model", "args", "inference_target"}
    assert set(inspect.signature(ExportOptions.from_arguments).parameters) == params
    assert set(inspect.signature(export_model_with_result).parameters) == set(
        inspect.signature(export_model_to_nnef).parameters)


def test_checked_values_and_frozen():
    options = ExportOptions.from_arguments(**_public_defaults(
        file_path_export="out/m.nnef", compression_level=3, input_names=["a", "b"], output_names=["y"],
        nnef_variable_naming_scheme="numeric", custom_extensions=["tract_assert S >= 1"],
    ))
    assert (options.path, options.artefact_format) == (Path("out/m.nnef.tgz"), "tgz")
    assert options.input_names == ("a", "b") and options.output_names == ("y",)
    assert options.naming == "numeric" and options.custom_extensions == ("tract_assert S >= 1",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.front_end = "export"  # type: ignore[misc]


@pytest.mark.parametrize("changes, message", [
    ({"front_end": "dynamo"}, "front_end must be one of"),
    ({"custom_extensions": "tract_assert S >= 1"}, "custom_extensions must be a list"),
    ({"skip_eager_forward": 1}, "skip_eager_forward must be a bool"),
    ({"input_names": ["x", "x"]}, "Each str in input_names must be different"),
    ({"input_names": ["x"], "output_names": ["x"]}, "allow_same_io_names=True"),
    ({"file_path_export": "m.onnx"}, "has no '.nnef' suffix"),
    ({"compression_level": 10}, "compression_level must be None"),
])
def test_a_wrong_option_is_named_before_anything_runs(changes, message):
    with pytest.raises(T2NErrorInvalidArgument, match=message):
        ExportOptions.from_arguments(**_public_defaults(**changes))


def test_an_export_from_options_runs_in_tract(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3)).eval()
    inputs = torch.randn(2, 4)
    options = ExportOptions.from_arguments(**_public_defaults(
        file_path_export=tmp_path / "m.nnef", compression_level=None, input_names=["x"], output_names=["y"],
        log_level=logging.WARNING,
    ))
    result = export_with_options(model, (inputs,), TractNNEF(TractNNEF.latest_version(), check_io=True), options)
    assert result.path == tmp_path / "m.nnef" and result.path.is_dir()
    assert result.checks == ("io_quantity", "check_io") and result.input_names == ["x"]
    (got,) = TractArtefact.load(result.path).run([inputs])
    with torch.no_grad():
        np.testing.assert_allclose(got, model(inputs).numpy(), atol=1e-5, rtol=1e-5)
