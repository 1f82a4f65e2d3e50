"""Round trip through the consumer: every dtype (and Q4_0) written by the sink is loaded by
the linked tract from a directory, a .tar and a .tgz, and compared with what was written."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastnnef import _native
from fastnnef.artefact import Artefact, quant_line

pytestmark = [
    pytest.mark.skipif(
        not hasattr(_native, "TractModel"), reason="the extension was built without TractModel (branch h2-tract)"
    ),
    # torch >= 2.10 deprecates its quantized dtypes; exporting them is still supported here.
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
]

rng = np.random.default_rng(11)
W = rng.standard_normal((4, 64)).astype(np.float32)
BF16 = torch.tensor([1.5, -3.0e38], dtype=torch.bfloat16)

# (label, tensor, generic, expected output of tract). Plain dtypes come back unchanged.
CASES = [
    ("f16", torch.tensor([[1.5, -2.25]], dtype=torch.float16), "scalar", None),
    ("f32", torch.arange(6, dtype=torch.float32).reshape(2, 3), "scalar", None),
    ("f64", torch.tensor([2.5, -1.0], dtype=torch.float64), "scalar", None),
    ("i8", torch.tensor([-128, 127], dtype=torch.int8), "integer", None),
    ("i16", torch.tensor([-300, 300], dtype=torch.int16), "integer", None),
    ("i32", torch.tensor([[-70000], [70000]], dtype=torch.int32), "integer", None),
    ("i64", torch.tensor([-(2**40), 2**40]), "integer", None),
    ("u8", torch.tensor([0, 255], dtype=torch.uint8), "integer", None),
    ("u16", torch.tensor([0, 65535], dtype=torch.uint16), "integer", None),
    ("u32", torch.tensor([0, 2**32 - 1], dtype=torch.uint32), "integer", None),
    ("u64", torch.tensor([0, 2**40], dtype=torch.uint64), "integer", None),
    ("bool", torch.tensor([[True, False, True], [False, False, True]]), "logical", None),
    ("bf16", BF16, "scalar", BF16.float().numpy()),  # written as exact f32
    ("scalar", torch.tensor(4.0), "scalar", None),
]


def build(path, fmt):
    """An artefact whose outputs are its variables; returns the expected outputs."""
    level = 1 if fmt == "tgz" else 0
    body, outputs, expected = [], [], []
    for i, (label, tensor, generic, want) in enumerate(CASES):
        body.append(f"  o{i} = variable<{generic}>(label = '{label}', shape = {list(tensor.shape)});")
        outputs.append(f"o{i}")
        expected.append(want if want is not None else tensor.numpy())
    q = len(CASES)
    # A Q4_0 constant stays block-quantized in tract, so it is read through the op it
    # exists for: linear(I, w) = I @ w.T, exact with an identity input.
    body.append("  eye = variable<scalar>(label = 'eye', shape = [64, 64]);")
    body.append("  w4 = variable<scalar>(label = 'deep/q4', shape = [4, 64]);")
    body.append("  w4l = variable<scalar>(label = 'q4_legacy', shape = [4, 64]);")
    body.append(f"  o{q} = linear(eye, w4, 0.0);")
    body.append(f"  o{q}l = linear(eye, w4l, 0.0);")
    outputs += [f"o{q}", f"o{q}l"]
    dequantized = _native.q4_0_dequantize(_native.q4_0_quantize(W), [4, 64])
    expected += [dequantized.T, dequantized.T]
    qi = torch.quantize_per_tensor(torch.tensor([-1.0, 0.5]), 0.5, 0, torch.qint8)
    body.append(f"  o{q + 1} = variable<scalar>(label = 'qi8', shape = [2]);")
    outputs.append(f"o{q + 1}")
    expected.append(qi.int_repr().numpy())
    graph = (
        "version 1.0;\nextension tract_registry tract_core;\n"
        f"graph network() -> ({', '.join(outputs)}) {{\n" + "\n".join(body) + "\n}\n"
    )
    with Artefact(path, fmt, level) as art:
        art.add_file("graph.nnef", graph)
        art.add_file("graph.quant", quant_line(f"o{q + 1}", qi))
        for label, tensor, _, _ in CASES:
            art.add_tensor(label, tensor)
        art.add_tensor("eye", torch.eye(64))
        art.add_tensor("deep/q4", torch.from_numpy(W), encoding="q4_0")
        art.add_tensor("q4_legacy", torch.from_numpy(W), encoding="q4_0_legacy")
        art.add_tensor("qi8", qi)
    return art.path, expected


@pytest.mark.parametrize("fmt", ["dir", "tar", "tgz"])
def test_tract_loads_every_dtype(tmp_path, fmt):
    path, expected = build(tmp_path / f"m.nnef.{fmt}", fmt)
    model = _native.TractModel.load(path, optimize=False)
    got = model.run([])
    assert len(got) == len(expected)
    for g, e, name in zip(got, expected, [c[0] for c in CASES] + ["q4_0", "q4_0_legacy", "qi8"]):
        assert g.shape == e.shape, name
        if name == "qi8":
            # tract returns the QI8 codes as int8 values.
            np.testing.assert_array_equal(g.view(np.int8), e, err_msg=name)
        else:
            assert g.dtype == e.dtype, name
            np.testing.assert_array_equal(g, e, err_msg=name)
