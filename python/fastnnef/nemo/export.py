"""``export_nemo_asr_model``: a NeMo ASR model as one NNEF artefact per subnet, each checked
in the linked tract against the model's own modules.

The model is exported in eval mode without dither or pad_to, settings put back when the
export ends (``subnets.inference_settings``); its modules are wrapped, never changed.
Everything is written into a staging directory beside ``export_dir`` and renamed into place
once every subnet has passed its check, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemo.collections.asr.models import ASRModel
from omegaconf import OmegaConf

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.export import export_model_to_nnef
from fastnnef.exporter_run import staged_export, timed
from fastnnef.inference_target import TractNNEF
from fastnnef.log import get_logger
from fastnnef.nemo.subnets import export_subnets, inference_settings, subnet_names

log = get_logger(__name__)

ARTEFACT_SUFFIX = ".nnef.tgz"
CONFIG_NAME = "model_config.json"


@dataclass(frozen=True)
class NemoExportReport:
    """What ``export_nemo_asr_model`` wrote: the directory, its artefacts by subnet name and
    the seconds each took (trace, write and tract check)."""

    export_dir: Path
    artefacts: dict[str, Path]
    seconds: dict[str, float]

    def summary(self) -> str:
        lines = [f"exported {len(self.artefacts)} subnet(s) to {self.export_dir}:"]
        lines += [f"  {name}: {path.name} ({self.seconds[name]:.1f} s, checked in tract)"
                  for name, path in self.artefacts.items()]
        return "\n".join(lines)


def export_nemo_asr_model(
    asr_model: Any,
    export_dir: Path | str,
    inference_target: TractNNEF | None = None,
    skip_preprocessor: bool = False,
    only_subnets: list[str] | None = None,
    compression_level: int = 0,
) -> NemoExportReport:
    """Export ``asr_model`` (a NeMo CTC or transducer model, e.g. FastConformer CTC or RNNT)
    into ``export_dir``: ``preprocessor.nnef.tgz``, ``encoder.nnef.tgz``, ``decoder.nnef.tgz``
    (CTC) or ``decoder_joint.nnef.tgz`` (transducer) and ``model_config.json`` (the model's
    config). ``export_dir`` must not exist or be empty.

    Batch and time are dynamic in every artefact (symbols ``B`` and ``T``); each artefact
    is run in tract on the traced inputs and compared with PyTorch (``inference_target``'s
    ``check_io`` and tolerance; default ``TractNNEF.latest()``). ``skip_preprocessor`` or
    ``only_subnets`` (names among the model's subnets) export a part.
    """
    names = subnet_names(asr_model, skip_preprocessor, only_subnets)
    target_dir = _free_dir(Path(export_dir))
    base_target = inference_target if inference_target is not None else TractNNEF.latest()
    if not isinstance(base_target, TractNNEF):
        raise T2NErrorInvalidArgument(
            f"inference_target must be a TractNNEF, got {type(base_target).__name__}"
        )

    model: ASRModel = asr_model
    with staged_export(target_dir) as staging:
        (staging / CONFIG_NAME).write_text(json.dumps(OmegaConf.to_container(model.cfg, resolve=True), indent=2))
        artefacts: dict[str, Path] = {}
        seconds: dict[str, float] = {}
        with inference_settings(model):
            for subnet in export_subnets(model, names):
                log.info("exporting subnet %s", subnet.name)
                file_name = subnet.name + ARTEFACT_SUFFIX
                with timed(seconds, subnet.name):
                    export_model_to_nnef(
                        subnet.module, subnet.example, staging / file_name,
                        base_target.with_dynamic_axes(subnet.dynamic_axes),
                        input_names=subnet.input_names, output_names=subnet.output_names,
                        compression_level=compression_level, custom_extensions=subnet.extensions,
                    )
                artefacts[subnet.name] = target_dir / file_name
    return NemoExportReport(target_dir, artefacts, seconds)


def _free_dir(path: Path) -> Path:
    """``path``, checked to be absent or an empty directory (nothing is ever overwritten)."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise T2NErrorInvalidArgument(
            f"export_dir {path} already exists and is not an empty directory: choose a new one or remove it"
        )
    return path
