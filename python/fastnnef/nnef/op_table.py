"""The NNEF operations fastnnef writes, declared once: name, the tract registry that
defines it, typed attributes (required, or optional with the default the reader applies),
and the shape rule (nnef/shapes.py) that derives its output's datum type and shape.

Every op statement is checked against its declaration when it is emitted (``check``,
called by op/builder.py before the statement reaches the graph), so an unknown op, a
missing or misspelt attribute, or an attribute of the wrong type fails in our code, with
the aten op being converted named, instead of in tract when the artefact loads.

Three kinds of ops are known:

- the declarations below (NNEF's own operations and the stdlib fragments tract expands,
  and the ``tract_core``, ``tract_transformers`` ops fastnnef emits);
- ops declared by user code (a ``t2n_extra`` handler or a module extractor that emits a
  tract op fastnnef does not use itself) with ``declare``;
- fragments written into ``graph.nnef`` (``ctx.fragment(name, text)``): the fragment's
  own signature declares its attributes (its non-tensor parameters).

Fragments fastnnef itself defines (scan bodies, the properties fragment) are declared in
``FRAGMENTS`` by their name prefixes, checked when a fragment is declared
(``check_fragment``, called by op/builder.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastnnef.dim import DimExpr
from fastnnef.exceptions import T2NErrorConsistency, T2NErrorInvalidArgument
from fastnnef.nnef import shapes
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.payload import quantized_params
from fastnnef.nnef.shapes import Rule, Shape


# --- attribute types --------------------------------------------------------------------
@dataclass(frozen=True)
class AttrType:
    """The values an attribute takes, as the NNEF text writer spells them."""

    name: str
    accepts: Callable[[Any], bool] = field(compare=False)

    def __str__(self) -> str:
        return self.name


def _is_int(v: Any) -> bool:
    return type(v) is int  # not a bool (nor a DimExpr, which is a str); the fast test: one per attribute


_PLAIN_DATUM_TYPES = frozenset("bool f16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 tdim".split())

INTEGER = AttrType("integer", _is_int)
#: An integer, or a size of a dynamic axis (``S``, ``S+1``): shapes, bounds, counts.
SIZE = AttrType("size", lambda v: _is_int(v) or isinstance(v, DimExpr))
SCALAR = AttrType("scalar", lambda v: _is_int(v) or isinstance(v, float))
LOGICAL = AttrType("logical", lambda v: isinstance(v, bool))
STRING = AttrType("string", lambda v: isinstance(v, str) and not isinstance(v, DimExpr))
#: A tract datum type (``f32``, ``i64``, ``QU8(Z:128 S:0.05)``...).
DATUM_TYPE = AttrType(
    "datum type",
    lambda v: isinstance(v, str) and not isinstance(v, DimExpr)
    and (v in _PLAIN_DATUM_TYPES or quantized_params(v) is not None),
)
TENSOR = AttrType("tensor", lambda v: isinstance(v, NTensor))


def list_of(item: AttrType) -> AttrType:
    return AttrType(f"{item}[]", lambda v: isinstance(v, (list, tuple)) and all(map(item.accepts, v)))


def pair_of(item: AttrType) -> AttrType:
    return AttrType(f"({item}, {item})", lambda v: isinstance(v, Tuple) and len(v.items) == 2
                    and all(item.accepts(i) for i in v.items))


def either(*types: AttrType) -> AttrType:
    return AttrType(" | ".join(t.name for t in types), lambda v: any(t.accepts(v) for t in types))


INTEGERS = list_of(INTEGER)
SIZES = list_of(SIZE)
SCALARS = list_of(SCALAR)
PADDING = list_of(pair_of(INTEGER))
#: ``tract_core_scan``'s port lists: tuples of names, tensors and axes.
SCAN_PORTS = AttrType("tuple[]", lambda v: isinstance(v, list) and all(isinstance(i, Tuple) for i in v))
#: Any value: a fragment parameter of a type the signature parser does not read.
ANY = AttrType("any", lambda v: True)

REQUIRED: Any = object()  # the default of an attribute that must be given


@dataclass(frozen=True)
class Attr:
    type: AttrType
    #: ``REQUIRED``, or the value the reader assumes when the attribute is left out
    #: (``None``: the reader's own default, or the attribute changes the op's form).
    default: Any = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def req(type: AttrType) -> Attr:
    return Attr(type, REQUIRED)


def opt(type: AttrType, default: Any = None) -> Attr:
    return Attr(type, default)


# --- declarations ------------------------------------------------------------------------
@dataclass(frozen=True)
class OpDecl:
    """One NNEF operation: ``name(args..., attrs...)``."""

    name: str
    #: The tract registry that defines it (``extension tract_registry <r>;``), None for
    #: NNEF's own operations and fragments written into the graph.
    registry: str | None
    attrs: Mapping[str, Attr]
    #: The output's ``(datum type, shape)`` from the operands; None: the handler says them.
    rule: Rule | None = None
    required: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", tuple(k for k, a in self.attrs.items() if a.required))

    def check(self, attrs: Mapping[str, Any]) -> None:
        """Raise ``T2NErrorConsistency`` for an attribute this op does not take, a required
        one left out, or a wrongly typed one."""
        for key, value in attrs.items():
            attr = self.attrs.get(key)
            if attr is None:
                raise T2NErrorConsistency(
                    f"NNEF op {self.name!r} has no attribute {key!r}; it takes "
                    f"{', '.join(sorted(self.attrs)) or 'none'} (declared in nnef/op_table.py)"
                )
            if not attr.type.accepts(value):
                raise T2NErrorConsistency(
                    f"attribute {key!r} of NNEF op {self.name!r} is a {attr.type}, "
                    f"got {value!r} ({type(value).__name__})"
                )
        missing = [k for k in self.required if k not in attrs]
        if missing:
            raise T2NErrorConsistency(f"NNEF op {self.name!r} needs attribute(s) {', '.join(missing)}")


_TABLE: dict[str, OpDecl] = {}


def declare(name: str, registry: str | None = None, rule: Rule | None = None, **attrs: Attr) -> OpDecl:
    """Declare an NNEF op (user code: a tract op fastnnef does not emit itself). Declaring
    a name twice differently raises ``T2NErrorInvalidArgument``."""
    decl = OpDecl(name, registry, dict(attrs), rule)
    known = _TABLE.get(name)
    if known is not None and known != decl:
        raise T2NErrorInvalidArgument(f"NNEF op {name!r} is already declared differently: {known}")
    _TABLE[name] = decl
    return decl


def declared(name: str) -> OpDecl | None:
    return _TABLE.get(name)


def declarations() -> Mapping[str, OpDecl]:
    """Every declared op by name."""
    return dict(_TABLE)


# NNEF's own operations (tract_nnef: no extension line), and the stdlib fragments tract
# expands at load. Defaults are the NNEF specification's.
_UNARY = """copy neg abs sign exp log sin cos tan asin acos atan sinh cosh asinh acosh atanh
    floor ceil round sqrt rsqrt sqr recip relu sigmoid tanh elu selu gelu silu softplus not""".split()
_BINARY = "add sub mul div pow min max and or".split()
for _name in _UNARY + _BINARY:
    declare(_name, rule=shapes.elementwise)
for _name in "lt gt le ge eq ne".split():
    declare(_name, rule=shapes.comparison)
declare("leaky_relu", rule=shapes.elementwise, alpha=req(SCALAR))
declare("select", rule=shapes.select)
for _name in "sum_reduce mean_reduce max_reduce min_reduce all_reduce any_reduce".split():
    declare(_name, rule=shapes.reduction, axes=req(INTEGERS))
for _name in ("argmax_reduce", "argmin_reduce"):
    declare(_name, rule=shapes.index_reduction, axes=req(INTEGERS))
declare("softmax", rule=shapes.elementwise, axes=opt(INTEGERS, [1]))
declare("reshape", shape=req(either(SIZES, TENSOR)), axis_start=opt(INTEGER, 0), axis_count=opt(INTEGER, -1))
declare("transpose", rule=shapes.transpose, axes=req(INTEGERS))
declare("squeeze", rule=shapes.squeeze, axes=req(INTEGERS))
declare("unsqueeze", rule=shapes.unsqueeze, axes=req(INTEGERS))
declare("concat", rule=shapes.concat, axis=req(INTEGER))
declare("stack", rule=shapes.concat, axis=req(INTEGER))
declare("slice", rule=shapes.slice_, axes=req(INTEGERS), begin=req(SIZES), end=req(SIZES), stride=opt(INTEGERS))
declare("tile", rule=shapes.tile, repeats=req(SIZES))
declare("pad", padding=req(PADDING), border=opt(STRING, "constant"), value=opt(SCALAR, 0.0))
declare("matmul", rule=shapes.matmul, transposeA=opt(LOGICAL, False), transposeB=opt(LOGICAL, False))
# Any: mypy cannot rule out that a splatted dict names declare()'s registry or rule.
_CONV: dict[str, Any] = dict(border=opt(STRING, "constant"), padding=opt(PADDING, []), stride=opt(INTEGERS, []),
             dilation=opt(INTEGERS, []), groups=opt(INTEGER, 1))
declare("conv", rule=shapes.conv, **_CONV)
declare("deconv", **_CONV, output_shape=opt(INTEGERS, []))
_POOL: dict[str, Any] = dict(size=req(INTEGERS), border=opt(STRING, "constant"), padding=opt(PADDING, []),
             stride=opt(INTEGERS, []), dilation=opt(INTEGERS, []))
for _name in ("max_pool", "avg_pool", "max_pool_with_index"):
    declare(_name, **_POOL)
declare("box", **_POOL, normalize=opt(LOGICAL, False))
declare("debox", **_POOL, output_shape=opt(INTEGERS, []), normalize=opt(LOGICAL, False))
# tract's own versions of these two (declared only with tract_core; NNEF's are broken in tract)
declare("nearest_upsample", factor=req(INTEGERS))
declare("multilinear_upsample", factor=req(INTEGERS), method=opt(STRING, "symmetric"), border=opt(STRING, "replicate"))

# tract_core (tract.md §4).
CORE = "tract_core"
for _name in """tract_core_erf tract_core_round_even tract_core_hard_swish tract_core_is_nan
        tract_core_bitnot tract_core_bitand tract_core_bitor tract_core_bitxor tract_shl tract_shr""".split():
    declare(_name, CORE, shapes.elementwise)
declare("tract_core_is_inf", CORE, shapes.elementwise, detect_positive=opt(LOGICAL, True),
        detect_negative=opt(LOGICAL, True))
declare("tract_core_log_softmax", CORE, shapes.elementwise, axes=req(INTEGERS))
declare("tract_core_trilu", CORE, shapes.elementwise, k=opt(either(INTEGER, TENSOR), 0), upper=req(LOGICAL))
declare("tract_core_cumsum", CORE, shapes.elementwise, axis=req(INTEGER), exclusive=opt(LOGICAL, False),
        reverse=opt(LOGICAL, False))
declare("tract_core_product_reduce", CORE, shapes.reduction, axes=req(INTEGERS))
declare("tract_core_cast", CORE, shapes.cast, to=req(DATUM_TYPE))
declare("tract_core_broadcast", CORE, shapes.broadcast, shape=req(either(SIZES, TENSOR)))
declare("tract_core_shape_of", CORE, shapes.shape_of)
declare("tract_core_range", CORE)
declare("tract_core_einsum", CORE, shapes.einsum, expr=req(STRING), acc=req(DATUM_TYPE), output=opt(STRING, ""))
declare("tract_core_einsum_q", CORE, expr=req(STRING), acc=req(DATUM_TYPE), output=opt(DATUM_TYPE, ""),
        bias=opt(either(TENSOR, SCALAR), 0), a0=req(either(SCALAR, TENSOR)), a_scale=req(either(SCALAR, TENSOR)),
        b0=req(either(SCALAR, TENSOR)), b_scale=req(either(SCALAR, TENSOR)), c0=req(either(SCALAR, TENSOR)),
        c_scale=req(either(SCALAR, TENSOR)))
declare("tract_core_qconv", CORE, **_CONV, group=opt(INTEGER, 1), bias=opt(either(TENSOR, SCALAR), 0),
        a0=req(either(SCALAR, TENSOR)), a_scale=req(either(SCALAR, TENSOR)), b0=req(either(SCALAR, TENSOR)),
        b_scale=req(either(SCALAR, TENSOR)), c0=req(either(SCALAR, TENSOR)), c_scale=req(either(SCALAR, TENSOR)),
        output_dt=opt(DATUM_TYPE, ""))
declare("tract_core_gather", CORE, shapes.gather, axis=req(INTEGER), datum_type=opt(DATUM_TYPE))
declare("tract_core_gather_elements", CORE, shapes.gather_elements, axis=req(INTEGER))
declare("tract_core_gather_nd", CORE, batch_dims=opt(INTEGER, 0))
declare("tract_core_scatter_elements", CORE, shapes.same_as_input, axis=req(INTEGER),
        reduction=opt(STRING, "none"))
declare("tract_core_scatter_nd", CORE, shapes.same_as_input, reduction=opt(STRING, "none"))
declare("tract_core_downsample", CORE, shapes.downsample, axis=req(INTEGER), stride=req(INTEGER),
        modulo=opt(INTEGER, 0))
declare("tract_core_fft", CORE, shapes.same_as_input, axis=req(INTEGER), inverse=req(LOGICAL))
declare("tract_core_stft", CORE, axis=req(INTEGER), frame=req(INTEGER), stride=req(INTEGER),
        window=opt(TENSOR))
declare("tract_core_topk", CORE, k=req(either(INTEGER, TENSOR)), axis=req(INTEGER), largest=req(LOGICAL))
declare("tract_core_grid_sample", CORE, shapes.grid_sample, mode=opt(STRING, "bilinear"),
        padding_mode=opt(STRING, "zeros"), align_corners=opt(LOGICAL, False))
declare("tract_core_resize", CORE, scales=opt(SCALARS), sizes=opt(SIZES), coord_transformer=opt(STRING, "half_pixel"),
        interpolator=opt(STRING, "nearest"), nearest_mode=opt(STRING, "floor"))
declare("tract_core_scan", CORE, body=req(STRING), scan=req(SCAN_PORTS), full=req(SCAN_PORTS),
        state=req(SCAN_PORTS), output=req(SCAN_PORTS), skip=opt(INTEGER, 0), reset_every_turn=opt(INTEGER, 0))

# tract_transformers.
TRANSFORMERS = "tract_transformers"
declare("tract_transformers_sdpa", TRANSFORMERS, scale=opt(SCALAR), datum_type=req(DATUM_TYPE),
        acc_datum_type=req(DATUM_TYPE), is_causal=opt(LOGICAL, False))
declare("tract_transformers_causal_conv1d_update", TRANSFORMERS)
declare("tract_transformers_gdn_recurrent", TRANSFORMERS)
# registered by tract_transformers without its prefix
declare("tract_moe_ffn", TRANSFORMERS, k=req(INTEGER), activation=req(STRING), gate=req(STRING),
        expert_layout=req(STRING), wg_bias=opt(TENSOR), w1_bias=opt(TENSOR), w3_bias=opt(TENSOR),
        w2_bias=opt(TENSOR), act_alpha=opt(SCALAR), act_limit=opt(SCALAR))


# --- fragments ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FragmentDecl:
    """Fragments fastnnef writes into ``graph.nnef``, by name prefix."""

    prefix: str
    what: str


#: fastnnef's own fragment names start with ``fastnnef_`` (and the properties fragment's
#: is tract's); a ``fastnnef_`` name that none of these prefixes declares is refused.
OWN_PREFIX = "fastnnef_"
FRAGMENTS: tuple[FragmentDecl, ...] = (
    FragmentDecl("tract_core_properties", "the model's properties (inference_target/properties.py)"),
    *(FragmentDecl(f"fastnnef_cum{step}_", f"one step of a running {step}, a tract_core_scan body "
                   "(op/aten/cumulative.py)") for step in ("sum", "prod", "logsumexp", "max", "min")),
    *(FragmentDecl(f"fastnnef_{layer}_step_", f"one time step of a {layer} layer, a tract_core_scan body "
                   "(op/aten/recurrent.py)") for layer in ("lstm", "gru", "rnn_tanh", "rnn_relu")),
    FragmentDecl("fastnnef_ssm_step_", "one step of a state-space layer's selective scan, a tract_core_scan body "
                 "(op/custom_extractors/ssm.py)"),
)


def fastnnef_fragment(name: str) -> FragmentDecl | None:
    """The declaration of a fragment fastnnef writes, None for a user's fragment."""
    return next((f for f in FRAGMENTS if name.startswith(f.prefix)), None)


