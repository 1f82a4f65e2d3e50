"""Loss functions (op/aten/loss.py) exported and run in tract, compared with torch: each
reduction, class weights, ignore_index, label smoothing, single samples, dynamic batches.

Losses whose functional form first calls torch.broadcast_tensors (mse, l1, smooth_l1, huber,
weighted binary cross-entropy) are also exercised through ``torch.ops.aten`` directly, so the
handler is tested whether or not aten::broadcast_tensors is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check, needs_handler
from tests.op._table import check

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def labels(*shape: int, classes: int = 5) -> torch.Tensor:
    return torch.randint(0, classes, shape)


def signs(*shape: int) -> torch.Tensor:
    return torch.randint(0, 2, shape).float() * 2 - 1


XY = lambda: (randn(4, 5), randn(4, 5))  # noqa: E731 - table shorthand
PROBS = lambda: (torch.rand(4, 5) * 0.98 + 0.01, torch.rand(4, 5))  # noqa: E731
LOGITS = lambda: (randn(4, 5) * 3, torch.rand(4, 5))  # noqa: E731
CLS = lambda: (randn(4, 5), labels(4))  # noqa: E731
CLS_2D = lambda: (randn(2, 5, 3, 3), labels(2, 3, 3))  # noqa: E731
WITH_IGNORED = lambda: (randn(6, 5), torch.tensor([0, -100, 4, 2, -100, 1]))  # noqa: E731
# Targets mixing classes with ignore_index -100: a draw in their range is mostly no class.
IGNORED_KEPT = {1: "targets mix classes and ignore_index -100: a fresh draw in [-100, 4] is invalid"}
DYN_B2 = {0: {0: "B"}, 1: {0: "B"}}
BROADCAST = needs_handler("aten::broadcast_tensors")


def case(name: str, fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]],
         dyn: dict[int, dict[int, str]] | None = None, needs: pytest.MarkDecorator | None = None,
         kept: dict[int, str] | None = None) -> Any:
    """A table row; ``kept``: inputs kept as traced on the redraw (position -> why)."""
    return pytest.param(fn, make, dyn, kept, id=name, marks=[needs] if needs else [])


CASES = [
    case("mse_mean", lambda a, b: aten.mse_loss(a, b, MEAN), XY),
    case("mse_none_dyn", lambda a, b: aten.mse_loss(a, b, NONE), XY, DYN_B2),
    case("mse_functional", F.mse_loss, XY, needs=BROADCAST),
    case("l1_sum", lambda a, b: aten.l1_loss(a, b, SUM), XY),
    case("l1_functional_f16", lambda a, b: F.l1_loss(a.half(), b.half()), XY, needs=BROADCAST),
    case("smooth_l1_beta", lambda a, b: aten.smooth_l1_loss(a, b, MEAN, 0.5), XY),
    case("smooth_l1_beta0_none", lambda a, b: aten.smooth_l1_loss(a, b, NONE, 0.0), XY),
    case("smooth_l1_functional", lambda a, b: F.smooth_l1_loss(a, b, beta=2.0, reduction="sum"), XY, needs=BROADCAST),
    case("huber_delta", lambda a, b: aten.huber_loss(a, b, SUM, 0.7), XY),
    case("huber_functional", F.huber_loss, XY, needs=BROADCAST),
    case("poisson_log_input", F.poisson_nll_loss, lambda: (randn(4, 5), torch.rand(4, 5) * 4), None),
    case("poisson_full_sum", lambda a, b: F.poisson_nll_loss(a, b, log_input=False, full=True, reduction="sum"),
         lambda: (torch.rand(4, 5) + 0.1, torch.randint(0, 6, (4, 5)).float())),
    case("gaussian_nll", lambda a, b, v: F.gaussian_nll_loss(a, b, v.abs() + 0.1),
         lambda: (randn(4, 5), randn(4, 5), randn(4, 5))),
    case("bce", lambda p, t: F.binary_cross_entropy(p, t), PROBS),
    case("bce_saturated_none", lambda p, t: F.binary_cross_entropy(p, t, reduction="none"),
         lambda: (torch.tensor([0.0, 1.0, 0.5, 1e-30]), torch.tensor([1.0, 0.0, 0.3, 1.0]))),
    case("bce_weight_aten", lambda p, t, w: aten.binary_cross_entropy(p, t, w, SUM),
         lambda: (*PROBS(), torch.rand(4, 5))),
    case("bce_weight_functional", lambda p, t, w: F.binary_cross_entropy(p, t, weight=w),
         lambda: (*PROBS(), torch.rand(5)), needs=BROADCAST),
    case("bce_logits", F.binary_cross_entropy_with_logits, LOGITS),
    case("bce_logits_large", lambda x, t: F.binary_cross_entropy_with_logits(x * 40, t, reduction="sum"), LOGITS),
    case("bce_logits_weights",
         lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw, reduction="none"),
         lambda: (*LOGITS(), torch.rand(5), torch.rand(5) * 3)),
    case("bce_logits_dyn", F.binary_cross_entropy_with_logits, LOGITS, DYN_B2),
    case("cross_entropy", F.cross_entropy, CLS),
    case("cross_entropy_weight_ignore", lambda x, t, w: F.cross_entropy(x, t, weight=w),
         lambda: (*WITH_IGNORED(), torch.rand(5)), kept=IGNORED_KEPT),
    case("cross_entropy_ignore_index_sum", lambda x, t: F.cross_entropy(x, t, ignore_index=2, reduction="sum"), CLS),
    case("cross_entropy_smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2), WITH_IGNORED,
         kept=IGNORED_KEPT),
    case("cross_entropy_smoothing_weight_none",
         lambda x, t, w: F.cross_entropy(x, t, weight=w, label_smoothing=0.1, reduction="none"),
         lambda: (*WITH_IGNORED(), torch.rand(5)), kept=IGNORED_KEPT),
    case("cross_entropy_smoothing_weight_mean", lambda x, t, w: F.cross_entropy(x, t, weight=w, label_smoothing=0.3),
         lambda: (*WITH_IGNORED(), torch.rand(5)), kept=IGNORED_KEPT),
    case("cross_entropy_2d", F.cross_entropy, CLS_2D),
    case("cross_entropy_single_sample", lambda x, t: F.cross_entropy(x, t, reduction="none"),
         lambda: (randn(5), torch.tensor(3))),
    case("cross_entropy_probabilities", F.cross_entropy, lambda: (randn(4, 5), torch.rand(4, 5).softmax(1))),
    case("cross_entropy_probabilities_smoothing_weight",
         lambda x, t, w: F.cross_entropy(x, t, weight=w, label_smoothing=0.2, reduction="sum"),
         lambda: (randn(2, 5, 3), torch.rand(2, 5, 3).softmax(1), torch.rand(5))),
    case("cross_entropy_probabilities_single_none", lambda x, t: F.cross_entropy(x, t, reduction="none"),
         lambda: (randn(5), torch.rand(5).softmax(0))),
    case("cross_entropy_f16", lambda x, t: F.cross_entropy(x.half(), t), CLS),
    case("cross_entropy_dyn", F.cross_entropy, CLS, DYN_B2),
    case("nll", lambda x, t: F.nll_loss(x.log_softmax(1), t), CLS),
    case("nll_weight_ignore_none", lambda x, t, w: F.nll_loss(x, t, weight=w, reduction="none"),
         lambda: (*WITH_IGNORED(), torch.rand(5)), kept=IGNORED_KEPT),
    case("nll_2d_weight", lambda x, t, w: F.nll_loss(x, t, weight=w), lambda: (*CLS_2D(), torch.rand(5))),
    case("nll_3d_sum", lambda x, t: F.nll_loss(x, t, reduction="sum"),
         lambda: (randn(2, 5, 3, 2, 2), labels(2, 3, 2, 2))),
    case("nll_aten_nll_loss", lambda x, t: aten.nll_loss(x, t, None, MEAN, -100), CLS),
    case("nll_aten_nll_loss2d", lambda x, t: aten.nll_loss2d(x, t, None, SUM, 1), CLS_2D),
    case("kl_div_batchmean", lambda x, t: F.kl_div(x, t, reduction="batchmean"),
         lambda: (randn(4, 5).log_softmax(1), torch.rand(4, 5))),
    case("kl_div_zero_targets_none", lambda x, t: F.kl_div(x, t, reduction="none"),
         lambda: (randn(2, 3), torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]]))),
    case("kl_div_log_target", lambda x, t: F.kl_div(x, t, reduction="sum", log_target=True),
         lambda: (randn(4, 5), randn(4, 5))),
    case("hinge_embedding", F.hinge_embedding_loss, lambda: (randn(4, 5), signs(4, 5))),
    case("hinge_embedding_margin_none", lambda x, y: F.hinge_embedding_loss(x, y, margin=0.5, reduction="none"),
         lambda: (randn(4, 5), signs(5))),
    case("margin_ranking", lambda a, b, y: F.margin_ranking_loss(a, b, y, margin=0.3),
         lambda: (randn(6), randn(6), signs(6))),
    case("soft_margin", F.soft_margin_loss, lambda: (randn(4, 5) * 50, signs(4, 5))),
    case("cosine_embedding", F.cosine_embedding_loss, lambda: (randn(4, 5), randn(4, 5), signs(4))),
    case("cosine_embedding_margin_single",
         lambda a, b, y: F.cosine_embedding_loss(a, b, y, margin=-0.2, reduction="none"),
         lambda: (randn(5), randn(5), torch.tensor(-1.0))),
    case("triplet_margin", F.triplet_margin_loss, lambda: (randn(4, 5), randn(4, 5), randn(4, 5))),
    case("triplet_margin_swap_p1",
         lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5, p=1, swap=True, reduction="sum"),
         lambda: (randn(4, 5), randn(4, 5), randn(4, 5))),
    case("multi_margin", F.multi_margin_loss, CLS),
    case("multi_margin_p2_weight_none",
         lambda x, t, w: F.multi_margin_loss(x, t, p=2, margin=0.5, weight=w, reduction="none"),
         lambda: (randn(4, 5), labels(4), torch.rand(5))),
    case("multi_margin_single", lambda x, t: F.multi_margin_loss(x, t), lambda: (randn(5), torch.tensor([2]))),
    case("multilabel_margin", F.multilabel_margin_loss,
         lambda: (randn(3, 4), torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 2, 0, 0]]))),
    case("multilabel_margin_single_none", lambda x, t: F.multilabel_margin_loss(x, t, reduction="none"),
         lambda: (randn(4), torch.tensor([1, 2, -1, 0]))),
    case("multilabel_soft_margin", lambda x, t, w: F.multilabel_soft_margin_loss(x, t, weight=w),
         lambda: (randn(3, 4), (randn(3, 4) > 0).float(), torch.rand(4))),
]


@pytest.mark.parametrize("fn, make, dyn, kept", CASES)
def test_loss(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, kept: Any,
              tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    f16 = fn(*inputs).dtype == torch.float16
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=5e-3 if f16 else 5e-4, kept_on_redraw=kept)


def test_label_smoothing_needs_a_static_class_count(tmp_path: Any) -> None:
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "C"}})
    with pytest.raises(T2NErrorNotImplemented, match="label smoothing over a dynamic number of classes"):
        export_and_check(Fn(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)), CLS(), tmp_path,
                         target=target, input_names=["x", "t"])
