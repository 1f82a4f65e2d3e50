"""``t2n_extra::`` custom ops (fastnnef.op.extras): user handlers registered by decorator,
their modules imported through ``load_extra_op_modules``, the environment variable or
entry points (``strict_extra_imports`` for failures), each exported through tract."""

from __future__ import annotations

import logging
import sys
import tarfile
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from fastnnef.exceptions import (
    T2NErrorConsistency,
    T2NErrorInvalidArgument,
    T2NErrorMissingOpEmitter,
    T2NErrorNotImplemented,
)
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.op.extras import EXTRA_MODULES_ENV, extra_module_names, register
from tests.helpers import TRACER_ALLOWED, export_and_check

# The custom ops here have no fake kernel (torch.library.register_fake), which torch.export
# needs: "auto" traces them, the tracer's notice allowed.
pytestmark = TRACER_ALLOWED

# A plugin module as a user ships it: a fragment and the handler that invokes it.
PLUGIN = '''
from fastnnef.op.extras import register

FRAGMENT = """fragment {frag}(x: tensor<scalar>, alpha: scalar) -> (y: tensor<scalar>)
{{
  s = mul(x, alpha);
  y = add(s, 1.0);
}}"""


@register("{op}", args="t f")
def scale_shift(ctx, x, alpha):
    "t2n_extra::{op}(Tensor x, float alpha) -> Tensor"
    return ctx.emit(ctx.fragment("{frag}", FRAGMENT), [x], {{"alpha": alpha}})
'''


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _declare_op(op: str) -> None:
    """The custom op ``t2n_extra::<op>(x, alpha) = x * alpha + 1`` (model side)."""

    def impl(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x * alpha + 1.0

    torch.library.custom_op(f"t2n_extra::{op}", impl, mutates_args=())


class _UsesOp(torch.nn.Module):
    def __init__(self, op: str):
        super().__init__()
        self.op = op
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(torch.ops.t2n_extra, self.op)(self.lin(x), -0.75).relu()


def _plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str) -> str:
    """Write a plugin module registering the handler of ``op``; return its name."""
    module = _unique("h10_plugin")
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(PLUGIN.format(op=op, frag=f"frag_{op}"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return module


def _graph_text(path: Path) -> str:
    with tarfile.open(path) as tar:
        return tar.extractfile("graph.nnef").read().decode()  # type: ignore[union-attr]


def test_load_extra_op_modules_registers_the_handler(tmp_path, monkeypatch):
    op = _unique("h10_scale_shift")
    _declare_op(op)
    module = _plugin(tmp_path, monkeypatch, op)
    path = export_and_check(
        _UsesOp(op), torch.randn(3, 5), tmp_path, load_extra_op_modules=[module]
    )
    assert module in sys.modules
    text = _graph_text(path)
    assert f"fragment frag_{op}(x: tensor<scalar>, alpha: scalar)" in text
    assert f"= frag_{op}(" in text and "alpha = -0.75" in text


def test_custom_op_on_a_dynamic_axis(tmp_path, monkeypatch):
    op = _unique("h10_scale_shift")
    _declare_op(op)
    module = _plugin(tmp_path, monkeypatch, op)
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "S"}})
    export_and_check(
        _UsesOp(op), torch.randn(3, 5), tmp_path, target=target, input_names=["x"],
        load_extra_op_modules=[module], run_inputs=[torch.randn(7, 5)],
    )


def test_environment_variable_adds_modules_deduplicated_in_order(tmp_path, monkeypatch):
    op = _unique("h10_scale_shift")
    _declare_op(op)
    module = _plugin(tmp_path, monkeypatch, op)
    monkeypatch.setenv(EXTRA_MODULES_ENV, f" {module}, ,json,{module}")
    assert extra_module_names(["json"], False) == ["json", module]
    export_and_check(_UsesOp(op), torch.randn(2, 5), tmp_path)
    assert module in sys.modules


def test_entry_points_are_discovered_only_when_asked(tmp_path, monkeypatch):
    op = _unique("h10_scale_shift")
    _declare_op(op)
    module = _plugin(tmp_path, monkeypatch, op)
    dist = tmp_path / "site" / f"{module}_dist-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}-dist\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[torch_to_nnef.extras]\nmine = {module}:scale_shift\n")
    monkeypatch.delenv(EXTRA_MODULES_ENV, raising=False)
    assert module not in extra_module_names(None, False)
    assert module in extra_module_names(None, True)
    with pytest.raises(T2NErrorMissingOpEmitter, match=f"no fastnnef handler for t2n_extra::{op}"):
        export_model_to_nnef(_UsesOp(op), torch.randn(2, 5), tmp_path / "a.nnef", TractNNEF.latest())
    export_and_check(_UsesOp(op), torch.randn(2, 5), tmp_path, discover_extra_entrypoints=True)


