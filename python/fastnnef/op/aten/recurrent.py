"""Recurrent layers: aten::lstm, aten::gru, aten::rnn_tanh, aten::rnn_relu.

A layer and direction is one ``tract_core_scan`` over the time axis, so the time axis may be
dynamic (streaming audio). The input projection ``x @ W_ih^T + b`` of all steps is one
matmul before the scan; the scan body is an NNEF fragment holding one step (the recurrent
matmul and the gates), with the hidden (and cell) state as scan state. The reverse direction
scans with chunk -1: tract then reads the input and writes the output back to front, so the
output stays in time order.

The cells (nn.LSTMCell, torch.gru_cell...) never reach a handler of this family: tracing
records them as linear/unsafe_chunk/sigmoid/tanh ops, which the other families export.

Gate layouts are torch's: LSTM (i, f, g, o), ``c' = f*c + i*g``, ``h' = o*tanh(c')`` (then
``h' @ W_hr^T`` with ``proj_size``); GRU (r, z, n), ``n = tanh(x_n + r*(h W_hn^T + b_hn))``,
``h' = (1-z)*n + z*h``; RNN ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


@dataclass(frozen=True)
class _Step:
    """One time step of a layer: what its fragment computes (everything its text depends on)."""

    kind: str  # lstm, gru, rnn_tanh, rnn_relu
    hidden: int  # H (the cell size for LSTM)
    proj: bool  # LSTM proj_size: h' = h' @ W_hr^T
    hh_bias: bool  # GRU: b_hh is added inside the step (r scales W_hn h + b_hn)

    def params(self) -> list[str]:
        """Fragment parameters, in invocation order: the step input [1, B, G*H] (already
        projected, with the biases that can be folded), the states, then the weights."""
        names = ["x", "h"] + (["c"] if self.kind == "lstm" else []) + ["w_hh"]
        if self.hh_bias:
            names.append("b_hh")
        if self.proj:
            names.append("w_hr")
        return names

    def results(self) -> list[str]:
        """y: h' as [1, B, Hout] (one slice of the output sequence); then the new states."""
        return ["y", "h_next"] + (["c_next"] if self.kind == "lstm" else [])

    def body(self) -> list[str]:
        h = self.hidden

        def gate(src: str, k: int) -> str:
            return f"slice({src}, axes = [1], begin = [{k * h}], end = [{(k + 1) * h}])"

        rec = "matmul(h, w_hh, transposeA = false, transposeB = true)"
        lines = ["xt = squeeze(x, axes = [0]);"]
        if self.kind == "lstm":
            lines += [
                f"gates = add(xt, {rec});",
                f"i = sigmoid({gate('gates', 0)});",
                f"f = sigmoid({gate('gates', 1)});",
                f"g = tanh({gate('gates', 2)});",
                f"o = sigmoid({gate('gates', 3)});",
                "c_next = add(mul(f, c), mul(i, g));",
            ]
            if self.proj:
                lines += [
                    "h_full = mul(o, tanh(c_next));",
                    "h_next = matmul(h_full, w_hr, transposeA = false, transposeB = true);",
                ]
            else:
                lines.append("h_next = mul(o, tanh(c_next));")
        elif self.kind == "gru":
            lines.append(f"hg = add({rec}, b_hh);" if self.hh_bias else f"hg = {rec};")
            lines += [
                f"r = sigmoid(add({gate('xt', 0)}, {gate('hg', 0)}));",
                f"z = sigmoid(add({gate('xt', 1)}, {gate('hg', 1)}));",
                f"n = tanh(add({gate('xt', 2)}, mul(r, {gate('hg', 2)})));",
                "h_next = add(n, mul(z, sub(h, n)));",
            ]
        else:
            act = "tanh" if self.kind == "rnn_tanh" else "relu"
            lines.append(f"h_next = {act}(add(xt, {rec}));")
        lines.append("y = unsqueeze(h_next, axes = [0]);")
        return lines

    def fragment(self) -> tuple[str, str]:
        """(name, text): the name carries a hash of the body, so equal steps share one
        fragment and different ones never collide."""
        params = ", ".join(f"{p}: tensor<scalar>" for p in self.params())
        results = ", ".join(f"{r}: tensor<scalar>" for r in self.results())
        body = "\n".join("  " + line for line in self.body())
        rest = f"({params}) -> ({results})\n{{\n{body}\n}}"
        digest = hashlib.sha1(rest.encode()).hexdigest()[:10]
        name = f"fastnnef_{self.kind}_step_{digest}"
        return name, f"fragment {name}{rest}"


