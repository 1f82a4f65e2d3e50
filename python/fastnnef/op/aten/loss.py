"""Loss functions, with torch's reductions (0 none, 1 mean, 2 sum), class weights and
ignore_index: regression (mse, l1, smooth_l1, huber, poisson_nll), binary and multi-class
classification (binary_cross_entropy[_with_logits], cross_entropy with class indices or
probabilities and label smoothing, nll_loss[2d|_nd], kl_div), margins (hinge_embedding,
margin_ranking, soft_margin, cosine_embedding, triplet_margin, multi_margin,
multilabel_margin).

gaussian_nll_loss and multilabel_soft_margin_loss never reach a handler: torch writes them
with elementwise ops, which the other families export. Losses are computed in f32 for f16
inputs. A class axis of size C is axis 1 of a batch, or axis 0 of one sample (``[C]``): one
sample is handled as a batch of one.
"""

from __future__ import annotations

import math

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten import _math as m
from fastnnef.op.aten._common import channel_param
from fastnnef.op.aten.cumulative import running_sum
from fastnnef.op.aten.distance import pairwise
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

NONE, MEAN, SUM = 0, 1, 2
_LOG_CLAMP = -100.0  # binary_cross_entropy clamps its logarithms here (torch's convention)


def _calc(ctx: OpContext) -> m.Calc:
    return m.Calc(ctx, m.float_compute(ctx))


def _reduced(c: m.Calc, loss: NTensor, reduction: int, unbatched: bool = False) -> NTensor:
    """``loss`` (elementwise or per sample) reduced as asked, as the node output; with
    ``unbatched``, axis 0 is a batch of one added for a single sample."""
    if reduction not in (NONE, MEAN, SUM):
        raise c.ctx.unsupported(f"reduction code {reduction}", "torch uses 0 (none), 1 (mean) or 2 (sum)")
    if reduction == NONE:
        return c.out("squeeze", loss, axes=[0]) if unbatched else c.result(loss)
    if loss.rank == 0:
        return c.result(loss)
    axes = list(range(loss.rank))
    return c.out("squeeze", c("mean_reduce" if reduction == MEAN else "sum_reduce", loss, axes=axes), axes=axes)


def _weighted_mean(c: m.Calc, loss: NTensor, weights: NTensor, reduction: int, unbatched: bool) -> NTensor:
    """nll_loss's reductions: the mean divides by the sum of the weights of the counted
    targets (ignored ones weigh 0), not by their number."""
    if reduction != MEAN:
        return _reduced(c, loss, reduction, unbatched)
    axes = list(range(loss.rank))
    total = c("div", c("sum_reduce", loss, axes=axes), c("sum_reduce", weights, axes=axes))
    return c.out("squeeze", total, axes=axes)


def _pair(c: m.Calc, a: NTensor, b: NTensor) -> tuple[NTensor, NTensor]:
    rank = max(a.rank, b.rank)
    x, y = c.inputs(a, b, rank=rank)
    return x, y


# --- regression ---------------------------------------------------------------------------
@handler("aten::mse_loss", "aten::l1_loss", args="t t i")
def mse_loss(ctx: OpContext, x: NTensor, y: NTensor, reduction: int) -> NTensor:
    """aten::mse_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor  (and l1_loss)"""
    c = _calc(ctx)
    d = c("sub", *_pair(c, x, y))
    return _reduced(c, c("sqr" if ctx.kind == "aten::mse_loss" else "abs", d), reduction)


@handler("aten::smooth_l1_loss", "aten::huber_loss", args="t t i f")
def smooth_l1_loss(ctx: OpContext, x: NTensor, y: NTensor, reduction: int, beta: float) -> NTensor:
    """aten::smooth_l1_loss(Tensor self, Tensor target, int reduction=Mean, float beta=1.0) -> Tensor

    Also huber_loss (its ``delta`` in beta's place): ``0.5 d^2 / beta`` below beta and
    ``d - beta / 2`` above for smooth_l1; huber is delta times that."""
    c = _calc(ctx)
    d = c("abs", c("sub", *_pair(c, x, y)))
    if beta == 0:  # smooth_l1 with beta 0 is l1 (no quadratic zone)
        return _reduced(c, d, reduction)
    huber = ctx.kind == "aten::huber_loss"
    quadratic = c("mul", c("sqr", d), 0.5 if huber else 0.5 / beta)
    linear = c("mul", c("sub", d, 0.5 * beta), beta) if huber else c("sub", d, 0.5 * beta)
    return _reduced(c, c("select", c("lt", d, beta), quadratic, linear), reduction)


