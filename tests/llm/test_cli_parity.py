"""Command-line parity with torch_to_nnef_llm 0.24.12: every option of its three commands
(``t2n_export_llm_to_tract``, ``t2n_export_multimodal_to_tract``: ``cli.py``'s
``parser_cli``; ``t2n_export_peft_to_nnef``: ``peft/cli.py``), read from its source and
pinned here, is accepted by fastnnef's command of the same name with the same option
strings, value or no value, choices and default, but for the deviations listed with their
reason, each tested below. Whole command lines using every reference flag run too."""

from __future__ import annotations

import argparse
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fastnnef.llm.cli import build_parser as llm_parser
from fastnnef.llm.cli import main as llm_main
from fastnnef.llm.cli import registry_path
from fastnnef.peft.cli import build_parser as peft_parser
from fastnnef.peft.mapping import PATTERN_LORA


@dataclass(frozen=True)
class Opt:
    default: object = None
    choices: tuple[str, ...] | None = None
    takes_value: bool = True


FLAG = Opt(False, None, False)
DTYPES = ("f32", "f16", "bf16")
# The reference's torch_to_nnef.compress.DEFAULT_COMPRESSION keys.
COMPRESSIONS = ("min_max_q4_0", "min_max_q4_0_with_embeddings", "min_max_q4_0_with_embeddings_99", "min_max_q4_0_all")

# torch_to_nnef_llm 0.24.12, cli.py parser_cli (the LLM and multimodal commands).
REFERENCE_LLM: dict[tuple[str, ...], Opt] = {
    ("-e", "--export-dirpath"): Opt(),
    ("-s", "--model-slug"): Opt(),
    ("-dt", "--force-module-dtype"): Opt(None, DTYPES),
    ("-idt", "--force-inputs-dtype"): Opt(None, DTYPES),
    ("-mp", "--merge-peft"): FLAG,
    ("--compression-registry",): Opt("torch_to_nnef.compress.DEFAULT_COMPRESSION"),
    ("-d", "--local-dir"): Opt(),
    ("-f32-attn", "--force-f32-attention"): FLAG,
    ("-f32-lin-acc", "--force-f32-linear-accumulator"): FLAG,
    ("-f32-norm", "--force-f32-normalization"): FLAG,
    ("--reify-sdpa-operator",): FLAG,
    ("--transformers-attn-implementation",): Opt("auto", ("auto", "eager", "sdpa")),
    ("--transformers-experts-implementation",): Opt("auto"),
    ("--upcast-quant",): Opt(),
    ("--num-logits-to-keep",): Opt(1),
    ("--hf-download-n-retries",): Opt(5),
    ("--trust-remote-code", "--no-trust-remote-code"): Opt(True, None, False),
    ("--device-map",): Opt(),
    ("-tt", "--tract-check-io-tolerance"): Opt("approximate", ("exact", "approximate", "close", "very", "super",
                                                                "ultra")),
    ("-n", "--naming-scheme"): Opt("natural_verbose_camel", ("raw", "natural_verbose", "natural_verbose_camel",
                                                              "numeric")),
    ("--tract-specific-path",): Opt(),
    ("--tract-specific-version",): Opt(),
    ("-td", "--test-display-token-gens"): FLAG,
    ("-dwtac", "--dump-with-tokenizer-and-conf"): FLAG,
    ("--export-dir-struct",): Opt("deep", ("deep", "flat")),
    ("-sgts", "--sample-generation-total-size"): Opt(6),
    ("-iaed", "--ignore-already-exist-dir"): FLAG,
    ("-nv", "--no-verify"): FLAG,
    ("-v", "--verbose"): FLAG,
    ("-c", "--compression-method"): Opt(None, COMPRESSIONS),
}

# torch_to_nnef_llm 0.24.12, peft/cli.py parser_cli.
REFERENCE_PEFT: dict[tuple[str, ...], Opt] = {
    ("-r", "--read-filepath"): Opt(),
    ("-p", "--patterns"): Opt([r"(?P<name>.*).lora_A.default.weight$", r"(?P<name>.*).lora_B.default.weight$"]),
    ("--method",): Opt("LoRA"),
    ("-c", "--check-map-name"): Opt("{name}.base_layer.weight"),
    ("-m", "--map-name"): Opt("{name}.weight"),
    ("-o", "--output-archive"): Opt(),
    ("-v", "--verbose"): FLAG,
}

