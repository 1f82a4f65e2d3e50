"""Shape ops on dynamic axes in the two cases the trace alone misleads: a dynamic axis traced
at size 1 (its size then matches every unit dim, and a reshape rule matching traced sizes
took it for one), and dims whose expression the IR lost (``?``: two of them are not the
same size). Each export is run in tract at the traced sizes and at other sizes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


T0 = {0: {0: "TILES"}}
T1 = {0: {1: "TILES"}}

# (id, fn, input traced with its dynamic axis at 1, dynamic axes); each runs again at 3 and 4.
AT_ONE = [
    ("flatten_leading", lambda x: x.flatten(0, 1), randn(1, 4, 8), T0),
    ("flatten_all", lambda x: x.flatten(), randn(1, 4, 8), T0),
    ("flatten_middle", lambda x: x.flatten(1, 2), randn(2, 1, 8), T1),
    ("flatten_trailing", lambda x: x.flatten(1), randn(4, 1, 8), T1),
    ("flatten_leading_then_linear", lambda x: x.flatten(0, 1) @ torch.ones(8, 3), randn(1, 4, 8), T0),
    ("reshape_infer", lambda x: x.reshape(-1, 8), randn(1, 4, 8), T0),
    ("view_infer_middle", lambda x: x.view(2, -1), randn(2, 1, 8), T1),
    ("view_sizes", lambda x: x.view(x.size(0) * 4, 8), randn(1, 4, 8), T0),
    ("view_unit_dims", lambda x: x.view(-1, 1, 8), randn(1, 8), T0),
    ("unflatten", lambda x: x.unflatten(1, (2, 4)), randn(1, 8), T0),
    ("unflatten_dynamic_dim", lambda x: x.unflatten(0, (-1, 1)), randn(1, 8), T0),
    ("unsqueeze_before", lambda x: x.unsqueeze(0), randn(1, 8), T0),
    ("unsqueeze_after", lambda x: x.unsqueeze(1).flatten(1), randn(1, 8), T0),
    ("squeeze_other_dim", lambda x: x.squeeze(1), randn(1, 1, 8), T0),
    ("squeeze_leading_unit", lambda x: x.squeeze(0), randn(1, 1, 8), T1),
    ("permute", lambda x: x.permute(1, 0, 2).reshape(4, -1), randn(1, 4, 8), T0),
    ("expand", lambda x: x.expand(-1, 4, 8).flatten(0, 1), randn(1, 1, 8), T0),
    ("keepdim_sum_then_flatten", lambda x: x.sum(0, keepdim=True).flatten(), randn(1, 8), T0),
    ("keepdim_mean_of_other_dim", lambda x: x.mean(1, keepdim=True).flatten(), randn(1, 8), T0),
]


def _at(x: torch.Tensor, dyn: dict[int, dict[int, str]], size: int) -> torch.Tensor:
    shape = list(x.shape)
    for d in dyn[0]:
        shape[d] = size
    return torch.randn(*shape)


@pytest.mark.parametrize("fn, x, dyn", [pytest.param(*c[1:], id=c[0]) for c in AT_ONE])
def test_dynamic_axis_traced_at_one(fn: Callable[..., Any], x: torch.Tensor, dyn: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    check(fn, (x,), tmp_path, dyn)  # traced size, redrawn, and 3 longer
    target = TractNNEF.latest().with_dynamic_axes({"in0": dyn[0]})
    export_and_check(Fn(fn), (x,), tmp_path, target=target, input_names=["in0"], name="at3.nnef",
                     run_inputs=[_at(x, dyn, 3)])


# (id, fn, traced inputs, dynamic axes, inputs to run at other sizes)
UNNAMED = [
    # [A, B, 4, C] -> [?, C] (4*A*B is no linear size) -> [?/4, 4C] (Qwen2.5-VL's patch merger):
    # the two ? are different sizes, so the second view must take the first axis too.
    ("view_unknown_into_unknown", lambda x: x.reshape(-1, x.size(-1)).view(-1, 4 * 3), (randn(2, 1, 4, 3),),
     {0: {0: "A", 1: "B"}}, (randn(3, 2, 4, 3),)),
    ("view_unknown_keep_trailing", lambda x: x.reshape(-1, 6).view(-1, 2, 3), (randn(2, 2, 6),),
     {0: {0: "A", 1: "B"}}, (randn(3, 5, 6),)),
    ("view_unknown_split_trailing", lambda x: x.reshape(-1, 2, 3).reshape(-1, 3), (randn(2, 2, 6),),
     {0: {0: "A", 1: "B"}}, (randn(3, 5, 6),)),
    ("view_unknown_same_shape", lambda x: x.reshape(-1, 6).view(-1, 6) * 2, (randn(2, 2, 6),),
     {0: {0: "A", 1: "B"}}, (randn(3, 5, 6),)),
    # reshape(1, h.size(1), -1) of rows whose count the IR lost (Pixtral's attention output)
    ("reshape_unknown_rows_by_their_size", lambda x: (lambda h: h.reshape(1, h.size(1), -1))(x.reshape(1, -1, 4, 8)),
     (randn(2, 3, 4, 8),), {0: {0: "A", 1: "B"}}, (randn(3, 5, 4, 8),)),
    # expand's -1 keeps x's own dim: no broadcast needed, unknown or not
    ("expand_keeps_unknown_unchanged", lambda x: x.reshape(-1, 4).expand(-1, 4) * 2, (randn(2, 2, 4),),
     {0: {0: "A", 1: "B"}}, (randn(3, 5, 4),)),
]


@pytest.mark.parametrize("fn, inputs, dyn, other", [pytest.param(*c[1:], id=c[0]) for c in UNNAMED])
def test_unnamed_sizes_are_not_equal(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], dyn: Any,
                                     other: tuple[torch.Tensor, ...], tmp_path: Path) -> None:
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({f"in{k}": axes for k, axes in dyn.items()})
    names = [f"in{k}" for k in range(len(inputs))]
    export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=names)
    export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=names, name="other.nnef",
                     run_inputs=list(other))


def test_reshape_whole_only_for_some_lengths_is_refused(tmp_path: Path) -> None:
    """[N, 3] -> [-1, 12] is [N/4, 12]: tract cannot prove 12 * (N/4) = 3 * N, so the
    exporter says so instead of writing a graph tract refuses."""
    target = TractNNEF.latest().with_dynamic_axes({"in0": {0: "N"}})
    with pytest.raises(T2NErrorNotImplemented, match="rows of 12"):
        export_and_check(Fn(lambda x: x.view(-1, 4 * 3)), (randn(8, 3),), tmp_path, target=target,
                         input_names=["in0"])


def test_squeeze_of_dynamic_axis_traced_at_one_is_refused(tmp_path: Path) -> None:
    """torch squeezed the axis because it was 1 in the trace; at other sizes it keeps it."""
    target = TractNNEF.latest().with_dynamic_axes({"in0": {0: "TILES"}})
    with pytest.raises(T2NErrorNotImplemented, match="traced at size 1"):
        export_and_check(Fn(lambda x: x.squeeze(0)), (randn(1, 8),), tmp_path, target=target, input_names=["in0"])


class _SiglipTiles(torch.nn.Module):
    """A SigLIP tower on a batch of tiles, flattened to rows (Gemma 3's and Idefics3's image
    encoders): exported with one tile in the trace, it must still take several."""

    def __init__(self) -> None:
        super().__init__()
        import transformers

        config = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                 num_attention_heads=4, image_size=16, patch_size=4)
        self.tower = transformers.SiglipVisionModel(config).eval()

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.tower(pixel_values=pixel_values).last_hidden_state.flatten(0, 1)


class _QwenMerger(torch.nn.Module):
    """Qwen2.5-VL's own patch merger (``view(-1, 4C)``) after patches ``[MH, MW, 2, 2, D]``
    were flattened to rows: the merger's input row count is ``4*MH*MW``, which the IR does
    not write (a product of two axes), so its view must not keep that axis as is."""

    def __init__(self) -> None:
        super().__init__()
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLPatchMerger

        self.embed = torch.nn.Linear(12, 8)
        self.merger = Qwen2_5_VLPatchMerger(dim=16, context_dim=8, spatial_merge_size=2)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.merger(self.embed(patches.reshape(-1, patches.shape[-1])))


@pytest.mark.parametrize("make, traced, dyn, other", [
    pytest.param(_SiglipTiles, randn(1, 3, 16, 16), {0: "TILES"}, randn(3, 3, 16, 16), id="siglip-tiles-traced-at-one"),
    pytest.param(_QwenMerger, randn(2, 3, 2, 2, 12), {0: "MH", 1: "MW"}, randn(4, 5, 2, 2, 12), id="qwen-merger"),
])
def test_vision_towers(make: Callable[[], torch.nn.Module], traced: torch.Tensor, dyn: dict[int, str],
                       other: torch.Tensor, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = make().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": dyn})
    export_and_check(model, (traced,), tmp_path, target=target, input_names=["x"], atol=1e-3, rtol=1e-3)
    export_and_check(model, (traced,), tmp_path, target=target, input_names=["x"], name="other.nnef",
                     run_inputs=[other], atol=1e-3, rtol=1e-3)
