"""State-space and short-convolution layers (Mamba, Mamba2, Falcon-Mamba, LFM2's short
convolutions, and the hybrids built on them): their states as cache tensors, and the
forward the wrapper runs them with.

Such a layer keeps no key/value cache but fixed-size states, which the artefact takes and
returns beside the attention layers' keys and values (shapes as transformers' own cache
holds them):

- ``in_cache_conv_{i}`` / ``out_cache_conv_{i}`` ``[1, channels, k]``: the last ``k`` inputs
  of the layer's depthwise causal convolution (``k`` its kernel width; LFM2: ``conv_L_cache``);
- ``in_cache_recurrent_{i}`` / ``out_cache_recurrent_{i}``: the selective scan's state,
  ``[1, intermediate, state]`` for Mamba (and Falcon-Mamba, Jamba's Mamba layers),
  ``[1, heads, head dim, state]`` for Mamba2 (and the Mamba2 layers of Bamba, Granite 4.0-H,
  Nemotron-H, Zamba2). LFM2's short convolutions have none.

Neither has a P axis: an empty past (a prompt) is zeros, as transformers' prompt path
assumes (zero left context for the convolution, zero initial state for the scan).

transformers' forwards of these layers branch on the sequence length (a padded
convolution and a loop or a chunked scan for prompts, a single-step update for tokens):
traced, they would be frozen to the example's length. ``state_space_forward`` replaces
each layer's forward, per module instance and for the duration of one wrapper call, by the
same computation for any S from the given states: the convolution over the state followed
by the new inputs (plain ops), and the selective scan as one ``tract_core_scan``
(``SelectiveScanReified``, op/custom_extractors/ssm.py). Projections, norms and gates are
the module's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.llm.linear_attention import LinearStates
from fastnnef.op.custom_extractors.ssm import SelectiveScanReified

CONV = "conv"
RECURRENT = "recurrent"
_SILU = ("silu", "swish")
# transformers' default Mamba2 time-step limit: no clamping.
_NO_LIMIT = (0.0, float("inf"))

__all__ = ["MIXERS", "Mixer", "StateSpaceOps", "state_space_forward", "state_space_mixers"]


def causal_conv(x: torch.Tensor, state: torch.Tensor, conv: nn.Conv1d) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal convolution of ``x [b, C, S]`` after the ``k`` inputs of ``state
    [b, C, k]``: the S outputs (no activation) and the last ``k`` inputs as the new state."""
    width, new = state.shape[-1], x.shape[-1]
    full = torch.cat([state.to(x.dtype), x], dim=-1)  # [b, C, k + S]
    # Tap j of output s reads input s + 1 + j of `full` (its first input is older than any
    # window of the new outputs). A sum of k shifted slices, not F.conv1d: the weights are
    # value-less stand-ins while the LLM exporter traces (tensor/offload.py), and a
    # convolution of one fails under the tracer; the slices are as cheap for k of 3 or 4.
    weight = conv.weight[:, 0]  # [C, k]
    out = full[..., 1: 1 + new] * weight[:, :1]
    for tap in range(1, conv.kernel_size[0]):
        out = out + full[..., 1 + tap: 1 + tap + new] * weight[:, tap: tap + 1]
    if conv.bias is not None:
        out = out + conv.bias[:, None]
    return out, full[..., -width:].to(state.dtype)


# --- LFM2's gated short convolution --------------------------------------------------------
def _short_conv_forward(self: Any, hidden_states: torch.Tensor, cache: Any = None, attention_mask: Any = None,
                        ops: Any = None, **kwargs: Any) -> torch.Tensor:
    """``Lfm2ShortConv.forward``: ``out_proj(C * conv(B * x))`` from the state in ``cache``."""
    states: LinearStates = cache.layers[self.layer_idx]
    b_gate, c_gate, x = self.in_proj(hidden_states).transpose(-1, -2).chunk(3, dim=-2)
    conv_out, states.conv = causal_conv(b_gate * x, states.conv, self.conv)
    return self.out_proj((c_gate * conv_out).transpose(-1, -2).contiguous())


def _is_short_conv(m: nn.Module) -> bool:
    return isinstance(getattr(m, "conv", None), nn.Conv1d) and all(
        isinstance(getattr(m, n, None), nn.Linear) for n in ("in_proj", "out_proj"))


def _short_conv_shapes(m: Any) -> tuple[tuple[int, ...], ...]:
    return ((1, m.conv.in_channels, m.conv.kernel_size[0]),)


def _recurrent(states: LinearStates) -> torch.Tensor:
    """The scan's state of a layer (its cache layer always holds one: wrapper.layer_cache_names)."""
    if states.recurrent is None:
        raise T2NErrorNotImplemented("a selective-scan layer was given no recurrent state: its cache layout is wrong")
    return states.recurrent


