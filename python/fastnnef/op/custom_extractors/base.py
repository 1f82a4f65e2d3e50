"""The module-extractor mechanism: ``ModuleInfoExtractor``, the registry of extractor
classes by module class, and ``find_extractor`` (what the trace asks for each submodule).

The package's ``__init__`` documents how an extractor is written and re-exports these names
at the reference's path (``op.custom_extractors``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from torch import nn

from fastnnef.dim import DimExpr
from fastnnef.exceptions import T2NErrorNotFoundModuleExtractor, T2NErrorNotImplemented
from fastnnef.nnef.graph import NTensor
from fastnnef.torch_graph.ir import CUSTOMOP_KIND, TensorValue

if TYPE_CHECKING:
    from fastnnef.op.context import OpContext

__all__ = ["CUSTOMOP_KIND", "ModuleInfoExtractor", "find_extractor"]

# module class -> extractor class; the latest subclass defined for a module class wins.
_REGISTRY: dict[type, type[ModuleInfoExtractor]] = {}


class _ExtractorMeta(type):
    """Registers each extractor class under its ``MODULE_CLASS`` when the class is created."""

    def __init__(cls, name: str, bases: tuple, namespace: dict) -> None:
        super().__init__(name, bases, namespace)
        module_class = getattr(cls, "MODULE_CLASS", None)
        if module_class is not None and namespace.get("REGISTERED", True):
            _REGISTRY.pop(module_class, None)  # re-insert so lookups by name see the newest
            _REGISTRY[module_class] = cls  # type: ignore[assignment]


class ModuleInfoExtractor(metaclass=_ExtractorMeta):
    """Base class of module extractors: subclass it, set ``MODULE_CLASS``, override ``convert_to_nnef``.

    Registration is keyed by the exact module class (no subclass matching); defining a
    second extractor for the same class replaces the first.

    Example::

        class ScaledTanhExtractor(ModuleInfoExtractor):
            MODULE_CLASS = ScaledTanh

            def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph,
                                inference_target, **kwargs):
                (x,) = g.tensor_inputs()
                inner = g.tmp("tanh", [x], suffix="tanh")
                g.emit("mul", [inner, node.module.scale], out=0)
                return []
    """

    MODULE_CLASS: ClassVar[type | None] = None
    #: False on classes kept only so that their names import (not used by exports).
    REGISTERED: ClassVar[bool] = True

    def __init__(self) -> None:
        if self.MODULE_CLASS is None:
            raise T2NErrorNotImplemented(
                f"{type(self).__name__} has no MODULE_CLASS: set it to the nn.Module class "
                "this extractor handles"
            )

    @property
    def op_kind(self) -> str:
        """The IR op kind of the modules this extractor handles."""
        assert self.MODULE_CLASS is not None  # checked in __init__
        return CUSTOMOP_KIND + self.MODULE_CLASS.__name__

    @classmethod
    def get_by_kind(cls, kind: str) -> ModuleInfoExtractor:
        """The extractor for an IR op kind ``wired_custom::<ModuleClassName>``."""
        class_name = kind[len(CUSTOMOP_KIND):] if kind.startswith(CUSTOMOP_KIND) else kind
        for module_class, extractor in reversed(list(_REGISTRY.items())):
            if module_class.__name__ == class_name:
                return extractor()
        raise T2NErrorNotFoundModuleExtractor(
            f"no module extractor for kind {kind!r}; registered: {_registered_names()}"
        )

    @classmethod
    def get_by_module(cls, module: nn.Module) -> ModuleInfoExtractor:
        """The extractor for ``type(module)`` exactly."""
        extractor = find_extractor(module)
        if extractor is None:
            raise T2NErrorNotFoundModuleExtractor(
                f"no module extractor for {type(module).__qualname__}; registered: "
                f"{_registered_names()}. Subclass ModuleInfoExtractor with "
                f"MODULE_CLASS = {type(module).__name__} to add one"
            )
        return extractor

    def takes_over(self, module: nn.Module) -> bool:
        """Whether this instance of ``MODULE_CLASS`` is exported by this extractor (True);
        False leaves it to the trace (e.g. the MoE experts extractor takes only the
        modules planned for ``tract_moe_ffn``, see moe.py)."""
        return True

    def output_dims(
        self, inputs: Sequence[tuple[DimExpr | None, ...]], output_ranks: Sequence[int]
    ) -> list[tuple[DimExpr | None, ...]] | None:
        """The dynamic dims of the module's outputs, from those of its tensor inputs (in
        call order): per dim ``None`` where static, else its size's expression. The default
        (``None``) leaves every dim of the outputs unknown, as for any op without a rule
        (torch_graph/ir/dynamic.py): override it when later ops need the outputs' sizes."""
        return None

    def fake_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """The module's outputs on ``torch.export``'s fake tensors, where only their sizes
        and dtypes matter: by default its own forward. Override it where that forward would
        fix a dynamic size to its traced value (a Python loop over a sequence axis)."""
        return type(module).forward(module, *args, **kwargs)

    def convert_to_nnef(
        self,
        g: Any,
        node: Any,
        name_to_tensor: dict[str, Any],
        null_ref: Any,
        torch_graph: Any,
        inference_target: Any,
        **kwargs: Any,
    ) -> list[str]:
        """Add the NNEF ops for one module call through ``g``; return the fragment names used."""
        raise T2NErrorNotImplemented(
            f"{type(self).__name__}.convert_to_nnef is not implemented: override it to emit "
            f"the NNEF ops for {getattr(self.MODULE_CLASS, '__name__', None)}"
        )

    def emit(self, ctx: OpContext, inference_target: Any) -> list[NTensor]:
        """Convert one module call: run ``convert_to_nnef``, check what it declared, and
        return the module's output tensors in order."""
        named = {v.name: ctx.tensor(v) for v in ctx.node.inputs if isinstance(v, TensorValue)}
        fragments = self.convert_to_nnef(ctx, ctx.node, named, None, None, inference_target) or []
        undeclared = [name for name in fragments if not ctx.has_fragment(name)]
        if undeclared:
            raise T2NErrorNotImplemented(
                f"{type(self).__name__} uses fragments {undeclared} it did not declare: "
                "declare each with g.fragment(name, text)"
            )
        outputs = []
        for i, value in enumerate(ctx.outputs()):
            tensor = ctx.emitted(value)
            if tensor is None:
                raise T2NErrorNotImplemented(
                    f"{type(self).__name__} emitted no op for output {i} of "
                    f"{type(ctx.node.module).__name__}: emit it with g.emit(kind, args, attrs, out={i})"
                )
            outputs.append(tensor)
        return outputs


def find_extractor(module: nn.Module) -> ModuleInfoExtractor | None:
    """The extractor registered for ``type(module)`` exactly that takes this instance
    over, or None."""
    extractor_class = _REGISTRY.get(type(module))
    if extractor_class is None:
        return None
    extractor = extractor_class()
    return extractor if extractor.takes_over(module) else None


def _registered_names() -> list[str]:
    return sorted(module_class.__qualname__ for module_class in _REGISTRY)
