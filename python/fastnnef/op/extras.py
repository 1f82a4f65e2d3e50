"""User custom ops: handlers for ``t2n_extra::<name>`` (torch_to_nnef's ``op.extras``).

A model can keep a computation opaque to tracing by declaring it as a torch custom op in
the ``t2n_extra`` namespace; the trace then records one ``t2n_extra::<name>`` node, which
fastnnef hands to the handler registered for ``<name>``::

    import torch
    from fastnnef.op.extras import register

    @torch.library.custom_op("t2n_extra::scale_shift", mutates_args=())
    def scale_shift(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x * alpha + 1.0

    @register("scale_shift", args="t f")
    def _(ctx, x, alpha):
        "t2n_extra::scale_shift(Tensor x, float alpha) -> Tensor"
        y = ctx.tmp("mul", [x, alpha], suffix="scaled")
        return ctx.emit("add", [y, 1.0])

Calling convention: a handler is a fastnnef op handler (op/registry.py, op/context.py),
called as ``fn(ctx, *args)``: ``ctx`` is the node's ``OpContext`` (``emit``, ``tmp``,
``fragment``, ``constant``, ``caps``...), ``args`` the node's inputs read as declared by
``args`` (``"t f"``: a tensor, then a float; the default ``"*"`` reads none, the handler
then uses ``ctx.arg(i, kind)``). It returns the NNEF tensor(s) of the node's outputs.
torch_to_nnef's handlers, ``fn(g, node, name_to_tensor, null_ref, torch_graph,
inference_target, op_helper)`` over NNEF-Tools graphs, cannot run here: ``register``
refuses them with the porting steps.

The module that registers handlers must be imported before the export: import it
yourself, or name it in ``export_model_to_nnef(load_extra_op_modules=[...])``, in the
environment variable ``TORCH_TO_NNEF_EXTRA_MODULES`` (comma separated), or as an entry
point of group ``torch_to_nnef.extras`` or ``fastnnef.extras`` (with
``discover_extra_entrypoints=True``). ``import_extra_modules`` does that import.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.log import get_logger
from fastnnef.op.registry import DEFAULT_REGISTRY
from fastnnef.utils import SemanticVersion

__all__ = ["ENTRY_POINT_GROUPS", "EXTRA_MODULES_ENV", "NAMESPACE", "import_extra_modules", "register"]

log = get_logger(__name__)

NAMESPACE = "t2n_extra"
EXTRA_MODULES_ENV = "TORCH_TO_NNEF_EXTRA_MODULES"
# torch_to_nnef's group, so existing plugins are found, then fastnnef's own.
ENTRY_POINT_GROUPS = ("torch_to_nnef.extras", "fastnnef.extras")

# Parameters only a torch_to_nnef-style handler has.
_REFERENCE_PARAMETERS = frozenset({"g", "name_to_tensor", "null_ref", "torch_graph", "op_helper"})


def register(
    op_name: str, args: str = "*", since: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the handler of ``t2n_extra::<op_name>``.

    ``args`` declares how the node's inputs are read (op/registry.py's argument kinds),
    ``since`` the first tract version the emitted ops need ("0.22.0", or the name of a
    gate of ``VERSION_GATES``). Registering a name twice
    raises ``T2NErrorConsistency``.
    """
    if not isinstance(op_name, str) or not op_name or "::" in op_name:
        raise T2NErrorInvalidArgument(
            f"register takes the op name without its namespace, e.g. 'my_op' for "
            f"{NAMESPACE}::my_op; got {op_name!r}"
        )

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        _refuse_reference_style(op_name, fn)
        gate = since if since is None or since in VERSION_GATES else SemanticVersion.from_str(since)
        return DEFAULT_REGISTRY.register(f"{NAMESPACE}::{op_name}", args=args, since=gate)(fn)

    return decorate


def _refuse_reference_style(op_name: str, fn: Callable[..., Any]) -> None:
    params = inspect.signature(fn).parameters
    takes_ctx = any(p.kind is not p.VAR_KEYWORD and p.kind is not p.KEYWORD_ONLY for p in params.values())
    if _REFERENCE_PARAMETERS & set(params) or not takes_ctx:
        raise T2NErrorNotImplemented(
            f"the handler {fn.__module__}.{fn.__qualname__} of {NAMESPACE}::{op_name} has "
            f"torch_to_nnef's signature ({', '.join(params)}), which works on NNEF-Tools graphs "
            "that fastnnef does not build. Port it: take `(ctx, *inputs)`, declare how the "
            "inputs are read with register(..., args='t f ...'), emit ops with "
            "ctx.emit(kind, inputs, attrs) / ctx.tmp(...), declare fragments with "
            "ctx.fragment(name, text) and return the output tensor(s) (see fastnnef.op.extras)"
        )


def extra_module_names(
    load_extra_op_modules: Sequence[str] | None, discover_extra_entrypoints: bool
) -> list[str]:
    """The modules to import, deduplicated in order: the given ones, those of
    ``TORCH_TO_NNEF_EXTRA_MODULES``, then entry points' modules (when discovering)."""
    if isinstance(load_extra_op_modules, str):
        raise T2NErrorInvalidArgument(
            f"load_extra_op_modules must be a list of module names, got the string "
            f"{load_extra_op_modules!r}: write [{load_extra_op_modules!r}]"
        )
    names: list[str] = list(load_extra_op_modules or [])
    names += [n.strip() for n in os.environ.get(EXTRA_MODULES_ENV, "").split(",") if n.strip()]
    if discover_extra_entrypoints:
        names += [ep.value.split(":", 1)[0].strip() for ep in _entry_points()]
    return list(dict.fromkeys(n for n in names if n))


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    for group in ENTRY_POINT_GROUPS:
        yield from importlib.metadata.entry_points(group=group)


def import_extra_modules(
    load_extra_op_modules: Sequence[str] | None = None,
    discover_extra_entrypoints: bool = False,
    strict_extra_imports: bool = False,
) -> list[str]:
    """Import the modules that register ``t2n_extra`` handlers (``extra_module_names``);
    return the names imported. A module that fails to import, whatever it raises (missing,
    broken, or a handler ``register`` refuses), is logged as a warning, or raises
    ``T2NErrorInvalidArgument`` with ``strict_extra_imports``."""
    imported: list[str] = []
    for name in extra_module_names(load_extra_op_modules, discover_extra_entrypoints):
        try:
            importlib.import_module(name)
        except (Exception, SystemExit) as err:  # a plugin's failure must not abort the export
            message = f"failed to import extra op module {name!r}: {type(err).__name__}: {err}"
            if strict_extra_imports:
                raise T2NErrorInvalidArgument(message) from err
            log.warning("%s (its t2n_extra handlers are not registered)", message)
            continue
        log.info("loaded extra op module %s", name)
        imported.append(name)
    return imported