def _declare(ctx: OpContext, step: _Step) -> str:
    return ctx.fragment(*step.fragment())


def _row(ctx: OpContext, t: NTensor, k: int, suffix: str) -> NTensor:
    """``t[k]`` along axis 0 (the layer x direction axis of h0/c0)."""
    piece = ctx.tmp("slice", [t], {"axes": [0], "begin": [k], "end": [k + 1]}, suffix=suffix)
    return ctx.tmp("squeeze", [piece], {"axes": [0]}, suffix=suffix)


def _direction(
    ctx: OpContext, step: _Step, body: str, x: NTensor, weights: list[NTensor], has_biases: bool,
    states: list[NTensor], reverse: bool, tag: str,
) -> list[NTensor]:
    """One layer in one direction over x [T, B, I]: [output [T, B, Hout], h_n[, c_n]].
    ``weights``: this direction's slice of torch's flat list (w_ih, w_hh[, b_ih, b_hh][, w_hr]);
    ``states``: its initial h (and c)."""
    dtype = x.dtype
    w_ih, w_hh, *rest = (ctx.cast(w, dtype) for w in weights)
    bias = rest[0] if has_biases else None
    if has_biases and step.kind != "gru":  # b_hh folds into the projection; GRU's b_hn is scaled by r
        bias = ctx.tmp("add", rest[:2], suffix=tag + "_bias")
    steps, batch = x.shape[0], x.shape[1]
    xw = ctx.tmp("matmul", [x, ctx.to_rank(w_ih, 3)], {"transposeA": False, "transposeB": True}, suffix=tag + "_xw")
    if bias is not None:
        xw = ctx.tmp("add", [xw, ctx.to_rank(bias, 3)], suffix=tag + "_xw")
    full = [w_hh] + ([ctx.to_rank(rest[1], 2)] if step.hh_bias else []) + ([rest[-1]] if step.proj else [])

    chunk = -1 if reverse else 1  # negative: tract scans back to front, and writes back in place
    names = step.params()
    results = step.results()
    specs: list[tuple[str, str, Sequence[Size]]] = [(f"{tag}_y", dtype, (steps, batch, w_hh.shape[1]))]
    specs += [(f"{tag}_{r[0]}", dtype, s.shape) for r, s in zip(results[1:], states)]
    return list(ctx.tmp_multi("tract_core_scan", [], {
        "body": body,
        "scan": [Tuple(("x", xw, 0, chunk))],
        "full": [Tuple((n, t)) for n, t in zip(names[1 + len(states):], full)],
        "state": [Tuple((n, s, r)) for n, s, r in zip(names[1:], states, results[1:])],
        "output": [Tuple(("y", "full", 0, chunk))] + [Tuple((r, "last", 0, 1)) for r in results[1:]],
    }, specs))


