"""What a provider reports about a subnet's boundary, and the plan it applies.

A *provider* knows how to cut a model into subnets (NeMo's encoder, decoder, joint; or
one plain module): it reports each subnet's inputs and outputs (``SubnetSignature``) at a
``Stage`` of the remodeling, and applies a ``RemodelPlan`` by wrapping each subnet in a
``BoundaryAdapter`` (``adapter.py``).
"""

from __future__ import annotations

import typing as T
from dataclasses import dataclass, field
from enum import Enum

import torch

from fastnnef.remodeler.axis_registry import AxisSymbolRegistry


class Stage(Enum):
    """The stages at which a subnet's signature can be inspected, in order."""

    RAW = "raw"
    COLLAPSED = "collapsed"
    BOUND = "bound"
    FINAL = "final"

    @property
    def order(self) -> int:
        """Position of the stage: RAW < COLLAPSED < BOUND < FINAL."""
        return list(Stage).index(self)


@dataclass(frozen=True)
class IODescriptor:
    """One input or output: its name, its dims (sizes or symbols), dtype and notes."""

    name: str
    shape: list[int | str]
    dtype: str | None = None
    notes: list[str] | None = None


@dataclass(frozen=True)
class SubnetSignature:
    """A subnet's boundary at one stage; ``symbol_axes`` maps an input to ``{axis: symbol}``."""

    name: str
    stage: Stage
    inputs: list[IODescriptor]
    outputs: list[IODescriptor]
    symbol_axes: dict[str, dict[int, str]] | None = None
    applied_flags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RemodelPlan:
    """The boundary transforms to apply: a parsed, validated ``AxisSymbolRegistry``."""

    registry: AxisSymbolRegistry


class Provider(T.Protocol):
    """What a provider offers: its subnets' signatures, and the plan applied to them."""

    def discover_signatures(self, model: torch.nn.Module, stage: Stage) -> list[SubnetSignature]:
        """The signature of every subnet of ``model`` at ``stage``."""
        ...

    def apply(self, model: torch.nn.Module, plan: RemodelPlan) -> dict[str, torch.nn.Module]:
        """Every subnet of ``model``, wrapped to expose the boundary ``plan`` describes."""
        ...


def plan_from_registry(registry: AxisSymbolRegistry) -> RemodelPlan:
    """The plan of a parsed registry (``load_axis_symbol_registry``)."""
    return RemodelPlan(registry=registry)
