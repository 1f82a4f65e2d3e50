"""torch_to_nnef's tract command-line names (fastnnef.inference_target.tract): ``build_io``
with nested IO, ``TractCli`` over a binary (a recording stand-in script; its ``check_io``
with the reference's command line) and over the linked tract, ``TractNNEF.tract_cli``,
``assert_io`` / ``assert_io_and_debug_bundle``, ``TractBinaryDownloader`` and
``apply_dynamic_shape_in_nnef`` (which never download)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef import _native
from fastnnef.cli import main as fastnnef_cli
from fastnnef.compat import tract_downloader
from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
    T2NErrorTract,
    T2NErrorTractDownload,
)
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target.base import UnfoldModelInfo
from fastnnef.inference_target.tract import (
    TractBinaryDownloader,
    TractCheckTolerance,
    TractCli,
    TractNNEF,
    apply_dynamic_shape_in_nnef,
    assert_io,
    assert_io_and_debug_bundle,
    build_io,
)
from tests.helpers import TRACER_ALLOWED
from tests.test_check import X, mul_graph, write_artefact

# The exports here hold an nn.LSTM, whose flat weights torch.export refuses: "auto" traces.
pytestmark = TRACER_ALLOWED


class _Lstm(nn.Module):
    """Returns an LSTM's ``(out, (h, c))``, nested as torch gives it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.LSTM(3, 4)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        return self.rnn(x, state)


def _lstm_args() -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(1)
    return torch.randn(5, 2, 3), (torch.randn(1, 2, 4), torch.randn(1, 2, 4))


