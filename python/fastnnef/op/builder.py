"""The NNEF graph under construction, and everything that names, binds or declares its
tensors. Handlers reach it only through ``OpContext`` (op/context.py); the converter
(op/convert.py) drives it. It owns:

- naming: identifiers from the naming scheme, user-given output names kept exact;
- binding: which NNEF tensor holds each IR value;
- variables: weights and export-time constants, each with the payload chosen once here;
- ops with one or several outputs, with datum types and shapes derived by nnef/shapes.py
  where the caller does not give them;
- fragments.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.dim import DimExpr, Size
from fastnnef.exceptions import T2NErrorConsistency, T2NErrorNotImplemented
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.nnef.graph import NNEFGraph, NTensor, sanitize_identifier
from fastnnef.nnef.op_table import check, check_fragment, infer
from fastnnef.nnef.payload import DATUM_TYPES, TORCH_QUANTIZED, datum_type, payload_for
from fastnnef.tensor.quant.packed import PackedFormat
from fastnnef.torch_graph.ir import ConstTensor, IROp, IRValue, ParamValue, TensorValue

_CAMEL_SPLIT = re.compile(r"[._]+")


# Complex values are real tensors with a trailing (re, im) axis of 2 (tract's convention
# for tract_core_fft / tract_core_stft); their datum type is that of the parts.
_COMPLEX_PARTS = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}


def tract_dtype(dtype: torch.dtype, where: str = "") -> str:
    """The tract datum type of a torch dtype (bf16 is computed in f32; complex values are
    pairs of their parts' type)."""
    try:
        return DATUM_TYPES[_COMPLEX_PARTS.get(dtype, dtype)]
    except KeyError:
        if dtype in TORCH_QUANTIZED:
            raise T2NErrorNotImplemented(
                f"a torch-quantized tensor ({dtype}) reaches {where or 'an op'}, which fastnnef "
                "exports on float tensors only (quantized tensors go through the quantized:: ops, "
                "quantize_per_tensor, dequantize and ops that only move data): dequantize() before it"
            ) from None
        raise T2NErrorNotImplemented(
            f"dtype {dtype} has no tract equivalent{(' (' + where + ')') if where else ''}: "
            "cast the model or this value to a supported dtype (float16/32/64, ints, bool)"
        ) from None


def shape_of(value: TensorValue) -> tuple[Size, ...]:
    """The traced shape with dynamic dims written as their symbols (``?`` stays marked);
    complex values get their trailing (re, im) axis."""
    shape = tuple(DimExpr(dyn) if dyn is not None else size for size, dyn in zip(value.shape, value.dyn))
    return shape + (2,) if value.dtype.is_complex else shape


class GraphBuilder:
    """Builds one ``NNEFGraph``; all per-export state lives here, none in globals."""

    def __init__(self, graph: NNEFGraph, caps: TargetCapabilities, naming: str,
                 param_names: dict[int, str] | None = None):
        self.graph = graph
        self.caps = caps
        self.naming = naming
        self._param_names = param_names or {}  # id(model tensor) -> its canonical name
        self._label_sources: dict[str, int] = {}  # label -> id of the model tensor declared under it
        self._bound: dict[int, NTensor] = {}  # id(IR value) -> NNEF tensor
        self._fixed: dict[int, str] = {}  # id(IR value) -> user-given output name
        self._unexported: dict[int, str] = {}  # id(IR value) -> the op that could not export it
        self._packed: dict[str, PackedFormat] = {}  # identifier -> format, of variables held packed
        self._variables: set[str] = set()  # identifiers of all variables
        self._counter = 0

    # --- names ---------------------------------------------------------------------------
    def base_name(self, node: IROp, value: TensorValue | None = None) -> str:
        """A base identifier for ``value`` produced by ``node`` (the graph makes it unique)."""
        if value is not None and id(value) in self._fixed:
            return self._fixed[id(value)]
        op_name = node.kind.split("::")[-1].strip("_")
        if self.naming == "raw" and value is not None:
            return sanitize_identifier(value.name)
        if self.naming == "numeric":
            self._counter += 1
            return f"v{self._counter}"
        if self.naming == "natural_verbose_camel":
            parts = [p for p in _CAMEL_SPLIT.split(f"{node.scope}.{op_name}") if p]
            return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:]) if parts else op_name
        return f"{node.scope}_{op_name}" if node.scope else op_name

    def fix_output_name(self, value: TensorValue, name: str) -> None:
        """The op producing ``value`` names its output ``name`` (reserved beforehand)."""
        self._fixed[id(value)] = name

    def has_fixed_name(self, value: IRValue) -> bool:
        return id(value) in self._fixed

    # --- IR values -----------------------------------------------------------------------
    def bind(self, value: IRValue, tensor: NTensor) -> None:
        self._bound[id(value)] = tensor

    def bound(self, value: IRValue) -> NTensor | None:
        return self._bound.get(id(value))

    def mark_unexported(self, value: IRValue, where: str) -> None:
        """``value`` has no NNEF tensor; using it later is an error naming ``where``."""
        self._unexported[id(value)] = where

    def tensor(self, value: IRValue, node: IROp) -> NTensor:
        """The NNEF tensor of an IR value; weights and traced constants become variables
        on first use."""
        bound = self._bound.get(id(value))
        if bound is not None:
            return bound
        if isinstance(value, (ParamValue, ConstTensor)):
            label = value.qualname if isinstance(value, ParamValue) else value.label
            owner = self._label_sources.setdefault(label, id(value.tensor))
            if owner != id(value.tensor):  # another tensor already has this label (a user name)
                label = self.fresh_label(label)
                self._label_sources[label] = id(value.tensor)
            t = self.variable(value.tensor, label, logical=value.dtype, shape=shape_of(value), where=node.where())
        elif id(value) in self._unexported:
            raise T2NErrorNotImplemented(
                f"{node.where()}: uses output {value.name} of {self._unexported[id(value)]}, which "
                "fastnnef cannot export (e.g. pooling indices); avoid using that output"
            )
        else:
            raise T2NErrorNotImplemented(f"{node.where()}: {value.name} is used before any op produced it")
        self._bound[id(value)] = t
        return t

    # --- variables -----------------------------------------------------------------------
    def variable(
        self, data: torch.Tensor, label: str, *, logical: torch.dtype | None = None,
        shape: Sequence[Size] | None = None, where: str = "",
    ) -> NTensor:
        """Declare ``data`` as ``<label>.dat``. A label declared before returns its tensor
        (tied weights, shared constants). The payload is chosen here, once."""
        known = self.graph.variables.get(label)
        if known is not None:
            return known.tensor
        payload = payload_for(data, self.caps, where, label)
        dtype = datum_type(payload, logical if logical is not None else data.dtype)
        t = self.graph.add_variable(label, label, payload, dtype, tuple(data.shape) if shape is None else shape)
        self._variables.add(t.name)
        if payload.held_packed is not None:
            self._packed[t.name] = payload.held_packed
        return t

    def parameter(self, tensor: torch.Tensor, where: str = "") -> NTensor:
        """A parameter or buffer of the model as a variable labelled with its name."""
        label = self._param_names.get(id(tensor))
        if label is None:
            raise T2NErrorNotImplemented(
                f"{where}: the tensor is not a parameter or buffer of the exported model; "
                "use ctx.constant(tensor, label) for values computed at export time"
            )
        return self.variable(tensor, label, where=where)

    def fresh_label(self, base: str) -> str:
        """A variable label not used yet, derived from ``base``."""
        label, n = base, 0
        while label in self.graph.variables:
            n += 1
            label = f"{base}_{n}"
        return label

    def is_variable(self, t: NTensor) -> bool:
        """Whether ``t`` is a variable (a weight or an export-time constant)."""
        return t.name in self._variables

    def plain_data(self, t: NTensor) -> torch.Tensor | None:
        """The torch data of ``t`` when it is a variable written as plain elements."""
        if t.name not in self._variables:
            return None
        var = next((v for v in self.graph.variables.values() if v.tensor is t), None)
        return var.payload.plain_data if var is not None else None

    def packed_format(self, t: NTensor) -> PackedFormat | None:
        """The packed format of ``t`` when it is a variable held as packed blocks (a Q4_0
        ``QTensor``), ``None`` otherwise."""
        return self._packed.get(t.name)

    # --- ops -----------------------------------------------------------------------------
    def _declared(self, kind: str, attrs: dict[str, Any], by: IROp | None) -> None:
        """Check the statement against its declaration (nnef/op_table.py), before anything
        is added to the graph, and note the tract registry it needs. Errors name ``by``,
        the node being converted."""
        try:
            decl = check(kind, attrs, self.graph.fragments)
        except T2NErrorConsistency as err:
            if by is None:
                raise
            raise T2NErrorConsistency(f"{by.where()}: {err}") from None
        if decl.registry is not None:
            self.graph.use_registry(decl.registry, needed_by=kind)

    def op(
        self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None = None, *, name: str,
        dtype: str | None = None, shape: Sequence[Size] | None = None, exact: bool = False,
        by: IROp | None = None,
    ) -> NTensor:
        """Append a single-output op, checked against its declaration (``by``: the node
        being converted, named in errors). A missing ``dtype`` or ``shape`` is derived by
        the op's rule; ``name`` is a base made unique, or with ``exact`` a reserved output
        name taken as is."""
        attrs = dict(attrs or {})
        self._declared(kind, attrs, by)
        if dtype is None or shape is None:
            derived = infer(kind, args, attrs)
            if derived is None:
                raise T2NErrorConsistency(
                    f"no shape rule for NNEF op {kind!r}: the handler must give dtype= and shape="
                )
            dtype = dtype if dtype is not None else derived[0]
            shape = shape if shape is not None else derived[1]
        return self.graph.op(kind, args, attrs, name=name, dtype=dtype, shape=shape, exact=exact)

    def op_multi(
        self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None,
        outputs: Sequence[tuple[str, str, Sequence[Size]]], exact: Sequence[bool] = (), by: IROp | None = None,
    ) -> tuple[NTensor, ...]:
        """Append an op with several outputs, each given as ``(base name, dtype, shape)``,
        checked against its declaration."""
        self._declared(kind, dict(attrs or {}), by)
        tensors = []
        for i, (name, dtype, shape) in enumerate(outputs):
            fixed = i < len(exact) and exact[i]
            ident = self.graph.claim(name) if fixed else self.graph.fresh_name(name)
            tensors.append(NTensor(ident, dtype, tuple(shape)))
        return self.graph.op_multi(kind, args, attrs, outputs=tensors)

    def has_fragment(self, name: str) -> bool:
        return name in self.graph.fragments

    def fragment(self, name: str, text: str) -> None:
        """Declare an NNEF fragment (written once, however many ops use it), checked by
        nnef/op_table.py (its text defines ``name``; fastnnef's own are declared there)."""
        check_fragment(name, text)
        known = self.graph.fragments.get(name)
        if known is not None and known != text:
            raise T2NErrorConsistency(f"two different fragments are both named {name!r}")
        self.graph.fragments[name] = text
