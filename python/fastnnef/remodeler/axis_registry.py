"""The shape config: parsed strictly into an ``AxisSymbolRegistry``, and written back.

The format is torch_to_nnef's (``schema.py`` names its keys): a mapping of subnet names to
``{inputs, outputs, renamed_symbols, outputs_keep, extensions}``, or of qualified input names
(``encoder.audio_signal``) to their dims. A config written for torch_to_nnef loads unchanged.
Parsing is strict: an unknown key, a value of the wrong type or an empty name is refused
with ``T2NErrorInvalidArgument`` naming where it is, so a typo never silently drops a
transform. Symbols are compared without case and kept upper-cased, as torch_to_nnef does.
"""

from __future__ import annotations

import json
import os
import tempfile
import typing as T
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile
from fastnnef.remodeler.schema import (
    INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE,
    INPUT_FIELD_COLLAPSE_DIMS,
    INPUT_FIELD_EVAL_SYMBOLS,
    INPUT_FIELD_ORIGINAL_SHAPE,
    OUTPUT_FIELD_COLLAPSE_DIMS,
    SHAPE_KEY_EXTENSIONS,
    SHAPE_KEY_INPUTS,
    SHAPE_KEY_OUTPUTS,
    SHAPE_KEY_OUTPUTS_KEEP,
    SHAPE_KEY_RENAMED,
)

AxisSymbolMap = dict[int, str]
ShapeEntry = int | str  # a static size, or the name of a dynamic axis

SUBNET_KEYS = (SHAPE_KEY_INPUTS, SHAPE_KEY_OUTPUTS, SHAPE_KEY_RENAMED, SHAPE_KEY_OUTPUTS_KEEP, SHAPE_KEY_EXTENSIONS)
INPUT_KEYS = (
    INPUT_FIELD_ORIGINAL_SHAPE, INPUT_FIELD_COLLAPSE_DIMS, INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE,
    INPUT_FIELD_EVAL_SYMBOLS,
)
OUTPUT_KEYS = (OUTPUT_FIELD_COLLAPSE_DIMS,)


@dataclass
class AxisSymbolRegistry:
    """A parsed shape config. Inputs and outputs are qualified: ``"<subnet>.<name>"``.

    ``symbols_per_input``: the symbols of each input's ``original_shape`` (``{axis: SYMBOL}``),
    ``rank_per_input`` its length; ``bind_to_dim``: an input computed from another's dynamic
    size (``"source.SYMBOL"``); ``input_collapse_dims``: the symbols whose axes leave the
    boundary; ``renamed_symbols_per_subnet``: ``{TARGET: [SOURCES]}`` aliases seen by tract;
    ``outputs_keep_per_subnet``: the outputs kept; ``output_collapse_dims``: output axes
    squeezed; ``eval_symbols_per_input``: symbols pinned to a size in the example;
    ``original_shape_per_input``: the dims as written; ``extensions_per_subnet``: extension
    lines (``tract_assert ...``) added to the subnet's graph.
    """

    symbols_per_input: dict[str, AxisSymbolMap]
    rank_per_input: dict[str, int]
    bind_to_dim: dict[str, str]
    input_collapse_dims: dict[str, list[str]]
    renamed_symbols_per_subnet: dict[str, dict[str, list[str]]]
    outputs_keep_per_subnet: dict[str, list[str]]
    output_collapse_dims: dict[str, list[int]] = field(default_factory=dict)
    eval_symbols_per_input: dict[str, dict[str, int]] = field(default_factory=dict)
    original_shape_per_input: dict[str, list[ShapeEntry]] = field(default_factory=dict)
    extensions_per_subnet: dict[str, list[str]] = field(default_factory=dict)

    @staticmethod
    def empty() -> AxisSymbolRegistry:
        return AxisSymbolRegistry({}, {}, {}, {}, {}, {})


def _name(key: object, where: str) -> str:
    if not isinstance(key, str) or not key.strip():
        raise T2NErrorInvalidArgument(f"shape-config: {where} must be a non-empty string, got {key!r}")
    return key


