"""SemanticVersion, torch_version and init_empty_weights (fastnnef.utils)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.utils import SemanticVersion, init_empty_weights, torch_version


def v(text: str) -> SemanticVersion:
    return SemanticVersion.from_str(text)


def test_constructor_is_keyword_only():
    assert SemanticVersion(major=0, minor=23, patch=9).to_str() == "0.23.9"
    with pytest.raises(TypeError):
        SemanticVersion(0, 23, 9)  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(major=-1, minor=0, patch=0), "SemanticVersion major must be a non-negative int, got -1"),
        (dict(major=0, minor=1.5, patch=0), "SemanticVersion minor must be a non-negative int, got 1.5"),
        (dict(major=0, minor=0, patch=True), "SemanticVersion patch must be a non-negative int, got True"),
        (dict(major=0, minor=0, patch="1"), "SemanticVersion patch must be a non-negative int, got '1'"),
    ],
)
def test_constructor_rejects_bad_parts(kwargs, message):
    with pytest.raises(T2NErrorInvalidArgument) as err:
        SemanticVersion(**kwargs)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0.21.11", (0, 21, 11)),
        (" 1.0.5\n", (1, 0, 5)),
        ("0.23.0-dev.4", (0, 23, 0)),
        ("2.5.1+cu121", (2, 5, 1)),
        ("10.200.3000", (10, 200, 3000)),
    ],
)
def test_from_str(text, expected):
    parsed = v(text)
    assert (parsed.major, parsed.minor, parsed.patch) == expected


def test_from_str_custom_separator():
    assert SemanticVersion.from_str("1_2_3", sep="_") == "1.2.3"
    assert SemanticVersion.from_str("1-2-3-rc1", sep="-") == "1.2.3"


@pytest.mark.parametrize("text", ["0.21", "0.21.1.4", "a.b.c", "", "v0.21.1", "0..1"])
def test_from_str_rejects(text):
    with pytest.raises(T2NErrorInvalidArgument) as err:
        v(text)
    assert str(err.value) == (
        f"cannot parse version {text!r}: expected 'MAJOR.MINOR.PATCH' with an optional "
        "'-suffix', e.g. '0.23.9'"
    )


def test_repr_str_to_str():
    version = v("0.23.9")
    assert repr(version) == "<Version 0.23.9>"
    assert str(version) == "0.23.9"
    assert version.to_str() == "0.23.9"


def test_comparisons_with_versions_and_strings():
    version = v("0.21.11")
    assert version == "0.21.11"
    assert version == v("0.21.11")
    assert version != "0.21.12"
    assert version >= "0.21.11"
    assert version > "0.21.7"  # numeric, not lexicographic: 11 > 7
    assert version < "0.22.0"
    assert version <= "1.0.0"
    assert not version < "0.21.11"
    assert "0.21.7" < version  # reflected comparison from the str side
    assert v("0.23.0-dev.4") >= "0.23.0"


def test_comparison_with_other_types_is_not_supported():
    version = v("1.0.0")
    assert (version == 1) is False
    with pytest.raises(TypeError):
        version < 1  # noqa: B015


def test_sorting_and_hashing():
    texts = ["0.22.1", "0.21.13", "0.23.9", "0.21.7", "0.23.8"]
    ordered = sorted(v(t) for t in texts)
    assert [x.to_str() for x in ordered] == ["0.21.7", "0.21.13", "0.22.1", "0.23.8", "0.23.9"]
    assert max(v(t) for t in texts) == "0.23.9"
    assert len({v("0.1.2"), v("0.1.2"), v("0.1.3")}) == 2
    assert {v("0.1.2"): "x"}[SemanticVersion(major=0, minor=1, patch=2)] == "x"


def test_immutable_and_copyable():
    version = v("0.23.9")
    with pytest.raises(AttributeError):
        version.major = 1  # type: ignore[misc]
    assert copy.deepcopy(version) == version
    assert pickle.loads(pickle.dumps(version)) == version


def test_torch_version_drops_local_part():
    expected = torch.__version__.split("+")[0]
    assert torch_version().to_str() == ".".join(expected.split(".")[:3])
    assert torch_version() >= "1.8.0"


def test_init_empty_weights_puts_parameters_on_meta():
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(4096, 4096), nn.BatchNorm1d(4096))
    assert all(p.is_meta for p in model.parameters())
    assert all(isinstance(p, nn.Parameter) for p in model.parameters())
    # buffers stay real by default (values computed at construction are rarely in checkpoints)
    assert not model[1].running_mean.is_meta
    # the patch is undone on exit
    assert not nn.Linear(2, 2).weight.is_meta


def test_init_empty_weights_include_buffers():
    with init_empty_weights(include_buffers=True):
        norm = nn.BatchNorm1d(8)
    assert norm.weight.is_meta and norm.running_mean.is_meta
    assert not nn.BatchNorm1d(8).running_mean.is_meta


def test_init_empty_weights_restores_on_error():
    with pytest.raises(RuntimeError):
        with init_empty_weights(include_buffers=True):
            raise RuntimeError("boom")
    assert not nn.BatchNorm1d(2).running_mean.is_meta
    assert not nn.Linear(2, 2).weight.is_meta
