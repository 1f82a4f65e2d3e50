"""Every Python table with a twin in the Rust core equals it, so the two sides cannot drift
(the Rust side is the source; fix the Python table the assertion names)."""

from __future__ import annotations

import pytest
import torch

from fastnnef import _native
from fastnnef.artefact import PLAIN_ENCODINGS, TORCH_QUANTIZED
from fastnnef.check import TOLERANCES
from fastnnef.exceptions import T2NErrorImpossibleQuantization
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.tensor.quant.packed import PACKED_FORMATS
from fastnnef.tensor.quant.qtract import Q4_0_GROUP, check_q4_0_shape
from fastnnef.tensor.safetensors_file import SAFETENSORS_DTYPES
from fastnnef.utils import SemanticVersion


def test_every_encoding_python_chooses_is_one_rust_writes() -> None:
    python = set(PLAIN_ENCODINGS.values()) | {q.encoding for q in TORCH_QUANTIZED.values()}
    python |= {e for fmt in PACKED_FORMATS for e in fmt.encodings}
    assert python == set(_native.ENCODINGS), (
        "artefact.py's and tensor/quant/packed.py's encodings differ from rust/dat.rs ALL_ENCODINGS"
    )


def test_every_packed_encoding_a_target_gets_is_its_formats() -> None:
    for fmt in PACKED_FORMATS:
        chosen = {fmt.encoding_for(TargetCapabilities.tract(SemanticVersion.from_str(v))) for v in ("0.21.10",
                                                                                                    "0.23.9")}
        assert chosen <= set(fmt.encodings)
        assert fmt.encoding_for(TargetCapabilities.strict_nnef()) is None


def test_tolerances_are_rusts_levels() -> None:
    assert set(TOLERANCES) == set(_native.TOLERANCES), "check.TractCheckTolerance differs from Approximation::LEVELS"


def test_checkpoint_dtypes_are_what_rust_streams() -> None:
    assert set(SAFETENSORS_DTYPES) == set(_native.CHECKPOINT_DTYPES), (
        "tensor/offload.py SAFETENSORS_DTYPES differs from rust/checkpoint.rs STREAMED_DTYPES"
    )


@pytest.mark.parametrize("shape, ok", [
    ((32, 32), True), ((3, 64), True), ((2, 4, 8), True), ((2, 2, 2, 8), True),
    ((64,), False), ((2, 2, 2, 2, 32), False), ((5, 33), False),
])
def test_q4_0_shape_rule_has_one_source(shape: tuple[int, ...], ok: bool) -> None:
    """The Python check and the Rust encoder apply the same rule (the Rust one)."""
    assert Q4_0_GROUP == _native.Q4_0_BLOCK
    encoded = True
    try:
        _native.dat_payload_size("w", list(shape), "q4_0")
    except T2NErrorImpossibleQuantization:
        encoded = False
    checked = True
    try:
        check_q4_0_shape(shape)
    except T2NErrorImpossibleQuantization:
        checked = False
    assert encoded == checked == ok
    if not ok:
        with pytest.raises(T2NErrorImpossibleQuantization, match="rank 2 to 4"):
            check_q4_0_shape(shape, "layer.weight")
    assert torch.float32 in PLAIN_ENCODINGS
