"""Capture a model with ``torch.export`` (non-strict): one ``ExportedProgram`` per export.

The user's model is called through ``torch_graph.trace``'s ``FlatIO`` (the same flat
inputs and outputs as the jit front end), in eval mode, under ``torch.no_grad()``, its
state given back after (``state_kept``). It runs twice: once eagerly, whose outputs are
the artefact's expected outputs (``check_io``), and once under torch's fake tensors, which
records the program: ``torch.export`` computes no value, so the eager run is the only one
that reads the weights. When nothing reads those outputs (no check, no debug bundle,
``export_model_to_nnef``'s path only: ``values=False``) the eager run is skipped. Inside
``trace_on_stand_ins`` (``tensor/offload.py``: the LLM exporters, whose reference outputs
come from their own runs) there is no eager run either: the
weights, offloaded checkpoint tensors included, become fake tensors of their shapes and
dtypes (their metadata only) and nothing is read; the outputs are zeros of the traced sizes.

Dynamic axes become ``torch.export.Dim.DYNAMIC`` axes (``lower.py`` names torch's symbols
after the NNEF ones). Nothing is decomposed: every op stays as the user called it
(``linear``, ``layer_norm``, ``batch_norm``, ``scaled_dot_product_attention``, ``gelu``...),
the kinds the handlers read and what tract runs natively. Writes into memory the program
made (``relu_``, ``out += x``, ``y[:, 1:3] = z``) are replayed functionally where they
stand (fresh_writes.py); a program that still writes in place (into an input or a buffer,
through a view other than a slice or a select) is functionalized (``run_decompositions``
with an empty table).

A submodule that a module extractor exports whole (op/custom_extractors) is one
``fastnnef::module_call`` op in the program, as on the jit front end
(torch_graph/module_calls.py): torch records the call, not the module's internals, and
the op's fake kernel gives its outputs' sizes.

Inside ``repeats.layers_captured_once`` (the LLM exporters), each group of alike layers
(an LLM's decoder layers) is captured once and its nodes copied for the others.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.fx import config as fx_trace_config
from torch.fx.experimental import _config as fx_config
from torch.utils import _pytree as pytree
from torch.utils.hooks import RemovableHandle

from fastnnef.exceptions import T2NError, T2NErrorInvalidArgument, T2NErrorTorchExportFailed
from fastnnef.fx_graph.fast_path import nested_encoders_seen, zero_padding_like_eager
from fastnnef.fx_graph.fresh_writes import make_fresh_writes_functional
from fastnnef.fx_graph.repeats import active_plan, expand_repeats, repeated_calls
from fastnnef.fx_graph.sizes import traced_int
from fastnnef.log import get_logger
from fastnnef.tensor.offload import on_stand_ins
from fastnnef.torch_graph.module_calls import ModuleCall, kept_whole
from fastnnef.torch_graph.trace import FlatIO, eval_mode, expand_io_names, flatten_inputs, state_kept

# torch names a size of an input after FlatIO.forward's argument: ``L['flat'][0].size()[1]``.
_INPUT_SIZE = re.compile(r"L\['flat'\]\[(\d+)\]\.size\(\)\[(\d+)\]")
_EXPORT_LOCK = threading.Lock()
log = get_logger(__name__)

# {flat input index: {axis: NNEF symbol}} for the flat inputs with these names.
DynamicAxesOf = Callable[[list[str], list[torch.Tensor]], dict[int, dict[int, str]]]


@dataclass
class CapturedProgram:
    """What the ``torch.export`` front end captured, read by ``lower.py`` and export.py."""

    program: torch.export.ExportedProgram
    wrapper: FlatIO  # holds the user's model: its weights are bound by name
    flat_inputs: list[torch.Tensor]
    flat_outputs: list[torch.Tensor]  # the eager run's: the check's references
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[int, dict[int, str]]
    # fastnnef::module_call's key -> the submodule kept whole for its extractor
    module_calls: dict[int, ModuleCall] = field(default_factory=dict)


def capture_program(
    model: nn.Module,
    args: Any,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    dynamic_axes_of: DynamicAxesOf,
    extractor_of: Callable[[nn.Module], Any | None] = lambda _module: None,
    values: bool = True,
) -> CapturedProgram:
    """Run ``model(*args)`` once for its outputs and export it once with ``torch.export``;
    ``extractor_of``: the module extractor of a submodule, or None (those that have one are
    kept whole). ``values=False``: nobody reads the outputs' values (no check), so no eager
    run reads the weights, as on stand-ins; a model holding an ``nn.TransformerEncoder``
    still runs eagerly, which tells whether its fast path pads (``fast_path.py``)."""
    if isinstance(model, torch.jit.ScriptModule):
        raise T2NErrorTorchExportFailed(
            f"{type(model).__name__} is a TorchScript module, which torch.export cannot capture: "
            "export it with front_end='jit' (or 'auto')"
        )
    flat = flatten_inputs(args, input_names)
    wrapper = FlatIO(model, flat.leaves, flat.spec, flat.tensor_slots)
    dynamic_axes = dynamic_axes_of(flat.names, flat.tensors)
    eager = not on_stand_ins() and (values or _has_encoder(model))
    recorded: list[Any] = []  # without an eager run: the fake run's outputs and their structure
    nested_encoders: list[nn.TransformerEncoder] = []
    with torch.no_grad(), eval_mode(model), state_kept(model), _outputs_recorded(model, recorded, not eager):
        if eager:
            with nested_encoders_seen(model) as nested_encoders:
                flat_outputs = _eager_outputs(wrapper, flat.tensors)
            out_spec = wrapper.out_spec
        try:
            # A dynamic axis may be captured at size 1 (one image, one token): without
            # size-oblivious sizes torch would fix it to 1 (its 0/1 specialization).
            # torch.export's mode stacks and config patches are process-wide: one capture at a time.
            with _EXPORT_LOCK, kept_whole(model, extractor_of) as module_calls, _rnn_weights_kept(model):
                with fx_config.patch(backed_size_oblivious=True), _no_stack_traces():  # type: ignore[attr-defined]
                    with zero_padding_like_eager(nested_encoders):  # the encoders' eager fast path (fast_path.py)
                        program = _exported(wrapper, flat.tensors, _dims(dynamic_axes, flat.tensors),
                                            module_calls)
                    if not eager:  # the outputs the fake run recorded, as values of their traced sizes
                        fakes, out_spec = pytree.tree_flatten(recorded[-1])
                        flat_outputs = [_zeros_like_traced(out) for out in fakes]
                    if made := make_fresh_writes_functional(program):
                        log.debug("%d in-place writes made functional where they stand", made)
                    if _writes_in_place(program):  # module calls run again (fake): still kept whole
                        program = program.run_decompositions({})
        except T2NError:
            raise
        except Exception as err:  # noqa: BLE001 - torch.export raises many kinds; keep its message
            raise _capture_error(model, err, flat.names, dynamic_axes) from err
        finally:
            wrapper.captured = None
    top_out = pytree.tree_unflatten(list(flat_outputs), out_spec)
    top_items = top_out if isinstance(top_out, (tuple, list)) else (top_out,)
    out_names = expand_io_names(output_names, top_items, len(flat_outputs), "output", "output")
    return CapturedProgram(program, wrapper, flat.tensors, list(flat_outputs), flat.names, out_names, dynamic_axes,
                           module_calls)


def _exported(wrapper: FlatIO, inputs: list[torch.Tensor], dims: tuple[Any, ...] | None,
              module_calls: dict[int, ModuleCall]) -> torch.export.ExportedProgram:
    """``torch.export``'s program of ``wrapper``; inside ``layers_captured_once`` each group
    of alike layers captured once (repeats.py), or, where the layers turn out not alike,
    captured again layer by layer."""
    def export() -> torch.export.ExportedProgram:
        return torch.export.export(wrapper, tuple(inputs), dynamic_shapes=dims, strict=False)

    with repeated_calls(wrapper, active_plan()) as repeats:
        if not repeats.groups:
            return export()
        try:
            program = export()
            why = expand_repeats(program, repeats, module_calls)
        except Exception as err:  # noqa: BLE001 - whatever failed, the capture layer by layer decides
            why = f"{type(err).__name__}: {err}"
    if why is None:
        log.info("%d alike layers captured once", sum(m.repeated for g in repeats.groups for m in g.members))
        return program
    log.info("alike layers captured again one by one: %s", why)
    return export()


@contextlib.contextmanager
def _rnn_weights_kept(model: nn.Module) -> Iterator[None]:
    """While ``torch.export`` runs, each ``nn.LSTM``/``GRU``/``RNN`` of ``model`` gets its
    list of weights back after each call. Their forward rebuilds that list from the weights,
    which torch.export has swapped for fake ones, and torch.export then warns that a tensor
    attribute was assigned during export (an error under warnings-as-errors) although its
    own module did it and it gives the list back itself after."""
    kept = ("_flat_weights", "_flat_weight_refs")
    saved: dict[int, dict[str, Any]] = {}

    def save(module: nn.Module, _args: Any) -> None:
        saved[id(module)] = {k: module.__dict__[k] for k in kept if k in module.__dict__}

    def give_back(module: nn.Module, _args: Any, _out: Any) -> None:
        module.__dict__.update(saved.pop(id(module), {}))

    handles: list[RemovableHandle] = []
    for module in model.modules():
        if isinstance(module, nn.RNNBase):
            handles.append(module.register_forward_pre_hook(save))
            handles.append(module.register_forward_hook(give_back, always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _capture_error(
    model: nn.Module, err: Exception, names: list[str], dynamic_axes: dict[int, dict[int, str]],
) -> T2NErrorTorchExportFailed:
    """torch.export's error, the input sizes it names written as the user knows them
    (``input 'x' axis 1 (dynamic axis S)``, not ``L['flat'][0].size()[1]``); for a dynamic
    axis that torch fixed to its traced size, the way out."""
    def named(match: re.Match[str]) -> str:
        index, axis = int(match[1]), int(match[2])
        symbol = dynamic_axes.get(index, {}).get(axis)
        return f"input {names[index]!r} axis {axis}" + (f" (dynamic axis {symbol})" if symbol else "")

    message = _INPUT_SIZE.sub(named, str(err))
    if "specialized it to be a constant" in message:
        message += "\nThe model's code needs that axis at its traced size: export it static (not in dynamic_axes)"
    return T2NErrorTorchExportFailed(f"torch.export could not capture {type(model).__name__}: {message}")


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """Capture without a Python stack trace per FX node: torch formats the whole stack of
    every op it records (a quarter of ``torch.export``'s own time on 64 attention blocks,
    benches/README.md), and the lowering needs only the op's module, which
    ``nn_module_stack`` gives. torch's own errors (a data-dependent guard) still name the
    user's line: it takes that stack itself when it raises."""
    old = fx_trace_config.do_not_emit_stack_traces
    fx_trace_config.do_not_emit_stack_traces = True  # a plain module flag: no patch() to scope it
    try:
        yield
    finally:
        fx_trace_config.do_not_emit_stack_traces = old


