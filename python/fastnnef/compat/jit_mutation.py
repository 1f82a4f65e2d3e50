"""Writes through views made functional (torch_to_nnef's ``torch_graph.jit_mutation``,
served there and at ``torch_graph``). Drop-in only: no export path runs it.

``torch.jit.trace`` records ``buf[:, i] = x`` as ``aten::select``/``aten::slice`` views of
``buf`` and an ``aten::copy_`` into the last one; later reads of ``buf`` still name the value
from before the write, which only aliasing makes right. A graph of values (NNEF) would lose
the write. ``functionalize_view_inplace_copy`` rewrites each such ``copy_`` as the scatter of
its source back through the views (``aten::select_scatter`` / ``aten::slice_scatter``, innermost
first) and points every later read of the buffer, and of the views, at the updated values.

Writes it cannot express this way are left as they are: through a stepped slice or a view
other than select / slice (``transpose``, ``view``...); a warning names the write's source
line when the old value is read afterwards. (fastnnef's own export handles writes through
views while building its IR; this pass is the reference's standalone graph rewrite.)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from fastnnef.log import get_logger
from fastnnef.torch_graph.jit_passes import is_constant

__all__ = ["functionalize_view_inplace_copy"]

log = get_logger(__name__)

_SCATTER_OF = {"aten::select": "aten::select_scatter", "aten::slice": "aten::slice_scatter"}
# Producers whose output aliases their first input (a write through them is not expressible).
_OTHER_VIEWS = frozenset(
    """aten::view aten::reshape aten::transpose aten::t aten::permute aten::expand aten::expand_as
    aten::squeeze aten::unsqueeze aten::narrow aten::as_strided aten::diagonal aten::unfold
    aten::flatten aten::unflatten aten::view_as aten::alias aten::movedim aten::swapaxes
    aten::split aten::chunk aten::unbind aten::real aten::imag""".split()
)


class _View(NamedTuple):
    """One select / slice step: ``result = kind(base, *args)``."""

    kind: str
    base: torch._C.Value
    args: tuple[torch._C.Value, ...]
    result: torch._C.Value


def _view_step(value: torch._C.Value, rewritten: dict[int, _View]) -> _View | None:
    """The select / slice that produced ``value`` (``None`` if none did): a node of the
    graph, or a scatter this pass built (which stands for the view it updated)."""
    if value.unique() in rewritten:
        return rewritten[value.unique()]
    node = value.node()
    if node.kind() not in _SCATTER_OF:
        return None
    args = tuple(node.inputs())[1:]
    return _View(node.kind(), node.inputsAt(0), args, value)


def _expressible(chain: list[_View], root: torch._C.Value) -> bool:
    if root.node().kind() in _OTHER_VIEWS:
        return False
    for view in chain:  # slice(self, dim, start, end, step): only step 1
        if view.kind != "aten::slice":
            continue
        step = view.args[3]
        # toIValue() gives the Python value; torch's stubs say an opaque IValue.
        if not (is_constant(step) and step.toIValue() == 1):  # type: ignore[comparison-overlap]
            return False
    return True


def _warn_lost(write: torch._C.Node, why: str) -> None:
    # sourceRange() gives a str; torch's stubs say SourceRange.
    where = write.sourceRange().strip() or "<unknown source>"  # type: ignore[attr-defined]
    log.warning(
        "functionalize_view_inplace_copy: reads after the write at %s go through %s; the graph "
        "keeps their value from before the write", where, why,
    )


def _refresh_views(
    graph: torch._C.Graph, write: torch._C.Node, old: torch._C.Value, new: torch._C.Value, skip: list[_View],
) -> None:
    """For each select / slice of ``old`` made before ``write`` and read after it (views
    of views too), insert the same view of ``new`` and point the later reads at it."""
    chain_results = {v.result.unique() for v in skip}
    for use in old.uses():
        view = use.user
        if view.isAfter(write) or not view.outputsSize() or view.output().unique() in chain_results:
            continue
        if not any(u.user.isAfter(write) for u in view.output().uses()):
            continue
        if view.kind() in _OTHER_VIEWS:
            _warn_lost(write, f"{view.kind()} view taken before it")
            continue
        if view.kind() not in _SCATTER_OF:
            continue
        # torch's stubs lack Graph.insert (here and below)
        fresh = graph.insert(view.kind(), [new, *list(view.inputs())[1:]])  # type: ignore[attr-defined]
        fresh.setType(view.output().type())
        _refresh_views(graph, write, view.output(), fresh, skip)
        view.output().replaceAllUsesAfterNodeWith(write, fresh)


def functionalize_view_inplace_copy(graph: torch._C.Graph) -> int:
    """Rewrite the top-level ``aten::copy_`` into select / slice views as scatters into the
    viewed tensor, re-pointing later reads; returns the number of ``copy_`` rewritten."""
    count = 0
    # Scatter results that stand for a view of another value (their view step), so that a
    # later write through the same view chain continues from the updated values.
    rewritten: dict[int, _View] = {}
    for node in [n for n in graph.nodes() if n.kind() == "aten::copy_"]:
        dst, src = node.inputsAt(0), node.inputsAt(1)
        chain: list[_View] = []
        step = _view_step(dst, rewritten)
        while step is not None:
            chain.append(step)
            step = _view_step(step.base, rewritten)
        if not chain:
            continue  # a copy_ into a whole tensor: tracing already renames its later reads
        root = chain[-1].base
        if not _expressible(chain, root):
            aliases = [c.result for c in chain] + [root]
            while aliases[-1].node().kind() in _OTHER_VIEWS:  # up to the tensor written into
                aliases.append(aliases[-1].node().inputsAt(0))
            if any(u.user.isAfter(node) for v in aliases for u in v.uses()):
                _warn_lost(node, "a view that is not a unit-step select/slice")
            continue
        with graph.insert_point_guard(node):
            # The new value of each view, innermost (dst: the source, broadcast and cast as
            # copy_ does) to outermost (root: the last scatter).
            new = [graph.insert("aten::expand_as", [src, dst])]  # type: ignore[attr-defined]
            new[0].setType(dst.type())
            if src.type().scalarType() is None or src.type().scalarType() != dst.type().scalarType():
                new[0] = graph.insert("aten::type_as", [new[0], dst])  # type: ignore[attr-defined]
                new[0].setType(dst.type())
            for view in chain:
                scatter = _SCATTER_OF[view.kind]
                new.append(graph.insert(scatter, [view.base, new[-1], *view.args]))  # type: ignore[attr-defined]
                new[-1].setType(view.base.type())
            # Other select / slice views of the written tensors, taken before the write and
            # read after it, see the write in torch: take them again from the new values.
            for outer, value in zip([*chain[1:], None], new[1:]):
                base = outer.result if outer is not None else root
                _refresh_views(graph, node, base, value, skip=chain)
        for view, value, base in zip(chain, new, new[1:]):
            view.result.replaceAllUsesAfterNodeWith(node, value)
            rewritten[value.unique()] = _View(view.kind, base, view.args, value)
        root.replaceAllUsesAfterNodeWith(node, new[-1])
        node.output().replaceAllUsesWith(new[0])  # copy_ returns its (now written) destination
        node.destroy()
        count += 1
    return count
