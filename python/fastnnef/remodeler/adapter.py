"""The wrapper that gives a subnet its remodeled boundary at export time.

``BoundaryAdapter`` wraps a module (held by reference: the user's module is not changed) and
exposes flat tensor inputs and outputs, where the config asked:

- *collapse*: an input's axes named by ``collapse_dims`` symbols leave the boundary; the
  adapter puts them back (size 1) before calling the module, so its internal shapes stay;
- *bind*: an input named by ``bind_scalar_to_dim_size`` leaves the boundary; the adapter
  computes it from another input's dynamic size (``audio_signal.T``), in the graph, so the
  exported model keeps the size dynamic;
- *rename*: symbols of ``renamed_symbols`` sources become their target in the dynamic axes;
- *outputs*: ``outputs_keep`` keeps those flat outputs, in that order; an output's
  ``collapse_dims`` squeezes those axes.

Every name, symbol and axis of the plan is checked against the subnet when the adapter is
built (outputs when it first runs), and a mismatch raises ``T2NErrorInvalidArgument``
naming it: nothing is exported from a plan that does not fit.
"""

from __future__ import annotations

import typing as T
import warnings
from collections.abc import Mapping, Sequence

import torch
from torch.utils import _pytree as pytree

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.log import get_logger
from fastnnef.remodeler.dyn_axes import DynAxes, alias_of, apply_symbol_renames_to_dyn

log = get_logger(__name__)


def _flat_name(names: Sequence[str], path: tuple[T.Any, ...], default_tmpl: str) -> str:
    """``name`` of a top-level tensor, ``name_<key path>`` of one nested in a tuple or dict."""
    top, *rest = [getattr(k, "key", getattr(k, "idx", k)) for k in path]
    root = names[top] if top < len(names) and names[top] else default_tmpl.format(top)
    return "_".join([root, *(str(k) for k in rest)])


def flatten_named(
    names: Sequence[str], values: Sequence[T.Any], default_tmpl: str
) -> tuple[list[str], list[torch.Tensor], list[T.Any], T.Any, list[int]]:
    """Flat names and tensors of structured ``values`` (tuples, lists, dicts of tensors).

    ``names`` name the flat tensors (as many names as tensors) or, as export does too, the
    top-level values (nested tensors get the key path appended: ``state_0``; values without a
    name get ``default_tmpl``). Returns the names, the tensors, every leaf (tensors and the
    constants kept as they are), the structure, and the positions of the tensors among the
    leaves."""
    with_paths, spec = pytree.tree_flatten_with_path(tuple(values))
    slots = [slot for slot, (_, leaf) in enumerate(with_paths) if isinstance(leaf, torch.Tensor)]
    tensors = [with_paths[slot][1] for slot in slots]
    if len(names) == len(tensors):
        flat_names = list(names)
    elif len(names) <= len(values):
        flat_names = [_flat_name(names, with_paths[slot][0], default_tmpl) for slot in slots]
    else:
        raise T2NErrorInvalidArgument(
            f"{len(names)} names {list(names)} for {len(values)} values holding {len(tensors)} tensors: name each "
            "value, or each tensor"
        )
    repeated = sorted({n for n in flat_names if flat_names.count(n) > 1})
    if repeated:
        raise T2NErrorInvalidArgument(f"the flat names {repeated} repeat: give each input and output its own name")
    return flat_names, tensors, [leaf for _, leaf in with_paths], spec, slots


def _local(qualified: Mapping[str, T.Any], subnet_name: str) -> dict[str, T.Any]:
    """The entries of ``subnet_name`` (keys ``"<subnet>.<name>"``), keyed by ``name``."""
    prefix = f"{subnet_name}."
    return {q[len(prefix):]: v for q, v in qualified.items() if q.startswith(prefix)}


