"""fastnnef/compat/: the drop-in wing on top of the core.

- nothing outside compat imports it but the package's root, inside ``compat_wing`` (read
  from the sources); the modules at the reference's paths serve its names through their
  ``__getattr__`` (``fastnnef/reference_names.py``), exactly those of ``compat.SERVED``;
- ``import fastnnef``, importing every module of the core and an export checked in tract
  load none of it; the first drop-in name used loads it (in a fresh interpreter);
- the process-wide patches (``init_empty_weights``, ``ctx_maybe_load_from_disk_as_offloaded``)
  are safe when uses overlap, nested or in threads: installed once, restored exactly once
  when the last use leaves, whatever the order uses leave in.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import safetensors.torch
import torch
from safetensors.torch import save_file
from torch import nn

import fastnnef
from fastnnef.compat import SERVED
from fastnnef.compat.process_patch import ProcessWidePatch
from fastnnef.tensor.offload import OffloadedTensor, ctx_maybe_load_from_disk_as_offloaded
from fastnnef.utils import init_empty_weights
from tests.helpers import export_and_check

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "fastnnef"


def _modules() -> dict[str, ast.Module]:
    """Every module of the package outside compat/, by name, parsed."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        if not module.startswith("fastnnef.compat"):
            found[module] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def importers_of_compat(modules: dict[str, ast.Module]) -> dict[str, list[bool]]:
    """Modules that import compat, each with whether every such import sits in a function."""
    found: dict[str, list[bool]] = {}
    for module, tree in modules.items():
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        inside = {id(n) for f in functions for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            if any(n == "fastnnef.compat" or n.startswith("fastnnef.compat.") for n in names):
                found.setdefault(module, []).append(id(node) in inside)
    return found


def serving_modules(modules: dict[str, ast.Module]) -> set[str]:
    """Modules whose module-level ``__getattr__`` returns ``reference_name(__name__, name)``."""
    found = set()
    for module, tree in modules.items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and "reference_name(__name__" in \
                    ast.unparse(node):
                found.add(module)
    return found


def test_only_the_root_loads_the_wing_and_only_on_demand():
    assert importers_of_compat(_modules()) == {"fastnnef": [True]}
    # The check finds an import at module level, and one inside a function.
    breach = {"fastnnef.utils": ast.parse("from fastnnef.compat.empty_weights import init_empty_weights\n"),
              "fastnnef.op": ast.parse("def f():\n    import fastnnef.compat.op_helper\n")}
    assert importers_of_compat(breach) == {"fastnnef.utils": [False], "fastnnef.op": [True]}


def test_the_reference_paths_serve_the_wing():
    assert serving_modules(_modules()) == set(SERVED)
    import fastnnef.compat.empty_weights as empty_weights

    assert init_empty_weights is empty_weights.init_empty_weights
    with pytest.raises(AttributeError, match="has no attribute 'init_empty_weight'"):
        fastnnef.utils.init_empty_weight  # noqa: B018 - a misspelt drop-in name is a plain AttributeError


# Run in a fresh interpreter: this process has loaded compat already.
_FRESH = """
import importlib, json, sys, tempfile, warnings
warnings.simplefilter("ignore")
import torch
core = json.loads(sys.argv[1])
for name in core:
    importlib.import_module(name)
from fastnnef import TractNNEF, export_model_to_nnef
with tempfile.TemporaryDirectory() as tmp:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GRU(8, 3, batch_first=True))
    export_model_to_nnef(model, torch.randn(1, 5, 4), tmp + "/m.nnef.tgz", TractNNEF.latest())  # check_io on
before = sorted(m for m in sys.modules if m.startswith("fastnnef.compat"))
from fastnnef.torch_graph import TorchModuleIRGraph
after = sorted(m for m in sys.modules if m.startswith("fastnnef.compat"))
print(json.dumps([before, after, TorchModuleIRGraph.__module__]))
"""


def test_the_core_and_an_export_run_without_the_wing():
    core = [m for m in _modules() if not m.endswith("__main__")]
    out = subprocess.run([sys.executable, "-c", _FRESH, json.dumps(core)], capture_output=True, text=True,
                         check=True).stdout
    before, after, served_from = json.loads(out.splitlines()[-1])
    assert len(core) > 100 and before == []
    assert "fastnnef.compat" in after and served_from == "fastnnef.torch_graph.ir.data"


# --- ProcessWidePatch ---------------------------------------------------------------------------
class _Target(SimpleNamespace):
    """An object that counts the assignments to its ``fn`` after construction."""

    def __setattr__(self, name, value):
        if name == "fn":
            object.__setattr__(self, "sets", getattr(self, "sets", 0) + 1)
        super().__setattr__(name, value)


def _original() -> str:
    return "original"


def _replaced() -> str:
    return "replaced"


def _patch_of(target: _Target) -> ProcessWidePatch:
    return ProcessWidePatch(lambda: [(target, "fn", _replaced)])


def test_overlapping_holders_leaving_out_of_order():
    target = _Target(fn=_original)
    patch = _patch_of(target)
    a_inside, b_inside, a_may_leave, a_left, b_may_leave = (threading.Event() for _ in range(5))
    seen: dict[str, object] = {}

    def first():
        with patch.held("a"):
            a_inside.set()
            a_may_leave.wait(10)
        a_left.set()

    def second():
        a_inside.wait(10)
        with patch.held("b"):
            b_inside.set()
            b_may_leave.wait(10)
            seen["after a left"] = (target.fn(), patch.current())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    b_inside.wait(10)
    assert target.fn is _replaced and patch.current() == "b"
    a_may_leave.set()  # the first holder leaves first: the patch stays for the second
    a_left.wait(10)
    assert target.fn is _replaced and patch.installed
    b_may_leave.set()
    for thread in threads:
        thread.join(10)
    assert seen["after a left"] == ("replaced", "b")
    assert target.fn is _original and not patch.installed
    assert target.sets == 2  # installed once, restored once (construction is not counted)


def test_many_threads_install_once_and_restore_once():
    target = _Target(fn=_original)
    patch = _patch_of(target)
    start = threading.Barrier(8)
    inside_saw: list[str] = []

    def user(i: int) -> None:
        start.wait(10)
        for _ in range(50):
            with patch.held(i), patch.held(i):  # nested in one thread too
                inside_saw.append(target.fn())

    threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert inside_saw == ["replaced"] * 400
    assert target.fn is _original and not patch.installed
    assert target.sets >= 2 and target.sets % 2 == 0  # every install restored once


def test_restored_when_the_block_raises():
    target = _Target(fn=_original)
    patch = _patch_of(target)
    with pytest.raises(RuntimeError, match="inside"), patch.held():
        raise RuntimeError("inside")
    assert target.fn is _original
    with pytest.raises(RuntimeError, match="no holder inside"):
        patch.current()


# --- the two drop-in patches ---------------------------------------------------------------------
class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_offloaded_loads_when_uses_overlap_in_threads(tmp_path):
    """The first use leaves while the second is inside: the second's loads are still
    offloaded (to its own directory), and the loaders are restored when it leaves."""
    torch.manual_seed(3)
    state = _Tiny().state_dict()
    save_file(state, tmp_path / "m.safetensors")
    torch.save(state, tmp_path / "m.pt")
    originals = (torch.load, safetensors.torch.load_file)
    first_inside, second_inside, first_left = threading.Event(), threading.Event(), threading.Event()
    loaded: dict[str, dict[str, torch.Tensor]] = {}

    def first():
        with ctx_maybe_load_from_disk_as_offloaded(tmp_path / "a"):
            loaded["first"] = torch.load(tmp_path / "m.pt")
            first_inside.set()
            second_inside.wait(30)
        first_left.set()

    def second():
        first_inside.wait(30)
        with ctx_maybe_load_from_disk_as_offloaded(tmp_path / "b"):
            second_inside.set()
            first_left.wait(30)
            loaded["second"] = torch.load(tmp_path / "m.pt")
            loaded["second safetensors"] = safetensors.torch.load_file(tmp_path / "m.safetensors")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert (torch.load, safetensors.torch.load_file) == originals  # restored once, by the last
    assert any((tmp_path / "a").iterdir()) and any((tmp_path / "b").iterdir())  # each use's directory
    for name in ("first", "second", "second safetensors"):
        assert sorted(loaded[name]) == sorted(state), name
        assert all(isinstance(v, OffloadedTensor) for v in loaded[name].values()), name
        model = _Tiny()
        model.load_state_dict(loaded[name], assign=True)
        export_and_check(model, torch.randn(2, 8), tmp_path, name=f"{name.replace(' ', '_')}.nnef")


def test_init_empty_weights_nested_keeps_the_outer_scope():
    register_parameter, register_buffer = nn.Module.register_parameter, nn.Module.register_buffer
    with init_empty_weights():
        with init_empty_weights(include_buffers=True):
            inner = nn.BatchNorm1d(4)
        after_inner = nn.BatchNorm1d(4)
    outside = nn.BatchNorm1d(4)
    assert inner.weight.is_meta and inner.running_mean.is_meta
    assert after_inner.weight.is_meta and not after_inner.running_mean.is_meta
    assert not outside.weight.is_meta
    assert (nn.Module.register_parameter, nn.Module.register_buffer) == (register_parameter, register_buffer)


def test_init_empty_weights_in_threads():
    register_parameter = nn.Module.register_parameter
    start = threading.Barrier(4)
    built: list[nn.Module] = []

    def user() -> None:
        start.wait(10)
        for _ in range(20):
            with init_empty_weights():
                built.append(nn.Linear(4, 4))

    threads = [threading.Thread(target=user) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(built) == 80 and all(m.weight.is_meta for m in built)
    assert nn.Module.register_parameter is register_parameter
    assert not nn.Linear(4, 4).weight.is_meta


def test_init_empty_weights_first_thread_leaves_first():
    register_parameter = nn.Module.register_parameter
    first_inside, second_inside, first_left = threading.Event(), threading.Event(), threading.Event()
    built: dict[str, nn.Module] = {}

    def first():
        with init_empty_weights():
            first_inside.set()
            second_inside.wait(30)
        first_left.set()

    def second():
        first_inside.wait(30)
        with init_empty_weights():
            second_inside.set()
            first_left.wait(30)
            built["second"] = nn.Linear(4, 4)  # the first left: still inside the second's scope

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert built["second"].weight.is_meta
    assert nn.Module.register_parameter is register_parameter
