"""The front end every ``export_and_check`` uses (tests/helpers.py): ``--front-end=auto``
(the default, what users get: torch.export, the tracer where it cannot serve the model),
``--front-end=export`` (torch.export only) or ``--front-end=jit`` (torch.jit.trace only),
so that the same tests run under each. The tests that only the jit front end passes are
``JIT_ONLY``, with why: under ``--front-end=export`` each is a strict xfail (README.md,
"Front ends", lists them too); under ``"auto"`` they pass through its fallback to the tracer.

torch warns of ``torch.jit.trace``'s deprecation on every trace and pyproject.toml turns
warnings into errors: under ``--front-end=jit`` that one warning is ignored (the run asks
for the tracer); elsewhere a test that traces on purpose says so itself."""

from __future__ import annotations

import pytest

from tests import helpers

_DATA_DEPENDENT = "a size computed from a tensor's values is an unbacked symbol to torch.export; the tracer " \
    "computes it in the graph"
_REFUSED_OTHERWISE = "refused under torch.export too, with torch's error instead of the message the test matches"
_SPECIALIZED = "torch.export fixes the dynamic axis to its traced size (a guard of torch's kernels)"
_UNROLLED = "torch's own kernel of aten::lstm/gru/rnn unrolls the time axis, so torch.export fixes it to its " \
    "traced length (the tracer keeps the op and its dynamic axis)"
_CELL = "torch.export keeps aten::lstm_cell/gru_cell/rnn_*_cell whole, for which there is no handler (the tracer " \
    "records their math: linear, chunk and gates)"
_QUANTIZED = "torch.export cannot capture torch.ao's quantized modules and tensors (their packed weights are " \
    "TorchScript classes without __obj_flatten__; quantized tensors have no fake kernels)"

_LEGACY_WEIGHT_NORM = "the legacy weight_norm assigns a tensor attribute in a forward " \
    "pre-hook, which torch.export refuses"

JIT_ONLY: dict[str, str] = {
    "tests/op/test_creation.py::test_arange_of_tensor_bounds_follows_the_values": _DATA_DEPENDENT,
    "tests/op/test_layout.py::test_layout[repeat_interleave_tensor_in_forward]": _DATA_DEPENDENT,
    "tests/op/test_layout.py::test_layout[repeat_interleave_tensor_single]": _DATA_DEPENDENT,
    "tests/op/test_loss.py::test_loss[gaussian_nll]": "torch's gaussian_nll_loss guards on a tensor's value",
    "tests/op/test_conv.py::test_conv_tbc_dynamic_time_f16": _SPECIALIZED,
    "tests/op/test_layout.py::test_layout[native_channel_shuffle_dyn]": _SPECIALIZED,
    "tests/op/test_linalg.py::test_linalg[kron_dyn]": _SPECIALIZED,
    "tests/op/test_linalg.py::test_linalg[matrix_norm_f16_dyn]": _SPECIALIZED,
    "tests/op/test_lookup.py::test_lookup[take_along_dim_dyn]": _SPECIALIZED,
    "tests/op/test_creation.py::test_tables_refused[one_hot_no_classes]": _REFUSED_OTHERWISE,
    "tests/op/test_indexing.py::test_indexing_refused[where_one_arg]": _REFUSED_OTHERWISE,
    "tests/op/test_inplace.py::test_stepped_write_to_the_end_of_a_dynamic_axis_is_refused": _REFUSED_OTHERWISE,
    "tests/op/test_layout.py::test_layout_refused[repeat_interleave_tensor_dyn]": _REFUSED_OTHERWISE,
    "tests/op/test_layout.py::test_layout_refused[repeat_interleave_tensor_input]": _REFUSED_OTHERWISE,
    "tests/op/test_layout.py::test_layout_refused[repeat_interleave_indices_input]": _REFUSED_OTHERWISE,
    "tests/op/test_lookup.py::test_data_dependent_sizes_refused": _REFUSED_OTHERWISE,
    "tests/op/test_shape_dyn.py::test_reshape_whole_only_for_some_lengths_is_refused": _REFUSED_OTHERWISE,
    # The test's dynamic axis is istft's frequency axis, which torch fixes to n_fft.
    "tests/op/test_spectral.py::test_spectral_refused[istft_complex]": _REFUSED_OTHERWISE,
    "tests/op/test_indexing.py::test_indexing[slice_dyn_to_end]":
        "torch's size max(S-min(S,2),0) is not the NNEF rule's S-2 (equal for every S >= 2)",
    "tests/op/test_indexing.py::test_indexing[slice_dyn_other_axis]":
        "torch's size of the slice clamps to the axis (min/max) where the NNEF rule's is 3 (equal for every S >= 5)",
    "tests/op/test_indexing.py::test_indexing[slice_dyn_size_expr]":
        "a slice ending at size(1)-2: the size-oblivious capture cannot tell the end is not negative and gives "
        "the slice an unbacked size, which the lowering refuses",
    "tests/op/test_inplace.py::test_inplace_handlers[slice_dynamic_tail]":
        "torch's size max(S-min(S,2),0) is not the NNEF rule's S-2 (equal for every S >= 2)",
    "tests/op/test_inplace.py::test_inplace_handlers[slice_dynamic_static_region]":
        "torch's size of the written slice is not the NNEF rule's (equal where both are defined)",
    "tests/op/test_grouped_experts.py::test_grouped_experts_static":
        "transformers' grouped_mm_fallback is a custom op under torch.export; the tracer sees its aten ops",
    "tests/op/test_norm.py::test_weight_norm[conv1d-dim0-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[conv1d-dim1-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[conv1d-dim2-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[conv1d-dimNone-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[conv2d-dim0-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[conv2d-dim-2-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[conv2d-dimNone-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[linear-dim0-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[linear-dim1-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_norm.py::test_weight_norm[linear-dimNone-legacy]": _LEGACY_WEIGHT_NORM,
    "tests/op/test_pool.py::test_global_pools_dynamic_time": _SPECIALIZED,
    # A whole file: each of its tests exports a torch.ao quantized model.
    "tests/op/test_quantized.py": _QUANTIZED,
    "tests/op/test_quantized_models.py": _QUANTIZED,
    "tests/op/test_recurrent.py::test_recurrent_dynamic_time": _UNROLLED,
    "tests/op/test_recurrent.py::test_lstm_dynamic_batch_and_time": _UNROLLED,
    "tests/op/test_recurrent.py::test_conv_lstm_linear_dynamic_time": _UNROLLED,
    "tests/op/test_recurrent.py::test_cell": _CELL,
    "tests/op/test_recurrent.py::test_packed_sequence_is_refused_with_the_workaround": _REFUSED_OTHERWISE,
    "tests/op/test_custom_extractors.py::test_extractor_takes_over_its_module": "the kept module's forward "
        "computes a data-dependent size (nonzero): under torch's fake tensors its outputs' sizes are unbacked "
        "symbols, where the tracer's real run gives them",
    "tests/op/test_shape_dyn.py::test_vision_towers[siglip-tiles-traced-at-one]":
        "repeat(batch_size, 1, 1) reads a size of a dynamic axis where the handler needs a constant",
    "tests/test_zoo_models.py::test_encodec_round_trip": "EnCodec keeps its convolutions' padding amounts "
        "in buffers (stride, kernel_size, padding_total) and its reflect padding branches on them "
        "(length <= max_pad): values of tensors, which torch.export cannot guard on",
}


