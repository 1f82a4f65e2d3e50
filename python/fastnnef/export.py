"""Public export API (same names, signatures and defaults as ``torch_to_nnef.export``)."""

from __future__ import annotations

import logging
import time
import typing as T
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorIoQuantity,
)
from fastnnef.export_options import ExportOptions
from fastnnef.fx_graph import (
    REFUSALS,
    CapturedProgram,
    capture_program,
    declined_before_capture,
    lower_program,
    range_assertions,
    refusal_reason,
)
from fastnnef.inference_target.base import InferenceTarget, UnfoldModelInfo
from fastnnef.log import export_log_level, get_logger
from fastnnef.nnef.graph import NNEFGraph
from fastnnef.nnef.passes import run_passes
from fastnnef.nnef.serialize import write_artefact
from fastnnef.op.convert import Converter
from fastnnef.op.custom_extractors.base import find_extractor
from fastnnef.op.extras import import_extra_modules
from fastnnef.op.families import load_handlers
from fastnnef.tensor_export import (
    export_tensors_from_disk_to_nnef,
    export_tensors_to_nnef,
    iter_torch_tensors_from_disk,
)
from fastnnef.torch_graph.devices import on_cpu
from fastnnef.torch_graph.harden import harden_jit_for_export
from fastnnef.torch_graph.ir import IRGraph, build_ir
from fastnnef.torch_graph.ir_naming import DEFAULT_VARNAME_SCHEME, VariableNamingScheme
from fastnnef.torch_graph.trace import TracedModel, trace_model

__all__ = [
    "export_model_to_nnef",
    "export_tensors_to_nnef",
    "export_tensors_from_disk_to_nnef",
    "iter_torch_tensors_from_disk",
]

log = get_logger(__name__)

@dataclass(frozen=True)
class ExportResult:
    """What one export did (``export_model_with_result``); ``export_model_to_nnef`` returns
    its ``path``. For exporters built on the core (the LLM and multimodal ones), which need
    the traced run's outputs: they are the artefact's expected outputs, without running the
    model again.

    - ``path``: the artefact written;
    - ``input_names`` / ``output_names``: the graph's IO names;
    - ``traced_outputs``: the trace's outputs, flattened in ``output_names`` order (the
      references ``check_io`` compares with);
    - ``timings``: seconds per stage, in order: ``trace``, ``build_ir``, ``convert``,
      ``write``, ``post_export`` (the target's check);
    - ``checks``: the checks that ran: ``io_quantity`` (``check_io_names_qte_match``),
      ``check_io`` (the target's ``post_export`` returned a result, e.g. ``TractNNEF``
      with ``check_io=True``);
    - ``check_result``: what the target's ``post_export`` returned (``None`` when it
      checked nothing; tract's per-output reports for ``TractNNEF``/``KhronosNNEF``).
    """

    path: Path
    input_names: list[str]
    output_names: list[str]
    traced_outputs: list[torch.Tensor]
    timings: dict[str, float]
    checks: tuple[str, ...]
    check_result: T.Any = None


def export_model_to_nnef(
    model: nn.Module,
    args: T.Any,
    file_path_export: Path | str,
    inference_target: InferenceTarget,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    compression_level: int | None = 0,
    log_level: int = logging.INFO,
    nnef_variable_naming_scheme: VariableNamingScheme = DEFAULT_VARNAME_SCHEME,
    check_io_names_qte_match: bool = True,
    debug_bundle_path: Path | None = None,
    custom_extensions: list[str] | None = None,
    allow_same_io_names: bool = False,
    auto_harden_jit: bool = True,
    load_extra_op_modules: list[str] | None = None,
    discover_extra_entrypoints: bool = False,
    strict_extra_imports: bool = False,
    skip_eager_forward: bool = False,
    *,
    front_end: str = "auto",
) -> Path:
    """Export ``model(*args)`` to an NNEF artefact for ``inference_target``; return its path.

    The model is traced once (its outputs from that run are the check_io references), the
    graph is converted in one linear pass, and the artefact is streamed by the Rust sink to
    a temporary name beside the target, then renamed. The model is not modified.

    ``file_path_export`` + ``compression_level``: ``m.nnef`` + None -> directory ``m.nnef``;
    + 0 -> ``m.nnef.tar``; + 1..9 -> ``m.nnef.tgz``; ``m.nnef.tgz`` + 0..9 -> ``m.nnef.tgz``.

    Example:
        >>> from fastnnef.export import export_model_to_nnef
        >>> from fastnnef.inference_target import TractNNEF
        >>> path = export_model_to_nnef(
        ...     nn.Sequential(nn.Linear(1, 5), nn.ReLU()), torch.rand(3, 1),
        ...     tmp_dir / "mlp.nnef.tgz", TractNNEF.latest(),
        ...     input_names=["inp"], output_names=["out"])
        >>> path.name
        'mlp.nnef.tgz'
    """
    options = ExportOptions.from_arguments(
        file_path_export=file_path_export, input_names=input_names, output_names=output_names,
        compression_level=compression_level, log_level=log_level,
        nnef_variable_naming_scheme=nnef_variable_naming_scheme, check_io_names_qte_match=check_io_names_qte_match,
        debug_bundle_path=debug_bundle_path, custom_extensions=custom_extensions,
        allow_same_io_names=allow_same_io_names, auto_harden_jit=auto_harden_jit,
        load_extra_op_modules=load_extra_op_modules, discover_extra_entrypoints=discover_extra_entrypoints,
        strict_extra_imports=strict_extra_imports, skip_eager_forward=skip_eager_forward, front_end=front_end,
    )
    return export_with_options(model, args, inference_target, options).path


