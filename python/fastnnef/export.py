"""Public export API (same names, signatures and defaults as ``torch_to_nnef.export``)."""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import shutil
import threading
import time
import typing as T
from concurrent.futures import ThreadPoolExecutor
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
from fastnnef.nnef.serialize import EarlyFiles, write_artefact
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
R = T.TypeVar("R")

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
    return export_with_options(model, args, inference_target, options, reference_outputs=False).path


def options_of(file_path_export: Path | str, **given: T.Any) -> ExportOptions:
    """The ``ExportOptions`` of an ``export_model_to_nnef`` call to ``file_path_export``
    passing ``given`` (its keyword arguments by name), its defaults for the others: for
    exporters that prepare and finish an export themselves (``prepare_export``)."""
    defaults = {name: p.default for name, p in inspect.signature(export_model_to_nnef).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return ExportOptions.from_arguments(**{**defaults, **given, "file_path_export": file_path_export})


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
    model: nn.Module, args: T.Any, inference_target: InferenceTarget, options: ExportOptions,
    reference_outputs: bool = True,
) -> ExportResult:
    """The export of ``model(*args)`` for ``inference_target`` with checked ``options``
    (``ExportOptions.from_arguments``), under their log level: what both public functions
    run, and what an exporter holding its options already calls. ``reference_outputs``:
    the caller reads ``ExportResult.traced_outputs``; when it does not, nor the target's
    check, nor a debug bundle, torch.export's capture runs no eager forward (its outputs
    are zeros of their traced sizes then)."""
    result, _ = finish_export(prepare_export(model, args, inference_target, options, reference_outputs))
    return result


@dataclass
class PreparedExport:
    """A model captured and converted to its NNEF graph, nothing written yet but the
    tensor files written ahead under the artefact's temporary name (``prepare_export``);
    ``finish_export`` writes and checks it."""

    model: nn.Module
    args: T.Any  # the example inputs as the model takes them (on the CPU)
    target: InferenceTarget
    options: ExportOptions
    captured: TracedModel | CapturedProgram
    graph: NNEFGraph
    input_names: list[str]
    timings: dict[str, float]
    checks: list[str]
    early: EarlyFiles | None  # the tensor files written during the capture
    past_cache: bool  # large files written past the page cache: nothing reads them right after


def prepare_export(
    model: nn.Module, args: T.Any, inference_target: InferenceTarget, options: ExportOptions,
    reference_outputs: bool = True, read_back: bool = False,
) -> PreparedExport:
    """The capture and the conversion of ``export_with_options``, under the options' log
    level: nothing written yet at the target (its parameters' files are written meanwhile
    under the artefact's temporary name beside it: ``_write_ahead``). ``read_back``: the
    caller loads the artefact right after (the LLM exporter's verification), so it goes
    through the page cache, as when the target checks it; otherwise its large files are
    written past the cache (on this project's VM the cache copy cost more CPU than the
    disk took time; reading a gigabyte back from the disk cost more than caching it)."""
    with export_log_level(options.log_level):
        return _prepare(model, args, inference_target, options, reference_outputs, read_back)


def finish_export(
    prepared: PreparedExport, while_writing: T.Callable[[], R] | None = None
) -> tuple[ExportResult, R | None]:
    """Write ``prepared``'s artefact, then run the target's check. ``while_writing`` (an
    exporter's own work that reads no part of the artefact, e.g. the LLM exporter's test
    bundles) runs on this thread while the artefact is written on another: the writing is
    mostly Rust, without the GIL, so on two cores the two overlap. Returns the result and
    what ``while_writing`` returned; an error of either is raised once both have ended."""
    with export_log_level(prepared.options.log_level):
        return _finish(prepared, while_writing)


