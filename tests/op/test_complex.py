"""Complex tensors ((re, im) pairs in the graph) exported and run in tract, compared with
torch; complex graph inputs and outputs go through check_io as pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.op.registry import OpRegistry
from tests.helpers import export_and_check
from tests.op._table import Fn, check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def crandn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.complex64)


def as_pairs(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` with a real (re, im) output, for graphs that keep complex values inside."""
    return lambda *xs: torch.view_as_real(fn(*xs))


# (id, fn, inputs factory, dynamic axes {input index: {dim: symbol}} or None)
CASES = [
    # complex-only ops
    ("view_as_complex_real", lambda x: torch.view_as_real(torch.view_as_complex(x) * 2), lambda: (randn(3, 5, 2),),
     None),
    ("real_imag", lambda z: z.real * 2 + z.imag, lambda: (crandn(3, 4),), None),
    ("real_of_real", lambda x: torch.real(x) + 1, lambda: (randn(3, 4),), None),
    ("abs", lambda z: z.abs(), lambda: (crandn(2, 3, 5),), None),
    ("angle", lambda z: z.angle(), lambda: (crandn(4, 6),), None),
    ("angle_axes", lambda x: torch.complex(x, x.flip(0)).angle(),
     lambda: (torch.tensor([1.0, -1.0, 0.0, -2.0, 0.0, 3.0]),), None),
    ("angle_of_real", lambda x: torch.angle(x), lambda: (randn(3, 7),), None),
    ("sgn", lambda z: torch.sgn(z * torch.tensor([1.0, 0.0, 2.0])), lambda: (crandn(2, 3),), None),
    ("sgn_of_real", lambda x: torch.sgn(x), lambda: (torch.tensor([-2.0, 0.0, 3.0]),), None),
    ("polar", as_pairs(torch.polar), lambda: (torch.rand(3, 4) + 0.5, randn(4)), None),
    ("complex", as_pairs(torch.complex), lambda: (randn(2, 3), randn(3)), None),
    ("conj", lambda z: z.conj().resolve_conj() * z, lambda: (crandn(3, 4),), None),
    ("conj_physical", lambda z: torch.conj_physical(z), lambda: (crandn(5),), None),
    ("conj_of_real", lambda x: x.conj() + 1, lambda: (randn(3),), None),
    # elementwise, with real and scalar operands, broadcasting from the leading side
    ("mul", lambda a, b: a * b, lambda: (crandn(2, 3, 4), crandn(4)), None),
    ("mul_real", lambda z, r: z * r, lambda: (crandn(3, 4), randn(3, 1)), None),
    ("mul_imaginary_unit", lambda z: z * 1j + 2, lambda: (crandn(3),), None),
    ("add_sub", lambda a, b: a + b - 2 * a, lambda: (crandn(3, 4), crandn(1, 4)), None),
    ("add_alpha_real", lambda z, r: torch.add(z, r, alpha=3), lambda: (crandn(2, 5), randn(5)), None),
    ("rsub_real", lambda z, r: r - z, lambda: (crandn(2, 5), randn(2, 5)), None),
    ("div", lambda a, b: a / b, lambda: (crandn(3, 4), crandn(3, 4) + 2), None),
    ("div_real", lambda z, r: z / r, lambda: (crandn(3, 4), torch.rand(4) + 1), None),
    ("real_div_complex", lambda r, z: r / z, lambda: (randn(3, 4), crandn(3, 4) + 2), None),
    ("neg_exp", lambda z: torch.exp(-z), lambda: (crandn(2, 3),), None),
    ("matmul", lambda a, b: a @ b, lambda: (crandn(2, 3, 4), crandn(4, 5)), None),
    ("matmul_real", lambda a, b: a @ b.to(torch.complex64), lambda: (crandn(3, 4), randn(4, 2)), None),
    ("sum_mean", lambda z: z.sum(-1) + z.mean(0).sum(), lambda: (crandn(3, 4),), None),
    ("sum_keepdim", lambda z: z.sum(dim=(0, 2), keepdim=True), lambda: (crandn(2, 3, 4),), None),
    # shape ops: dims against torch's rank, never the pair axis
    ("reshape_flatten", lambda z: z.reshape(4, 3).flatten(), lambda: (crandn(2, 6),), None),
    ("transpose_permute", lambda z: z.transpose(-1, 0).permute(2, 0, 1), lambda: (crandn(2, 3, 4),), None),
    ("t", lambda z: z.t(), lambda: (crandn(2, 3),), None),
    ("squeeze_unsqueeze", lambda z: z.squeeze(1).unsqueeze(-1), lambda: (crandn(3, 1, 4),), None),
    ("expand", lambda z: z.expand(2, 3, 4), lambda: (crandn(3, 1),), None),
    ("cat_real_item", lambda z, r: torch.cat([z, r], dim=-1), lambda: (crandn(2, 3), randn(2, 2)), None),
    ("stack", lambda a, b: torch.stack([a, b], dim=-1), lambda: (crandn(2, 3), crandn(2, 3)), None),
    ("chunk", lambda z: z.chunk(2, dim=-1)[1], lambda: (crandn(3, 4),), None),
    ("unbind", lambda z: z.unbind(-1)[0], lambda: (crandn(3, 2),), None),
    ("slice_select", lambda z: z[1:, -1], lambda: (crandn(3, 4),), None),
    ("narrow_index_select", lambda z, i: z.narrow(-1, 1, 2).index_select(0, i),
     lambda: (crandn(3, 4), torch.tensor([2, 0])), None),
    ("flip_roll", lambda z: z.flip(-1).roll(1, -2), lambda: (crandn(3, 4),), None),
    ("pad", lambda z: nn.functional.pad(z, (1, 2)), lambda: (crandn(2, 3),), None),
    ("to_complex", lambda x: x.to(torch.complex64) * 1j, lambda: (randn(3),), None),
    ("to_real", lambda z: (z * 2).real.to(torch.float32), lambda: (crandn(3),), None),
    ("complex128", lambda z: z.to(torch.complex128) * 2, lambda: (crandn(3),), None),
    ("complex128_ops", lambda z: (z * z.conj()).abs() + z.angle(), lambda: (torch.randn(3, dtype=torch.complex128),),
     None),
    # dynamic axes
    ("mul_dyn", lambda a, b: a * b, lambda: (crandn(2, 4), crandn(4)), {0: {0: "B"}}),
    ("abs_dyn", lambda z: z.abs().sum(-1), lambda: (crandn(2, 5),), {0: {1: "S"}}),
]


