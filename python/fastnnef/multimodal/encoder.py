"""One encoder artefact (``<modality>/model.nnef.tgz``: tower + projector): traced on the
first sample item, written with its test bundle (``<modality>/tests/export_*.npz``), and
checked in tract against Hugging Face's own embeddings of EVERY sample item, at the sizes
the processor produced for them (two images of different sizes: the dynamic axes are
exercised, not only the traced size)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.export import export_model_with_result
from fastnnef.inference_target.tract import TractNNEF
from fastnnef.llm.bundles import Bundle
from fastnnef.log import get_logger
from fastnnef.multimodal.family import EncoderSpec
from fastnnef.multimodal.heap import map_large_allocations
from fastnnef.torch_graph.ir_naming import VariableNamingScheme
from fastnnef.utils import SemanticVersion


@dataclass
class EncoderCheck:
    """One sample item through the encoder artefact, against Hugging Face."""

    label: str  # the encoder ("vision")
    item: int
    input_shape: list[int]
    report: str
    ok: bool


def export_encoder(spec: EncoderSpec, model: Any, items: list[dict[str, torch.Tensor]], path: Path,
                   target_version: SemanticVersion, naming: VariableNamingScheme, tests_dir: Path,
                   front_end: str) -> Bundle:
    """Trace (on ``spec.trace_item``) and write the encoder of ``spec``; returns (and saves)
    its export bundle."""
    map_large_allocations()  # else the heap grows with the tower's depth while traced (heap.py)
    module = spec.build(model).eval()
    inputs = spec.graph_inputs(model, spec.trace_item(items))
    output_names = [spec.output_name, *spec.extra_output_names(model.config)]
    target = TractNNEF(target_version, check_io=False, dynamic_axes=spec.dynamic_axes,
                       dump_identity_properties=False)
    exported = export_model_with_result(
        module, inputs, path, target, input_names=list(spec.input_names), output_names=output_names,
        compression_level=0, log_level=get_logger().getEffectiveLevel(),
        nnef_variable_naming_scheme=naming, front_end=front_end,
    )
    bundle = Bundle("export", dict(zip(spec.input_names, inputs)), dict(zip(output_names, exported.traced_outputs)))
    tests_dir.mkdir(parents=True, exist_ok=True)
    bundle.save(tests_dir)
    return bundle


def run_encoder(artefact: TractArtefact, spec: EncoderSpec, model: Any,
                items: list[dict[str, torch.Tensor]]) -> list[list[torch.Tensor]]:
    """The artefact's outputs (embeddings, then any extra streams) for every sample item."""
    outputs = []
    for item in items:
        inputs = [(t.detach().float() if t.is_floating_point() else t).numpy() for t in spec.graph_inputs(model, item)]
        outputs.append([torch.from_numpy(o) for o in artefact.run(inputs)])
    return outputs


def check_encoder(spec: EncoderSpec, model: Any, items: list[dict[str, torch.Tensor]],
                  got: list[list[torch.Tensor]], tolerance: str) -> list[EncoderCheck]:
    """Each item's tract outputs ``got`` against Hugging Face's at ``tolerance``."""
    checks = []
    for index, (item, obtained) in enumerate(zip(items, got)):
        reports = [_native.compare(want.detach().float().numpy(), out.numpy(), tolerance)
                   for want, out in zip(spec.reference(model, item), obtained)]
        shape = list(spec.graph_inputs(model, item)[0].shape)
        checks.append(EncoderCheck(spec.modality, index, shape, "; ".join(str(r) for r in reports),
                                   all(bool(r.ok) for r in reports)))
    return checks


def concatenated(spec: EncoderSpec, items: list[dict[str, torch.Tensor]],
                 per_item: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """Each output of an encoder, its items concatenated (what the decoder takes): each
    item's rows the decoder uses (``spec.rows``), in prompt order."""
    counts = [spec.rows(item) if spec.rows is not None else None for item in items]
    return [torch.cat([t[:n] for t, n in zip(outputs, counts)]) for outputs in zip(*per_item)]
