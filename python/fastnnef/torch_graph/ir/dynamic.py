"""Dynamic dimensions of the IR: which output dims of an op vary with a dynamic axis.

The builder (``builder.py``) calls ``propagate_dyn`` on every op it records. Every op kind
that may take a dynamic dim has a rule in the one table here, ``RULES``: a shape op's rule
(``dynamic_shape.py``) over its first input (views, reshapes, slices, pads, fills,
reductions, matmul, conv...), the others' (``dynamic_kinds.py``) over the whole op
(elementwise ops by broadcasting, ops keeping their input's dims, linear, chunks, recurrent
layers, pools, module calls by their extractor...). The marks are sizes over the axes'
symbols (``fastnnef.dim``) where they can be written. An op whose kind has no rule (or
whose rule cannot tell) gets every output dim marked ``UNKNOWN``: a handler that needs a
concrete size then refuses it clearly instead of trusting a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastnnef.dim import UNKNOWN, DimExpr, Size
from fastnnef.log import get_logger
from fastnnef.torch_graph.ir.data import CUSTOMOP_KIND, Const, IROp, ListValue, SymInt, TensorValue
from fastnnef.torch_graph.ir.dynamic_kinds import (
    KindRule,
    adaptive_pool_dyn,
    addmm_dyn,
    atleast_2d_dyn,
    bilinear_dyn,
    broadcast_tensors_dyn,
    broadcasting_dyn,
    cdist_dyn,
    col2im_dyn,
    conv_tbc_dyn,
    diag_embed_dyn,
    diff_dyn,
    einsum_dyn,
    embedding_bag_dyn,
    eye_dyn,
    fft_dyn,
    glu_dyn,
    grid_sampler_dyn,
    grouped_mm_dyn,
    hsplit_dyn,
    im2col_dyn,
    index_dyn,
    istft_dyn,
    kron_dyn,
    like_input_dyn,
    linear_dyn,
    loss_dyn,
    max_like_dyn,
    meshgrid_dyn,
    module_call_dyn,
    multi_head_attention_dyn,
    mv_dyn,
    native_group_norm_dyn,
    native_layer_norm_dyn,
    one_hot_dyn,
    outer_dyn,
    pair_distance_dyn,
    pdist_dyn,
    pieces_dyn,
    pixel_shuffle_dyn,
    pool_dyn,
    quantized_cat_dyn,
    quantized_conv_dyn,
    quantized_linear_dyn,
    quantized_matmul_dyn,
    ravel_dyn,
    recurrent_dyn,
    reduction_of_dyn,
    repeat_dyn,
    repeat_interleave_dyn,
    same_as_input_dyn,
    scalar_out_dyn,
    stack_dyn,
    static_out_dyn,
    take_along_dim_dyn,
    tile_dyn,
    to_padded_tensor_dyn,
    topk_dyn,
    unbind_dyn,
    upsample_dyn,
    view_as_complex_dyn,
    view_as_real_dyn,
    without_dim_dyn,
)
from fastnnef.torch_graph.ir.dynamic_shape import (
    DynRule,
    const_ints,
    conv_dyn,
    diagonal_dyn,
    embedding_dyn,
    expand_as_dyn,
    expand_dyn,
    flat_items,
    flatten_dyn,
    index_select_dyn,
    int_expr,
    mark,
    matmul_dyn,
    matrix_transpose_dyn,
    movedim_dyn,
    narrow_dyn,
    new_fill_dyn,
    pad_dyn,
    permute_dyn,
    reduction_dyn,
    reverse_dyn,
    rot90_dyn,
    sdpa_dyn,
    select_dyn,
    size_list_marks,
    size_of,
    sizes_dyn,
    slice_dyn,
    squeeze_dyn,
    stft_dyn,
    tensor_inputs,
    transpose_dyn,
    unflatten_dyn,
    unfold_dyn,
    unsqueeze_dyn,
)

__all__ = ["DynRule", "const_ints", "propagate_dyn"]

log = get_logger(__name__)


@dataclass(frozen=True)
class OverFirstInput:
    """A shape op's rule in ``RULES``: over its first input, its output and its other
    arguments (the other rules are ``KindRule``s, over the whole op)."""

    marks: DynRule


def propagate_dyn(op: IROp) -> None:
    """Mark the dynamic dims of ``op``'s tensor outputs from its inputs' and its size
    arguments, by the rule of its kind (unknown where there is none)."""
    if op.kind == "aten::arange" and _arange_dyn(op):
        return
    if op.kind in ("aten::cat", "aten::concat", "aten::concatenate") and _cat_dyn(op):
        return
    if op.kind in _FILLS and _fill_dyn(op):
        return
    rule = RULES.get(op.kind)
    if isinstance(rule, OverFirstInput) and op.inputs and isinstance(op.inputs[0], TensorValue):
        out = op.outputs[0]
        sym_args = any(isinstance(v, SymInt) for v in flat_items(op.inputs))
        if isinstance(out, TensorValue) and (
            any(t.is_dynamic() for t in tensor_inputs(op)) or out.is_dynamic() or sym_args
        ):
            marks = rule.marks(op.inputs[0], out, op.inputs[1:])
            if marks is not None:
                out.dyn = marks
                return
        elif isinstance(out, TensorValue):
            return
    tensors = tensor_inputs(op)
    for v in op.inputs:
        if isinstance(v, ListValue):
            tensors += [x for x in v.items if isinstance(x, TensorValue)]
    sym_args = any(isinstance(v, SymInt) for v in flat_items(op.inputs))
    if not any(t.is_dynamic() for t in tensors) and not sym_args:
        return
    outs = _tensor_outputs(op)
    kind_rule = module_call_dyn if op.kind.startswith(CUSTOMOP_KIND) else rule
    if isinstance(kind_rule, OverFirstInput):  # a shape rule that could not tell
        kind_rule = None
    told = kind_rule(op, outs) if kind_rule is not None else None
    if told is None or len(told) != len(outs) or any(len(m) != o.rank for m, o in zip(told, outs)):
        # No rule tells: every dim may vary. Handlers that need a size refuse such a dim
        # clearly; a kind that must do better gets a rule in RULES.
        log.debug("%s: no dynamic-dim rule for %s, its output dims are marked unknown", op.where(), op.kind)
        told = [(UNKNOWN,) * o.rank for o in outs]
    for tensor, dyn in zip(outs, told):
        tensor.dyn = tuple(dyn)


def _tensor_outputs(op: IROp) -> list[TensorValue]:
    """``op``'s tensor outputs, the items of a list output included, in order."""
    outs: list[TensorValue] = []
    for o in op.outputs:
        if isinstance(o, TensorValue):
            outs.append(o)
        elif isinstance(o, ListValue):
            outs += [x for x in o.items if isinstance(x, TensorValue)]
    return outs


