"""How NNEF graph identifiers are named (mirrors ``torch_to_nnef.torch_graph.ir_naming``)."""

from __future__ import annotations

from enum import Enum


class VariableNamingScheme(str, Enum):
    """Naming scheme for identifiers in ``graph.nnef``; plain strings are accepted too.

    - ``raw``: the JIT debug names;
    - ``natural_verbose``: module-path based names (the default);
    - ``natural_verbose_camel``: shorter camelCase names;
    - ``numeric``: compact numbered names.

    ``.dat`` labels are the torch parameter paths whatever the scheme.
    """

    RAW = "raw"
    NATURAL_VERBOSE = "natural_verbose"
    NATURAL_VERBOSE_CAMEL = "natural_verbose_camel"
    NUMERIC = "numeric"

    @classmethod
    def default(cls) -> VariableNamingScheme:
        """The scheme used when none is given: ``NATURAL_VERBOSE``."""
        return cls.NATURAL_VERBOSE


DEFAULT_VARNAME_SCHEME = VariableNamingScheme.default()