def export_model_with_result(
    model: nn.Module,
    args: T.Any,
    file_path_export: Path | str,
    inference_target: InferenceTarget,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    compression_level: int | None = 0,
    log_level: int = logging.INFO,
    nnef_variable_naming_scheme: VariableNamingScheme = DEFAULT_VARNAME_SCHEME,
    check_io_names_qte_match: bool = True,
    debug_bundle_path: Path | None = None,
    custom_extensions: list[str] | None = None,
    allow_same_io_names: bool = False,
    auto_harden_jit: bool = True,
    load_extra_op_modules: list[str] | None = None,
    discover_extra_entrypoints: bool = False,
    strict_extra_imports: bool = False,
    skip_eager_forward: bool = False,
    *,
    front_end: str = "auto",
) -> ExportResult:
    """``export_model_to_nnef`` (same parameters, same export), returning what the export
    did as an ``ExportResult`` instead of only the artefact's path."""
    options = ExportOptions.from_arguments(
        file_path_export=file_path_export, input_names=input_names, output_names=output_names,
        compression_level=compression_level, log_level=log_level,
        nnef_variable_naming_scheme=nnef_variable_naming_scheme, check_io_names_qte_match=check_io_names_qte_match,
        debug_bundle_path=debug_bundle_path, custom_extensions=custom_extensions,
        allow_same_io_names=allow_same_io_names, auto_harden_jit=auto_harden_jit,
        load_extra_op_modules=load_extra_op_modules, discover_extra_entrypoints=discover_extra_entrypoints,
        strict_extra_imports=strict_extra_imports, skip_eager_forward=skip_eager_forward, front_end=front_end,
    )
    return export_with_options(model, args, inference_target, options)


def export_with_options(
    model: nn.Module, args: T.Any, inference_target: InferenceTarget, options: ExportOptions
) -> ExportResult:
    """The export of ``model(*args)`` for ``inference_target`` with checked ``options``
    (``ExportOptions.from_arguments``), under their log level: what both public functions
    run, and what an exporter holding its options already calls."""
    with export_log_level(options.log_level):
        return _export(model, args, inference_target, options)