def _arange_dyn(op: IROp) -> bool:
    """arange(end), arange(start, end) and arange(start, end, 1) with start and end static
    or dynamic sizes have length end - start: mark it (torch.arange over dynamic sizes builds
    position ids and masks in transformers; arange(P, P+S) has length S). A bound read from
    a tensor makes the length unknown until run time."""
    bounds = {5: 1, 6: 2, 7: 3}.get(len(op.inputs))
    out = op.outputs[0]
    if bounds is None or not isinstance(out, TensorValue) or out.rank != 1:
        return False
    if any(isinstance(v, TensorValue) for v in op.inputs[:bounds]):
        # Bounds read from tensors (model inputs): the length is known only when tract runs.
        out.dyn = (UNKNOWN,)
        return True
    start, end = (Const("", 0), op.inputs[0]) if bounds == 1 else (op.inputs[0], op.inputs[1])
    if bounds == 3 and not (isinstance(op.inputs[2], Const) and op.inputs[2].value == 1):
        return False
    exprs = [int_expr(v) for v in (start, end)]
    if not any(isinstance(v, SymInt) for v in (start, end)) or None in exprs:
        return False
    out.dyn = (mark(exprs[1] - exprs[0]),)  # type: ignore[operator]
    return True


def _cat_dyn(op: IROp) -> bool:
    """cat(tensors, dim): the concatenated dim is the sum of the inputs' (a KV cache of P
    entries grown by S new ones has P+S); every other dim follows the first input that is
    dynamic there. Inputs of size 0 along ``dim`` (torch's legacy empty tensors) are skipped."""
    out = op.outputs[0]
    if not (isinstance(out, TensorValue) and op.inputs and isinstance(op.inputs[0], ListValue)
            and len(op.inputs) > 1 and isinstance(op.inputs[1], Const) and out.rank):
        return False
    parts = [t for t in op.inputs[0].items if isinstance(t, TensorValue) and t.rank == out.rank]
    if len(parts) != len(op.inputs[0].items) or not any(t.is_dynamic() for t in parts):
        return False
    axis = op.inputs[1].value % out.rank
    total: Size = 0
    for t in parts:
        total = total + size_of(t, axis)
    dyn: list[DimExpr | None] = []
    for d in range(out.rank):
        if d == axis:
            dyn.append(mark(total))
        else:
            dyn.append(next((t.dyn[d] for t in parts if t.dyn[d] is not None), None))
    out.dyn = tuple(dyn)
    return True