@handler("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu", args="t v L b i f b b b")
def recurrent(
    ctx: OpContext, x: NTensor, hx: Any, params: list[NTensor], has_biases: bool, num_layers: int, dropout: float,
    train: bool, bidirectional: bool, batch_first: bool,
) -> list[NTensor]:
    """aten::lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)"""  # noqa: E501
    kind = ctx.kind.split("::")[-1]
    if train and dropout:
        raise ctx.unsupported("dropout between layers in training mode", "export the model in eval()")
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    if x.rank != 3:
        raise ctx.unsupported(f"a rank-{x.rank} input (expected [T, B, I] or [B, T, I])")
    if batch_first:
        x = ctx.tmp("transpose", [x], {"axes": [1, 0, 2]}, suffix="time_major")
    if kind == "lstm":
        if not (isinstance(hx, list) and len(hx) == 2 and all(isinstance(h, NTensor) for h in hx)):
            raise ctx.unsupported("an LSTM state that is not a (h0, c0) pair")
        initial = [ctx.cast(h, dtype) for h in hx]
    else:
        if not isinstance(hx, NTensor):
            raise ctx.unsupported("a state that is not a tensor")
        initial = [ctx.cast(hx, dtype)]
    directions = 2 if bidirectional else 1
    count = num_layers * directions
    per = 4 if has_biases else 2
    proj = kind == "lstm" and len(params) == count * (per + 1)  # proj_size adds weight_hr per layer
    if not proj and len(params) != count * per:
        raise ctx.unsupported(f"{len(params)} weight tensors for {count} layer directions")
    per += proj

    step = _Step(kind, int(params[1].shape[0]) // _GATES[kind], proj, has_biases and kind == "gru")
    body = _declare(ctx, step)
    layer_in = x
    finals: list[list[NTensor]] = [[] for _ in initial]  # h_n (and c_n) of every layer direction
    for layer in range(num_layers):
        outs: list[NTensor] = []
        for d in range(directions):
            k = layer * directions + d
            tag = f"l{layer}" + ("_reverse" if d else "")
            states = [_row(ctx, s, k, f"{tag}_{s0}") for s, s0 in zip(initial, ("h0", "c0"))]
            y, *last = _direction(ctx, step, body, layer_in, params[k * per:(k + 1) * per], has_biases, states,
                                  bool(d), tag)
            outs.append(y)
            for acc, t in zip(finals, last):
                acc.append(t)
        if directions == 1:
            layer_in = outs[0]
        else:
            layer_in = ctx.tmp("concat", [outs], {"axis": 2}, suffix=f"l{layer}_cat")

    if batch_first:
        y = ctx.emit("transpose", [layer_in], {"axes": [1, 0, 2]}, out=0)
    else:
        y = ctx.emit("copy", [layer_in], out=0)
    return [y] + [_stacked(ctx, acc, i + 1) for i, acc in enumerate(finals)]


@handler("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu", args="t t v L b i f b b", overload="data")
def recurrent_packed(ctx: OpContext, *_: Any) -> list[NTensor]:
    """aten::lstm.data(Tensor data, Tensor batch_sizes, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional) -> (Tensor, Tensor, Tensor)"""  # noqa: E501
    raise ctx.unsupported(
        "packed sequences (the batch_sizes overload)",
        "pass a padded tensor to the recurrent layer instead of a PackedSequence",
    )


def _stacked(ctx: OpContext, states: list[NTensor], out: int) -> NTensor:
    """The final states of every layer and direction as [L*D, B, H]."""
    if len(states) == 1:
        return ctx.emit("unsqueeze", states, {"axes": [0]}, out=out)
    return ctx.emit("stack", [states], {"axis": 0}, out=out)


@handler("aten::_pack_padded_sequence", args="*")
def pack_padded_sequence(ctx: OpContext) -> list[NTensor]:
    """aten::_pack_padded_sequence(Tensor input, Tensor lengths, bool batch_first) -> (Tensor, Tensor)"""
    raise ctx.unsupported(
        "packed sequences (nn.utils.rnn.pack_padded_sequence): their layout depends on the "
        "lengths' values, which a graph cannot follow",
        "pass the padded tensor to the recurrent layer, then take each sequence's output at "
        "its length (e.g. torch.gather with lengths - 1) or mask the padding",
    )
