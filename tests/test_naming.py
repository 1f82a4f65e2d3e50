"""nnef_variable_naming_scheme: every scheme gives valid identifiers and a graph tract
checks; .dat labels are the torch parameter paths whatever the scheme; tied weights once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.nnef.graph import NNEF_KEYWORDS
from fastnnef.torch_graph.ir_naming import VariableNamingScheme
from tests.helpers import export_and_check

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN = re.compile(r"^\s+(\w+) = (\w+)\(")


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)) * 2.0


def identifiers(text: str) -> list[str]:
    body = text[text.index("\ngraph ") :]
    names = [m.group(1) for m in map(ASSIGN.match, body.splitlines()) if m]
    header = re.search(r"graph (\w+)\(([^)]*)\) -> \(([^)]*)\)", text)
    assert header is not None
    for group in header.groups():
        names += [n.strip() for n in group.split(",") if n.strip()]
    return names


@pytest.mark.parametrize("scheme", [s.value for s in VariableNamingScheme])
def test_scheme(scheme: str, tmp_path: Path) -> None:
    model = TwoLayers().eval()
    path = export_and_check(
        model, torch.randn(2, 4), tmp_path, compression_level=None, nnef_variable_naming_scheme=scheme
    )
    text = (path / "graph.nnef").read_text()
    names = identifiers(text)
    assert len(names) > 5
    for name in names:
        assert IDENT.fullmatch(name) and name not in NNEF_KEYWORDS, name
    body = names[: len(names) - 3]  # graph name + IO repeat the body's identifiers
    assert len(set(body)) == len(body), "each identifier is assigned once"
    dats = sorted(p.name for p in path.iterdir() if p.suffix == ".dat")
    assert dats == sorted(f"{n}.dat" for n in model.state_dict())
    labels = re.findall(r"variable<scalar>\(label = '([^']+)'", text)
    assert sorted(labels) == sorted(model.state_dict())


def test_schemes_differ(tmp_path: Path) -> None:
    texts = {}
    for scheme in ("natural_verbose", "numeric"):
        path = export_and_check(
            TwoLayers().eval(), torch.randn(2, 4), tmp_path, name=f"{scheme}.nnef", compression_level=None,
            nnef_variable_naming_scheme=scheme,
        )
        texts[scheme] = (path / "graph.nnef").read_text()
    assert texts["natural_verbose"] != texts["numeric"]


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(5, 5, bias=False)
        self.unembed = nn.Linear(5, 5, bias=False)
        self.unembed.weight = self.embed.weight  # the same Parameter in two modules

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.unembed(torch.relu(self.embed(x)))


@pytest.mark.parametrize("scheme", ["natural_verbose", "raw"])
def test_tied_weights_written_once(scheme: str, tmp_path: Path) -> None:
    path = export_and_check(
        Tied().eval(), torch.randn(3, 5), tmp_path, compression_level=None, nnef_variable_naming_scheme=scheme
    )
    text = (path / "graph.nnef").read_text()
    assert text.count("= variable") == 1
    assert [p.name for p in path.iterdir() if p.suffix == ".dat"] == ["embed.weight.dat"]