# Ops whose input 0 is the output's size list (zeros(size), full(size, value)...).
_FILLS = frozenset({"aten::zeros", "aten::ones", "aten::empty", "aten::full"})


def _fill_dyn(op: IROp) -> bool:
    """zeros/ones/empty/full(size, ...): each output dim is static or carries its size's
    expression (``torch.zeros(x.size(1), 4)``)."""
    out = op.outputs[0]
    if not (isinstance(out, TensorValue) and op.inputs and isinstance(op.inputs[0], ListValue)):
        return False
    dyn = size_list_marks(op.inputs[0], out.rank)
    if dyn is None:
        return False
    out.dyn = dyn
    return True


# --- the table: every op kind that has a rule, in one place -----------------------------------
# Output dims equal to input 0's: unary elementwise ops, casts, normalizations, softmax,
# scans, masks of a matrix, *_like creations.
_SAME_AS_INPUT = (
    "abs", "neg", "sign", "sgn", "ceil", "floor", "round", "trunc", "frac", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "square", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "sigmoid", "relu", "relu6", "gelu", "silu",
    "mish", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "softplus", "softsign",
    "threshold", "logit", "nan_to_num", "bitwise_not", "logical_not", "isnan", "isinf", "isfinite", "clamp_min",
    "clamp_max", "to", "type_as", "clone", "contiguous", "detach", "dropout", "alpha_dropout", "feature_dropout",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "tril", "triu", "softmax",
    "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "cumsum", "cumprod",
    "logcumsumexp", "cummax", "cummin", "prelu", "diagonal_scatter", "slice_scatter", "select_scatter",
    "scatter", "scatter_add", "scatter_reduce", "index_put", "index_fill", "masked_scatter", "flip", "roll",
    "fill", "local_response_norm", "angle", "conj", "real", "imag", "deg2rad", "digamma", "lgamma", "mvlgamma",
    "hardshrink", "softshrink", "log_sigmoid", "positive", "signbit", "sinc", "special_entr", "special_erfcx",
    "special_log_ndtr", "special_ndtr", "special_ndtri", "renorm", "zero", "zero_", "copy_", "alias_copy",
    "_weight_norm", "fft_fftshift", "fft_ifftshift",
    "special_i0e", "special_gammaln", "flipud", "fliplr", "index_copy", "index_add", "frexp", "channel_shuffle",
    "native_channel_shuffle", "quantize_per_tensor", "quantize_per_channel", "dequantize", "bucketize",
    "argsort", "sort", "_transformer_encoder_layer_fwd", "_nested_tensor_from_mask",
)
# Elementwise ops over several tensors: the broadcast of their shapes.
_BROADCASTING = (
    "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "minimum",
    "maximum", "fmin", "fmax", "atan2", "hypot", "copysign", "xlogy", "lerp", "addcmul", "addcdiv", "where",
    "masked_fill", "clamp", "clip", "eq", "ne", "lt", "le", "gt", "ge", "__and__", "__or__", "__xor__",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
    "__lshift__", "__rshift__", "logical_and", "logical_or", "logical_xor", "polar", "complex", "heaviside",
    "ldexp", "logaddexp", "float_power", "isclose", "special_xlog1py",
)
# Reductions (single output) by the position of their dim argument after self.
_REDUCTIONS = (
    "aten::sum", "aten::mean", "aten::prod", "aten::amax", "aten::amin", "aten::argmax", "aten::argmin",
    "aten::all", "aten::any", "aten::logsumexp", "aten::nansum", "aten::nanmean", "aten::count_nonzero",
    "aten::var", "aten::std",
)
_SHAPE_RULES: dict[str, DynRule] = {
    "aten::view": sizes_dyn,
    "aten::reshape": sizes_dyn,
    "aten::flatten": flatten_dyn,
    "aten::unflatten": unflatten_dyn,
    "aten::squeeze": squeeze_dyn,
    "aten::permute": permute_dyn,
    "aten::transpose": transpose_dyn,
    "aten::t": transpose_dyn,
    "aten::unsqueeze": unsqueeze_dyn,
    "aten::embedding": embedding_dyn,
    "aten::scaled_dot_product_attention": sdpa_dyn,
    "aten::matmul": matmul_dyn,
    "aten::mm": matmul_dyn,
    "aten::bmm": matmul_dyn,
    "aten::index_select": index_select_dyn,
    "aten::select": select_dyn,
    "aten::movedim": movedim_dyn,
    "aten::moveaxis": movedim_dyn,
    "aten::mT": matrix_transpose_dyn,
    "aten::mH": matrix_transpose_dyn,
    "aten::adjoint": matrix_transpose_dyn,
    "aten::matrix_H": matrix_transpose_dyn,
    "aten::numpy_T": reverse_dyn,
    "aten::rot90": rot90_dyn,
    "aten::unfold": unfold_dyn,
    "aten::diagonal": diagonal_dyn,
    "aten::slice": slice_dyn,
    "aten::narrow": narrow_dyn,
    "aten::constant_pad_nd": pad_dyn,
    "aten::pad": pad_dyn,
    "aten::stft": stft_dyn,
    "aten::_convolution": conv_dyn,
    "aten::conv1d": conv_dyn,
    "aten::conv2d": conv_dyn,
    "aten::conv3d": conv_dyn,
    "aten::_convolution_mode": conv_dyn,
    "aten::expand": expand_dyn,
    "aten::expand_as": expand_as_dyn,
    "aten::broadcast_to": expand_as_dyn,
    "aten::new_zeros": new_fill_dyn,
    "aten::new_ones": new_fill_dyn,
    "aten::new_empty": new_fill_dyn,
    "aten::new_full": new_fill_dyn,
    **{kind: reduction_dyn(0) for kind in _REDUCTIONS},
    **{kind: reduction_dyn(1) for kind in ("aten::norm", "aten::linalg_vector_norm")},
}
_KIND_RULES: dict[str, KindRule] = {
    **{f"aten::{k}": same_as_input_dyn for k in _SAME_AS_INPUT},
    **{f"aten::{k}": broadcasting_dyn for k in _BROADCASTING},
    "aten::linear": linear_dyn,
    "aten::addmm": addmm_dyn,
    "aten::view_as": like_input_dyn(1),
    "aten::gather": like_input_dyn(2),
    "aten::one_hot": one_hot_dyn,
    "aten::eye": eye_dyn,
    "aten::cumulative_trapezoid": without_dim_dyn(2, 1),
    "aten::trapezoid": without_dim_dyn(2, None),
    "aten::pairwise_distance": pair_distance_dyn,
    "aten::cosine_similarity": pair_distance_dyn,
    "aten::cdist": cdist_dyn,
    "aten::pdist": pdist_dyn,
    "aten::diag_embed": diag_embed_dyn,
    "aten::view_as_real": view_as_real_dyn,
    "aten::view_as_complex": view_as_complex_dyn,
    "aten::glu": glu_dyn,
    "aten::conv_tbc": conv_tbc_dyn,
    "aten::chunk": pieces_dyn,
    "aten::unsafe_chunk": pieces_dyn,
    "aten::split": pieces_dyn,
    "aten::split_with_sizes": pieces_dyn,
    "aten::unbind": unbind_dyn,
    "aten::meshgrid": meshgrid_dyn,
    "aten::lstm": recurrent_dyn,
    "aten::gru": recurrent_dyn,
    "aten::rnn_tanh": recurrent_dyn,
    "aten::rnn_relu": recurrent_dyn,
    "aten::repeat": repeat_dyn,
    **{f"aten::{k}": upsample_dyn for k in (
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
        "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "_upsample_bilinear2d_aa",
        "_upsample_bicubic2d_aa")},
    "aten::max": max_like_dyn,
    "aten::min": max_like_dyn,
    "aten::aminmax": reduction_of_dyn(1, 2),
    "aten::linalg_matrix_norm": reduction_of_dyn(2, 3),
    "aten::topk": topk_dyn,
    "aten::native_layer_norm": native_layer_norm_dyn,
    "aten::native_group_norm": native_group_norm_dyn,
    "aten::mv": mv_dyn,
    "aten::outer": outer_dyn,
    "aten::ger": outer_dyn,
    "aten::dot": scalar_out_dyn,
    "aten::vdot": scalar_out_dyn,
    "aten::kron": kron_dyn,
    "aten::bilinear": bilinear_dyn,
    "aten::einsum": einsum_dyn,
    "aten::atleast_2d": atleast_2d_dyn,
    "aten::grid_sampler": grid_sampler_dyn,
    "aten::max_pool1d": pool_dyn(1, 2, 3, 4, 5),
    "aten::max_pool2d": pool_dyn(1, 2, 3, 4, 5),
    "aten::max_pool3d": pool_dyn(1, 2, 3, 4, 5),
    "aten::max_pool1d_with_indices": pool_dyn(1, 2, 3, 4, 5),
    "aten::max_pool2d_with_indices": pool_dyn(1, 2, 3, 4, 5),
    "aten::avg_pool1d": pool_dyn(1, 2, 3, None, 4),
    "aten::avg_pool2d": pool_dyn(1, 2, 3, None, 4),
    "aten::avg_pool3d": pool_dyn(1, 2, 3, None, 4),
    "aten::adaptive_avg_pool1d": adaptive_pool_dyn,
    "aten::adaptive_avg_pool2d": adaptive_pool_dyn,
    "aten::adaptive_avg_pool3d": adaptive_pool_dyn,
    "aten::adaptive_max_pool1d": adaptive_pool_dyn,
    "aten::adaptive_max_pool2d": adaptive_pool_dyn,
    "aten::im2col": im2col_dyn,
    "aten::istft": istft_dyn,
    "aten::col2im": col2im_dyn,
    "aten::index": index_dyn,
    "aten::repeat_interleave": repeat_interleave_dyn,
    "aten::ravel": ravel_dyn,
    "aten::fft_fft": fft_dyn,
    "aten::fft_ifft": fft_dyn,
    "aten::fft_rfft": fft_dyn,
    "aten::mse_loss": loss_dyn(2),
    "aten::cross_entropy_loss": loss_dyn(3),
    "aten::binary_cross_entropy_with_logits": loss_dyn(4),
    "aten::diff": diff_dyn,
    "aten::stack": stack_dyn,
    "aten::hstack": stack_dyn,
    "aten::broadcast_tensors": broadcast_tensors_dyn,
    "aten::take_along_dim": take_along_dim_dyn,
    "aten::hsplit": hsplit_dyn,
    "aten::histc": static_out_dyn,
    "aten::linalg_cross": broadcasting_dyn,
    "aten::_native_multi_head_attention": multi_head_attention_dyn,
    "aten::embedding_bag": embedding_bag_dyn,
    "aten::_embedding_bag": embedding_bag_dyn,
    "aten::_grouped_mm": grouped_mm_dyn,
    "aten::to_padded_tensor": to_padded_tensor_dyn,
    "quantized::conv1d": quantized_conv_dyn,
    "quantized::conv2d": quantized_conv_dyn,
    "quantized::conv2d_relu": quantized_conv_dyn,
    "quantized::linear": quantized_linear_dyn,
    "quantized::linear_relu": quantized_linear_dyn,
    "quantized::matmul": quantized_matmul_dyn,
    "quantized::cat": quantized_cat_dyn,
    **{f"quantized::{k}": same_as_input_dyn for k in (
        "batch_norm2d", "hardswish", "relu6", "leaky_relu", "mul_scalar", "add_scalar", "sigmoid", "hardsigmoid")},
    **{f"quantized::{k}": broadcasting_dyn for k in ("mul", "add", "add_relu")},
    "aten::pixel_shuffle": pixel_shuffle_dyn,
    "aten::pixel_unshuffle": pixel_shuffle_dyn,
    "aten::tile": tile_dyn,
    "aten::cross": broadcasting_dyn,

}
# Aliases and private/copy forms of kinds that have a rule: the same rule.
_ALIASES = {
    "aten::divide": "aten::div", "aten::multiply": "aten::mul", "aten::greater": "aten::gt",
    "aten::greater_equal": "aten::ge", "aten::less": "aten::lt", "aten::less_equal": "aten::le",
    "aten::not_equal": "aten::ne", "aten::arctan2": "aten::atan2", "aten::negative": "aten::neg",
    "aten::fix": "aten::trunc", "aten::rad2deg": "aten::deg2rad", "aten::_softmax": "aten::softmax",
    "aten::_log_softmax": "aten::log_softmax", "aten::special_softmax": "aten::softmax",
    "aten::special_log_softmax": "aten::log_softmax", "aten::_to_copy": "aten::to", "aten::to_dtype": "aten::to",
    "aten::detach_copy": "aten::detach", "aten::_conj": "aten::conj", "aten::_conj_physical": "aten::conj",
    "aten::conj_physical": "aten::conj", "aten::_prelu_kernel": "aten::prelu", "aten::special_erf": "aten::erf",
    "aten::special_erfc": "aten::erfc", "aten::special_erfinv": "aten::erfinv", "aten::special_exp2": "aten::exp2",
    "aten::special_expm1": "aten::expm1", "aten::special_log1p": "aten::log1p", "aten::special_logit": "aten::logit",
    "aten::special_psi": "aten::digamma", "aten::special_digamma": "aten::digamma", "aten::special_sinc": "aten::sinc",
    "aten::special_xlogy": "aten::xlogy", "aten::logaddexp2": "aten::logaddexp", "aten::i0": "aten::abs",
    "aten::special_i0": "aten::abs", "aten::special_i1": "aten::abs", "aten::special_i1e": "aten::abs",
    "aten::isneginf": "aten::isinf", "aten::isposinf": "aten::isinf", "aten::unsafe_split": "aten::split",
    "aten::split_copy": "aten::split", "aten::unbind_copy": "aten::unbind", "aten::reshape_as": "aten::view_as",
    "aten::_adaptive_avg_pool2d": "aten::adaptive_avg_pool2d",
    "aten::_adaptive_avg_pool3d": "aten::adaptive_avg_pool3d",
    "aten::adaptive_max_pool3d": "aten::adaptive_max_pool2d", "aten::max_pool3d_with_indices": "aten::max_pool3d",
    # shape ops
    "aten::_reshape_alias": "aten::view", "aten::_reshape_copy": "aten::reshape", "aten::swapaxes": "aten::transpose",
    "aten::swapdims": "aten::transpose", "aten::squeeze_copy": "aten::squeeze", "aten::_pad_circular": "aten::pad",
    **{f"aten::{mode}_pad{n}d": "aten::pad" for mode in ("reflection", "replication") for n in (1, 2, 3)},
    # torch.*_copy forms of views: the same dims as the view
    **{f"{kind}_copy": kind for kind in (
        "aten::view", "aten::permute", "aten::transpose", "aten::t", "aten::unsqueeze", "aten::expand",
        "aten::slice", "aten::select", "aten::narrow", "aten::unfold", "aten::diagonal")},
}
_CANONICAL: dict[str, OverFirstInput | KindRule] = {
    **{kind: OverFirstInput(rule) for kind, rule in _SHAPE_RULES.items()},
    **_KIND_RULES,
}
RULES: dict[str, OverFirstInput | KindRule] = {
    **_CANONICAL,
    **{alias: _CANONICAL[kind] for alias, kind in _ALIASES.items()},
}
