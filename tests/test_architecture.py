"""docs/architecture.md's claims that a test can check and no other test does, one test
each. The others: the stages, circles, façade edges and the dependency table are
tests/test_import_layers.py's; the drop-in wing (nothing but the package's root loads it,
and only on demand) tests/compat/test_compat_package.py's; no module taking another's private
name tests/op/test_handler_api.py's; the user's model never modified
tests/test_never_mutate.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from torch import nn

from fastnnef.op.custom_extractors import base as extractors
from fastnnef.op.families import load_handlers
from tests.helpers import TRACER_ALLOWED, export_and_check
from tests.test_import_layers import ARCHITECTURE, PACKAGE, STAGES, _imports, _unit_file


def _section(title: str) -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_every_unit_has_its_row_in_the_folders_table():
    """"Folders": one row per top-level module and package (the extension is ``rust/``'s row)."""
    folders = _section("Folders")
    missing = [
        name for _, units in STAGES for name in units
        if name != "_native" and _unit_file(name) not in folders
        and f"`python/fastnnef/{_unit_file(name).strip('`')}`" not in folders
    ]
    assert not missing, f"docs/architecture.md's Folders table lacks {missing}"


def test_exporters_reach_the_core_through_its_front():
    """"Add a model-family exporter": an exporter reaches the core through export.py, the
    naming schemes and module extractors, never the trace, the IR or the converter."""
    graph = _imports(deferred=True)[0]
    exporters = ("fastnnef.llm", "fastnnef.multimodal", "fastnnef.peft")
    allowed = ("fastnnef.torch_graph.ir_naming", "fastnnef.op.custom_extractors")
    reached = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items() if module.startswith(exporters)
        for target in targets
        if target.startswith(("fastnnef.torch_graph", "fastnnef.op")) and not target.startswith(allowed)
    )
    assert reached == []


def test_check_knows_only_the_linked_tract():
    """"check.py": the linked tract only; a tract binary's check is TractCli's."""
    tree = ast.parse((PACKAGE / "check.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "subprocess" not in imported
    assert not [m for m in imported if m.startswith("fastnnef.inference_target")]
    assert "fastnnef.check" in _imports(deferred=True)[0]["fastnnef.inference_target.tract_cli"]


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.GRU(6, 8, batch_first=True), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return torch.softmax(self.head(out), dim=-1)


@TRACER_ALLOWED  # _Block holds an nn.LSTM: torch.export refuses its _flat_weights, "auto" traces
def test_an_export_only_reads_the_registries(tmp_path: Path):
    """"Invariants": the handler and extractor registries are the same after an export."""
    registry = load_handlers()
    handlers = {kind: list(specs) for kind, specs in registry._handlers.items()}
    extractor_classes = dict(extractors._REGISTRY)
    export_and_check(_Block(), torch.randn(2, 5, 6), tmp_path)
    assert {kind: list(specs) for kind, specs in registry._handlers.items()} == handlers
    assert dict(extractors._REGISTRY) == extractor_classes


# --- tests mirror the package -----------------------------------------------------------------------
# Packages of fastnnef without a folder of tests, and where they are tested instead.
TESTED_ELSEWHERE = {
    "examples": "the bundled model of `fastnnef demo`, run by tests/cli/test_cli.py",
    "nnef_io": "its one module, the .dat header: tests/test_dat.py, tests/test_dropin_modules.py",
}


def test_tests_mirror_the_packages():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    tests = Path(__file__).resolve().parent
    missing = {name for name in packages if not (tests / name).is_dir()} - set(TESTED_ELSEWHERE)
    assert not missing, f"give these packages a tests/<package>/ folder: {sorted(missing)}"
    stale = {name for name in TESTED_ELSEWHERE if name not in packages or (tests / name).is_dir()}
    assert not stale, f"drop from TESTED_ELSEWHERE: {sorted(stale)}"
    strays = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))} - packages
    assert not strays, f"test folders named after no package of fastnnef: {sorted(strays)}"


# A module over this many lines is split where its content allows (issue 27): none is today.
MAX_MODULE_LINES = 900


def test_no_module_over_the_line_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules where their content allows: {long}"