@handler("aten::poisson_nll_loss", args="t t b b f i")
def poisson_nll_loss(ctx: OpContext, x: NTensor, y: NTensor, log_input: bool, full: bool, eps: float,
                     reduction: int) -> NTensor:
    """aten::poisson_nll_loss(Tensor input, Tensor target, bool log_input, bool full, float eps, int reduction) -> Tensor"""  # noqa: E501
    c = _calc(ctx)
    x, y = _pair(c, x, y)
    if log_input:
        loss = c("sub", c("exp", x), c("mul", y, x))
    else:
        loss = c("sub", x, c("mul", y, c("log", c("add", x, eps))))
    if full:  # Stirling's term, where the target exceeds 1
        stirling = c("add", c("sub", c("mul", y, c("log", y)), y), c("mul", c("log", c("mul", y, 2 * math.pi)), 0.5))
        loss = c("add", loss, c.select(c("gt", y, 1.0), stirling, 0.0))
    return _reduced(c, loss, reduction)


# --- binary classification ------------------------------------------------------------------
def _weighted(c: m.Calc, loss: NTensor, weight: NTensor | None) -> NTensor:
    if weight is None:
        return loss
    (w,) = c.inputs(weight, rank=loss.rank)
    return c("mul", loss, w)


@handler("aten::binary_cross_entropy", args="t t t? i")
def binary_cross_entropy(ctx: OpContext, x: NTensor, y: NTensor, weight: NTensor | None, reduction: int) -> NTensor:
    """aten::binary_cross_entropy(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean) -> Tensor  (logs clamped at -100)"""  # noqa: E501
    c = _calc(ctx)
    x, y = _pair(c, x, y)
    log_p = c("max", c("log", x), _LOG_CLAMP)
    log_q = c("max", c("log", c("sub", 1.0, x)), _LOG_CLAMP)
    loss = c("neg", c("add", c("mul", y, log_p), c("mul", c("sub", 1.0, y), log_q)))
    return _reduced(c, _weighted(c, loss, weight), reduction)


@handler("aten::binary_cross_entropy_with_logits", args="t t t? t? i")
def binary_cross_entropy_with_logits(
    ctx: OpContext, x: NTensor, y: NTensor, weight: NTensor | None, pos_weight: NTensor | None, reduction: int,
) -> NTensor:
    """aten::binary_cross_entropy_with_logits(Tensor self, Tensor target, Tensor? weight=None, Tensor? pos_weight=None, int reduction=Mean) -> Tensor

    ``(1 - y) x - (1 + (pos_weight - 1) y) log_sigmoid(x)``, log_sigmoid without overflow."""  # noqa: E501
    c = _calc(ctx)
    x, y = _pair(c, x, y)
    log_sigmoid = c("neg", m.softplus(c, c("neg", x)))
    if pos_weight is not None:
        (pw,) = c.inputs(pos_weight, rank=x.rank)
        log_sigmoid = c("mul", log_sigmoid, c("add", c("mul", c("sub", pw, 1.0), y), 1.0))
    loss = c("sub", c("mul", c("sub", 1.0, y), x), log_sigmoid)
    return _reduced(c, _weighted(c, loss, weight), reduction)


# --- multi-class classification ---------------------------------------------------------------
def _batched(c: m.Calc, x: NTensor, target: NTensor, same_rank: bool) -> tuple[NTensor, NTensor, bool]:
    """(input [N, C, ...] in the compute dtype, target, unbatched): a single sample ``[C]``
    becomes a batch of one (its target too: ``[]`` or, with ``same_rank``, ``[C]``)."""
    x = c.ctx.cast(x, c.dtype)
    if x.rank >= 2:
        return x, target, False
    unbatch_target = target.rank == 0 or same_rank
    return (c("unsqueeze", x, axes=[0]),
            c("unsqueeze", target, axes=[0]) if unbatch_target else target, True)


