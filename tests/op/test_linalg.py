"""Vector and tensor products, norms, kron, cross, vander, bilinear (op/aten/linalg.py)
exported and run in tract, compared with torch; integer variants avoid tract's float-only
matmul kernels; what needs singular values is refused by name."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fastnnef.exceptions import T2NErrorNotImplemented
from tests.helpers import Fn, export_and_check
from tests.op._table import check

NAN, INF = float("nan"), float("inf")
INV_FREQ = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-5, 6, shape)


V2 = lambda: (randn(5), randn(5))  # noqa: E731 - table shorthand
M = lambda: (randn(3, 4),)  # noqa: E731
DYN_S = {0: {0: "S"}}


def quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with torch's deprecation warnings silenced (the ops are still traced)."""
    def call(*args: torch.Tensor) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fn(*args)
    return call


def rope_angles(x: torch.Tensor) -> torch.Tensor:
    """RoPE's table: positions (as long as the input) times the inverse frequencies."""
    positions = torch.arange(x.shape[0], dtype=torch.float32)
    return torch.outer(positions, INV_FREQ).cos() + x.sum(-1, keepdim=True)


# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), lambda: (randn(2, 3, 4), randn(2, 4, 5)), None),
    ("einsum_implicit_output", lambda a, b: torch.einsum("ij,kj", a, b), lambda: (randn(3, 4), randn(5, 4)), None),
    ("einsum_ellipsis_broadcast", lambda a, b: torch.einsum("...ij,...jk", a, b),
     lambda: (randn(2, 3, 4), randn(1, 4, 5)), None),
    ("einsum_ellipsis_middle", lambda a: torch.einsum("i...j->j...i", a), lambda: (randn(2, 3, 4, 5),), None),
    ("einsum_ellipsis_f16_dyn", lambda a, b: torch.einsum("b...d,d->b...", a.half(), b.half()),
     lambda: (randn(2, 3, 4), randn(4)), {0: {1: "S"}}),
    ("dot", torch.dot, V2, None),
    ("dot_int", torch.dot, lambda: (ints(7), ints(7)), None),
    ("dot_f16", lambda a, b: torch.dot(a.half(), b.half()), V2, None),
    ("dot_dyn", torch.dot, V2, {0: {0: "N"}, 1: {0: "N"}}),
    ("vdot", torch.vdot, V2, None),
    ("inner", torch.inner, lambda: (randn(2, 3, 5), randn(4, 5)), None),
    ("inner_vectors", torch.inner, V2, None),
    ("inner_scalar", lambda a, b: torch.inner(a, b), lambda: (torch.tensor(2.5), randn(3, 4)), None),
    ("inner_int", torch.inner, lambda: (ints(3, 4), ints(2, 4)), None),
    ("tensordot_one", lambda a, b: torch.tensordot(a, b, dims=([1], [0])), lambda: (randn(3, 4, 2), randn(4, 5)), None),
    ("tensordot_two", lambda a, b: torch.tensordot(a, b, dims=2), lambda: (randn(2, 3, 4), randn(3, 4, 5)), None),
    ("tensordot_unordered", lambda a, b: torch.tensordot(a, b, dims=([0, 2], [2, 0])),
     lambda: (randn(2, 3, 4), randn(4, 5, 2)), None),
    ("tensordot_int", lambda a, b: torch.tensordot(a, b, dims=([1, 0], [0, 2])), lambda: (ints(3, 4), ints(4, 2, 3)),
     None),
    ("tensordot_outer", lambda a, b: torch.tensordot(a, b, dims=0), lambda: (randn(2, 3), randn(4)), None),
    ("mv", torch.mv, lambda: (randn(3, 5), randn(5)), None),
    ("mv_int", torch.mv, lambda: (ints(3, 5), ints(5)), None),
    ("mv_dyn_rows", torch.mv, lambda: (randn(3, 5), randn(5)), DYN_S),
    ("outer", torch.outer, lambda: (randn(5), randn(3)), None),
    ("ger_int", torch.ger, lambda: (ints(5), ints(3)), None),
    ("outer_rope_dyn", rope_angles, lambda: (randn(6, 4),), DYN_S),
    ("addmv", lambda b, m, v: torch.addmv(b, m, v, beta=0.5, alpha=-2.0), lambda: (randn(3), randn(3, 4), randn(4)),
     None),
    ("addmv_beta0_ignores_nan", lambda b, m, v: torch.addmv(b, m, v, beta=0),
     lambda: (torch.full((3,), NAN), randn(3, 4), randn(4)), None),
    ("addmv_broadcast_bias", torch.addmv, lambda: (randn(1), randn(3, 4), randn(4)), None),
    ("addr", lambda b, u, v: torch.addr(b, u, v, beta=2.0, alpha=0.5), lambda: (randn(3, 4), randn(3), randn(4)), None),
    ("addr_int", lambda b, u, v: torch.addr(b, u, v, alpha=3), lambda: (ints(3, 4), ints(3), ints(4)), None),
    ("chain_matmul", quiet(torch.chain_matmul), lambda: (randn(2, 3), randn(3, 4), randn(4, 5)), None),
    ("multi_dot_vector_ends", lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
     lambda: (randn(3), randn(3, 4), randn(4)), None),
    ("multi_dot_int", lambda a, b: torch.linalg.multi_dot([a, b]), lambda: (ints(2, 3), ints(3, 2)), None),
    ("kron", torch.kron, lambda: (randn(2, 3), randn(3, 2)), None),
    ("kron_ranks", torch.kron, lambda: (randn(2, 2, 3), randn(3, 2)), None),
    ("kron_int", torch.kron, lambda: (ints(2, 2), ints(2, 3)), None),
    ("kron_dyn", lambda a: torch.kron(a, torch.ones(2, 3)), lambda: (randn(3, 2),), DYN_S),
    ("cross_default_dim", quiet(torch.cross), lambda: (randn(4, 3, 2), randn(4, 3, 2)), None),
    ("cross_dim", lambda a, b: torch.cross(a, b, dim=-1), lambda: (randn(2, 3), randn(2, 3)), None),
    ("linalg_cross_broadcast", torch.linalg.cross, lambda: (randn(4, 3), randn(1, 3)), None),
    ("linalg_cross_int_dyn", torch.linalg.cross, lambda: (ints(5, 3), ints(5, 3)), {0: {0: "B"}, 1: {0: "B"}}),
    ("linalg_norm_flat", torch.linalg.norm, lambda: (randn(2, 3, 4),), None),
    ("linalg_norm_vector_ord", lambda x: torch.linalg.norm(x, 3, dim=1), lambda: (randn(2, 3, 4),), None),
    ("linalg_norm_vector_inf_keepdim", lambda x: torch.linalg.norm(x, INF, dim=-1, keepdim=True), M, None),
    ("linalg_norm_matrix_default", lambda x: torch.linalg.norm(x, dim=(0, 2)), lambda: (randn(2, 3, 4),), None),
    ("linalg_norm_matrix_fro", lambda x: torch.linalg.norm(x, "fro"), M, None),
    ("linalg_norm_matrix_ord1", lambda x: torch.linalg.norm(x, 1), M, None),
    ("linalg_norm_matrix_ord_neg_inf", lambda x: torch.linalg.norm(x, -INF), M, None),
    ("matrix_norm_default_batched", torch.linalg.matrix_norm, lambda: (randn(2, 3, 4),), None),
    ("matrix_norm_inf_keepdim", lambda x: torch.linalg.matrix_norm(x, INF, keepdim=True), lambda: (randn(2, 3, 4),),
     None),
    ("matrix_norm_neg1_dims", lambda x: torch.linalg.matrix_norm(x, -1, dim=(2, 0)), lambda: (randn(2, 3, 4),), None),
    ("matrix_norm_f16_dyn", lambda x: torch.linalg.matrix_norm(x.half(), 1), lambda: (randn(2, 3, 4),), DYN_S),
    ("frobenius_norm", quiet(lambda x: torch.frobenius_norm(x, [1, 2])), lambda: (randn(2, 3, 4),), None),
    ("renorm", lambda x: torch.renorm(x, 2, 0, 1.5), lambda: (randn(4, 3) * 2,), None),
    ("renorm_p1_dim1", lambda x: torch.renorm(x, 1, 1, 2.0), lambda: (randn(2, 3, 4),), None),
    ("vander", torch.vander, lambda: (randn(5),), None),
    ("vander_n_increasing_int", lambda x: torch.vander(x, 3, increasing=True), lambda: (ints(4),), None),
    ("linalg_vander_batched", lambda x: torch.linalg.vander(x, N=4), lambda: (randn(2, 3),), None),
    ("bilinear", F.bilinear, lambda: (randn(4, 3), randn(4, 5), randn(2, 3, 5), randn(2)), None),
    ("bilinear_batched_no_bias", F.bilinear, lambda: (randn(2, 4, 3), randn(2, 4, 5), randn(6, 3, 5)), None),
    ("bilinear_module_dyn", torch.nn.Bilinear(3, 5, 2), lambda: (randn(4, 3), randn(4, 5)), {0: {0: "B"}, 1: {0: "B"}}),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_linalg(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    with torch.no_grad():
        out = fn(*inputs)
    f16 = out.dtype == torch.float16
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=5e-3 if f16 else 5e-4)


