"""``fastnnef ops``: the supported aten ops, generated from the registry."""

from __future__ import annotations

import argparse


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = subparsers.add_parser("ops", help="list the aten ops fastnnef can export")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fastnnef.op.registry import load_handlers
    from fastnnef.utils import SemanticVersion

    registry = load_handlers()
    latest = SemanticVersion.from_str("99.0.0")
    for kind in registry.kinds():
        spec = registry.lookup(kind, latest)
        assert spec is not None
        since = f"  (tract >= {spec.since.to_str()})" if spec.since else ""
        print(f"{kind:40s} {spec.doc}{since}")
    return 0