# --- Mamba (selective scan over a diagonal state per channel) ---------------------------------
def _mamba_forward(self: Any, hidden_states: torch.Tensor, cache: Any = None, attention_mask: Any = None,
                   ops: StateSpaceOps | None = None, **kwargs: Any) -> torch.Tensor:
    """``MambaMixer.forward`` (and Falcon-Mamba's, Jamba's: norms on dt, B and C where the
    module has them) from the states in ``cache``."""
    assert ops is not None  # bound by state_space_forward
    states: LinearStates = cache.layers[self.layer_idx]
    dtype = hidden_states.dtype
    x, gate = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)
    x, states.conv = causal_conv(x, states.conv, self.conv1d)
    x = self.act(x).transpose(1, 2)  # [b, S, D]
    time_step, B, C = torch.split(self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size],
                                  dim=-1)
    if hasattr(self, "dt_layernorm"):
        time_step, B, C = self.dt_layernorm(time_step), self.b_layernorm(B), self.c_layernorm(C)
    dt = F.softplus(self.dt_proj(time_step).float())  # [b, S, D]
    A = -torch.exp(self.A_log.float())  # [D, N]
    recurrent = _recurrent(states)
    y, final = ops.scan(dt[..., None], x.float()[..., None], B.float()[:, :, None], C.float()[:, :, None],
                        A[None, None], recurrent.float()[:, None])
    states.recurrent = final[:, 0].to(recurrent.dtype)
    y = (y + x.float() * self.D.float()) * F.silu(gate.transpose(1, 2).float())
    return self.out_proj(y.to(dtype))


def _is_mamba(m: nn.Module) -> bool:
    a_log = getattr(m, "A_log", None)
    return isinstance(getattr(m, "conv1d", None), nn.Conv1d) and isinstance(a_log, torch.Tensor) \
        and a_log.dim() == 2 and all(isinstance(getattr(m, n, None), nn.Linear)
                                     for n in ("in_proj", "x_proj", "dt_proj", "out_proj"))


def _mamba_shapes(m: Any) -> tuple[tuple[int, ...], ...]:
    return (1, m.conv1d.in_channels, m.conv1d.kernel_size[0]), (1, *m.A_log.shape)


# --- Mamba2 (a scalar decay per head, groups of B and C) -----------------------------------
def _mamba2_forward(self: Any, hidden_states: torch.Tensor, cache: Any = None, attention_mask: Any = None,
                    ops: StateSpaceOps | None = None, **kwargs: Any) -> torch.Tensor:
    """``Mamba2Mixer.forward`` (and the Mamba2 layers of Bamba, Granite 4.0-H, Nemotron-H,
    Zamba2, Falcon-H1: its input and projection multipliers, and its gate applied without a
    norm unless ``mamba_rms_norm``) from the states in ``cache``."""
    assert ops is not None  # bound by state_space_forward
    states: LinearStates = cache.layers[self.layer_idx]
    batch, new = hidden_states.shape[:2]
    dtype = hidden_states.dtype
    heads, groups, head_dim, size = self.num_heads, self.n_groups, self.head_dim, self.ssm_state_size
    per_group = heads // groups
    if hasattr(self, "ssm_in_multiplier"):
        hidden_states = hidden_states * self.ssm_in_multiplier
    projected = self.in_proj(hidden_states)
    if hasattr(self, "mup_vector"):
        projected = projected * self.mup_vector
    gate, xbc, dt = projected.split([self.intermediate_size, self.conv_dim, heads], dim=-1)
    xbc, states.conv = causal_conv(xbc.transpose(1, 2), states.conv, self.conv1d)
    xbc = self.act(xbc).transpose(1, 2)
    x, B, C = torch.split(xbc, [self.intermediate_size, groups * size, groups * size], dim=-1)
    dt = F.softplus(dt.float() + self.dt_bias.float())  # [b, S, H]
    if tuple(self.time_step_limit) != _NO_LIMIT:
        dt = torch.clamp(dt, self.time_step_limit[0], self.time_step_limit[1])
    A = -torch.exp(self.A_log.float())  # [H]
    recurrent = _recurrent(states)
    # Heads grouped as [G, H/G] so that B and C broadcast over their group's heads.
    # Sizes spelled out, not -1: the trace keeps S symbolic through them.
    xs = x.float().reshape(batch, new, groups, per_group, head_dim, 1)
    y, final = ops.scan(
        dt.reshape(batch, new, groups, per_group, 1, 1), xs,
        B.float().reshape(batch, new, groups, 1, 1, size), C.float().reshape(batch, new, groups, 1, 1, size),
        A.reshape(1, 1, groups, per_group, 1, 1),
        recurrent.float().reshape(batch, 1, groups, per_group, head_dim, size),
    )
    states.recurrent = final.reshape(batch, heads, head_dim, size).to(recurrent.dtype)
    y = y + xs[..., 0] * self.D.float().reshape(groups, per_group, 1)
    y = y.reshape(batch, new, self.intermediate_size)
    y = self.norm(y.to(dtype), gate) if getattr(self, "mamba_rms_norm", True) else y * F.silu(gate.float())
    return self.out_proj(y.to(dtype))


