"""IR -> NNEF graph: declare inputs, dispatch every IR op to its handler, name outputs."""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

import torch

from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorMissingOpEmitter,
    T2NErrorNotImplemented,
    T2NErrorStrictNNEFSpec,
)
from fastnnef.nnef.graph import NNEFGraph, NTensor, sanitize_identifier
from fastnnef.op.context import OpContext, parse_args, shape_of, tract_dtype
from fastnnef.op.registry import OpRegistry
from fastnnef.torch_graph.ir import (
    Const,
    ConstTensor,
    IRGraph,
    IROp,
    IRValue,
    ListValue,
    ParamValue,
    TensorValue,
)
from fastnnef.tensor.quant import QTensorTractScaleOnly, q4_0_encoding
from fastnnef.utils import SemanticVersion

_CAMEL_SPLIT = re.compile(r"[._]+")


def float_encoding(dtype: torch.dtype) -> tuple[str, bool]:
    """(.dat encoding, bf16 flag) for a torch tensor written as a variable."""
    if dtype == torch.bfloat16:
        return "f32", True
    return tract_dtype(dtype), False


class Converter:
    """Builds one ``NNEFGraph`` from one ``IRGraph``; state lives here, not in globals."""

    def __init__(
        self,
        graph: NNEFGraph,
        target: Any,
        registry: OpRegistry,
        naming: str,
        version: SemanticVersion,
    ):
        self.graph = graph
        self.target = target
        self.registry = registry
        self.naming = naming
        self.version = version
        self.bound: dict[int, NTensor] = {}  # id(IR value) -> NNEF tensor
        self.fixed_names: dict[int, str] = {}  # id(IR value) -> user output name
        self.counter = 0
        self.unexported: dict[int, str] = {}  # id(IR value) -> the op whose handler left it out

    # --- names ---------------------------------------------------------------------------
    def name_for(self, node: IROp, value: Optional[TensorValue]) -> str:
        """Identifier for ``value`` produced by ``node`` (a base; made unique by the graph)."""
        if value is not None and id(value) in self.fixed_names:
            return self.fixed_names[id(value)]
        op_name = node.kind.split("::")[-1].strip("_")
        if self.naming == "raw" and value is not None:
            return sanitize_identifier(value.name)
        if self.naming == "numeric":
            self.counter += 1
            return f"v{self.counter}"
        if self.naming == "natural_verbose_camel":
            parts = [p for p in _CAMEL_SPLIT.split(f"{node.scope}.{op_name}") if p]
            return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:]) if parts else op_name
        return f"{node.scope}_{op_name}" if node.scope else op_name

    # --- values --------------------------------------------------------------------------
    def tensor(self, value: IRValue, node: IROp) -> NTensor:
        bound = self.bound.get(id(value))
        if bound is not None:
            return bound
        if isinstance(value, ParamValue) and isinstance(value.tensor, QTensorTractScaleOnly):
            t = self.q4_0_variable(value, node)
        elif isinstance(value, ParamValue):
            encoding, bf16 = float_encoding(value.tensor.dtype)
            t = self.graph.add_variable(
                self.graph.fresh_name(value.qualname), value.qualname, value.tensor,
                tract_dtype(value.dtype, node.where()), value.shape, encoding, bf16,
            )
        elif isinstance(value, ConstTensor):
            encoding, bf16 = float_encoding(value.tensor.dtype)
            t = self.graph.add_variable(
                self.graph.fresh_name(value.label), value.label, value.tensor,
                tract_dtype(value.dtype, node.where()), value.shape, encoding, bf16,
            )
        elif id(value) in self.unexported:
            raise T2NErrorNotImplemented(
                f"{node.where()}: uses output {value.name} of {self.unexported[id(value)]}, which "
                "fastnnef cannot export (e.g. pooling indices); avoid using that output"
            )
        else:
            raise T2NErrorNotImplemented(
                f"{node.where()}: {value.name} is used before any op produced it"
            )
        self.bound[id(value)] = t
        return t

    def q4_0_variable(self, value: ParamValue, node: IROp) -> NTensor:
        """A Q4_0 weight: its packed blocks are written as they are (no re-quantization),
        declared with its logical dtype and shape (declaring f32 in an f16 model would make
        handlers cast the weight, and tract cannot cast Q4_0 storage); tract dequantizes
        them. Targets without the
        Q4_0 vendor type (Khronos) get the dequantized floats."""
        qtensor = value.tensor
        assert isinstance(qtensor, QTensorTractScaleOnly)
        name = self.graph.fresh_name(value.qualname)
        if not hasattr(self.target, "supports"):
            plain = qtensor.decompress()
            encoding, bf16 = float_encoding(plain.dtype)
            return self.graph.add_variable(
                name, value.qualname, plain, tract_dtype(plain.dtype, node.where()), value.shape, encoding, bf16
            )
        return self.graph.add_variable(
            name, value.qualname, qtensor, tract_dtype(value.dtype, node.where()), value.shape,
            q4_0_encoding(self.target),
        )

    def bind(self, value: IRValue, tensor: NTensor) -> None:
        self.bound[id(value)] = tensor

    # --- conversion ----------------------------------------------------------------------
    def declare_inputs(self, ir: IRGraph, names: Sequence[str]) -> None:
        for value, name in zip(ir.inputs, names):
            self.graph.reserve_name(name)
            dtype = tract_dtype(value.dtype, f"input {name}")
            self.bind(value, self.graph.add_input(name, dtype, shape_of(value)))

    def reserve_outputs(self, ir: IRGraph, names: Sequence[str], input_names: Sequence[str]) -> None:
        for value, name in zip(ir.outputs, names):
            if name in input_names:
                continue  # allowed same IO name: the output aliases the input (checked upstream)
            self.graph.reserve_name(name, claim_later=True)
            if isinstance(value, TensorValue) and id(value) not in self.fixed_names and not isinstance(
                value, (ParamValue, ConstTensor)
            ) and value not in ir.inputs:
                self.fixed_names[id(value)] = name

    def convert(self, ir: IRGraph) -> None:
        for node in ir.ops:
            spec = self.registry.lookup(node.kind, self.version)
            if spec is None:
                raise T2NErrorMissingOpEmitter(
                    f"{node.where()}: no fastnnef handler for {node.kind}. Supported ops are "
                    "listed by `fastnnef ops`; register one with "
                    "`fastnnef.op.registry.handler(...)` or avoid the op in forward"
                )
            if spec.since is not None and spec.since > self.version:
                raise T2NErrorNotImplemented(
                    f"{node.where()}: {node.kind} needs tract >= {spec.since.to_str()} but the "
                    f"target is {self.version.to_str()}: raise the TractNNEF version"
                )
            ctx = OpContext(self, node)
            args = parse_args(ctx, spec.arg_kinds, node.inputs)
            try:
                result = spec.fn(ctx, *args)
            except T2NErrorStrictNNEFSpec as err:  # name the torch op and module too
                raise T2NErrorStrictNNEFSpec(f"{node.where()}: {err}") from err
            self._bind_outputs(node, result)

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
                self.bind(value, tensor)
            else:  # an output the handler can't export: an error only if something uses it
                self.unexported[id(value)] = node.where()

    def finish_outputs(self, ir: IRGraph, names: Sequence[str]) -> None:
        """Bind graph outputs by name; alias where the producing tensor has another name."""
        for value, name in zip(ir.outputs, names):
            if isinstance(value, Const):
                raise T2NErrorInvalidArgument(
                    f"output {name!r} is the constant {value.value!r}: NNEF outputs are tensors"
                )
            tensor = self.bound.get(id(value))
            if tensor is None:
                tensor = self.tensor(value, ir.ops[-1] if ir.ops else IROp("output", [], [], "", ""))
            if tensor.name != name:
                if name in self.graph.input_names:
                    raise T2NErrorInvalidArgument(
                        f"output {name!r} has an input's name but is not that input: with "
                        "allow_same_io_names the output must be the unchanged input"
                    )
                # Produced under another name (an input, a weight, a shared value): alias it.
                tensor = self.graph.alias(self.graph.claim(name), tensor)
            self.graph.outputs.append(tensor)