def check_fragment(name: str, text: str) -> None:
    """Refuse a fragment whose text does not define ``name``, or a fastnnef fragment that
    ``FRAGMENTS`` does not declare (raises ``T2NErrorConsistency``)."""
    if name.startswith(OWN_PREFIX) and fastnnef_fragment(name) is None:
        raise T2NErrorConsistency(
            f"fragment {name!r} is in fastnnef's namespace ({OWN_PREFIX}) but not declared in "
            "nnef/op_table.py FRAGMENTS"
        )
    fragment_decl(name, text)


_SIGNATURE = re.compile(r"fragment\s+(\w+)\s*(?:<[^>]*>)?\s*\((.*?)\)\s*->", re.S)
_PARAM_TYPES = {"integer": INTEGER, "scalar": SCALAR, "logical": LOGICAL, "string": STRING}


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for c in text:
        depth += c in "([<"
        depth -= c in ")]>"
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    return [p.strip() for p in parts + [current] if p.strip()]


def _param_type(text: str) -> AttrType:
    text = text.strip()
    if text.endswith("[]"):
        return list_of(_param_type(text[:-2]))
    return _PARAM_TYPES.get(text, ANY)


def fragment_decl(name: str, text: str) -> OpDecl:
    """The op a fragment defines, from its signature: its non-tensor parameters are the
    attributes (required unless they have a default)."""
    match = _SIGNATURE.search(text)
    if match is None or match.group(1) != name:
        raise T2NErrorConsistency(f"the text of fragment {name!r} does not define it: 'fragment {name}(...) -> (...)'")
    attrs: dict[str, Attr] = {}
    for param in _split_top_level(match.group(2)):
        pname, _, rest = param.partition(":")
        ptype, eq, _default = rest.partition("=")
        if ptype.strip().startswith("tensor"):
            continue
        attrs[pname.strip()] = Attr(_param_type(ptype), None if eq else REQUIRED)
    return OpDecl(name, None, attrs)


