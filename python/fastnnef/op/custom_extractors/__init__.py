"""Module extractors: take over the NNEF export of a whole ``nn.Module`` class.

Mirrors ``torch_to_nnef.op.custom_extractors``. A module whose exact class has an extractor
is not traced through: it becomes one IR op of kind ``CUSTOMOP_KIND + MODULE_CLASS.__name__``
and its extractor's ``convert_to_nnef`` writes the NNEF ops.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional, Type

from torch import nn

from fastnnef.exceptions import T2NErrorNotFoundModuleExtractor, T2NErrorNotImplemented

CUSTOMOP_KIND = "wired_custom::"

# module class -> extractor class; the latest subclass defined for a module class wins.
_REGISTRY: Dict[type, "Type[ModuleInfoExtractor]"] = {}


class _ExtractorMeta(type):
    """Registers each extractor class under its ``MODULE_CLASS`` when the class is created."""

    def __init__(cls, name: str, bases: tuple, namespace: dict) -> None:
        super().__init__(name, bases, namespace)
        module_class = getattr(cls, "MODULE_CLASS", None)
        if module_class is not None:
            _REGISTRY.pop(module_class, None)  # re-insert so lookups by name see the newest
            _REGISTRY[module_class] = cls  # type: ignore[assignment]


class ModuleInfoExtractor(metaclass=_ExtractorMeta):
    """Base class of module extractors: subclass it, set ``MODULE_CLASS``, override ``convert_to_nnef``.

    Registration is keyed by the exact module class (no subclass matching); defining a
    second extractor for the same class replaces the first. Same contract as
    torch_to_nnef's; the arguments of ``convert_to_nnef`` are fastnnef's own graph objects.

    Example::

        class MyBlockExtractor(ModuleInfoExtractor):
            MODULE_CLASS = MyBlock

            def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph,
                                inference_target, **kwargs):
                ...  # add NNEF ops to g
                return []  # names of the fragments used
    """

    MODULE_CLASS: ClassVar[Optional[type]] = None

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
        extractor = _REGISTRY.get(type(module))
        if extractor is None:
            raise T2NErrorNotFoundModuleExtractor(
                f"no module extractor for {type(module).__qualname__}; registered: "
                f"{_registered_names()}. Subclass ModuleInfoExtractor with "
                f"MODULE_CLASS = {type(module).__name__} to add one"
            )
        return extractor()

    def convert_to_nnef(
        self,
        g: Any,
        node: Any,
        name_to_tensor: Dict[str, Any],
        null_ref: Any,
        torch_graph: Any,
        inference_target: Any,
        **kwargs: Any,
    ) -> List[str]:
        """Add the NNEF ops for one module call to ``g``; return the fragment names used."""
        raise T2NErrorNotImplemented(
            f"{type(self).__name__}.convert_to_nnef is not implemented: override it to emit "
            f"the NNEF ops for {getattr(self.MODULE_CLASS, '__name__', None)}"
        )


def _registered_names() -> List[str]:
    return sorted(module_class.__qualname__ for module_class in _REGISTRY)
