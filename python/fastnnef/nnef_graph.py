"""Drop-in: torch_to_nnef's ``nnef_graph``: ``TorchToNGraphExtractor``, a model traced and
converted to an NNEF graph in memory, nothing written.

The steps are ``export_model_to_nnef``'s up to the writing (``export.py``: trace, IR,
conversion, the target's extensions and fragments). The graph is fastnnef's
``nnef.graph.NNEFGraph``, where the reference's is an ``nnef_tools`` Graph (a package
fastnnef does not depend on); ``nnef.serialize.write_artefact`` writes it.
"""

from __future__ import annotations

from typing import Any

import torch

from fastnnef.export import check_io_quantity, convert_to_nnef, dynamic_axes_by_index
from fastnnef.inference_target.base import InferenceTarget
from fastnnef.nnef.graph import NNEFGraph
from fastnnef.op.custom_extractors.base import find_extractor
from fastnnef.torch_graph.ir import build_ir
from fastnnef.torch_graph.ir_naming import DEFAULT_VARNAME_SCHEME, VariableNamingScheme
from fastnnef.torch_graph.trace import trace_model

__all__ = ["TorchToNGraphExtractor"]


class TorchToNGraphExtractor:
    """Trace ``model`` on ``args`` (at construction), then build its NNEF graph for
    ``inference_target`` (``parse``; the graph is ``self.g``)."""

    def __init__(
        self,
        model: torch.nn.Module,
        args: Any,
        inference_target: InferenceTarget,
        nnef_variable_naming_scheme: VariableNamingScheme | str = DEFAULT_VARNAME_SCHEME,
        forced_inputs_names: list[str] | None = None,
        forced_outputs_names: list[str] | None = None,
        check_io_names_qte_match: bool = True,
    ):
        self.model = model
        self._inference_target = inference_target
        self._naming = VariableNamingScheme(nnef_variable_naming_scheme).value
        inference_target.pre_trace(model, forced_inputs_names, forced_outputs_names)
        self._traced = trace_model(model, args, forced_inputs_names, forced_outputs_names,
                                   extractor_of=find_extractor, watch_sizes=inference_target.has_dynamic_axes)
        self._check_io_quantity = check_io_names_qte_match
        self.g: NNEFGraph | None = None

    @property
    def activated_custom_fragment_keys(self) -> set[str]:
        """The names of the fragments the graph uses (empty before ``build_nnef_graph``)."""
        return set(self.g.fragments) if self.g is not None else set()

    def build_nnef_graph(self) -> None:
        traced = self._traced
        ir = build_ir(traced, dynamic_axes_by_index(self._inference_target, traced.input_names, traced.flat_inputs))
        if self._check_io_quantity:
            check_io_quantity(len(ir.inputs), len(traced.flat_inputs))
        self.g = convert_to_nnef(traced, ir, self._inference_target, self._naming, [], self.model)

    def parse(self) -> NNEFGraph:
        """The NNEF graph of the model (built once)."""
        if self.g is None:
            self.build_nnef_graph()
        assert self.g is not None
        return self.g
