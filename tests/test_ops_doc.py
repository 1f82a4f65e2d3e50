"""docs/ops.md is generated (``fastnnef ops --markdown``) from the registry and torch's
operator set; this test fails when it is stale and says how to refresh it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from fastnnef.cli import main
from fastnnef.cli.ops_cmd import REFRESH, ops_markdown, torch_operator_set
from fastnnef.op.extras import register

DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"


def test_docs_ops_md_is_up_to_date():
    text = DOC.read_text()
    generated_with = re.search(r"operator set of torch (\S+);", text)
    assert generated_with is not None, f"{DOC} has no torch version line: run `{REFRESH}`"
    if generated_with.group(1) != torch.__version__:
        pytest.skip(f"docs/ops.md lists torch {generated_with.group(1)}'s operators; this is torch {torch.__version__}")
    assert text == ops_markdown(), f"docs/ops.md is stale: run `{REFRESH}` and commit it"


def test_command_prints_the_doc(capsys):
    assert main(["ops", "--markdown"]) == 0
    assert capsys.readouterr().out == ops_markdown()


def test_operator_set_rule():
    operators = set(torch_operator_set())
    assert {"aten::relu", "aten::conv2d", "aten::__and__", "aten::fft_fft"} <= operators
    excluded = {"aten::add_", "aten::convolution_backward", "aten::_foreach_add", "aten::cudnn_convolution",
                "aten::Int", "aten::_softmax", "aten::to_sparse", "aten::miopen_rnn"}
    assert not excluded & operators


def test_supported_unsupported_and_user_handlers():
    @register("h10_doc_probe", args="t")
    def probe(ctx, x):
        "t2n_extra::h10_doc_probe(Tensor x) -> Tensor"

    text = ops_markdown()
    supported, unsupported = text.split("## Not supported")
    assert "| `aten::linear` | any | `aten::linear(Tensor input" in supported
    assert "| `aten::_softmax` | any |" in supported  # a private op listed because it is handled
    assert "`aten::contiguous`" in supported  # resolved by the IR
    assert "h10_doc_probe" not in text  # users' handlers are theirs, not fastnnef's coverage
    missing = re.findall(r"`(aten::[^`]+)`", unsupported)
    assert missing and not {"aten::linear", "aten::contiguous"} & set(missing)
    assert int(re.search(r"\((\d+)\)", unsupported).group(1)) == len(missing)
