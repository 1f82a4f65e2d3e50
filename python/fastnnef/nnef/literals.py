"""How values are spelled as NNEF literals that tract's lexer accepts (nnef-format §6.2).

The one owner of literal syntax: ``writer.py`` spells op arguments with it, ``artefact.py``
the tensor names of ``graph.quant`` entries, the properties fragment its keys and values.
"""

from __future__ import annotations

import math
import re

from fastnnef.exceptions import T2NErrorInvalidArgument

_ESCAPED = {"\\": "\\\\", '"': '\\"', "'": "\\'"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TEMPLATE_OPENER = re.compile(r"\{(?=[{%#])")


def format_float(value: float) -> str:
    """A float literal tract's lexer accepts: no ``nan``, no ``+``, no leading ``.``."""
    if math.isnan(value):
        raise T2NErrorInvalidArgument(
            "NaN cannot be written as an NNEF literal: store it in a tensor (.dat) instead"
        )
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value)).replace("e+", "e")


def format_string(value: object, quote: str = "'") -> str:
    """``str(value)`` as an NNEF string literal that tract's parser accepts
    (nnef-format.md §6.2): backslashes and both quote kinds backslash-escaped, control
    characters (newlines, tabs, ...) as spaces, and the template openers ``{{``, ``{%``,
    ``{#`` split by a space (some tract versions render graph.nnef as a template).

    Single quotes by default, as the reference (and NNEF-Tools' printer) writes graph.nnef,
    so text checks written against its artefacts (``to = 'f32'``) hold for ours;
    graph.quant names its tensors in double quotes, as the reference does."""
    text = "".join(_ESCAPED.get(c, c) for c in str(value))
    text = _CONTROL.sub(" ", text)
    return quote + _TEMPLATE_OPENER.sub("{ ", text) + quote