# --- use ---------------------------------------------------------------------------------
def lookup(kind: str, fragments: Mapping[str, str]) -> OpDecl:
    """The declaration of op ``kind``: the table's, or that of a fragment of this graph
    (``fragments``: name -> text). Raises ``T2NErrorConsistency`` for an unknown op."""
    decl = _TABLE.get(kind)
    if decl is not None:
        return decl
    text = fragments.get(kind)
    if text is not None:
        return fragment_decl(kind, text)
    raise T2NErrorConsistency(
        f"NNEF op {kind!r} is not declared: fastnnef's ops are in nnef/op_table.py; "
        "user code declares a tract op with fastnnef.nnef.op_table.declare(...) or defines a "
        "fragment with ctx.fragment(name, text) before emitting it"
    )


def check(kind: str, attrs: Mapping[str, Any], fragments: Mapping[str, str]) -> OpDecl:
    """``lookup`` then ``OpDecl.check``: the declaration, for a statement that may be written."""
    decl = lookup(kind, fragments)
    decl.check(attrs)
    return decl


def infer(kind: str, args: Sequence[Any], attrs: dict[str, Any]) -> tuple[str, Shape] | None:
    """``(datum type, shape)`` of ``kind(args, attrs)``'s single output by its declared
    rule, or ``None`` when the op has none (or is not declared)."""
    decl = _TABLE.get(kind)
    return decl.rule(kind, args, attrs) if decl is not None and decl.rule is not None else None