def _picked(c: m.Calc, logp: NTensor, target: NTensor, weight: NTensor | None, ignore_index: int,
            ) -> tuple[NTensor, NTensor]:
    """(-w[t] * logp[t] per sample, w[t] per sample), both 0 where t == ignore_index."""
    ctx = c.ctx
    target = ctx.cast(target, "i64")
    valid = c("ne", target, c.lit(ignore_index, "i64"))
    safe = c.select(valid, target, 0)  # ignore_index may lie outside [0, C): never gathered
    chosen = c("squeeze", c("tract_core_gather_elements", logp, c("unsqueeze", safe, axes=[1]), axis=1), axes=[1])
    if weight is None:
        w = c("tract_core_cast", valid, to=c.dtype)
    else:
        w = c.select(valid, c("tract_core_gather", ctx.cast(weight, c.dtype), safe, axis=0), 0.0)
    return c("neg", c("mul", chosen, w)), w


@handler("aten::nll_loss_nd", "aten::nll_loss", "aten::nll_loss2d", args="t t t? i i")
def nll_loss(ctx: OpContext, logp: NTensor, target: NTensor, weight: NTensor | None, reduction: int,
             ignore_index: int) -> NTensor:
    """aten::nll_loss_nd(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean, SymInt ignore_index=-100) -> Tensor  (also nll_loss, nll_loss2d)"""  # noqa: E501
    c = _calc(ctx)
    logp, target, unbatched = _batched(c, logp, target, same_rank=False)
    loss, w = _picked(c, logp, target, weight, ignore_index)
    return _weighted_mean(c, loss, w, reduction, unbatched)


@handler("aten::cross_entropy_loss", args="t t t? i i f")
def cross_entropy_loss(
    ctx: OpContext, x: NTensor, target: NTensor, weight: NTensor | None, reduction: int, ignore_index: int,
    label_smoothing: float,
) -> NTensor:
    """aten::cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean, SymInt ignore_index=-100, float label_smoothing=0.0) -> Tensor

    Class indices: nll of log_softmax; smoothing mixes in ``-sum_c w_c logp_c / C`` with the
    same reductions. Class probabilities: ``-sum_c w_c t_c logp_c``, the mean over samples."""  # noqa: E501
    c = _calc(ctx)
    probabilities = target.dtype in ("f16", "f32", "f64")
    x, target, unbatched = _batched(c, x, target, same_rank=probabilities)
    n_classes = x.shape[1]
    if label_smoothing and not isinstance(n_classes, int):
        raise ctx.unsupported("label smoothing over a dynamic number of classes")
    logp = m.log_softmax(c, x, 1)
    class_w = None if weight is None else channel_param(ctx, ctx.cast(weight, c.dtype), x.rank)
    if probabilities:
        t = ctx.cast(target, c.dtype)
        if label_smoothing:
            t = c("add", c("mul", t, 1.0 - label_smoothing), label_smoothing / int(n_classes))
        terms = c("mul", logp, t)
        if class_w is not None:
            terms = c("mul", terms, class_w)
        loss = c("neg", c("squeeze", c("sum_reduce", terms, axes=[1]), axes=[1]))
        return _reduced(c, loss, reduction, unbatched)
    loss, w = _picked(c, logp, target, weight, ignore_index)
    if label_smoothing:
        terms = logp if class_w is None else c("mul", logp, class_w)
        smooth = c("neg", c("squeeze", c("sum_reduce", terms, axes=[1]), axes=[1]))
        smooth = c.select(c("ne", ctx.cast(target, "i64"), c.lit(ignore_index, "i64")), smooth, 0.0)
        loss = c("add", c("mul", loss, 1.0 - label_smoothing), c("mul", smooth, label_smoothing / int(n_classes)))
    return _weighted_mean(c, loss, w, reduction, unbatched)


@handler("aten::kl_div", args="t t i b")
def kl_div(ctx: OpContext, x: NTensor, target: NTensor, reduction: int, log_target: bool) -> NTensor:
    """aten::kl_div(Tensor self, Tensor target, int reduction=Mean, *, bool log_target=False) -> Tensor

    ``t (log t - x)``, 0 where ``t == 0`` (``exp(t) (t - x)`` for log targets); batchmean is
    torch's sum divided by the batch size, traced apart."""
    c = _calc(ctx)
    x, t = _pair(c, x, target)
    if log_target:
        loss = c("mul", c("exp", t), c("sub", t, x))
    else:
        t_log_t = c.select(c("eq", t, 0.0), 0.0, c("mul", t, c("log", t)))
        loss = c("sub", t_log_t, c("mul", t, x))
    return _reduced(c, loss, reduction)