class BoundaryAdapter(torch.nn.Module):
    """``module`` behind the boundary a remodel plan describes (module docstring).

    ``collapse_by_input`` and ``binds_by_input`` are keyed by qualified input names (every
    subnet's entries may be given: only ``subnet_name``'s apply); ``output_collapse_dims``
    by the subnet's output names. ``input_names``/``output_names`` default to the module's
    own ``input_names``/``output_names`` attributes, then to ``input_{i}``/``output_{i}``.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        subnet_name: str,
        input_example: Sequence[T.Any],
        dynamic_axes: Mapping[str, Mapping[int, str]] | None,
        collapse_by_input: Mapping[str, T.Collection[str]] | None,
        binds_by_input: Mapping[str, str] | None = None,
        renamed_map: Mapping[str, Sequence[str]] | None = None,
        outputs_keep: Sequence[str] | None = None,
        output_collapse_dims: Mapping[str, Sequence[int]] | None = None,
        *,
        apply_symbol_renames: bool = True,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.module = module
        self.subnet_name = subnet_name
        names = list(input_names if input_names is not None else getattr(module, "input_names", None) or [])
        self._orig_output_names = list(
            output_names if output_names is not None else getattr(module, "output_names", None) or []
        )
        self._flat_names, tensors, self._leaves, self._spec, self._tensor_slots = flatten_named(
            names, list(input_example or []), "input_{}"
        )
        self._examples = dict(zip(self._flat_names, tensors))
        self._dyn: DynAxes = {n: {int(a): str(s) for a, s in axes.items()} for n, axes in (dynamic_axes or {}).items()}
        unknown = sorted(set(self._dyn) - set(self._flat_names))
        if unknown:
            raise T2NErrorInvalidArgument(self._where(f"dynamic axes name {unknown}, which are not inputs"))
        self._rename_map = {str(t).upper(): [str(s).upper() for s in srcs] for t, srcs in (renamed_map or {}).items()}
        self._alias = alias_of(self._rename_map)
        self._apply_renames = apply_symbol_renames
        self._collapse = self._collapse_axes(_local(collapse_by_input or {}, subnet_name))
        self._binds = self._bind_sources(_local(binds_by_input or {}, subnet_name))
        self._ext_names = [n for n in self._flat_names if n not in self._binds]
        self._outputs_keep = list(outputs_keep or [])
        if len(set(self._outputs_keep)) != len(self._outputs_keep):
            raise T2NErrorInvalidArgument(self._where(f"outputs_keep {self._outputs_keep} repeats an output"))
        self._output_collapse = {name: sorted(set(axes)) for name, axes in (output_collapse_dims or {}).items()}
        if self._orig_output_names:
            self._check_outputs(self._orig_output_names, flat=False)

    def _where(self, what: str) -> str:
        return f"remodel of subnet '{self.subnet_name}' (inputs {self._flat_names}): {what}"

    def _matches(self, symbol: str, wanted: str) -> bool:
        """Whether an axis symbol is ``wanted``, itself or as a source renamed to it."""
        su = symbol.upper()
        return su == wanted or self._alias.get(su) == wanted

    def _collapse_axes(self, wanted_by_input: Mapping[str, T.Collection[str]]) -> dict[str, list[int]]:
        collapse: dict[str, list[int]] = {}
        for name, wanted in wanted_by_input.items():
            if name not in self._examples:
                raise T2NErrorInvalidArgument(self._where(f"collapse_dims is set on '{name}', which is not an input"))
            axes = self._dyn.get(name, {})
            drop: set[int] = set()
            for sym in {str(s).upper() for s in wanted}:
                hits = {a for a, s in axes.items() if self._matches(s, sym)}
                if not hits:
                    raise T2NErrorInvalidArgument(self._where(
                        f"collapse_dims of '{name}' names '{sym}', which is none of its dynamic axes {axes or '{}'}"
                        " (only dynamic axes collapse: give the axis a symbol in the dynamic axes)"
                    ))
                drop |= hits
            rank = self._examples[name].dim()
            if any(a >= rank for a in drop):
                raise T2NErrorInvalidArgument(self._where(f"dynamic axes of '{name}' {axes} exceed its rank {rank}"))
            if drop:
                collapse[name] = sorted(drop)
        return collapse

    def _external_axis(self, name: str, axis: int) -> int:
        """An input's axis counted at the boundary (after its collapsed axes left it)."""
        return axis - sum(1 for d in self._collapse.get(name, []) if d < axis)

    def _bind_sources(self, binds: Mapping[str, str]) -> dict[str, tuple[str, int, torch.dtype]]:
        """``{bound input: (source input, source axis at the boundary, dtype)}``."""
        out: dict[str, tuple[str, int, torch.dtype]] = {}
        for target, spec in binds.items():
            if target not in self._examples:
                raise T2NErrorInvalidArgument(
                    self._where(f"bind_scalar_to_dim_size is set on '{target}', which is not an input")
                )
            src_path, _, sym = spec.rpartition(".")
            subnet, _, src = src_path.rpartition(".")  # "<subnet>.<input>.<SYMBOL>" or "<input>.<SYMBOL>"
            sym = sym.strip().upper()
            if subnet and subnet != self.subnet_name:
                raise T2NErrorInvalidArgument(self._where(
                    f"'{target}' is bound to '{spec}', a size of subnet '{subnet}': bind to an input of this subnet"
                ))
            if src not in self._examples or src in binds:
                raise T2NErrorInvalidArgument(self._where(
                    f"'{target}' is bound to '{spec}', but '{src}' is not an input left at the boundary"
                ))
            axes = [a for a, s in self._dyn.get(src, {}).items() if self._matches(s, sym)]
            if not axes:
                raise T2NErrorInvalidArgument(self._where(
                    f"'{target}' is bound to '{spec}', but '{sym}' is none of the dynamic axes of '{src}' "
                    f"{self._dyn.get(src, {}) or '{}'}"
                ))
            if axes[0] in self._collapse.get(src, []):
                raise T2NErrorInvalidArgument(self._where(
                    f"'{target}' is bound to '{spec}', but that axis of '{src}' is collapsed (its size is always 1)"
                ))
            example = self._examples[target]
            kept = [s for a, s in enumerate(example.shape) if a not in self._collapse.get(target, [])]
            if kept:
                raise T2NErrorInvalidArgument(self._where(
                    f"'{target}' is bound to a size, so it must be a scalar at the boundary, but its shape "
                    f"{list(example.shape)} keeps dims {kept}: collapse them with collapse_dims"
                ))
            out[target] = (src, self._external_axis(src, axes[0]), example.dtype)
        return out

    @property
    def input_names(self) -> list[str]:
        """The inputs at the boundary: the flat inputs but the bound ones."""
        return list(self._ext_names)

    @property
    def output_names(self) -> list[str]:
        """The outputs at the boundary: ``outputs_keep`` when set, else the module's."""
        return list(self._outputs_keep or self._orig_output_names)

    def input_example(self) -> tuple[torch.Tensor, ...]:
        """The example inputs at the boundary: collapsed axes removed (their first entry kept)."""
        out = []
        for name in self._ext_names:
            t = self._examples[name]
            for axis in reversed(self._collapse.get(name, [])):
                if t.size(axis) != 1:
                    log.warning("the example of '%s' has %d entries on collapsed axis %d: the first one is kept",
                                name, t.size(axis), axis)
                t = t.select(axis, 0)
            out.append(t)
        return tuple(out)

    def dynamic_shapes_for_export(self) -> DynAxes:
        """The dynamic axes at the boundary: collapsed axes gone, the others shifted and renamed."""
        dyn: DynAxes = {}
        for name in self._ext_names:
            dropped = self._collapse.get(name, [])
            axes = {self._external_axis(name, a): s for a, s in self._dyn.get(name, {}).items() if a not in dropped}
            if axes:
                dyn[name] = axes
        return apply_symbol_renames_to_dyn(dyn, self._rename_map) if self._apply_renames else dyn

    def _check_outputs(self, names: Sequence[str], flat: bool) -> None:
        """Refuse output settings naming outputs not in ``names`` (``outputs_keep`` only
        against the flat names, known once the module ran)."""
        faults = []
        unknown_collapse = sorted(set(self._output_collapse) - set(names))
        if unknown_collapse:
            faults.append(f"outputs {unknown_collapse} have collapse_dims")
        unknown_keep = sorted(set(self._outputs_keep) - set(names)) if flat else []
        if unknown_keep:
            faults.append(f"outputs_keep names {unknown_keep}")
        if faults:
            raise T2NErrorInvalidArgument(self._where(f"{' and '.join(faults)}, but the outputs are {list(names)}"))

    def _squeeze_outputs(self, outs: T.Any) -> T.Any:
        if not self._output_collapse:
            return outs
        items = list(outs) if isinstance(outs, tuple) else [outs]
        names = self._orig_output_names or [f"output_{i}" for i in range(len(items))]
        self._check_outputs(names[: len(items)], flat=False)
        for i, name in enumerate(names[: len(items)]):
            axes = self._output_collapse.get(name)
            if not axes:
                continue
            t = items[i]
            with warnings.catch_warnings():
                # Under the export's trace sizes are traced values, and reading one warns; this
                # read only decides whether to raise, the graph never depends on it.
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                bad = [a for a in axes if not isinstance(t, torch.Tensor) or a >= t.dim() or t.size(a) != 1]
                shape = [int(d) for d in t.shape] if isinstance(t, torch.Tensor) else type(t).__name__
            if bad:
                raise T2NErrorInvalidArgument(self._where(
                    f"output '{name}' of shape {shape} cannot collapse axes {bad}: only axes of size 1 collapse"
                ))
            for axis in reversed(axes):
                t = t.squeeze(axis)
            items[i] = t
        return tuple(items) if isinstance(outs, tuple) else items[0]

    def _bound_value(self, name: str, given: Mapping[str, torch.Tensor]) -> torch.Tensor:
        src, axis, dtype = self._binds[name]
        # x.size(axis) is recorded by the trace (aten::size), so the value stays dynamic.
        return torch.scalar_tensor(given[src].size(axis), dtype=dtype)

    def forward(self, *args: torch.Tensor) -> T.Any:
        if len(args) != len(self._ext_names):
            raise T2NErrorInvalidArgument(self._where(
                f"called with {len(args)} inputs, the boundary has {len(self._ext_names)}: {self._ext_names}"
            ))
        given = dict(zip(self._ext_names, args))
        leaves = list(self._leaves)
        for slot, name in zip(self._tensor_slots, self._flat_names):
            value = self._bound_value(name, given) if name in self._binds else given[name]
            for axis in self._collapse.get(name, []):
                value = value.unsqueeze(axis)
            leaves[slot] = value
        outs = self._squeeze_outputs(self.module(*pytree.tree_unflatten(leaves, self._spec)))
        if not self._outputs_keep:
            return outs
        flat_names, flat_outs, *_ = flatten_named(
            self._orig_output_names, [outs] if isinstance(outs, torch.Tensor) else list(outs), "output_{}"
        )
        self._check_outputs(flat_names, flat=True)
        by_name = dict(zip(flat_names, flat_outs))
        return tuple(by_name[n] for n in self._outputs_keep)


class RenameOutputs(torch.nn.Module):
    """``module`` with some output names changed (``{old: new}``), for export only.

    The computation is the module's; only ``output_names`` differ, e.g. so that an output no
    longer shares its name with an input (``length``).
    """

    def __init__(self, module: torch.nn.Module, rename_map: Mapping[str, str]):
        super().__init__()
        self.module = module
        self._rename_map = dict(rename_map or {})

    @property
    def input_names(self) -> list[str]:
        return list(getattr(self.module, "input_names", None) or [])

    @property
    def output_names(self) -> list[str]:
        return [self._rename_map.get(n, n) for n in getattr(self.module, "output_names", None) or []]

    def dynamic_shapes_for_export(self) -> DynAxes:
        inner = getattr(self.module, "dynamic_shapes_for_export", None)
        return dict(inner()) if callable(inner) else {}

    def forward(self, *args: T.Any, **kwargs: T.Any) -> T.Any:
        return self.module(*args, **kwargs)
