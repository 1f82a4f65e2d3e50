"""IR -> NNEF graph: declare inputs, dispatch every IR op to its handler (or its module's
extractor), name outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorMissingOpEmitter,
    T2NErrorNotImplemented,
    T2NErrorStrictNNEFSpec,
)
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.nnef.graph import NNEFGraph, NTensor
from fastnnef.op.builder import GraphBuilder, shape_of, tract_dtype
from fastnnef.op.context import OpContext, bind_args
from fastnnef.op.registry import OpRegistry
from fastnnef.torch_graph.ir import (
    Const,
    ConstTensor,
    IRGraph,
    IROp,
    ListValue,
    ParamValue,
    TensorValue,
)


def has_complex(node: IROp) -> bool:
    """Whether ``node`` reads or produces a complex tensor (those take complex handlers)."""
    values = [*node.inputs, *node.outputs]
    values += [item for v in values if isinstance(v, ListValue) for item in v.items]
    return any(isinstance(v, TensorValue) and v.dtype.is_complex for v in values)


class Converter:
    """Converts one ``IRGraph`` into the builder's ``NNEFGraph``."""

    def __init__(
        self, graph: NNEFGraph, caps: TargetCapabilities, registry: OpRegistry, naming: str, target: Any = None,
        param_names: dict[int, str] | None = None,
    ):
        self.builder = GraphBuilder(graph, caps, naming, param_names)
        self.graph = graph
        self.caps = caps
        self.registry = registry
        self.target = target  # handed to module extractors, as in the reference's API

    def declare_inputs(self, ir: IRGraph, names: Sequence[str]) -> None:
        for value, name in zip(ir.inputs, names):
            self.graph.reserve_name(name)
            dtype = tract_dtype(value.dtype, f"input {name}")
            self.builder.bind(value, self.graph.add_input(name, dtype, shape_of(value)))

    def reserve_outputs(self, ir: IRGraph, names: Sequence[str], input_names: Sequence[str]) -> None:
        for value, name in zip(ir.outputs, names):
            if name in input_names:
                continue  # allowed same IO name: the output aliases the input (checked upstream)
            self.graph.reserve_name(name, claim_later=True)
            if (
                isinstance(value, TensorValue) and not self.builder.has_fixed_name(value)
                and not isinstance(value, (ParamValue, ConstTensor)) and value not in ir.inputs
            ):
                self.builder.fix_output_name(value, name)

    def convert(self, ir: IRGraph) -> None:
        for node in ir.ops:
            ctx = OpContext(self.builder, node)
            if node.extractor is not None:
                result = node.extractor.emit(ctx, self.target)
            else:
                result = self._dispatch(ctx)
            self._bind_outputs(node, result)

    def _dispatch(self, ctx: OpContext) -> Any:
        node = ctx.node
        complex_values = has_complex(node)
        spec = self.registry.lookup(node.kind, self.caps.tract_version, complex=complex_values)
        if spec is None and complex_values and self.registry.lookup(node.kind, self.caps.tract_version):
            raise T2NErrorNotImplemented(
                f"{node.where()}: fastnnef exports {node.kind} on real tensors only, and this one "
                "has complex inputs or outputs. Work on real tensors before it "
                "(torch.view_as_real, .real, .imag, .abs()) and rebuild the complex value after it"
            )
        if spec is None:
            raise T2NErrorMissingOpEmitter(
                f"{node.where()}: no fastnnef handler for {node.kind}. Supported ops are "
                "listed by `fastnnef ops`; register one with "
                "`fastnnef.op.registry.handler(...)` or avoid the op in forward"
            )
        if spec.since is not None and (self.caps.tract_version is None or spec.since > self.caps.tract_version):
            target = (
                f"tract {self.caps.tract_version.to_str()}: raise the TractNNEF version"
                if self.caps.tract_version is not None
                else "strict NNEF, which has no such operator: export with TractNNEF"
            )
            raise T2NErrorNotImplemented(
                f"{node.where()}: {node.kind} needs tract >= {spec.since.to_str()} but the target is {target}"
            )
        spec, args = bind_args(ctx, self.registry.overloads(spec))
        try:
            return spec.fn(ctx, *args)
        except T2NErrorStrictNNEFSpec as err:  # name the torch op and module too
            raise T2NErrorStrictNNEFSpec(f"{node.where()}: {err}") from err

    def _bind_outputs(self, node: IROp, result: Any) -> None:
        outputs = node.outputs
        if isinstance(result, NTensor):
            result = [result]
        if len(outputs) == 1 and isinstance(outputs[0], ListValue):
            outputs = list(outputs[0].items)
        if len(result) != len(outputs):
            raise T2NErrorNotImplemented(
                f"{node.where()}: handler returned {len(result)} values for {len(outputs)} outputs"
            )
        for value, tensor in zip(outputs, result):
            if tensor is not None:
                self.builder.bind(value, tensor)
            else:  # an output the handler can't export: an error only if something uses it
                self.builder.mark_unexported(value, node.where())

    def _constant_output(self, value: Const, name: str) -> NTensor:
        """An output the trace computed as a Python number (``torch.tensor(x.numel())`` of a
        static shape): a 0-d variable of the dtype ``torch.tensor`` gives that number."""
        if not isinstance(value.value, (bool, int, float)):
            raise T2NErrorInvalidArgument(
                f"output {name!r} is the constant {value.value!r}: NNEF outputs are tensors"
            )
        return self.builder.variable(torch.tensor(value.value), self.builder.fresh_label(name))

    def finish_outputs(self, ir: IRGraph, names: Sequence[str]) -> None:
        """Bind graph outputs by name; alias where the producing tensor has another name."""
        for value, name in zip(ir.outputs, names):
            tensor: NTensor | None
            if isinstance(value, Const):
                tensor = self._constant_output(value, name)
            else:
                tensor = self.builder.bound(value)
            if tensor is None:
                tensor = self.builder.tensor(value, ir.ops[-1] if ir.ops else IROp("output", [], [], "", ""))
            if tensor.name != name:
                if name in self.graph.input_names:
                    raise T2NErrorInvalidArgument(
                        f"output {name!r} has an input's name but is not that input: with "
                        "allow_same_io_names the output must be the unchanged input"
                    )
                # Produced under another name (an input, a weight, a shared value): alias it.
                tensor = self.graph.alias(self.graph.claim(name), tensor)
            self.graph.outputs.append(tensor)