# --- margins -------------------------------------------------------------------------------------
@handler("aten::hinge_embedding_loss", args="t t f i")
def hinge_embedding_loss(ctx: OpContext, x: NTensor, y: NTensor, margin: float, reduction: int) -> NTensor:
    """aten::hinge_embedding_loss(Tensor self, Tensor target, float margin=1.0, int reduction=Mean) -> Tensor  (x where y == 1, max(0, margin - x) where y == -1)"""  # noqa: E501
    c = _calc(ctx)
    x, y = _pair(c, x, y)
    beyond = c.select(c("ne", y, 1.0), c("max", c("sub", margin, x), 0.0), 0.0)
    within = c.select(c("ne", y, -1.0), x, 0.0)
    return _reduced(c, c("add", beyond, within), reduction)


@handler("aten::margin_ranking_loss", args="t t t f i")
def margin_ranking_loss(ctx: OpContext, a: NTensor, b: NTensor, y: NTensor, margin: float, reduction: int) -> NTensor:
    """aten::margin_ranking_loss(Tensor input1, Tensor input2, Tensor target, float margin=0.0, int reduction=Mean) -> Tensor"""  # noqa: E501
    c = _calc(ctx)
    rank = max(a.rank, b.rank, y.rank)
    a, b, y = c.inputs(a, b, y, rank=rank)
    loss = c("max", c("add", c("mul", c("neg", y), c("sub", a, b)), margin), 0.0)
    return _reduced(c, loss, reduction)


@handler("aten::soft_margin_loss", args="t t i")
def soft_margin_loss(ctx: OpContext, x: NTensor, y: NTensor, reduction: int) -> NTensor:
    """aten::soft_margin_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor  (log(1 + exp(-y x)))"""
    c = _calc(ctx)
    x, y = _pair(c, x, y)
    return _reduced(c, m.softplus(c, c("neg", c("mul", y, x))), reduction)


@handler("aten::cosine_embedding_loss", args="t t t f i")
def cosine_embedding_loss(ctx: OpContext, a: NTensor, b: NTensor, y: NTensor, margin: float, reduction: int) -> NTensor:
    """aten::cosine_embedding_loss(Tensor input1, Tensor input2, Tensor target, float margin=0.0, int reduction=Mean) -> Tensor

    torch's cosine here: ``a.b / sqrt((|a|^2 + 1e-12)(|b|^2 + 1e-12))`` over the last axis;
    ``1 - cos`` where y == 1, ``max(0, cos - margin)`` where y == -1."""  # noqa: E501
    c = _calc(ctx)
    rank = max(a.rank, b.rank)
    a, b = c.inputs(a, b, rank=rank)
    last = [rank - 1]

    def squares(t: NTensor, u: NTensor) -> NTensor:
        return c("squeeze", c("sum_reduce", c("mul", t, u), axes=last), axes=last)

    denom = c("sqrt", c("mul", c("add", squares(a, a), 1e-12), c("add", squares(b, b), 1e-12)))
    cos = c("div", squares(a, b), denom)
    (y,) = c.inputs(y, rank=cos.rank)
    pos = c.select(c("eq", y, 1.0), c("sub", 1.0, cos), 0.0)
    neg = c.select(c("eq", y, -1.0), c("max", c("sub", cos, margin), 0.0), 0.0)
    return _reduced(c, c("add", pos, neg), reduction)


@handler("aten::triplet_margin_loss", args="t t t f f f b i")
def triplet_margin_loss(
    ctx: OpContext, anchor: NTensor, positive: NTensor, negative: NTensor, margin: float, p: float, eps: float,
    swap: bool, reduction: int,
) -> NTensor:
    """aten::triplet_margin_loss(Tensor anchor, Tensor positive, Tensor negative, float margin=1.0, float p=2, float eps=1e-06, bool swap=False, int reduction=Mean) -> Tensor"""  # noqa: E501
    c = _calc(ctx)

    def distance(u: NTensor, v: NTensor) -> NTensor:
        d = pairwise(c, u, v, p, eps)
        return c("squeeze", d, axes=[d.rank - 1])

    d_pos, d_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        d_neg = c("min", d_neg, distance(positive, negative))
    return _reduced(c, c("max", c("sub", c("add", d_pos, margin), d_neg), 0.0), reduction)


