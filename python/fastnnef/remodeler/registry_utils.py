"""A registry checked against the subnets a provider discovered, and a starter registry dumped
from them (the ``--dump-shape-config`` template: every input's shape, every output kept)."""

from __future__ import annotations

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.remodeler.axis_registry import AxisSymbolRegistry
from fastnnef.remodeler.signature import SubnetSignature


def dump_registry_from_signatures(signatures: list[SubnetSignature]) -> AxisSymbolRegistry:
    """A registry that changes nothing: each input's discovered dims, each subnet's outputs kept."""
    reg = AxisSymbolRegistry.empty()
    for sig in signatures:
        reg.outputs_keep_per_subnet[sig.name] = [o.name for o in sig.outputs]
        axes_of = sig.symbol_axes or {}
        for io in sig.inputs:
            qname = f"{sig.name}.{io.name}"
            reg.symbols_per_input[qname] = {int(a): str(s) for a, s in axes_of.get(io.name, {}).items()}
            if io.shape:
                reg.rank_per_input[qname] = len(io.shape)
                reg.original_shape_per_input[qname] = list(io.shape)
    return reg


def validate_registry_against_signatures(signatures: list[SubnetSignature], registry: AxisSymbolRegistry) -> None:
    """Raise ``T2NErrorInvalidArgument`` listing every entry that names a subnet, input, output
    or symbol the signatures lack (collapse and bind symbols must be dynamic axes)."""
    subnets = {s.name: s for s in signatures}
    inputs = {f"{s.name}.{i.name}" for s in signatures for i in s.inputs}
    outputs = {s.name: [o.name for o in s.outputs] for s in signatures}
    input_syms = {
        f"{s.name}.{name}": {str(sym).upper() for sym in axes.values()}
        for s in signatures for name, axes in (s.symbol_axes or {}).items()
    }
    subnet_syms = {s.name: {str(sym).upper() for axes in (s.symbol_axes or {}).values() for sym in axes.values()}
                   for s in signatures}
    problems: list[str] = []
    configured = [*registry.symbols_per_input, *registry.bind_to_dim, *registry.input_collapse_dims,
                  *registry.eval_symbols_per_input, *registry.output_collapse_dims]
    named_subnets = {q.partition(".")[0] for q in configured}
    named_subnets |= {*registry.renamed_symbols_per_subnet, *registry.outputs_keep_per_subnet,
                      *registry.extensions_per_subnet}
    unknown_subnets = sorted(named_subnets - set(subnets))
    if unknown_subnets:
        problems.append(f"unknown subnets {unknown_subnets} (the subnets are {sorted(subnets)})")
    unknown_inputs = sorted(
        q for q in dict.fromkeys([*registry.symbols_per_input, *registry.bind_to_dim, *registry.input_collapse_dims,
                                  *registry.eval_symbols_per_input])
        if q not in inputs and q.partition(".")[0] in subnets
    )
    if unknown_inputs:
        problems.append(f"unknown inputs {unknown_inputs}")
    for subnet, keep in registry.outputs_keep_per_subnet.items():
        extra = sorted(set(keep) - set(outputs.get(subnet, [])))
        if subnet in subnets and extra:
            problems.append(f"outputs_keep of '{subnet}' names {extra}, not among its outputs {outputs[subnet]}")
    for qout in registry.output_collapse_dims:
        subnet, _, name = qout.partition(".")
        if subnet in subnets and name not in outputs[subnet]:
            problems.append(f"collapse_dims is set on output '{qout}', not among the outputs {outputs[subnet]}")
    for target, spec in registry.bind_to_dim.items():
        subnet = target.partition(".")[0]
        src_path, _, sym = spec.rpartition(".")
        src = f"{subnet}.{src_path.split('.', 1)[1] if '.' in src_path else src_path}"
        if src not in inputs:
            problems.append(f"'{target}' is bound to '{spec}', whose source '{src}' is not an input")
        elif sym.upper() not in input_syms.get(src, set()):
            problems.append(f"'{target}' is bound to '{spec}', but '{sym}' is no dynamic axis of '{src}'")
    for qname, syms in registry.input_collapse_dims.items():
        unknown = [s for s in syms if s.upper() not in input_syms.get(qname, set())]
        if qname in inputs and unknown:
            problems.append(f"collapse_dims of '{qname}' names {unknown}, which are none of its dynamic axes")
    for subnet, renames in registry.renamed_symbols_per_subnet.items():
        unknown = [s for srcs in renames.values() for s in srcs if s.upper() not in subnet_syms.get(subnet, set())]
        if subnet in subnets and unknown:
            problems.append(f"renamed_symbols of '{subnet}' has sources {unknown} that no dynamic axis carries")
    if problems:
        raise T2NErrorInvalidArgument("shape-config does not fit the model: " + "; ".join(problems))
