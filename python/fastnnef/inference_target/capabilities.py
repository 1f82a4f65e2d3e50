"""What an inference target can run: the one typed object that op handlers, the registry's
version gates and the weight writer consult (they never probe a target's class or
attributes).

A target builds its ``TargetCapabilities`` once per export (``InferenceTarget.capabilities()``).
``tract_version`` is ``None`` for targets that are not tract (strict Khronos NNEF): version
gates then stay closed, whatever the target's own version number means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.tensor.quant.packed import Q4_0
from fastnnef.utils import SemanticVersion


class VersionGate(NamedTuple):
    """The first tract version with a feature, and what the feature changes."""

    first: SemanticVersion
    reason: str


def _v(text: str) -> SemanticVersion:
    return SemanticVersion.from_str(text)


# Target-version gates as data (torch_to_nnef-api.md §6.3). A gate is open when the target
# is tract >= `first`; "> X.Y.Z" gates of the reference are written as the next patch.
VERSION_GATES: dict[str, VersionGate] = {
    "tract_symbol": VersionGate(_v("0.18.2"), "`extension tract_symbol S;` declares dynamic axes"),
    "multi_char_symbols": VersionGate(_v("0.19.0"), "symbol names longer than one letter"),
    "tract_extra": VersionGate(_v("0.20.20"), "the tract_extra registry"),
    "approx_levels": VersionGate(_v("0.21.7"), "the check honours check_io_tolerance"),
    "approx_very_ultra": VersionGate(_v("0.21.8"), "the 'very' and 'ultra' tolerance levels"),
    "q4_0_ggml_order": VersionGate(_v("0.21.11"), "Q4_0 .dat code 0x3040 (GGML order), not 0x2040"),
    "native_log_softmax": VersionGate(_v("0.21.14"), "log_softmax as tract_core_log_softmax, not max/exp/sum/log"),
    "tract_transformers": VersionGate(_v("0.22.0"), "the tract_transformers registry"),
    "reified_sdpa": VersionGate(_v("0.22.1"), "SDPA as tract_transformers_sdpa by default"),
    "scatter_reductions": VersionGate(_v("0.23.0"), "scatter with reductions"),
    "debox": VersionGate(_v("0.23.0"), "NNEF's debox (upsample_with_debox; also behind nearest_upsample)"),
    "resize_grid_sample": VersionGate(_v("0.23.2"), "resize and grid_sample ops"),
    "gated_delta_net": VersionGate(_v("0.23.5"), "tract_transformers_gdn_recurrent"),
    "moe_ffn": VersionGate(_v("0.23.9"), "MoE blocks as tract_moe_ffn"),
    "native_cumsum": VersionGate(_v("0.23.9"), "cumsum as tract_core_cumsum, not a tract_core_scan"),
    "cli_input_from_bundle": VersionGate(
        _v("0.18.0"), "the CLI's `run --input-from-bundle` (before: `--input-bundle`, ahead of `run`)"
    ),
}

# The tract extension registries and the gate that opens each (None: always there).
REGISTRY_GATES: dict[str, str | None] = {
    "tract_core": None,
    "tract_pulse": None,
    "tract_extra": "tract_extra",
    "tract_transformers": "tract_transformers",
}


@dataclass(frozen=True)
class TargetCapabilities:
    """What one export may emit.

    - ``tract_version``: the tract version targeted, or ``None`` (not tract: no gate opens);
    - ``strict``: only Khronos NNEF (no ``tract_*`` op, no tract registry, strict externals);
    - ``registries``: the tract registries the graph may use;
    - the export options that change the graph (``TractNNEF``'s numerics switches).
    """

    tract_version: SemanticVersion | None = None
    strict: bool = True
    registries: frozenset[str] = field(default_factory=frozenset)
    reify_sdpa: bool = False
    force_attention_inner_in_f32: bool = False
    force_linear_accumulation_in_f32: bool = False
    force_norm_in_f32: bool = False
    upcast_reified_sdpa_inputs_to_f32: bool = True
    upsample_with_debox: bool = False
    native_gated_delta_op: bool | None = None

    @classmethod
    def strict_nnef(cls) -> TargetCapabilities:
        """Plain Khronos NNEF: nothing tract-specific."""
        return cls()

    @classmethod
    def tract(cls, version: SemanticVersion, **options: object) -> TargetCapabilities:
        """tract ``version`` with every registry that version has, and ``options``."""
        registries = frozenset(
            name for name, gate in REGISTRY_GATES.items()
            if gate is None or version >= VERSION_GATES[gate].first
        )
        return cls(tract_version=version, strict=False, registries=registries, **options)  # type: ignore[arg-type]

    def supports(self, feature: str) -> bool:
        """Whether the target is a tract that has ``feature`` (a key of ``VERSION_GATES``)."""
        gate = VERSION_GATES.get(feature)
        if gate is None:
            raise T2NErrorInvalidArgument(
                f"unknown tract feature {feature!r}; known: {sorted(VERSION_GATES)}"
            )
        return self.tract_version is not None and self.tract_version >= gate.first

    @property
    def q4_0_encoding(self) -> str | None:
        """The ``.dat`` encoding of Q4_0 weights, or ``None`` where the target has no Q4_0
        (weights are then written dequantized)."""
        return Q4_0.encoding_for(self)