def _class_positions(c: m.Calc, n: object, rank: int, axis: int) -> NTensor:
    """0 .. C-1 along ``axis`` of a rank-``rank`` tensor of unit axes."""
    positions = c.ctx.tmp("tract_core_range", [0, n, 1], dtype="i64", shape=(n,), suffix="classes")  # type: ignore[arg-type]
    others = [a for a in range(rank) if a != axis]
    return c("unsqueeze", positions, axes=others) if others else positions


@handler("aten::multi_margin_loss", args="t t f f t? i")
def multi_margin_loss(
    ctx: OpContext, x: NTensor, target: NTensor, p: float, margin: float, weight: NTensor | None, reduction: int,
) -> NTensor:
    """aten::multi_margin_loss(Tensor self, Tensor target, Scalar p=1, Scalar margin=1, Tensor? weight=None, int reduction=Mean) -> Tensor

    Per sample: ``sum over i != y of max(0, margin - x[y] + x[i])^p * w[y] / C``."""  # noqa: E501
    if p not in (1, 2):
        raise ctx.unsupported(f"multi_margin_loss with p={p}", "torch only allows p = 1 or 2")
    c = _calc(ctx)
    x, target, unbatched = _batched(c, x, target, same_rank=False)
    t = c("unsqueeze", ctx.cast(target, "i64"), axes=[1])  # [N, 1]
    chosen = c("tract_core_gather_elements", x, t, axis=1)
    h = c("max", c("add", c("sub", margin, chosen), x), 0.0)
    if p == 2:
        h = c("sqr", h)
    if weight is not None:
        h = c("mul", h, c("tract_core_gather", ctx.cast(weight, c.dtype), t, axis=0))
    others = c("ne", _class_positions(c, x.shape[1], 2, 1), t)
    h = c.select(others, h, 0.0)
    loss = c("squeeze", c("mean_reduce", h, axes=[1]), axes=[1])  # the sum over classes / C
    return _reduced(c, loss, reduction, unbatched)


@handler("aten::multilabel_margin_loss", args="t t i")
def multilabel_margin_loss(ctx: OpContext, x: NTensor, target: NTensor, reduction: int) -> NTensor:
    """aten::multilabel_margin_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor

    The targets of a sample are its entries before the first -1; per sample:
    ``sum over targets j and non-targets i of max(0, 1 - (x[j] - x[i])) / C``."""
    c = _calc(ctx)
    x, target, unbatched = _batched(c, x, target, same_rank=True)
    t = ctx.cast(target, "i64")
    # Valid positions: no -1 at or before them (a running count of the -1s is still 0).
    ends = c("tract_core_cast", c("eq", t, c.lit(-1, "i64")), to="i64")
    valid = c("eq", running_sum(ctx, ends, 1), c.lit(0, "i64"))  # [N, C(j)]
    safe = c.select(valid, t, 0)
    x_target = c("unsqueeze", c("tract_core_gather_elements", x, safe, axis=1), axes=[2])  # [N, C(j), 1]
    classes = _class_positions(c, x.shape[1], 3, 2)  # [1, 1, C(i)]
    hit = c("and", c("eq", c("unsqueeze", safe, axes=[2]), classes), c("unsqueeze", valid, axes=[2]))
    is_target = c("any_reduce", hit, axes=[1])  # [N, 1, C(i)]
    hinge = c("max", c("add", c("sub", 1.0, x_target), c("unsqueeze", x, axes=[1])), 0.0)
    counted = c("and", c("unsqueeze", valid, axes=[2]), c("not", is_target))
    # The sum over (j, i) divided by C: a sum over targets of means over classes.
    per_sample = c("sum_reduce", c("mean_reduce", c.select(counted, hinge, 0.0), axes=[2]), axes=[1])
    return _reduced(c, c("squeeze", per_sample, axes=[1, 2]), reduction, unbatched)