def _param(case: Any) -> Any:
    return pytest.param(*case[1:], id=case[0])


@pytest.mark.parametrize("fn, make, dyn", [_param(c) for c in CASES])
def test_complex(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-4, rtol=1e-4)


class Rope(nn.Module):
    """Llama-style rotary embedding: a complex buffer from torch.polar, sliced to the
    sequence length, times the query read as complex pairs."""

    def __init__(self, dim: int = 8, max_len: int = 32) -> None:
        super().__init__()
        freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(max_len).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h, d = x.shape
        xc = torch.view_as_complex(x.float().reshape(b, s, h, d // 2, 2))
        freqs = self.freqs_cis[:s].view(1, s, 1, d // 2)
        return torch.view_as_real(xc * freqs).flatten(3).type_as(x)


def test_rope_with_polar_dynamic_sequence(tmp_path: Any) -> None:
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    export_and_check(Rope(), (randn(2, 5, 2, 8),), tmp_path, target=target, input_names=["x"],
                     run_inputs=[randn(2, 9, 2, 8)])


@pytest.mark.parametrize("target", [TractNNEF.latest(), KhronosNNEF.latest()], ids=["tract", "strict_nnef"])
def test_complex_graph_io(target: Any, tmp_path: Any) -> None:
    """A complex input and output are (re, im) pairs for tract, and check_io compares them;
    complex arithmetic needs only standard NNEF operators."""
    torch.manual_seed(0)
    export_and_check(Fn(lambda a, b: a * b + a.conj() / b.abs()), (crandn(3, 4), crandn(4)), tmp_path, target=target)


def test_artefact_runs_numpy_complex_arrays(tmp_path: Any) -> None:
    """TractArtefact.run takes complex numpy arrays too, as (re, im) pairs."""
    torch.manual_seed(0)
    z = crandn(2, 3)
    path = export_and_check(Fn(lambda z: z * z), (z,), tmp_path)
    (got,) = TractArtefact.load(path).run([z.numpy()])
    np.testing.assert_allclose(got, torch.view_as_real(z * z).numpy(), atol=1e-5)


@pytest.mark.parametrize("fn, make, message", [
    pytest.param(lambda z: torch.tanh(z), lambda: (crandn(3),),
                 "fastnnef exports aten::tanh on real tensors only, and this one has complex inputs or outputs",
                 id="real_only_op"),
    pytest.param(lambda z: nn.functional.pad(z, (1, 1), value=1.0), lambda: (crandn(3),),
                 "padding a complex tensor with 1.0", id="pad_value"),
    pytest.param(lambda z: z.roll(1), lambda: (crandn(3),), "roll of a flattened complex tensor", id="roll_no_dims"),
    pytest.param(lambda a, b: a @ b, lambda: (crandn(3), crandn(3, 2)), "complex matmul with a 1-D operand",
                 id="matmul_vector"),
])
def test_complex_refused(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], message: str,
                         tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), make(), tmp_path)


def test_registry_routes_complex_nodes() -> None:
    """Complex nodes reach only complex handlers; a complex-only kind serves real nodes."""
    registry = OpRegistry()

    def real(ctx: Any) -> None:
        """aten::k(Tensor self) -> Tensor"""

    def cplx(ctx: Any) -> None:
        """aten::k(Tensor self) -> Tensor  (complex)"""

    registry.register("aten::both", args="t")(real)
    registry.register("aten::both", args="t", complex=True)(cplx)
    registry.register("aten::complex_only", args="t", complex=True)(cplx)
    registry.register("aten::real_only", args="t")(real)
    look = lambda kind, c: getattr(registry.lookup(kind, None, complex=c), "fn", None)  # noqa: E731
    assert (look("aten::both", False), look("aten::both", True)) == (real, cplx)
    assert (look("aten::both_", True), look("aten::complex_only", False)) == (cplx, cplx)
    assert (look("aten::real_only", False), look("aten::real_only", True)) == (real, None)