@pytest.mark.parametrize("fn, message", [
    (lambda x: torch.linalg.matrix_norm(x, "nuc"),
     "matrix norm ord='nuc'. it needs singular values and tract has no SVD"),
    (lambda x: torch.linalg.norm(x, 2), "matrix norm ord=2. it needs singular values"),
    (lambda x: torch.linalg.matrix_norm(x, -2), "matrix norm ord=-2. it needs"),
], ids=["nuc", "spectral", "smallest_singular_value"])
def test_matrix_norms_needing_svd_are_refused(fn: Callable[..., Any], message: str, tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), (randn(3, 4),), tmp_path)


@pytest.mark.parametrize("fn, make", [
    pytest.param(lambda a, b: a @ b, lambda: (ints(3, 4), ints(4, 5)), id="mm"),
    pytest.param(lambda a, b: torch.bmm(a, b), lambda: (ints(2, 3, 4), ints(2, 4, 2)), id="bmm"),
    pytest.param(lambda a, v: a @ v, lambda: (ints(3, 4), ints(4)), id="mv"),
    pytest.param(lambda a, b: torch.matmul(a.to(torch.int32), b.to(torch.int32)), lambda: (ints(2, 3), ints(3, 2)),
                 id="int32"),
])
def test_integer_matmul_is_exact(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]],
                                 tmp_path: Any) -> None:
    """tract's matmul has no integer kernels: integer products go through f64 and back."""
    check(fn, make(), tmp_path, atol=0, rtol=0)
