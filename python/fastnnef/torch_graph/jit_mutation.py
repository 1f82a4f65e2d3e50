"""torch_to_nnef's ``torch_graph.jit_mutation`` path: the reference's standalone rewrite of
writes through views, drop-in only (fastnnef/compat/jit_mutation.py; fastnnef's own export
functionalizes while building its IR, torch_graph/functionalize.py)."""

from fastnnef.compat.jit_mutation import functionalize_view_inplace_copy

__all__ = ["functionalize_view_inplace_copy"]
