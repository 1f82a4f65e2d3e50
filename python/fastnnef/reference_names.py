"""The drop-in names at the core's own module paths, served by the wing on top
(``fastnnef/compat/``).

Several of torch_to_nnef's module paths are fastnnef's own modules (``fastnnef.utils``,
``fastnnef.torch_graph``, ``fastnnef.inference_target.tract``, ...), and at those paths the
reference also defines names that fastnnef keeps only for drop-in users
(``init_empty_weights``, ``TorchModuleIRGraph``, ``TractBinaryDownloader``, ...). Those names
live in compat/, which is built on the core: the core imports nothing of it at module level,
so ``import fastnnef`` (and every export) runs without it. Each module at such a path ends
instead with::

    def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
        return reference_name(__name__, name)

Python calls a module's ``__getattr__`` only for a name the module lacks (PEP 562), so the
first ``from fastnnef.utils import init_empty_weights`` loads the wing, through the
package's root (``fastnnef.compat_wing``), and takes the name from the wing's one table of
which path serves what (``compat.SERVED``).
"""

from __future__ import annotations

from typing import Any


def reference_name(module: str, name: str) -> Any:
    """The drop-in name ``name`` that compat serves at the reference path ``module``;
    ``AttributeError`` (as for any missing attribute) when it serves none by that name."""
    # Dunder probes (copy, inspect, pickle, torch.jit ask modules for __wrapped__ and the
    # like) are never drop-in names: answered without loading the wing.
    if not (name.startswith("__") and name.endswith("__")):
        # The package's root is the gate to the wing (compat imports the core, so the gate
        # is reached inside this function: tests/test_import_layers.py FACADE_EDGES).
        import fastnnef

        served = fastnnef.compat_wing().SERVED.get(module, {})
        if name in served:
            return served[name]
    raise AttributeError(f"module {module!r} has no attribute {name!r}")