@pytest.fixture
def lstm_bundles(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An exported LSTM and the bundles build_io writes for it, with the same names."""
    model, args = _Lstm(), _lstm_args()
    names = dict(input_names=["x", "state"], output_names=["out", "state_out"])
    artefact = export_model_to_nnef(model, args, tmp_path / "lstm.nnef", TractNNEF.latest(), **names)
    ins, outs = tmp_path / "in.npz", tmp_path / "out.npz"
    assert build_io(model, args, ins, outs, **names) == (
        ["x", "state_0", "state_1"], ["out", "state_out_0", "state_out_1"]
    )
    return artefact, ins, outs


# --- build_io ----------------------------------------------------------------------------------


def test_build_io_flattens_nested_outputs_like_the_export(lstm_bundles):
    _, ins, outs = lstm_bundles
    model, (x, (h, c)) = _Lstm().eval(), _lstm_args()
    out, (h1, c1) = model(x, (h, c))
    with np.load(ins) as i, np.load(outs) as o:
        assert list(i) == ["x", "state_0", "state_1"] and list(o) == ["out", "state_out_0", "state_out_1"]
        np.testing.assert_array_equal(i["state_1"], c.numpy())
        for name, expected in zip(o, (out, h1, c1)):
            np.testing.assert_allclose(o[name], expected.detach().numpy(), rtol=1e-6)
    assert build_io(model, _lstm_args()) == (
        ["input_0", "input_1", "input_2"], ["output_0", "output_1", "output_2"]
    )


def test_build_io_keeps_submodule_modes():
    model = _Lstm().train()
    model.rnn.eval()
    build_io(model, _lstm_args())
    assert model.training is True and model.rnn.training is False


# --- TractCli over the linked tract ---------------------------------------------------------


def test_linked_cli_checks_in_process(lstm_bundles, tmp_path):
    artefact, ins, outs = lstm_bundles
    cli = TractNNEF.latest().tract_cli
    assert cli.tract_path is None and cli.version == _native.TRACT_VERSION
    assert cli.assert_io(artefact, ins, outs, check_tolerance=TractCheckTolerance.APPROXIMATE) is True
    cmd = cli.assert_io_cmd_str(artefact, ins, outs, "close")
    assert cmd == ["fastnnef", "check", str(artefact), "--inputs", str(ins), "--outputs", str(outs),
                   "--tolerance", "close"]
    assert fastnnef_cli(cmd[1:]) == 0  # the command it shows does the same check

    wrong = tmp_path / "wrong.npz"
    with np.load(outs) as o:
        np.savez(wrong, **{k: v + 1.0 for k, v in o.items()})
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match="differ from the expected ones"):
        cli.assert_io(artefact, ins, wrong)
    assert cli.assert_io(artefact, ins, wrong, raise_exception=False) is False

    # An artefact tract cannot load: an error, or False, as a failing tract command gives.
    missing = tmp_path / "missing.nnef.tgz"
    with pytest.raises(T2NErrorTract, match="missing.nnef.tgz"):
        cli.assert_io(missing, ins, outs)
    assert cli.assert_io(missing, ins, outs, raise_exception=False) is False


def test_linked_cli_takes_the_0_20_single_bundle(tmp_path):
    # torch_to_nnef 0.20: assert_io(nnef_path, io_npz_path, raise_exception=True), one bundle
    # holding the inputs and the expected outputs by name.
    model, args = _Lstm(), _lstm_args()
    names = dict(input_names=["x", "state"], output_names=["out", "state_out"])
    artefact = export_model_to_nnef(model, args, tmp_path / "lstm.nnef", TractNNEF.latest(), **names)
    io = tmp_path / "io.npz"
    build_io(model, args, io_npz_path=io, **names)
    cli = TractNNEF.latest().tract_cli
    assert cli.assert_io(artefact, io, check_tolerance=TractCheckTolerance.APPROXIMATE) is True

    wrong = tmp_path / "wrong.npz"
    with np.load(io) as bundle:
        np.savez(wrong, **{k: v + 1.0 if k.startswith("out") else v for k, v in bundle.items()})
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match="differ from the expected ones"):
        cli.assert_io(artefact, wrong)
    assert cli.assert_io(artefact, wrong, raise_exception=False) is False
    assert cli.assert_io(artefact, wrong, False) is False  # 0.20's positional raise_exception
    with pytest.raises(T2NErrorInvalidArgument, match="raise_exception twice"):
        cli.assert_io(artefact, wrong, False, False)


@pytest.mark.parametrize("call", [
    lambda cli: cli.run(["--version"]),
    lambda cli: cli.convert_onnx_to_nnef("m.onnx", "io.npz", "m.nnef"),
    lambda cli: cli.run_save_outputs_cmd_str("m.nnef", "in.npz", "out.npz"),
])
def test_linked_cli_has_no_command_line(call):
    with pytest.raises(T2NErrorNotImplemented, match=(
        r"runs a tract command line, and the tract linked into fastnnef has none: "
        r"use TractCli\(<path of a tract binary>\)"
    )):
        call(TractCli.linked())


def test_fastnnef_never_downloads(tmp_path, monkeypatch):
    with pytest.raises(T2NErrorTractDownload, match=r"^fastnnef never downloads tract \(asked for 0\.23\.8\)"):
        TractCli.download("0.23.8")
    monkeypatch.setattr(tract_downloader, "DEFAULT_CACHE_DIR", tmp_path)  # the drop-in downloader's module
    with pytest.raises(T2NErrorTractDownload, match=f"no tract binary at {tmp_path}/0.23.8/tract"):
        TractBinaryDownloader("0.23.8")
    lazy = TractBinaryDownloader("0.23.8", auto_download=False)
    assert lazy.tract_filepath == tmp_path / "0.23.8" / "tract"
    assert lazy.binary_url.endswith(f"/0.23.8/tract-{lazy.arch}-0.23.8.tgz")
    (tmp_path / "0.23.8").mkdir()
    (tmp_path / "0.23.8" / "tract").write_text("")
    assert TractBinaryDownloader("0.23.8").tract_filepath.is_file()


def test_apply_dynamic_shape_in_nnef_points_to_the_target():
    with pytest.raises(T2NErrorNotImplemented,
                       match=r"pass them to the target instead: TractNNEF\(\.\.\., dynamic_axes="):
        apply_dynamic_shape_in_nnef({"x": {0: "B"}}, None, "0.23.9")


# --- TractCli over a binary (a stand-in script that records its command line) --------------


def _fake_tract(tmp_path: Path, version: str, exit_code: int = 0) -> Path:
    script = tmp_path / "tract"
    log = tmp_path / "argv.txt"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "tract {version}"; exit 0; fi\n'
        f'echo "$@" > {log}\n'
        f'echo "mismatch details" >&2\nexit {exit_code}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


COMMANDS = [  # (tract version, expected command after the binary)
    ("0.17.3", "m.nnef --nnef-tract-core --nnef-tract-pulse -O --input-bundle in.npz run "
               "--assert-output-bundle out.npz --allow-float-casts"),
    # each boundary of the version gates the command line follows (VERSION_GATES)
    ("0.18.0", "m.nnef --nnef-tract-core --nnef-tract-pulse -O run --input-from-bundle in.npz "
               "--assert-output-bundle out.npz --allow-float-casts"),
    ("0.20.20", "m.nnef --nnef-tract-core --nnef-tract-pulse --nnef-tract-extra -O run --input-from-bundle "
                "in.npz --assert-output-bundle out.npz --allow-float-casts"),
    ("0.21.7", "m.nnef --nnef-tract-core --nnef-tract-pulse --nnef-tract-extra -O run --input-from-bundle "
               "in.npz --assert-output-bundle out.npz --allow-float-casts --approx super"),
    ("0.22.0", "m.nnef --nnef-tract-core --nnef-tract-pulse --nnef-tract-extra --nnef-tract-transformers -O run "
               "--input-from-bundle in.npz --assert-output-bundle out.npz --allow-float-casts --approx very"),
    ("0.21.9", "m.nnef --nnef-tract-core --nnef-tract-pulse --nnef-tract-extra -O run --input-from-bundle "
               "in.npz --assert-output-bundle out.npz --allow-float-casts --approx very"),
    ("0.23.8", "m.nnef --nnef-tract-core --nnef-tract-pulse --nnef-tract-extra --nnef-tract-transformers -O run "
               "--input-from-bundle in.npz --assert-output-bundle out.npz --allow-float-casts --approx very"),
]


@pytest.mark.parametrize("version, expected", COMMANDS)
def test_binary_commands_follow_its_version(version, expected, tmp_path):
    cli = TractCli(_fake_tract(tmp_path, version))
    assert cli.version == version
    cmd = cli.assert_io_cmd_str(Path("m.nnef"), Path("in.npz"), Path("out.npz"), TractCheckTolerance.VERY)
    assert cmd == [str(cli.tract_path), *expected.split()]
    assert cli.assert_io(Path("m.nnef"), Path("in.npz"), Path("out.npz"), check_tolerance="very") is True
    assert (tmp_path / "argv.txt").read_text().split() == expected.split()


def test_binary_verdict_is_its_exit_code(tmp_path, caplog):
    cli = TractCli(_fake_tract(tmp_path, "0.23.8", exit_code=1))
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match="exited with code 1:\nmismatch details"):
        cli.assert_io(Path("m.nnef"), Path("in.npz"), Path("out.npz"))
    with caplog.at_level(logging.ERROR, logger="fastnnef"):
        assert cli.assert_io(Path("m.nnef"), Path("in.npz"), Path("out.npz"), raise_exception=False) is False
    assert "mismatch details" in caplog.text


def test_binary_run_and_convert_pass_their_arguments(tmp_path):
    cli = TractCli(_fake_tract(tmp_path, "0.23.8", exit_code=3))
    assert cli.run(["model.nnef", "dump"], quiet=True) == 3
    assert (tmp_path / "argv.txt").read_text().split() == ["model.nnef", "dump"]
    assert cli.run_save_outputs_cmd_str("m.nnef", "in.npz", "out.npz")[-4:] == [
        "in.npz", "--save-outputs-npz", "out.npz", "--allow-float-casts"
    ]
    ok = TractCli(_fake_tract(tmp_path, "0.23.8"))
    ok.convert_onnx_to_nnef("m.onnx", "io.npz", "m.nnef")
    assert (tmp_path / "argv.txt").read_text().split() == [
        "m.onnx", "--nnef-tract-core", "--nnef-tract-pulse", "dump", "--input-from-bundle", "io.npz",
        "--nnef", "m.nnef",
    ]


def test_target_tract_cli(tmp_path):
    binary = _fake_tract(tmp_path, "0.23.8")
    target = TractNNEF("0.23.8", specific_tract_binary_path=binary)
    assert target.tract_cli.tract_path == binary and target.tract_cli.version == "0.23.8"
    assert target.with_dynamic_axes({"x": {0: "B"}}).tract_cli.tract_path == binary
    assert TractNNEF.latest().tract_cli.tract_path is None
    with pytest.raises(T2NErrorNotFoundFile, match="tract binary '/nope/tract' does not exist"):
        TractCli(Path("/nope/tract"))


# --- assert_io / assert_io_and_debug_bundle -----------------------------------------------------


def test_assert_io_functions(lstm_bundles, tmp_path, monkeypatch, caplog):
    artefact, ins, outs = lstm_bundles
    linked = TractCli.linked()
    assert_io(artefact, linked, ins, outs, TractCheckTolerance.APPROXIMATE)
    info = UnfoldModelInfo(_Lstm(), None, None, [], [], [], [])
    assert_io_and_debug_bundle(info, artefact, linked, ins, outs, tmp_path / "bundle",
                               TractCheckTolerance.APPROXIMATE)
    assert not (tmp_path / "bundle").exists()

    wrong = tmp_path / "wrong.npz"
    with np.load(outs) as o:
        np.savez(wrong, **{k: v * 2.0 for k, v in o.items()})
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match=r"^test with model: _Lstm\("):
        assert_io_and_debug_bundle(info, artefact, linked, ins, wrong, tmp_path / "bundle")
    assert (tmp_path / "bundle" / "report.txt").is_file()
    with pytest.raises(T2NErrorIOPytorchTractNotISO):
        assert_io(artefact, linked, ins, wrong)
    monkeypatch.setenv("T2N_CHECK_IO_RAISE_EXCEPTION", "0")
    with caplog.at_level(logging.ERROR, logger="fastnnef"):
        assert_io(artefact, linked, ins, wrong)
        assert_io_and_debug_bundle(info, artefact, linked, ins, wrong)
    assert caplog.text.count("differ from the expected ones") == 2
    with pytest.raises(T2NErrorNotFoundFile, match="input_bundle_path 'missing.npz' does not exist"):
        assert_io(artefact, linked, Path("missing.npz"), outs)


# --- TractCli.check_io: check_io's arguments through a binary (the reference's command line) ---
def fake_tract(tmp_path: Path, code: int, version: str = "0.23.8") -> tuple[Path, Path]:
    log = tmp_path / "argv.txt"
    script = tmp_path / "tract"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "tract {version}"; exit 0; fi\n'
        f'for a in "$@"; do echo "$a"; done > {log}\necho "fake tract says no" >&2\nexit {code}\n'
    )
    script.chmod(0o755)
    return script, log


@pytest.mark.parametrize("code", [0, 1])
def test_specific_tract_binary(tmp_path: Path, code: int) -> None:
    path = write_artefact(tmp_path, mul_graph())
    script, log = fake_tract(tmp_path, code)
    if code == 0:
        assert TractCli(script).check_io(path, [X], [X * 2], ["x"], ["y"], tolerance="super") == []
    else:
        with pytest.raises(T2NErrorIOPytorchTractNotISO, match="fake tract says no"):
            TractCli(script).check_io(path, [X], [X * 2], ["x"], ["y"], tolerance="super")
    argv = log.read_text().splitlines()
    assert argv[0] == str(path)
    assert argv[1:7] == [
        "--nnef-tract-core",
        "--nnef-tract-pulse",
        "--nnef-tract-extra",
        "--nnef-tract-transformers",
        "-O",
        "run",
    ]
    assert argv[7] == "--input-from-bundle" and argv[8].endswith("inputs.npz")
    assert argv[9] == "--assert-output-bundle" and argv[10].endswith("outputs.npz")
    assert argv[11:] == ["--allow-float-casts", "--approx", "super"]


@pytest.mark.parametrize("version, flags, approx", [
    ("0.21.9", ["--nnef-tract-extra"], ["--approx", "very"]),
    ("0.21.7", ["--nnef-tract-extra"], ["--approx", "super"]),  # 0.21.7 has no "very": super
    ("0.20.22", ["--nnef-tract-extra"], []),  # no --approx before 0.21.7: exact check
])
def test_an_older_tract_binary_gets_only_flags_it_knows(tmp_path: Path, version: str, flags: list,
                                                        approx: list) -> None:
    path = write_artefact(tmp_path, mul_graph())
    script, log = fake_tract(tmp_path, 0, version)
    TractCli(script).check_io(path, [X], [X * 2], ["x"], ["y"], tolerance="very")
    argv = log.read_text().splitlines()
    assert argv[1:] == ["--nnef-tract-core", "--nnef-tract-pulse", *flags, "-O", "run", "--input-from-bundle",
                        argv[-4 - len(approx)], "--assert-output-bundle", argv[-2 - len(approx)],
                        "--allow-float-casts", *approx]
    assert "--nnef-tract-transformers" not in argv


def test_custom_tolerance_through_a_binary(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, mul_graph())
    script, log = fake_tract(tmp_path, 0)
    TractCli(script).check_io(path, [X], [X * 2], ["x"], ["y"], tolerance="custom:0.1,0.01,0")
    assert log.read_text().splitlines()[-2:] == ["--approx-custom", "0.1,0.01,0"]