# Defaults that differ, with the reason (each has a test below).
DEFAULT_DEVIATIONS = {
    "--trust-remote-code": "off: code shipped with a checkpoint runs only when asked "
                           "(test_trust_remote_code_is_opt_in)",
    "--compression-registry": "fastnnef.compress.DEFAULT_COMPRESSION, which the reference's default path also "
                              "reads as (test_reference_registry_path_reads_as_fastnnef)",
    "--transformers-experts-implementation": "None: accepted and ignored, the exporter picks the traceable MoE "
                                             "form (tests/llm/test_llm_cli.py's ignored-flags test)",
}


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def _check_options(reference: dict[tuple[str, ...], Opt], parser: argparse.ArgumentParser) -> None:
    ours = _actions(parser)
    for strings, ref in reference.items():
        missing = [s for s in strings if s not in ours]
        assert not missing, f"{strings}: {missing} not accepted"
        action = ours[strings[0]]
        assert set(strings) <= set(action.option_strings), (strings, action.option_strings)
        assert (action.nargs != 0) == ref.takes_value, f"{strings}: value or flag differs"
        if ref.choices is not None:
            assert action.choices is not None and set(ref.choices) <= set(action.choices), (strings, action.choices)
        if strings[0] in DEFAULT_DEVIATIONS:
            assert action.default != ref.default
        else:
            assert action.default == ref.default, f"{strings}: default {action.default!r} != {ref.default!r}"


def test_llm_and_multimodal_options() -> None:
    from fastnnef.multimodal.cli import build_parser as multimodal_parser

    for build in (llm_parser, multimodal_parser):
        _check_options(REFERENCE_LLM, build(list(COMPRESSIONS)))


def test_peft_options() -> None:
    _check_options(REFERENCE_PEFT, peft_parser())
    assert PATTERN_LORA == REFERENCE_PEFT[("-p", "--patterns")].default


def test_trust_remote_code_is_opt_in() -> None:
    parser = llm_parser()
    assert parser.parse_args(["-e", "x"]).trust_remote_code is False
    assert parser.parse_args(["-e", "x", "--trust-remote-code"]).trust_remote_code is True


def test_reference_registry_path_reads_as_fastnnef() -> None:
    assert registry_path("torch_to_nnef.compress.DEFAULT_COMPRESSION") == "fastnnef.compress.DEFAULT_COMPRESSION"
    assert llm_parser().get_default("compression_registry") == "fastnnef.compress.DEFAULT_COMPRESSION"
    assert registry_path("mypkg.REGISTRY") == "mypkg.REGISTRY"


def test_dynamic_logits_to_keep_is_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    """'dynamic' (a value of --num-logits-to-keep, logits_to_keep as a runtime input) is not
    supported: a clear error, as the README says."""
    with pytest.raises(SystemExit):
        llm_main(["-d", "x", "-e", "y", "--num-logits-to-keep", "dynamic"])
    assert "'dynamic' (logits_to_keep as a runtime input) is not supported yet" in capsys.readouterr().err


def fake_tract(tmp_path: Path, version: str, exit_code: int = 0) -> tuple[Path, Path]:
    """A stand-in tract binary (no real one on this machine, none is downloaded): answers
    ``--version`` and records each command line; its checks exit with ``exit_code``."""
    script, log = tmp_path / "tract", tmp_path / "argv.txt"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "tract {version}"; exit 0; fi\n'
        f'echo "$@" >> {log}\necho "fake tract: mismatch" >&2\nexit {exit_code}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


# Every reference flag on one command line (-s/-d and the two tract flags exclude each other).
EVERY_FLAG = [
    "-dt", "f32", "-idt", "f32", "-mp", "--compression-registry", "torch_to_nnef.compress.DEFAULT_COMPRESSION",
    "-f32-attn", "-f32-lin-acc", "-f32-norm", "--reify-sdpa-operator", "--transformers-attn-implementation", "sdpa",
    "--transformers-experts-implementation", "auto", "--upcast-quant", "any", "--num-logits-to-keep", "1",
    "--hf-download-n-retries", "2", "--no-trust-remote-code", "--device-map", "auto", "-tt", "very",
    "-n", "natural_verbose_camel", "-dwtac", "-sgts", "4", "-iaed", "-nv", "-v",
]


def test_llm_every_reference_flag(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert llm_main(["-d", str(checkpoint("llama", tokenizer=True)), "-e", str(out), *EVERY_FLAG,
                     "--export-dir-struct", "flat", "--tract-specific-version", "0.23.0", "-td",
                     "-c", "min_max_q4_0"]) == 0
    assert (out / "model.nnef.tgz").is_file() and (out / "tokenizer.json").is_file()


def test_inputs_dtype_other_than_the_models_is_refused_clearly(
    checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-idt takes the reference's choices; the cache inputs take the model's dtype (tract
    has no bf16), so another one is an error saying to use -dt, and nothing is written."""
    assert llm_main(["-d", str(checkpoint("llama")), "-e", str(tmp_path / "out"), "-idt", "bf16", "-nv"]) == 2
    assert ("-idt/--force-inputs-dtype bf16: the cache inputs take the model's dtype, f32 here; load the model in "
            "bf16 with -dt/--force-module-dtype instead") in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
