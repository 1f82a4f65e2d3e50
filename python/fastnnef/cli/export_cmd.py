"""``fastnnef export``: export a model given as ``pkg.module:factory`` or a TorchScript file."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from fastnnef.check import TractCheckTolerance
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.torch_graph.ir_naming import DEFAULT_VARNAME_SCHEME, VariableNamingScheme


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a model to NNEF",
        description=(
            "SOURCE is either 'pkg.module:factory' (a callable returning (module, example_inputs)) "
            "or a TorchScript file saved with torch.jit.save (give --inputs or --input-shape)."
        ),
    )
    p.add_argument("source")
    p.add_argument("-o", "--output", type=Path, required=True, help="e.g. model.nnef.tgz")
    p.add_argument("--inputs", type=Path, help="example inputs as .npz (in key order)")
    p.add_argument("--input-shape", action="append", default=[],
                   help="example input shape, e.g. 1,3,224,224 (random f32 values); repeatable")
    p.add_argument("--input-names", nargs="+")
    p.add_argument("--output-names", nargs="+")
    p.add_argument("--compression-level", type=int, default=0,
                   help="0: .tar (or gzip level 0 for .tgz paths), 1..9: .tgz; -1: directory")
    p.add_argument("--khronos", action="store_true", help="strict Khronos NNEF (no tract extensions)")
    p.add_argument("--tract-version", default=None, help="target tract version (default: latest)")
    p.add_argument("--dynamic-axes", type=json.loads, default=None,
                   help='JSON, e.g. \'{"x": {"1": "S"}}\'')
    p.add_argument("--custom-extension", action="append", default=[],
                   help="extension line without the keyword, e.g. 'tract_assert S >= 1'")
    p.add_argument("--naming-scheme", default=DEFAULT_VARNAME_SCHEME.value,
                   choices=[scheme.value for scheme in VariableNamingScheme])
    p.add_argument("--no-check", action="store_true", help="skip the in-process tract check")
    p.add_argument("--tolerance", default=TractCheckTolerance.APPROXIMATE.value,
                   choices=[level.value for level in TractCheckTolerance])
    p.add_argument("--debug-bundle", type=Path, default=None)
    p.add_argument("--no-identity-properties", action="store_true",
                   help="do not write os/hostname/user properties")
    p.add_argument("--allow-same-io-names", action="store_true")
    # Checked by export_model_to_nnef (export.py FRONT_ENDS), which names the valid values.
    p.add_argument("--front-end", default="auto",
                   help="auto (default): torch.export, the deprecated tracer only where it cannot serve the model; "
                        "export: torch.export only; jit: torch.jit.trace only")
    p.set_defaults(run=run)


def load_source(source: str, inputs: Any, shapes: list[str]) -> tuple[Any, tuple[Any, ...]]:
    """(module, example inputs) from a factory reference or a TorchScript file."""
    import numpy as np
    import torch

    if ":" in source and not Path(source).exists():
        module_name, _, attr = source.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        built = factory()
        if isinstance(built, tuple) and len(built) == 2:
            model, example = built
            return model, example if isinstance(example, tuple) else (example,)
        raise T2NErrorInvalidArgument(f"{source} must return (module, example_inputs), got {type(built).__name__}")
    path = Path(source)
    if not path.exists():
        raise T2NErrorInvalidArgument(f"{source} is neither an existing file nor 'pkg.module:factory'")
    model = torch.jit.load(str(path), map_location="cpu")
    if inputs is not None:
        with np.load(inputs) as npz:
            example = tuple(torch.from_numpy(npz[k]) for k in npz.files)
    elif shapes:
        example = tuple(torch.randn(*[int(d) for d in s.split(",")]) for s in shapes)
    else:
        raise T2NErrorInvalidArgument("a TorchScript source needs --inputs FILE.npz or --input-shape")
    return model, example


def run(args: argparse.Namespace) -> int:
    from fastnnef.export import export_model_to_nnef
    from fastnnef.inference_target import KhronosNNEF, TractNNEF

    model, example = load_source(args.source, args.inputs, args.input_shape)
    if args.khronos:
        target: Any = KhronosNNEF.latest()
        target.check_io = not args.no_check
    else:
        target = TractNNEF(
            args.tract_version or TractNNEF.latest_version(),
            check_io=not args.no_check,
            dynamic_axes={k: {int(a): s for a, s in v.items()} for k, v in (args.dynamic_axes or {}).items()},
            check_io_tolerance=args.tolerance,
            dump_identity_properties=not args.no_identity_properties,
        )
    path = export_model_to_nnef(
        model, example, args.output, target,
        input_names=args.input_names, output_names=args.output_names,
        compression_level=None if args.compression_level < 0 else args.compression_level,
        nnef_variable_naming_scheme=args.naming_scheme,
        debug_bundle_path=args.debug_bundle,
        custom_extensions=args.custom_extension or None,
        allow_same_io_names=args.allow_same_io_names,
        front_end=args.front_end,
    )
    checked = "checked by the linked tract" if not args.no_check else "not checked"
    print(f"wrote {path} ({checked})")
    return 0