def _prepare(model: nn.Module, args: T.Any, inference_target: InferenceTarget, options: ExportOptions,
             reference_outputs: bool, read_back: bool) -> PreparedExport:
    if not isinstance(model, nn.Module):
        raise T2NErrorInvalidArgument(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(inference_target, InferenceTarget):
        raise T2NErrorInvalidArgument(
            "inference_target must be an InferenceTarget such as TractNNEF.latest() or "
            f"KhronosNNEF.latest(), got {type(inference_target).__name__}"
        )
    import_extra_modules(options.load_extra_op_modules, options.discover_extra_entrypoints,
                         options.strict_extra_imports)
    # skip_eager_forward needs no action: the tracer's forward is the only one it runs, and
    # torch.export's capture runs an eager forward only when its outputs are read (values).
    values = (reference_outputs or options.debug_bundle_path is not None
              or inference_target.needs_reference_outputs())
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

    past_cache = not (read_back or inference_target.reads_artefact())
    early = _write_ahead(model, options, past_cache)
    try:
        traced, ir, graph = _front_end(options.front_end, model, args, input_names, output_names, names_from,
                                       inference_target, convert, stage_done, values)
    except BaseException:
        if early is not None:
            early.abort()
        raise
    if options.check_io_names_qte_match:
        checks.append("io_quantity")
    return PreparedExport(model, args, inference_target, options, traced, graph, traced.input_names[: len(ir.inputs)],
                          timings, checks, early, past_cache)


def _write_ahead(model: nn.Module, options: ExportOptions, past_cache: bool) -> EarlyFiles | None:
    """The artefact's tensor files start being written while the model is captured: the
    parameters (and a directory's buffers, which an archive could not drop when the graph
    leaves them unused, as it does a batch norm's count), under their paths (the ``.dat``
    labels whatever the naming scheme), but those of modules an extractor keeps whole (it
    writes them in forms of its own: a MoE's fused gate and up projections in halves).
    The capture is Python, the writing Rust without the GIL, so on two cores the two
    overlap; what the graph does not write as it is is removed, or for an archive written
    again (``EarlyFiles``). In the module's order, which is mostly the order its forward
    reads them: a checkpoint's pages the writer reads are still cached when an exporter's
    forward (the LLM test bundles') reads them after it (a 7B export 8 s faster from a
    cold cache, 2 s from a warm one, than in byte order, benches/README.md)."""
    if isinstance(model, torch.jit.ScriptModule):
        return None
    kept_whole = {id(p) for module in model.modules() if find_extractor(module) is not None
                  for p in module.parameters()}
    named = [*model.named_parameters(), *(model.named_buffers() if options.artefact_format == "dir" else ())]
    tensors = [(name, t) for name, t in named if id(t) not in kept_whole and EarlyFiles.writable(t)]
    if not tensors:
        return None
    return EarlyFiles(options.path, options.artefact_format, options.compression_level or 0, tensors, past_cache)


def _finish(prepared: PreparedExport, while_writing: T.Callable[[], R] | None) -> tuple[ExportResult, R | None]:
    options, traced, timings = prepared.options, prepared.captured, prepared.timings
    start = time.perf_counter()
    written, job_result = _written_while(options, prepared.graph, while_writing, prepared.early, prepared.past_cache)
    timings["write"] = time.perf_counter() - start
    in_names = prepared.input_names
    model_info = UnfoldModelInfo(
        model=prepared.model,
        original_inputs=prepared.args,
        original_outputs=traced.flat_outputs,
        flat_inputs=traced.flat_inputs[: len(in_names)],
        flat_outputs=traced.flat_outputs,
        input_names=in_names,
        output_names=traced.output_names,
    )
    start = time.perf_counter()
    check_result = prepared.target.post_export(model_info, prepared.graph, written,
                                               debug_bundle_path=options.debug_bundle_path)
    timings["post_export"] = time.perf_counter() - start
    checks = list(prepared.checks)
    if check_result is not None:
        checks.append("check_io")
    result = ExportResult(
        path=written, input_names=in_names, output_names=list(traced.output_names),
        traced_outputs=list(traced.flat_outputs), timings=timings, checks=tuple(checks), check_result=check_result,
    )
    return result, job_result


def _written_while(options: ExportOptions, graph: NNEFGraph, job: T.Callable[[], R] | None,
                   early: EarlyFiles | None, past_cache: bool) -> tuple[Path, R | None]:
    """``write_artefact``, on a second thread while ``job`` runs on this one when there is
    a job (the writer's progress report, a context variable, goes along)."""
    stop = threading.Event()
    write = functools.partial(write_artefact, options.path, options.artefact_format, options.compression_level or 0,
                              graph, stop, early, past_cache)
    if job is None:
        return write(), None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastnnef-writer") as pool:
        writing = pool.submit(contextvars.copy_context().run, write)
        try:
            job_result = job()
        except BaseException:
            # The job's error (Ctrl-C included) wins: the writer stops before its next
            # tensor and removes what it wrote, or its finished artefact is removed, then
            # the error goes up: a failed export leaves nothing behind.
            stop.set()
            if writing.exception() is None:
                _remove(writing.result())
            raise
    return writing.result(), job_result


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _front_end(
    front_end: str, model: nn.Module, args: T.Any, input_names: list[str] | None, output_names: list[str] | None,
    names_from: nn.Module, target: InferenceTarget,
    convert: T.Callable[[TracedModel | CapturedProgram, IRGraph], NNEFGraph], stage_done: T.Callable[[str], None],
    values: bool,
) -> tuple[TracedModel | CapturedProgram, IRGraph, NNEFGraph]:
    """The model captured, its IR and its NNEF graph (``convert``), by ``front_end``:
    ``"export"`` (``fx_graph/``), ``"jit"`` (``torch_graph/``), or ``"auto"``: torch.export
    unless ``fx_graph/fallback.py``'s rules send the model to the tracer, the reason logged
    once. No artefact is written yet: a fallback never follows one (files written ahead
    for a directory are checked against whichever graph comes out)."""
    declined = declined_before_capture(model) if front_end == "auto" else None
    if front_end != "jit" and declined is None:
        try:
            captured = capture_program(model, args, input_names, output_names,
                                       lambda names, inputs: dynamic_axes_by_index(target, names, inputs),
                                       extractor_of=find_extractor, values=values)
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
