"""Verification catches a wrong artefact: the exported artefact with one weight altered
on disk fails its bundles and diverges in generation, and dump_llm's checks report it."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorIOPytorchTractNotISO, T2NErrorIoQuantity
from fastnnef.llm import dump_llm
from fastnnef.llm.bundles import Bundle
from fastnnef.llm.verify import check_bundle, check_generation, raise_on_failed_bundles
from tests.llm.tiny import build


def _bundle(root: Path, name: str) -> Bundle:
    with np.load(root / f"tests/{name}_inputs.npz") as i, np.load(root / f"tests/{name}_outputs.npz") as o:
        return Bundle(name, {k: torch.from_numpy(i[k]) for k in i.files}, {k: torch.from_numpy(o[k]) for k in o.files})


def _altered(artefact: Path, into: Path, label: str) -> Path:
    """The artefact unpacked as a directory, with ``label``'s weights scaled by 1.5."""
    with tarfile.open(artefact) as tar:
        tar.extractall(into, filter="data")
    dat = into / f"{label}.dat"
    raw = bytearray(dat.read_bytes())
    weights = np.frombuffer(bytes(raw[128:]), dtype=np.float32) * 1.5  # after the 128-byte header
    dat.write_bytes(bytes(raw[:128]) + weights.astype(np.float32).tobytes())
    return into


def test_an_altered_artefact_is_caught(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("llama"), no_verify=True)
    good = TractArtefact.load(report.model_path)
    bad = TractArtefact.load(_altered(report.model_path, tmp_path / "bad", "model.model.layers.1.mlp.down_proj.weight"))
    bundle = _bundle(report.export_dir, "prompt")
    assert check_bundle(good, bundle, "approximate").ok
    # An output tract does not give, or an input the artefact does not take, is an error, never
    # a value left unchecked.
    more_outputs = Bundle("prompt", bundle.inputs, {**bundle.outputs, "extra": torch.zeros(1)})
    with pytest.raises(T2NErrorIoQuantity, match=r"bundle 'prompt' holds \d+ outputs .*'extra'.*tract gave"):
        check_bundle(good, more_outputs, "approximate")
    fewer_inputs = Bundle("prompt", dict(list(bundle.inputs.items())[:-1]), bundle.outputs)
    with pytest.raises(T2NErrorIoQuantity, match=r"input values for an artefact with \d+ inputs"):
        check_bundle(good, fewer_inputs, "approximate")
    failed = check_bundle(bad, bundle, "approximate")
    assert not failed.ok and "MISMATCH" in failed.reports["outputs"]
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match=r"differ from PyTorch's at tolerance approximate on "
                       r"bundle\(s\) prompt:\nprompt: outputs: MISMATCH"):
        raise_on_failed_bundles([failed], "approximate")

    model = build("llama")
    prompt = _bundle(report.export_dir, "prompt").inputs["input_ids"]
    empty = [torch.zeros(1, 2, 0, 8) for _ in range(4)]
    assert check_generation(model, good, empty, prompt, 16, exact_required=True).ok
    wrong = check_generation(model, bad, empty, prompt, 16, exact_required=True)
    assert wrong.first_divergence is not None and not wrong.near_tie and not wrong.ok
    assert wrong.tract_tokens[: wrong.first_divergence] == wrong.torch_tokens[: wrong.first_divergence]
    assert 0.0 <= wrong.agreement < 1.0
    assert wrong.summary().startswith(f"first divergence at generated token {wrong.first_divergence} of 16")
    assert check_generation(model, bad, empty, prompt, 16, exact_required=False).ok  # reported, not failed