def test_failed_import_warns_or_raises_with_strict_extra_imports(tmp_path, caplog):
    missing = _unique("h10_no_such_module")
    model = torch.nn.Linear(2, 2)
    with pytest.raises(T2NErrorInvalidArgument, match=f"failed to import extra op module '{missing}'"):
        export_model_to_nnef(
            model, torch.randn(1, 2), tmp_path / "a.nnef", TractNNEF.latest(),
            load_extra_op_modules=[missing], strict_extra_imports=True,
        )
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        export_and_check(model, torch.randn(1, 2), tmp_path, load_extra_op_modules=[missing])
    assert f"failed to import extra op module '{missing}'" in caplog.text


BROKEN_PLUGINS = {
    "raises": "raise RuntimeError('plugin misconfigured')\n",
    "reference_handler": "from fastnnef.op.extras import register\n\n"
                         "@register('{op}')\ndef handler(g, node, name_to_tensor, null_ref, torch_graph):\n"
                         "    pass\n",
    "exits": "import sys\nsys.exit(3)\n",
}


@pytest.mark.parametrize("kind", list(BROKEN_PLUGINS))
def test_a_module_failing_with_any_error_warns_or_raises_with_strict(kind, tmp_path, monkeypatch, caplog):
    """Not only ImportError: a plugin that raises while imported (its own error, a handler
    register refuses, sys.exit) is a warning, and a clear error with strict_extra_imports."""
    module = _unique("h10_broken")
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(BROKEN_PLUGINS[kind].format(op=_unique("h10_op")))
    monkeypatch.syspath_prepend(str(site))
    model = torch.nn.Linear(2, 2)
    with pytest.raises(T2NErrorInvalidArgument, match=f"failed to import extra op module '{module}'"):
        export_model_to_nnef(model, torch.randn(1, 2), tmp_path / "a.nnef", TractNNEF.latest(),
                             load_extra_op_modules=[module], strict_extra_imports=True)
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        export_and_check(model, torch.randn(1, 2), tmp_path, load_extra_op_modules=[module])
    assert f"failed to import extra op module '{module}'" in caplog.text


def test_a_string_is_not_a_module_list(tmp_path):
    with pytest.raises(T2NErrorInvalidArgument, match=r"must be a list of module names.*write \['json'\]"):
        export_model_to_nnef(
            torch.nn.Linear(2, 2), torch.randn(1, 2), tmp_path / "a.nnef", TractNNEF.latest(),
            load_extra_op_modules="json",  # type: ignore[arg-type]
        )


def test_multi_output_custom_op(tmp_path):
    op = _unique("h10_minmax")

    def impl(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)

    torch.library.custom_op(f"t2n_extra::{op}", impl, mutates_args=())

    @register(op, args="t")
    def minmax(ctx, x):
        "t2n_extra::minmax(Tensor x) -> (Tensor, Tensor)"
        axes = {"axes": [x.rank - 1]}
        return [ctx.emit("min_reduce", [x], axes, out=0), ctx.emit("max_reduce", [x], axes, out=1)]

    class Model(torch.nn.Module):
        def forward(self, x):
            lo, hi = getattr(torch.ops.t2n_extra, op)(x)
            return (x - lo) / (hi - lo)

    export_and_check(Model(), torch.randn(4, 7), tmp_path)


def test_reference_style_handler_is_refused_with_porting_steps():
    with pytest.raises(T2NErrorNotImplemented, match=r"torch_to_nnef's signature \(g, node, name_to_tensor.*Port it"):
        @register(_unique("h10_ref"))
        def ref(g, node, name_to_tensor, null_ref, torch_graph, inference_target, op_helper):
            return []

    with pytest.raises(T2NErrorNotImplemented, match="Port it"):
        @register(_unique("h10_ref"))
        def ref_kwargs(**kwargs):
            return []


def test_names_are_given_without_namespace_and_registered_once():
    with pytest.raises(T2NErrorInvalidArgument, match="without its namespace, e.g. 'my_op'"):
        register("t2n_extra::x")
    op = _unique("h10_once")

    def handler(ctx):
        "t2n_extra::once(Tensor x) -> Tensor"

    register(op)(handler)
    with pytest.raises(T2NErrorConsistency, match=f"t2n_extra::{op} registered twice"):
        register(op)(handler)


def test_module_docstring_example_runs(tmp_path):
    """The docstring example of fastnnef.op.extras, run as written."""
    import fastnnef.op.extras as extras

    code = extras.__doc__.split("::\n", 1)[1].split("\n\n", 3)
    snippet = textwrap.dedent("\n\n".join(code[:3]))
    op = _unique("h10_doc")
    namespace: dict = {}
    exec(snippet.replace("scale_shift", op), namespace)

    class Model(torch.nn.Module):
        def forward(self, x):
            return getattr(torch.ops.t2n_extra, op)(x, 3.0)

    export_and_check(Model(), torch.randn(2, 3), tmp_path)