# Tests that fail under torch.export where its artefact is already written (so "auto" has no
# reason to fall back): strict xfails under --front-end=export and auto, with why.
EXPORT_WRITES_WRONG: dict[str, str] = {
    "tests/op/test_complex.py::test_rope_with_polar_dynamic_sequence":
        "torch's size of the rotary table's slice is min(S,32) where the NNEF rule's is S (equal for S <= 32); "
        "the op tests' consistency check compares the text",
    "tests/op/test_grouped_experts.py::test_grouped_experts_dynamic_tokens_refused":
        "refused, with the index_put handler's message (grouped_mm_fallback is captured otherwise) instead of sort's",
}

# JIT_ONLY cases that torch.export captures (so "auto" does not fall back): under "auto" they
# fail as under "export", for the reason JIT_ONLY gives.
CAPTURED_UNDER_AUTO = frozenset({
    "tests/op/test_indexing.py::test_indexing[slice_dyn_to_end]",
    "tests/op/test_indexing.py::test_indexing[slice_dyn_other_axis]",
    "tests/op/test_inplace.py::test_inplace_handlers[slice_dynamic_tail]",
    "tests/op/test_inplace.py::test_inplace_handlers[slice_dynamic_static_region]",
    "tests/op/test_shape_dyn.py::test_vision_towers[siglip-tiles-traced-at-one]",
})


# Folders whose tests under "auto" were not yet audited for fallbacks to the tracer (others'
# work in progress: the op tables, the LLM, multimodal and PEFT exporters, some of which
# also trace or script on purpose): there the tracer's deprecation notice is allowed, as it
# is for JIT_ONLY under "auto".
FALLBACKS_NOT_AUDITED = ("tests/op/", "tests/llm/", "tests/multimodal/", "tests/peft/")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--front-end", choices=("jit", "export", "auto"), default="auto",
                     help="front_end of export_model_to_nnef in export_and_check (default: auto)")


def pytest_configure(config: pytest.Config) -> None:
    helpers.FRONT_END = config.getoption("--front-end")
    if helpers.FRONT_END == "jit":
        config.addinivalue_line("filterwarnings", helpers.JIT_DEPRECATION_FILTER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    front_end = config.getoption("--front-end")
    if front_end == "jit":
        return
    for item in items:
        jit_only = JIT_ONLY.get(item.nodeid) or JIT_ONLY.get(item.nodeid.split("[")[0]) \
            or JIT_ONLY.get(item.nodeid.split("::")[0])
        if (front_end == "auto" and jit_only) or item.nodeid.startswith(FALLBACKS_NOT_AUDITED):
            item.add_marker(helpers.TRACER_ALLOWED)
        reason = EXPORT_WRITES_WRONG.get(item.nodeid)
        if reason is None and (front_end == "export" or item.nodeid in CAPTURED_UNDER_AUTO):
            reason = jit_only
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"front_end={front_end!r}: {reason}"))
