"""Rewrites of a subnet's dynamic axes (``{input: {axis: SYMBOL}}``) and of its extension lines.

The remodeler changes which symbols a subnet's boundary carries: renamed ones become their
alias, pinned ones (``eval_symbols``) become static. Extension lines (``tract_assert S >= 1``)
follow: renamed symbols are rewritten, and an assertion on a symbol that left the boundary is
dropped (tract warns about an assertion on a symbol no input carries).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import torch

from fastnnef.log import get_logger

log = get_logger(__name__)

DynAxes = dict[str, dict[int, str]]
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
# Words of an extension line that are not symbols.
_KEYWORDS = {"TRACT_ASSERT"}


def alias_of(rename_map: Mapping[str, Sequence[str]] | None) -> dict[str, str]:
    """``{SOURCE: TARGET}`` of a ``{TARGET: [SOURCES]}`` rename map, upper-cased."""
    return {str(s).upper(): str(t).upper() for t, srcs in (rename_map or {}).items() for s in srcs or []}


def apply_symbol_renames_to_dyn(dyn: DynAxes, rename_map: Mapping[str, Sequence[str]] | None) -> DynAxes:
    """``dyn`` with every source symbol of ``rename_map`` replaced by its target."""
    if not rename_map:
        return dyn
    alias = alias_of(rename_map)
    return {name: {i: alias.get(str(s).upper(), str(s)) for i, s in axes.items()} for name, axes in dyn.items()}


def apply_eval_symbols(
    test_input: list,
    input_names: list[str],
    subnet_name: str,
    dyn: DynAxes,
    eval_symbols: Mapping[str, Mapping[str, int]],
) -> list:
    """``test_input`` with each pinned axis cut or zero-padded to its ``eval_symbols`` size."""
    result = list(test_input)
    for i, name in enumerate(input_names[: len(result)]):
        pins = eval_symbols.get(f"{subnet_name}.{name}")
        t = result[i]
        if not pins or not isinstance(t, torch.Tensor):
            continue
        for axis, sym in dyn.get(name, {}).items():
            size = pins.get(str(sym).upper())
            if size is None or not 0 <= axis < t.dim() or size == t.size(axis):
                continue
            if size < t.size(axis):
                t = t.narrow(axis, 0, size)
            else:
                grown = t.new_zeros([*t.shape[:axis], size, *t.shape[axis + 1:]])
                grown.narrow(axis, 0, t.size(axis)).copy_(t)
                t = grown
        result[i] = t
    return result


def remove_eval_symbols_from_dyn(
    input_names: list[str],
    subnet_name: str,
    dyn: DynAxes,
    eval_symbols: Mapping[str, Mapping[str, int]],
) -> None:
    """Drop the pinned axes from ``dyn`` in place: they are static in the exported graph."""
    for name in input_names:
        pins = eval_symbols.get(f"{subnet_name}.{name}")
        if pins and name in dyn:
            dyn[name] = {ax: s for ax, s in dyn[name].items() if str(s).upper() not in pins}


def rewrite_assertions_with_renames(
    assertions: list[str], rename_map: Mapping[str, Sequence[str]] | None
) -> list[str]:
    """Each extension line with its source symbols replaced by their (upper-cased) target."""
    if not rename_map:
        return list(assertions)
    alias = alias_of(rename_map)
    return [_IDENT.sub(lambda m: alias.get(m.group(0).upper(), m.group(0)), str(a)) for a in assertions]


def _symbols_of(dyn: DynAxes | None) -> set[str]:
    return {str(s).upper() for axes in (dyn or {}).values() for s in (axes or {}).values()}


def filter_assertions_present_in_dyn(assertions: list[str], dyn: DynAxes | None) -> list[str]:
    """The lines whose every word is a symbol of ``dyn``, without repeats.

    For generated one-symbol assertions (``tract_assert S >= 1``) only: a hand-written line
    may hold labels or calls, and goes through ``drop_assertions_referencing_symbols``.
    """
    present = _symbols_of(dyn)
    kept = [
        a for a in assertions
        if all(w.upper() in present for w in _IDENT.findall(a) if w.upper() not in _KEYWORDS)
    ]
    return list(dict.fromkeys(kept))


def drop_assertions_referencing_symbols(assertions: list[str], removed_symbols: Iterable[str] | None) -> list[str]:
    """The lines that name none of ``removed_symbols`` (symbols made static), without repeats."""
    removed = {str(s).upper() for s in (removed_symbols or [])}
    kept = []
    for a in assertions:
        if any(w.upper() in removed for w in _IDENT.findall(a)):
            log.warning("dropping the extension %r: it names a symbol that eval_symbols made static", a)
            continue
        kept.append(a)
    return list(dict.fromkeys(kept))


def rewrite_and_filter_assertions(
    assertions: list[str], rename_map: Mapping[str, Sequence[str]] | None, dyn: DynAxes | None
) -> list[str]:
    """Generated assertions with renames applied, kept only while their symbols are in ``dyn``."""
    return filter_assertions_present_in_dyn(rewrite_assertions_with_renames(assertions, rename_map), dyn)