def _symbol(value: object, where: str) -> str:
    return _name(value, f"a symbol in {where}").strip().upper()


def _str_list(value: object, where: str) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise T2NErrorInvalidArgument(f"shape-config: {where} must be a list of strings, got {value!r}")
    return [_name(v, f"an entry of {where}") for v in value]


def _check_keys(mapping: Mapping[str, object], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(str(k) for k in mapping if k not in allowed)
    if unknown:
        raise T2NErrorInvalidArgument(
            f"shape-config: unknown keys in {where}: {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )


def _shape(value: object, where: str) -> list[ShapeEntry]:
    if not isinstance(value, (list, tuple)):
        raise T2NErrorInvalidArgument(f"shape-config: {where} must be a list of dims, got {value!r}")
    dims: list[ShapeEntry] = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise T2NErrorInvalidArgument(
                f"shape-config: {where}[{i}] is {v!r}: a dim is a size (int) or a symbol (string)"
            )
        if isinstance(v, str) and not v.strip():
            raise T2NErrorInvalidArgument(f"shape-config: {where}[{i}] is an empty symbol")
        dims.append(v)
    return dims


def _axis_list(value: object, where: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise T2NErrorInvalidArgument(
            f"shape-config: {where} must be a list of axis indices (ints >= 0), got {value!r}"
        )
    return list(value)


class _Parser:
    """Fills a registry from the raw mapping, one subnet or flat entry at a time."""

    def __init__(self) -> None:
        self.reg = AxisSymbolRegistry.empty()

    def record_shape(self, qname: str, value: object) -> None:
        dims = _shape(value, f"the original_shape of '{qname}'")
        self.reg.symbols_per_input[qname] = {i: d.strip().upper() for i, d in enumerate(dims) if isinstance(d, str)}
        self.reg.rank_per_input[qname] = len(dims)
        self.reg.original_shape_per_input[qname] = dims

    def input_entry(self, qname: str, entry: Mapping[str, object]) -> None:
        _check_keys(entry, INPUT_KEYS, f"input '{qname}'")
        if INPUT_FIELD_ORIGINAL_SHAPE in entry:
            self.record_shape(qname, entry[INPUT_FIELD_ORIGINAL_SHAPE])
        if INPUT_FIELD_COLLAPSE_DIMS in entry:
            where = f"the collapse_dims of '{qname}'"
            symbols = [s.strip().upper() for s in _str_list(entry[INPUT_FIELD_COLLAPSE_DIMS], where)]
            if symbols:  # the template writes `collapse_dims: []` on every input
                self.reg.input_collapse_dims[qname] = symbols
        if INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE in entry:
            bind = entry[INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE]
            if not isinstance(bind, str) or "." not in bind.strip(".") or not bind.rpartition(".")[2].strip():
                raise T2NErrorInvalidArgument(
                    f"shape-config: the bind_scalar_to_dim_size of '{qname}' is {bind!r}: write it as "
                    "'<input>.<SYMBOL>' (or '<subnet>.<input>.<SYMBOL>'), the symbol of a dynamic axis of "
                    "another input of the subnet"
                )
            self.reg.bind_to_dim[qname] = bind.strip()
        if INPUT_FIELD_EVAL_SYMBOLS in entry:
            pins = entry[INPUT_FIELD_EVAL_SYMBOLS]
            where = f"the eval_symbols of '{qname}'"
            if not isinstance(pins, Mapping) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pins.values()
            ):
                raise T2NErrorInvalidArgument(f"shape-config: {where} must map symbols to sizes >= 1, got {pins!r}")
            self.reg.eval_symbols_per_input[qname] = {_symbol(k, where): int(v) for k, v in pins.items()}

    def inputs(self, subnet: str, section: object) -> None:
        if not isinstance(section, Mapping):
            raise T2NErrorInvalidArgument(
                f"shape-config: subnet '{subnet}' must declare an 'inputs' mapping (input name -> dims or settings)"
            )
        for inp, value in section.items():
            qname = f"{subnet}.{_name(inp, f'an input name of subnet {subnet!r}')}"
            if isinstance(value, (list, tuple)):
                self.record_shape(qname, value)
            elif isinstance(value, Mapping):
                # A tuple input: one entry per position ("0", "1", ...), each its own input.
                if value and INPUT_FIELD_ORIGINAL_SHAPE not in value and all(
                    isinstance(k, str) and k.isdigit() for k in value
                ):
                    for idx, sub in value.items():
                        if not isinstance(sub, Mapping):
                            raise T2NErrorInvalidArgument(
                                f"shape-config: tuple entry '{qname}_{idx}' must be a mapping, got {sub!r}"
                            )
                        self.input_entry(f"{qname}_{idx}", sub)
                else:
                    self.input_entry(qname, value)
            else:
                raise T2NErrorInvalidArgument(
                    f"shape-config: input '{qname}' must be a list of dims or a mapping, got {value!r}"
                )

    def outputs(self, subnet: str, section: object) -> None:
        if not isinstance(section, Mapping):
            raise T2NErrorInvalidArgument(f"shape-config: 'outputs' of subnet '{subnet}' must be a mapping")
        for out, entry in section.items():
            qname = f"{subnet}.{_name(out, f'an output name of subnet {subnet!r}')}"
            if not isinstance(entry, Mapping):
                raise T2NErrorInvalidArgument(f"shape-config: output '{qname}' must be a mapping, got {entry!r}")
            _check_keys(entry, OUTPUT_KEYS, f"output '{qname}'")
            if OUTPUT_FIELD_COLLAPSE_DIMS in entry:
                where = f"the collapse_dims of output '{qname}'"
                self.reg.output_collapse_dims[qname] = _axis_list(entry[OUTPUT_FIELD_COLLAPSE_DIMS], where)

    def renamed(self, subnet: str, value: object) -> None:
        where = f"the renamed_symbols of subnet '{subnet}'"
        if isinstance(value, Mapping):
            pairs = list(value.items())
        elif isinstance(value, (list, tuple)) and all(isinstance(e, Mapping) and len(e) == 1 for e in value):
            pairs = [next(iter(e.items())) for e in value]
        else:
            raise T2NErrorInvalidArgument(
                f"shape-config: {where} must map each target symbol to its source symbols, got {value!r}"
            )
        mapping: dict[str, list[str]] = {}
        for target, sources in pairs:
            tgt = _symbol(target, where)
            srcs = [s.strip().upper() for s in _str_list(sources, f"{where} ({tgt})")]
            if tgt in srcs:
                raise T2NErrorInvalidArgument(f"shape-config: in {where}, target '{tgt}' cannot be one of its sources")
            if tgt in mapping:
                raise T2NErrorInvalidArgument(f"shape-config: in {where}, target '{tgt}' is given twice")
            taken = sorted({s for s in srcs for other in mapping.values() if s in other})
            if taken:
                raise T2NErrorInvalidArgument(f"shape-config: in {where}, sources {taken} are renamed to two targets")
            mapping[tgt] = srcs
        if mapping:
            self.reg.renamed_symbols_per_subnet[subnet] = mapping

    def subnet(self, subnet: str, body: Mapping[str, object]) -> None:
        if INPUT_FIELD_COLLAPSE_DIMS in body:
            raise T2NErrorInvalidArgument(
                f"shape-config: collapse_dims is set on subnet '{subnet}': set it on each input instead "
                f"({subnet}: inputs: <name>: collapse_dims: [...])"
            )
        _check_keys(body, SUBNET_KEYS, f"subnet '{subnet}'")
        self.inputs(subnet, body.get(SHAPE_KEY_INPUTS))
        if body.get(SHAPE_KEY_OUTPUTS) is not None:  # `outputs:` left empty, as torch_to_nnef allows
            self.outputs(subnet, body[SHAPE_KEY_OUTPUTS])
        if SHAPE_KEY_RENAMED in body and body[SHAPE_KEY_RENAMED] is not None:
            self.renamed(subnet, body[SHAPE_KEY_RENAMED])
        if SHAPE_KEY_OUTPUTS_KEEP in body:
            keep = _str_list(body[SHAPE_KEY_OUTPUTS_KEEP], f"the outputs_keep of subnet '{subnet}'")
            self.reg.outputs_keep_per_subnet[subnet] = keep
        if SHAPE_KEY_EXTENSIONS in body:
            exts = _str_list(body[SHAPE_KEY_EXTENSIONS], f"the extensions of subnet '{subnet}'")
            self.reg.extensions_per_subnet[subnet] = exts


def parse_axis_symbol_registry(raw: object) -> AxisSymbolRegistry:
    """Parse a shape config already read (a mapping); raise ``T2NErrorInvalidArgument`` on any fault."""
    if not isinstance(raw, Mapping):
        raise T2NErrorInvalidArgument(
            "shape-config must be a mapping of subnet names to their inputs (or of '<subnet>.<input>' to dims), "
            f"got {type(raw).__name__}"
        )
    parser = _Parser()
    for key, value in raw.items():
        key = _name(key, "a top-level key")
        if isinstance(value, Mapping):
            parser.subnet(key, value)
        elif isinstance(value, (list, tuple)):
            if "." not in key.strip("."):
                raise T2NErrorInvalidArgument(
                    f"shape-config: the dims {value!r} of '{key}' name no subnet: key them '<subnet>.{key}', or "
                    f"write them under '<subnet>: inputs: {key}:'"
                )
            parser.record_shape(key, value)
        else:
            raise T2NErrorInvalidArgument(
                f"shape-config: '{key}' must be a subnet mapping or a list of dims, got {value!r}"
            )
    if not parser.reg.symbols_per_input:
        raise T2NErrorInvalidArgument("shape-config defines no input shape: give each input its original_shape")
    return parser.reg


class _DuplicateKey(Exception):
    """A key written twice in one mapping of the config file (YAML and JSON keep the last)."""


class _StrictLoader(yaml.SafeLoader):
    """yaml's safe loader, refusing a key written twice in one mapping."""


def _unique_mapping(loader: _StrictLoader, node: T.Any) -> dict:
    loader.flatten_mapping(node)
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            continue  # construct_mapping refuses it, with yaml's own message
        if key in seen:
            raise _DuplicateKey(f"key {key!r} is written twice (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _unique_pairs(pairs: list[tuple[str, T.Any]]) -> dict[str, T.Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise _DuplicateKey(f"keys {repeated} are written twice in one mapping")
    return dict(pairs)


def load_axis_symbol_registry(config_path: Path | str) -> AxisSymbolRegistry:
    """Read a shape config (``.yml``/``.yaml``: YAML; otherwise JSON) and parse it strictly
    (a key written twice in one mapping is refused too)."""
    path = Path(config_path)
    if not path.is_file():
        raise T2NErrorNotFoundFile(f"shape-config file not found: {path}")
    text = path.read_text(encoding="utf8")
    try:
        if path.suffix.lower() in (".yml", ".yaml"):
            raw = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: builds plain data only
        else:
            raw = json.loads(text or "{}", object_pairs_hook=_unique_pairs)
    except (yaml.YAMLError, json.JSONDecodeError, _DuplicateKey) as err:
        raise T2NErrorInvalidArgument(f"shape-config {path} cannot be read: {err}") from err
    return parse_axis_symbol_registry(raw if raw is not None else {})


class _QuotedStr(str):
    """A string written double-quoted in YAML (extension lines hold ':' and '>=')."""


class _BlockDumper(yaml.SafeDumper):
    """Writes ``_QuotedStr`` double-quoted (a subclass: yaml's own dumper stays untouched)."""


class _FlowDumper(_BlockDumper):
    """Also writes lists on one line (``[B, 80, T]``)."""


_BlockDumper.add_representer(
    _QuotedStr, lambda d, data: d.represent_scalar("tag:yaml.org,2002:str", str(data), style='"')
)
_FlowDumper.add_representer(
    list, lambda d, data: d.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)


def registry_to_mapping(reg: AxisSymbolRegistry) -> dict[str, dict[str, T.Any]]:
    """The nested mapping of a registry, the form ``parse_axis_symbol_registry`` reads back."""
    nested: dict[str, dict[str, T.Any]] = {}
    qualified = list(dict.fromkeys([
        *reg.symbols_per_input, *reg.input_collapse_dims, *reg.bind_to_dim, *reg.eval_symbols_per_input,
    ]))
    for qname in qualified:
        subnet, _, inp = qname.partition(".")
        entry: dict[str, T.Any] = {}
        if qname in reg.rank_per_input:
            written = reg.original_shape_per_input.get(qname, [])
            symbols = reg.symbols_per_input.get(qname, {})
            entry[INPUT_FIELD_ORIGINAL_SHAPE] = [
                symbols.get(i, written[i] if i < len(written) else 1) for i in range(reg.rank_per_input[qname])
            ]
        entry[INPUT_FIELD_COLLAPSE_DIMS] = list(reg.input_collapse_dims.get(qname, []))
        if qname in reg.bind_to_dim:
            entry[INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE] = reg.bind_to_dim[qname]
        if qname in reg.eval_symbols_per_input:
            entry[INPUT_FIELD_EVAL_SYMBOLS] = dict(reg.eval_symbols_per_input[qname])
        nested.setdefault(subnet, {}).setdefault(SHAPE_KEY_INPUTS, {})[inp] = entry
    for qname, axes in reg.output_collapse_dims.items():
        subnet, _, out = qname.partition(".")
        nested.setdefault(subnet, {}).setdefault(SHAPE_KEY_OUTPUTS, {})[out] = {OUTPUT_FIELD_COLLAPSE_DIMS: list(axes)}
    for subnet, renames in reg.renamed_symbols_per_subnet.items():
        if renames:
            nested.setdefault(subnet, {})[SHAPE_KEY_RENAMED] = {t: list(s) for t, s in renames.items()}
    for subnet, keep in reg.outputs_keep_per_subnet.items():
        nested.setdefault(subnet, {})[SHAPE_KEY_OUTPUTS_KEEP] = list(keep)
    for subnet, exts in reg.extensions_per_subnet.items():
        if exts:
            nested.setdefault(subnet, {})[SHAPE_KEY_EXTENSIONS] = [_QuotedStr(e) for e in exts]
    return nested


def save_config(
    path: Path | str | None,
    registry: AxisSymbolRegistry | Mapping[str, T.Any],
    *,
    flow_seq: bool = True,
    stream: T.TextIO | None = None,
) -> None:
    """Write a registry as a shape config: YAML (``.yml``/``.yaml`` path, or a stream) or JSON.

    With ``stream`` the text goes there (``path``, if given, only picks the format); else the
    file at ``path`` is written whole under a temporary name and renamed, so a failed write
    leaves the previous file as it was. ``flow_seq=False`` writes YAML lists one item a line.
    """
    if path is None and stream is None:
        raise T2NErrorInvalidArgument("save_config needs a path or a stream to write the config to")
    as_yaml = path is None or Path(path).suffix.lower() in (".yml", ".yaml")
    mapping = registry_to_mapping(registry) if isinstance(registry, AxisSymbolRegistry) else dict(registry)
    if as_yaml:
        dumper = _FlowDumper if flow_seq else _BlockDumper
        text = yaml.dump(mapping, Dumper=dumper, sort_keys=False, default_flow_style=None)
    else:
        text = json.dumps(mapping, indent=2) + "\n"
    if stream is not None:
        stream.write(text)
        return
    assert path is not None
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