def _is_mamba2(m: nn.Module) -> bool:
    a_log = getattr(m, "A_log", None)
    modules = ("in_proj", "norm", "out_proj")
    return isinstance(getattr(m, "conv1d", None), nn.Conv1d) and isinstance(a_log, torch.Tensor) \
        and a_log.dim() == 1 and all(isinstance(getattr(m, n, None), nn.Module) for n in modules) \
        and all(hasattr(m, n) for n in ("dt_bias", "D", "num_heads", "n_groups", "head_dim", "ssm_state_size",
                                        "intermediate_size", "conv_dim", "time_step_limit"))


def _mamba2_shapes(m: Any) -> tuple[tuple[int, ...], ...]:
    return (1, m.conv1d.in_channels, m.conv1d.kernel_size[0]), (1, m.num_heads, m.head_dim, m.ssm_state_size)


@dataclass(frozen=True)
class Mixer:
    """A kind of state-space token mixer: how it is recognized, its states and their
    shapes, and the forward that the export runs it with."""

    name: str
    states: tuple[str, ...]
    matches: Callable[[nn.Module], bool]
    shapes: Callable[[Any], tuple[tuple[int, ...], ...]]
    forward: Callable[..., torch.Tensor]


#: The mixers, tried in order on each module of a model (Mamba before Mamba2: the first
#: matching kind is taken).
MIXERS: tuple[Mixer, ...] = (
    Mixer("Mamba selective scan", (CONV, RECURRENT), _is_mamba, _mamba_shapes, _mamba_forward),
    Mixer("Mamba2 selective scan", (CONV, RECURRENT), _is_mamba2, _mamba2_shapes, _mamba2_forward),
    Mixer("gated short convolution", (CONV,), _is_short_conv, _short_conv_shapes, _short_conv_forward),
)


def _check(mixer: Mixer, module: Any, path: str) -> None:
    """Raise when ``module`` computes something its forward above does not."""
    conv = module.conv1d if hasattr(module, "conv1d") else module.conv
    if conv.groups != conv.in_channels or conv.out_channels != conv.in_channels:
        raise T2NErrorNotImplemented(f"{path}: its convolution is not depthwise (groups={conv.groups})")
    if mixer.states == (CONV,):
        return
    if str(getattr(module, "activation", "silu")) not in _SILU:
        raise T2NErrorNotImplemented(
            f"{path}: its convolution is followed by {module.activation!r}; the exporter knows SiLU (Mamba's)")


@dataclass(frozen=True)
class StateLayer:
    """One state-space layer: its mixer module, what kind, and its states' shapes."""

    module: nn.Module
    mixer: Mixer
    shapes: tuple[tuple[int, ...], ...]


def state_space_mixers(model: nn.Module, layers: tuple[int, ...]) -> dict[int, StateLayer]:
    """The state-space mixer of each of ``layers`` (by ``layer_idx``), checked; raises when
    one is missing or of a kind the exporter does not know."""
    found: dict[int, StateLayer] = {}
    for path, module in model.named_modules():
        index = getattr(module, "layer_idx", None)
        if not isinstance(index, int) or index not in layers or index in found:
            continue
        mixer = next((k for k in MIXERS if k.matches(module)), None)
        if mixer is not None:
            _check(mixer, module, path)
            found[index] = StateLayer(module, mixer, mixer.shapes(module))
    missing = sorted(set(layers) - set(found))
    if missing:
        raise T2NErrorNotImplemented(
            f"layers {missing} keep a convolution or recurrent state, but the model has no module for them that the "
            f"LLM exporter knows (it exports {', '.join(k.name for k in MIXERS)} layers)"
        )
    return found


class StateSpaceOps(nn.Module):
    """The module one layer's forward calls (kept whole by the trace); held by the wrapper,
    so that the model's own module tree is untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.scan = SelectiveScanReified()


@contextmanager
def state_space_forward(layers: Mapping[int, StateLayer], ops: Mapping[int, StateSpaceOps]) -> Iterator[None]:
    """Within the block, each layer's mixer computes its kind's forward with the ops of its
    layer (an instance attribute shadows the class's ``forward``; removed on exit)."""
    for index, layer in layers.items():
        layer.module.forward = functools.partial(layer.mixer.forward, layer.module, ops=ops[index])
    try:
        yield
    finally:
        for layer in layers.values():
            del layer.module.forward  # back to the class's forward
