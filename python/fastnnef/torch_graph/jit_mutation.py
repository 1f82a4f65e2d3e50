"""torch_to_nnef's ``torch_graph.jit_mutation`` path: the reference's standalone rewrite of
writes through views, drop-in only, served here by fastnnef/compat/jit_mutation.py on first
use (fastnnef's own export functionalizes while building its IR, torch_graph/ir/functionalize.py)."""

from typing import Any

from fastnnef.reference_names import reference_name

__all__ = ["functionalize_view_inplace_copy"]  # noqa: F822 - served by __getattr__


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