def _export(model: nn.Module, args: T.Any, inference_target: InferenceTarget, options: ExportOptions) -> ExportResult:
    """The export itself, under the export's log level."""
    if not isinstance(model, nn.Module):
        raise T2NErrorInvalidArgument(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(inference_target, InferenceTarget):
        raise T2NErrorInvalidArgument(
            "inference_target must be an InferenceTarget such as TractNNEF.latest() or "
            f"KhronosNNEF.latest(), got {type(inference_target).__name__}"
        )
    import_extra_modules(options.load_extra_op_modules, options.discover_extra_entrypoints,
                         options.strict_extra_imports)
    # skip_eager_forward needs no action: the trace's forward is the only one that runs, and
    # its outputs are the check's references (no separate eager forward to skip).
    input_names = list(options.input_names) if options.input_names is not None else None
    output_names = list(options.output_names) if options.output_names is not None else None

    model, args = on_cpu(model, args)  # a model on an accelerator: its CPU stand-in (devices.py)
    names_from = model
    if isinstance(model, torch.jit.ScriptModule) and options.auto_harden_jit:
        model = harden_jit_for_export(model, args)

    timings: dict[str, float] = {}
    checks: list[str] = []
    clock = time.perf_counter()

    def stage_done(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = now - clock
        clock = now

    inference_target.pre_trace(model, input_names, output_names)

    def convert(captured: TracedModel | CapturedProgram, ir: IRGraph) -> NNEFGraph:
        if options.check_io_names_qte_match:
            check_io_quantity(len(ir.inputs), len(captured.flat_inputs))
        return convert_to_nnef(captured, ir, inference_target, options.naming, list(options.custom_extensions), model)

    traced, ir, graph = _front_end(options.front_end, model, args, input_names, output_names, names_from,
                                   inference_target, convert, stage_done)
    if options.check_io_names_qte_match:
        checks.append("io_quantity")
    in_names = traced.input_names[: len(ir.inputs)]

    written = write_artefact(options.path, options.artefact_format, options.compression_level or 0, graph)
    stage_done("write")
    model_info = UnfoldModelInfo(
        model=model,
        original_inputs=args,
        original_outputs=traced.flat_outputs,
        flat_inputs=traced.flat_inputs[: len(ir.inputs)],
        flat_outputs=traced.flat_outputs,
        input_names=in_names,
        output_names=traced.output_names,
    )
    check_result = inference_target.post_export(model_info, graph, written,
                                                debug_bundle_path=options.debug_bundle_path)
    stage_done("post_export")
    if check_result is not None:
        checks.append("check_io")
    return ExportResult(
        path=written, input_names=in_names, output_names=list(traced.output_names),
        traced_outputs=list(traced.flat_outputs), timings=timings, checks=tuple(checks), check_result=check_result,
    )


def _front_end(
    front_end: str, model: nn.Module, args: T.Any, input_names: list[str] | None, output_names: list[str] | None,
    names_from: nn.Module, target: InferenceTarget,
    convert: T.Callable[[TracedModel | CapturedProgram, IRGraph], NNEFGraph], stage_done: T.Callable[[str], None],
) -> tuple[TracedModel | CapturedProgram, IRGraph, NNEFGraph]:
    """The model captured, its IR and its NNEF graph (``convert``), by ``front_end``:
    ``"export"`` (``fx_graph/``), ``"jit"`` (``torch_graph/``), or ``"auto"``: torch.export
    unless ``fx_graph/fallback.py``'s rules send the model to the tracer, the reason logged
    once. Nothing is written yet: a fallback never follows a written artefact."""
    declined = declined_before_capture(model) if front_end == "auto" else None
    if front_end != "jit" and declined is None:
        try:
            captured = capture_program(model, args, input_names, output_names,
                                       lambda names, inputs: dynamic_axes_by_index(target, names, inputs),
                                       extractor_of=find_extractor)
            stage_done("trace")
            ir = lower_program(captured)
            stage_done("build_ir")
            graph = convert(captured, ir)
            graph.extensions += [a for a in range_assertions(captured.program, captured.dynamic_axes)
                                 if a not in graph.extensions]
            stage_done("convert")
            return captured, ir, graph
        except REFUSALS as err:
            if front_end == "export":
                raise
            declined = refusal_reason(err)
    if declined is not None:
        log.warning("front_end='auto': exported with the torch.jit.trace front end (deprecated upstream), "
                    "torch.export could not serve this model: %s", declined)
    traced = trace_model(model, args, input_names, output_names, names_from=names_from, extractor_of=find_extractor,
                         watch_sizes=target.has_dynamic_axes)
    stage_done("trace")
    ir = build_ir(traced, dynamic_axes_by_index(target, traced.input_names, traced.flat_inputs))
    stage_done("build_ir")
    graph = convert(traced, ir)
    stage_done("convert")
    return traced, ir, graph


def convert_to_nnef(
    traced: TracedModel | CapturedProgram,
    ir: IRGraph,
    target: InferenceTarget,
    naming: str,
    custom_extensions: list[str],
    model: nn.Module,
) -> NNEFGraph:
    """IR -> NNEF graph, named IO, the target's extension lines and fragments (no bytes
    written yet: the benchmark of graph building stops here)."""
    in_names = traced.input_names[: len(ir.inputs)]
    caps = target.capabilities()
    graph = NNEFGraph(strict=caps.strict, available_registries=caps.registries)
    if not graph.strict:
        graph.use_registry("tract_core")
    converter = Converter(graph, caps, load_handlers(), naming, target, ir.param_names)
    converter.declare_inputs(ir, in_names)
    converter.reserve_outputs(ir, traced.output_names, in_names)
    converter.convert(ir)
    converter.finish_outputs(ir, traced.output_names)
    run_passes(graph)  # e.g. ops whose results no output needs are not written
    extensions: list[str] = []
    target.post_trace(graph, extensions)
    graph.extensions = extensions + [e for e in custom_extensions if e not in extensions]
    graph.fragments = {**target.specific_fragments(model), **graph.fragments}
    return graph


def check_io_quantity(kept: int, given: int) -> None:
    """Raise when the capture kept fewer inputs than were given (unused inputs are
    dropped): the names would shift."""
    if kept != given:
        raise T2NErrorIoQuantity(
            f"tracing kept {kept} of {given} inputs (unused "
            "inputs are dropped): remove them, or pass check_io_names_qte_match=False"
        )


def dynamic_axes_by_index(
    target: InferenceTarget, input_names: list[str], inputs: list[torch.Tensor]
) -> dict[int, dict[int, str]]:
    """{flat input index: {axis: symbol}}, axes made non-negative by the target."""
    if not target.has_dynamic_axes:
        return {}
    return {i: target.dynamic_axes_of_input(name, inputs[i].dim()) for i, name in enumerate(input_names)}