def _has_encoder(model: nn.Module) -> bool:
    return any(isinstance(m, nn.TransformerEncoder) for m in model.modules())


def _eager_outputs(wrapper: FlatIO, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The model's flat outputs on the example inputs (the check's references)."""
    try:  # the model may write into its inputs: run it on copies, keep the user's tensors
        wrapper(*(t.clone() for t in inputs))
    except T2NError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's forward raises what it raises
        raise T2NErrorInvalidArgument(f"{type(wrapper.model).__name__} fails on the example inputs: {err}") from err
    assert wrapper.captured is not None
    outputs, wrapper.captured = wrapper.captured, None
    return outputs


@contextlib.contextmanager
def _outputs_recorded(model: nn.Module, recorded: list[Any], active: bool) -> Iterator[None]:
    """Appends each output of ``model`` to ``recorded`` while ``active`` (a hook: torch.export
    gives the exported module's attributes back as they were, ``FlatIO.captured`` included)."""
    if not active:
        yield
        return
    handle = model.register_forward_hook(lambda _module, _args, output: recorded.append(output))
    try:
        yield
    finally:
        handle.remove()


def _zeros_like_traced(fake: torch.Tensor) -> torch.Tensor:
    """Zeros of the sizes a fake output had on the example inputs."""
    sizes = [s if isinstance(s, int) else traced_int(s) for s in fake.shape]
    return torch.zeros([0 if s is None else s for s in sizes], dtype=fake.dtype)


def _writes_in_place(program: torch.export.ExportedProgram) -> bool:
    """Whether the captured graph still writes into a tensor (a buffer, ``x.t()[0] += 1``):
    only then is it functionalized. ``run_decompositions`` also rewrites what needs no rewriting
    (``batch_norm`` into ``_native_batch_norm_legit_no_training``), so a graph without
    writes is lowered as captured, every op as the user called it."""
    return any(
        isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
        for node in program.graph.nodes
    )


def _dims(dynamic_axes: dict[int, dict[int, str]], inputs: list[torch.Tensor]) -> tuple[Any, ...] | None:
    """``dynamic_shapes`` for ``torch.export``: every dynamic axis ``Dim.DYNAMIC``, which
    lets torch record what its kernels assume of the size (``S // 2 != 1``) as a range of
    the program instead of refusing it; only a size torch would fix to its traced value is
    an error. Axes sharing an NNEF symbol are one size to the lowering (``lower.py``)."""
    if not any(dynamic_axes.values()):
        return None
    per_input = tuple(
        dict.fromkeys(dynamic_axes.get(i, {}), torch.export.Dim.DYNAMIC) or None for i in range(len(inputs))
    )
    return (per_input,)  # FlatIO.forward(*flat): one argument, the tuple of the flat inputs
