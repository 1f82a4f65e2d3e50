"""``ExportOptions``: the options of one ``export_model_to_nnef`` call (every public
parameter but the model, its arguments and the inference target), checked once where they
are built and passed down as one frozen object, so that the export's stages read checked
values and no parameter list is written twice."""

from __future__ import annotations

import typing as T
from dataclasses import dataclass
from pathlib import Path

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.torch_graph.ir_naming import VariableNamingScheme

# export_model_to_nnef's front_end values: "jit" (torch.jit.trace, the default until the
# torch.export front end passes everything it passes), "export" (torch.export), "auto".
FRONT_ENDS = ("auto", "export", "jit")


@dataclass(frozen=True)
class ExportOptions:
    """Checked options of one export; build it with ``from_arguments`` (the public
    parameters under their public names; their defaults are the public signature's only).

    - ``path`` / ``artefact_format``: where the artefact goes and as what (``"dir"``,
      ``"tar"``, ``"tgz"``), from ``file_path_export`` and ``compression_level``;
    - ``naming``: the ``VariableNamingScheme`` value;
    - ``input_names`` / ``output_names``: distinct non-empty names, or None;
    - ``custom_extensions``: the extension lines to add, in order (tract reads them so);
    - the others: the public parameters of the same name, as given.
    """

    path: Path
    artefact_format: str
    compression_level: int | None
    input_names: tuple[str, ...] | None
    output_names: tuple[str, ...] | None
    log_level: int
    naming: str
    check_io_names_qte_match: bool
    debug_bundle_path: Path | None
    custom_extensions: tuple[str, ...]
    allow_same_io_names: bool
    auto_harden_jit: bool
    load_extra_op_modules: T.Sequence[str] | None
    discover_extra_entrypoints: bool
    strict_extra_imports: bool
    skip_eager_forward: bool
    front_end: str

    @classmethod
    def from_arguments(
        cls,
        *,
        file_path_export: Path | str,
        input_names: T.Sequence[str] | None,
        output_names: T.Sequence[str] | None,
        compression_level: int | None,
        log_level: int,
        nnef_variable_naming_scheme: VariableNamingScheme | str,
        check_io_names_qte_match: bool,
        debug_bundle_path: Path | None,
        custom_extensions: list[str] | None,
        allow_same_io_names: bool,
        auto_harden_jit: bool,
        load_extra_op_modules: T.Sequence[str] | None,
        discover_extra_entrypoints: bool,
        strict_extra_imports: bool,
        skip_eager_forward: bool,
        front_end: str,
    ) -> ExportOptions:
        """The options of ``export_model_to_nnef``'s parameters of the same names; raises
        ``T2NErrorInvalidArgument`` naming the first wrong one."""
        if custom_extensions is not None and not isinstance(custom_extensions, list):
            raise T2NErrorInvalidArgument(
                "custom_extensions must be a list (order matters to tract), got "
                f"{type(custom_extensions).__name__}"
            )
        if front_end not in FRONT_ENDS:
            raise T2NErrorInvalidArgument(f"front_end must be one of {FRONT_ENDS}, got {front_end!r}")
        if not isinstance(skip_eager_forward, bool):
            raise T2NErrorInvalidArgument(f"skip_eager_forward must be a bool, got {skip_eager_forward!r}")
        naming = VariableNamingScheme(nnef_variable_naming_scheme).value
        inputs = _check_names(input_names, "input_names")
        outputs = _check_names(output_names, "output_names")
        if inputs and outputs and not allow_same_io_names:
            same = sorted(set(inputs) & set(outputs))
            if same:
                raise T2NErrorInvalidArgument(
                    f"input_names and output_names must be different: {same} are both inputs and outputs; "
                    "rename them, or pass allow_same_io_names=True if the output is the unchanged input"
                )
        path, artefact_format = resolve_artefact_path(file_path_export, compression_level)
        return cls(
            path=path, artefact_format=artefact_format, compression_level=compression_level, input_names=inputs,
            output_names=outputs, log_level=log_level, naming=naming,
            check_io_names_qte_match=check_io_names_qte_match, debug_bundle_path=debug_bundle_path,
            custom_extensions=tuple(custom_extensions or ()), allow_same_io_names=allow_same_io_names,
            auto_harden_jit=auto_harden_jit, load_extra_op_modules=load_extra_op_modules,
            discover_extra_entrypoints=discover_extra_entrypoints, strict_extra_imports=strict_extra_imports,
            skip_eager_forward=skip_eager_forward, front_end=front_end,
        )


def resolve_artefact_path(file_path_export: Path | str, compression_level: int | None) -> tuple[Path, str]:
    """The reference's suffix + compression_level rule (torch_to_nnef-api.md §3)."""
    path = Path(file_path_export)
    if ".nnef" not in path.suffixes:
        raise T2NErrorInvalidArgument(
            f"file_path_export {str(path)!r} has no '.nnef' suffix: use e.g. 'model.nnef' "
            "(directory/.tar/.tgz chosen by compression_level) or 'model.nnef.tgz'"
        )
    if compression_level is not None and (
        isinstance(compression_level, bool) or not isinstance(compression_level, int)
        or not 0 <= compression_level <= 9
    ):
        raise T2NErrorInvalidArgument(
            f"compression_level must be None (directory), 0 (.tar) or 1..9 (.tgz), got {compression_level!r}"
        )
    is_tgz = path.suffix == ".tgz"
    base = path.with_suffix("") if is_tgz else path
    if compression_level is None:
        return base, "dir"
    if is_tgz or compression_level > 0:
        return base.with_name(base.name + ".tgz"), "tgz"
    return base.with_name(base.name + ".tar"), "tar"


def _check_names(names: T.Sequence[str] | None, what: str) -> tuple[str, ...] | None:
    if names is None:
        return None
    names = tuple(names)
    if not all(isinstance(n, str) and n for n in names):
        raise T2NErrorInvalidArgument(f"{what} must be non-empty strings, got {list(names)!r}")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise T2NErrorInvalidArgument(f"Each str in {what} must be different: {dup} repeated")
    return names
