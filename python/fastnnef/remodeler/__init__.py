"""The shapes remodeler: boundary-only transforms of a subnet, described by a shape config.

torch_to_nnef's ``torch_to_nnef.remodeler`` (its "provider-agnostic remodeler" tutorial), with
its names and its config format: a strict nested YAML/JSON mapping per subnet
(``schema.py``), parsed into an ``AxisSymbolRegistry`` (``axis_registry.py``) that says which
dynamic axes to *collapse*, which scalar input to *bind* to another input's size, which
symbols to *rename* (alias) and which outputs to *keep*. It is applied at export by wrapping
the subnet's module in a ``BoundaryAdapter`` (``adapter.py``); ``prepare_subnet_export``
(``prepare.py``) does all of it for one subnet and returns what ``export_model_to_nnef``
takes. Module map: ``signature.py`` (what providers report), ``dyn_axes.py`` (dynamic axes
and extension lines), ``registry_utils.py`` (a config checked against a model's subnets).
"""

from __future__ import annotations

from fastnnef.remodeler.adapter import BoundaryAdapter, RenameOutputs
from fastnnef.remodeler.axis_registry import (
    AxisSymbolRegistry,
    load_axis_symbol_registry,
    parse_axis_symbol_registry,
    save_config,
)
from fastnnef.remodeler.dyn_axes import (
    apply_eval_symbols,
    apply_symbol_renames_to_dyn,
    drop_assertions_referencing_symbols,
    filter_assertions_present_in_dyn,
    remove_eval_symbols_from_dyn,
    rewrite_and_filter_assertions,
    rewrite_assertions_with_renames,
)
from fastnnef.remodeler.prepare import PreparedSubnet, dynamic_axes_from_registry, prepare_subnet_export
from fastnnef.remodeler.registry_utils import dump_registry_from_signatures, validate_registry_against_signatures
from fastnnef.remodeler.signature import (
    IODescriptor,
    Provider,
    RemodelPlan,
    Stage,
    SubnetSignature,
    plan_from_registry,
)

__all__ = [
    "Stage",
    "IODescriptor",
    "SubnetSignature",
    "RemodelPlan",
    "Provider",
    "plan_from_registry",
    "save_config",
    "BoundaryAdapter",
    "RenameOutputs",
    "apply_eval_symbols",
    "apply_symbol_renames_to_dyn",
    "drop_assertions_referencing_symbols",
    "filter_assertions_present_in_dyn",
    "remove_eval_symbols_from_dyn",
    "rewrite_and_filter_assertions",
    "rewrite_assertions_with_renames",
    "PreparedSubnet",
    "prepare_subnet_export",
    # fastnnef's: the config parser and checks (torch_to_nnef keeps them in its NeMo package)
    "AxisSymbolRegistry",
    "load_axis_symbol_registry",
    "parse_axis_symbol_registry",
    "dump_registry_from_signatures",
    "validate_registry_against_signatures",
    "dynamic_axes_from_registry",
]
