"""In-process tract check: loading, running and comparing hand-written NNEF artefacts.

Expected figures are computed here from the inputs and tract.md §5 (the documented table and
rule), never from the code under test.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fastnnef import _native
from fastnnef.check import TractArtefact, check_artefact, check_io
from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorTract,
)
from tests.helpers import assert_gil_released

HEADER = "version 1.0;\nextension tract_registry tract_core;\n"


def graph(body: str, inputs: str = "x", outputs: str = "y", extra: str = "") -> str:
    return f"{HEADER}{extra}graph network({inputs}) -> ({outputs}) {{\n{body}\n}}\n"


def mul_graph(factor: str = "2.0", shape: str = "[2, 3]", dtype: str = "f32", extra: str = "") -> str:
    return graph(
        f"  x = tract_core_external(shape = {shape}, datum_type = '{dtype}');\n  y = mul(x, {factor});", extra=extra
    )


def tar_bytes(text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("graph.nnef")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_artefact(tmp_path: Path, text: str, fmt: str = "dir", name: str = "model") -> Path:
    """Write a graph.nnef-only artefact as a directory, .tar or .tgz."""
    if fmt == "dir":
        path = tmp_path / f"{name}.nnef"
        path.mkdir()
        (path / "graph.nnef").write_text(text)
        return path
    path = tmp_path / f"{name}.nnef.{fmt}"
    with tarfile.open(path, "w:gz" if fmt == "tgz" else "w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("graph.nnef")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


X = np.array([[0.0, 1.0, 2.0], [3.0, -4.0, 5.0]], dtype=np.float32)


@pytest.mark.parametrize("fmt", ["dir", "tar", "tgz", "bytes"])
def test_load_and_run_every_form(tmp_path: Path, fmt: str) -> None:
    text = mul_graph()
    source = tar_bytes(text) if fmt == "bytes" else write_artefact(tmp_path, text, fmt)
    art = TractArtefact.load(source)
    assert art.input_names == ["x"] and art.output_names == ["y"]
    assert art.input_facts == [("f32", [2, 3])]
    (y,) = art.run([X])
    assert y.dtype == np.float32 and y.flags.writeable
    np.testing.assert_array_equal(y, X * 2)
    (y,) = art.run({"x": torch.from_numpy(X)})
    np.testing.assert_array_equal(y, X * 2)
    if fmt != "bytes":
        reports = check_io(source, [X], [X * 2], ["x"], ["y"])
        assert [r.ok for r in reports] == [True]
        assert reports[0].n_fail == 0 and reports[0].max_abs_error == 0.0


def test_unoptimized_load_runs_too(tmp_path: Path) -> None:
    art = TractArtefact.load(write_artefact(tmp_path, mul_graph()), optimize=False)
    np.testing.assert_array_equal(art.run([X])[0], X * 2)


def test_perturbed_artefact_fails_with_figures(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, mul_graph("2.01"))
    expected = X * np.float32(2.0)
    got = X * np.float32(2.01)  # tract multiplies in f32, as numpy does here
    diff = np.abs(expected.astype(np.float64) - got.astype(np.float64))
    bound = np.float32(1e-4) + np.float32(5e-4) * np.abs(got)
    failing = np.abs(expected - got) > bound
    with pytest.raises(T2NErrorIOPytorchTractNotISO) as info:
        check_io(path, [X], [expected], ["x"], ["y"], tolerance="approximate")
    message = str(info.value)
    assert "output 'y'" in message and "MISMATCH" in message and str(path) in message
    np.testing.assert_array_equal(TractArtefact.load(path).run([X])[0], got)
    report = _native.compare(expected, got, "approximate")
    assert not report.ok
    assert report.n_fail == int(failing.sum()) == 5  # every element but the 0
    assert report.n_elements == 6 and report.fail_fraction == 5 / 6
    assert report.max_abs_error == diff.max()
    assert report.worst_index == [1, 2]
    assert report.worst_expected == 10.0 and report.worst_got == float(got[1, 2])
    nonzero = got != 0
    assert report.max_rel_error == (diff[nonzero] / np.abs(got[nonzero].astype(np.float64))).max()
    assert "failing elements: 5 / 6" in message


def test_perturbed_expected_outputs_fail_with_figures(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, mul_graph(), "tgz")
    expected = X * 2
    expected[0, 1] += np.float32(0.25)
    with pytest.raises(T2NErrorIOPytorchTractNotISO) as info:
        check_io(path, [X], [expected], ["x"], ["y"], tolerance="very")
    assert "failing elements: 1 / 6" in str(info.value)
    report = _native.compare(expected, X * 2, "very")
    assert (report.n_fail, report.worst_index, report.max_abs_error) == (1, [0, 1], 0.25)
    assert report.max_rel_error == 0.25 / 2.0
    assert (report.atol, report.rtol, report.max_outlier_fraction) == (5e-2, 1e-2, 0.0)


# The documented table (tract.md §5.1): level -> dtype -> (atol, rtol, outliers).
TABLE = {
    "exact": {"f32": (0.0, 0.0, 0.0), "f16": (0.0, 0.0, 0.0)},
    "close": {"f32": (1e-7, 1e-7, 0.0), "f16": (1e-3, 1e-3, 0.0)},
    "approximate": {"f32": (1e-4, 5e-4, 0.0), "f16": (1e-3, 5e-3, 0.0)},
    "very": {"f32": (5e-2, 1e-2, 0.0), "f16": (5e-2, 1e-2, 0.0)},
    "super": {"f32": (0.1, 0.05, 1e-4), "f16": (0.1, 0.05, 1e-4)},
    "ultra": {"f32": (0.2, 0.1, 5e-4), "f16": (0.2, 0.1, 5e-4)},
}


def edge_values(got: np.generic, atol: float, rtol: float) -> tuple[np.generic, np.generic]:
    """The largest representable expected value that passes the rule and the next one up.

    The rule (tract.md §5.2): |a - b| <= atol + rtol * |b|, in f32 arithmetic, b = got.
    """
    dtype = got.dtype.type
    b32 = np.float32(got)
    bound = np.float32(atol) + np.float32(rtol) * np.abs(b32)

    def passes(a: np.generic) -> bool:
        return bool(np.abs(np.float32(a) - b32) <= bound)

    a = dtype(b32 + bound)
    while not passes(a):
        a = np.nextafter(a, dtype(-np.inf))
    while passes(np.nextafter(a, dtype(np.inf))):
        a = np.nextafter(a, dtype(np.inf))
    return a, np.nextafter(a, dtype(np.inf))


@pytest.mark.parametrize("level", list(TABLE))
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("value", [1.5, -300.0, 0.0])
def test_levels_accept_inside_reject_outside(level: str, dtype: str, value: float) -> None:
    np_dtype = {"f32": np.float32, "f16": np.float16}[dtype]
    atol, rtol, _ = TABLE[level][dtype]
    got = np_dtype(value)
    inside, outside = edge_values(got, atol, rtol)
    ok = _native.compare(np.array([inside], np_dtype), np.array([got], np_dtype), level)
    bad = _native.compare(np.array([outside], np_dtype), np.array([got], np_dtype), level)
    assert ok.ok and ok.n_fail == 0, str(ok)
    assert not bad.ok and bad.n_fail == 1, str(bad)
    assert (ok.atol, ok.rtol) == (atol, rtol)


def test_f32_expected_against_f16_output_uses_f16_rows() -> None:
    got = np.array([1.5], np.float16)
    report = _native.compare(np.array([1.5 + 4e-3], np.float32), got, "approximate")
    assert report.ok and (report.atol, report.rtol) == (1e-3, 5e-3)
    assert (report.expected_dtype, report.got_dtype) == ("f32", "f16")


@pytest.mark.parametrize(("level", "fraction"), [("super", 1e-4), ("ultra", 5e-4)])
def test_outlier_fractions(tmp_path: Path, level: str, fraction: float) -> None:
    n = 20000
    path = write_artefact(tmp_path, mul_graph("1.0", shape=f"[{n}]"))
    x = np.linspace(-1, 1, n, dtype=np.float32)
    allowed = int(np.floor(n * fraction))
    expected = x.copy()
    expected[:allowed] += 10.0  # far outside any bound
    reports = check_io(path, [x], [expected], ["x"], ["y"], tolerance=level)
    assert reports[0].ok and reports[0].n_fail == allowed
    expected[allowed] += 10.0
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match=f"failing elements: {allowed + 1} / {n}"):
        check_io(path, [x], [expected], ["x"], ["y"], tolerance=level)


@pytest.mark.parametrize("level", ["approximate", "ultra"])
@pytest.mark.parametrize(("values", "off"), [([10_000, 7, -3], 4), ([2**30, 1, 2], 1)],
                         ids=["within-rtol", "beyond-f32"])
def test_integer_outputs_compare_exactly(tmp_path: Path, level: str, values: list, off: int) -> None:
    """An integer output off by a little fails at every level: 10004 for 10000 is inside
    tract's float rule (atol + rtol * |got|), 2**30 + 1 for 2**30 rounds to the same f32."""
    path = write_artefact(tmp_path, mul_graph("1", shape="[3]", dtype="i64"))
    x = np.array(values, np.int64)
    (report,) = check_io(path, [x], [x.copy()], ["x"], ["y"], tolerance=level)
    assert report.ok and report.approximation == "exact"
    expected = x.copy()
    expected[0] += off
    with pytest.raises(T2NErrorIOPytorchTractNotISO) as info:
        check_io(path, [x], [expected], ["x"], ["y"], tolerance=level)
    message = str(info.value)
    assert "output 'y'" in message
    if values[0] < 2**24:  # tract's rule at exact sees the difference
        assert "MISMATCH at tolerance exact" in message
    else:  # f32 hides it: the exact comparison names it
        assert f"integer values differ exactly: first at [0], expected {values[0] + off}, got {values[0]}" in message


def test_bool_outputs_compare_exactly(tmp_path: Path) -> None:
    text = graph("  x = tract_core_external(shape = [4], datum_type = 'f32');\n  y = gt(x, 0.0);")
    path = write_artefact(tmp_path, text)
    x = np.array([1.0, -1.0, 2.0, 0.5], np.float32)
    check_io(path, [x], [x > 0], ["x"], ["y"], tolerance="ultra")
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match="MISMATCH at tolerance exact"):
        check_io(path, [x], [x > 1], ["x"], ["y"], tolerance="ultra")


def test_dynamic_axis_runs_at_two_lengths(tmp_path: Path) -> None:
    text = mul_graph(shape="[1, S]", extra="extension tract_symbol S;\n")
    path = write_artefact(tmp_path, text, "tar")
    art = TractArtefact.load(path)
    assert art.input_facts == [("f32", [1, "S"])]
    for length in (3, 7):
        x = np.arange(length, dtype=np.float32).reshape(1, length)
        np.testing.assert_array_equal(art.run([x])[0], x * 2)
        assert check_io(path, [x], [x * 2], ["x"], ["y"])[0].ok


def test_inputs_matched_by_name_and_properties(tmp_path: Path) -> None:
    text = (
        f"{HEADER}fragment tract_core_properties() -> (properties: (string, tensor<scalar>)[])\n"
        '{\n  properties = [("source", "unit test"), ("n", "2")];\n}\n'
        "graph network(a, b) -> (d, s) {\n"
        "  a = tract_core_external(shape = [3], datum_type = 'f32');\n"
        "  b = tract_core_external(shape = [3], datum_type = 'f32');\n"
        "  d = sub(a, b);\n  s = add(a, b);\n}\n"
    )
    path = write_artefact(tmp_path, text)
    art = TractArtefact.load(path)
    assert art.properties == {"source": "unit test", "n": "2"}
    a, b = np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)
    d, s = art.run({"b": b, "a": a})
    np.testing.assert_array_equal(d, a - b)
    # Names given in another order are matched by name, outputs by label.
    reports = check_io(path, [b, a], [a + b, a - b], ["b", "a"], ["s", "d"], tolerance="exact")
    assert [r.ok for r in reports] == [True, True]


def test_input_dtype_mismatch_names_input(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, mul_graph())
    art = TractArtefact.load(path)
    with pytest.raises(T2NErrorInvalidArgument) as info:
        art.run([X.astype(np.float64)])
    assert str(info.value) == (
        f'input 0 ("x") of artefact {path} expects dtype f32, given f64; '
        "cast it before calling (e.g. `x.astype(np.float32)`)"
    )
    with pytest.raises(T2NErrorInvalidArgument, match=r"expects shape \[2, 3\], given \[3, 2\]"):
        art.run([X.T.copy()])
    with pytest.raises(T2NErrorInvalidArgument, match=r"missing \['x'\], unknown \['z'\]"):
        art.run({"z": X})


def test_torch_inputs_bf16_and_f16(tmp_path: Path) -> None:
    f16_path = write_artefact(tmp_path, mul_graph(dtype="f16"), name="half")
    x16 = torch.tensor(X, dtype=torch.float16)
    (y,) = TractArtefact.load(f16_path).run([x16])
    assert y.dtype == np.float16
    # f16 outputs pick the f16 rows (rtol 5e-3): a 0.3% error passes them, not the f32 row.
    expected = x16 * 2 * 1.003
    reports = check_io(f16_path, [x16], [expected], ["x"], ["y"], tolerance="approximate")
    assert reports[0].ok and (reports[0].atol, reports[0].rtol) == (1e-3, 5e-3)
    assert not _native.compare(expected.float().numpy(), y.astype(np.float32), "approximate").ok
    # bf16 tensors are compared as f32 (exactly widened).
    f32_path = write_artefact(tmp_path, mul_graph(), name="single")
    xb = torch.tensor(X, dtype=torch.bfloat16)
    reports = check_io(f32_path, [xb], [xb * 2], ["x"], ["y"], tolerance="exact")
    assert reports[0].ok and reports[0].expected_dtype == "f32"


def test_load_errors_carry_chain_and_path(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, graph("  x = external(shape = [2]);\n  y = no_such_op(x);"), "tgz")
    with pytest.raises(T2NErrorTract) as info:
        TractArtefact.load(path)
    message = str(info.value)
    assert str(path) in message and "Caused by" in message and "no_such_op" in message
    missing = tmp_path / "missing.nnef.tgz"
    with pytest.raises(T2NErrorTract, match=str(missing)):
        check_io(missing, [X], [X], ["x"], ["y"])
    with pytest.raises(T2NErrorTract, match="in-memory artefact"):
        TractArtefact.load(b"not a tar archive at all")


def test_outputs_all_inputs_is_rejected(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, graph("  x = external(shape = [2]);", outputs="x"))
    with pytest.raises(T2NErrorTract, match="nothing to check"):
        check_io(path, [X[0, :2]], [X[0, :2]], ["x"], ["x"])


def test_bad_tolerance(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match="unknown tolerance 'loose'"):
        check_io(write_artefact(tmp_path, mul_graph()), [X], [X * 2], ["x"], ["y"], tolerance="loose")


def test_no_subprocess_during_check_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("check_io started a process")

    monkeypatch.setattr(subprocess, "Popen", forbidden)
    for name in ("fork", "posix_spawn", "posix_spawnp", "system", "execv", "execvp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, forbidden)
    path = write_artefact(tmp_path, mul_graph(), "tgz")
    assert check_io(path, [X], [X * 2], ["x"], ["y"])[0].ok
    with pytest.raises(T2NErrorIOPytorchTractNotISO):
        check_io(path, [X], [X * 3], ["x"], ["y"], debug_bundle_path=tmp_path / "bundle")


def test_debug_bundle_directory_and_tgz(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, mul_graph("2.01"), "tgz")
    bundle = tmp_path / "out" / "bundle"
    for expected_dir in (bundle, tmp_path / "out" / "bundle_1"):
        with pytest.raises(T2NErrorIOPytorchTractNotISO, match=f"debug bundle: {expected_dir}"):
            check_io(path, [X], [X * 2], ["x"], ["y"], debug_bundle_path=bundle)
    files = sorted(p.name for p in bundle.iterdir())
    assert files == sorted(
        ["model.nnef.tgz", "inputs.npz", "expected.npz", "obtained.npz", "report.txt", "versions.txt", "rerun.sh"]
    )
    assert (bundle / "model.nnef.tgz").read_bytes() == path.read_bytes()
    np.testing.assert_array_equal(np.load(bundle / "inputs.npz")["x"], X)
    np.testing.assert_array_equal(np.load(bundle / "expected.npz")["y"], X * 2)
    np.testing.assert_array_equal(np.load(bundle / "obtained.npz")["y"], X * np.float32(2.01))
    assert "failing elements: 5 / 6" in (bundle / "report.txt").read_text()
    versions = (bundle / "versions.txt").read_text()
    assert f"tract (linked) {_native.TRACT_VERSION}" in versions and f"torch {torch.__version__}" in versions
    rerun = (bundle / "rerun.sh").read_text()
    assert (
        "fastnnef check model.nnef.tgz --inputs inputs.npz --outputs expected.npz --tolerance approximate" in rerun
    )
    # The bundle's files reproduce the failure through the public entry point.
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match="failing elements: 5 / 6"):
        check_artefact(bundle / "model.nnef.tgz", bundle / "inputs.npz", bundle / "expected.npz")

    tgz = tmp_path / "bundle.tgz"
    for expected_tgz in (tgz, tmp_path / "bundle_1.tgz"):
        with pytest.raises(T2NErrorIOPytorchTractNotISO, match=f"debug bundle: {expected_tgz}"):
            check_io(path, [X], [X * 2], ["x"], ["y"], debug_bundle_path=tgz)
    with tarfile.open(tgz) as tar:
        names = set(tar.getnames())
    assert {"bundle/report.txt", "bundle/rerun.sh", "bundle/model.nnef.tgz", "bundle/obtained.npz"} <= names


def test_directory_artefact_copied_into_bundle(tmp_path: Path) -> None:
    path = write_artefact(tmp_path, mul_graph())
    bundle = tmp_path / "b"
    with pytest.raises(T2NErrorIOPytorchTractNotISO):
        check_io(path, [X], [X], ["x"], ["y"], debug_bundle_path=bundle)
    assert (bundle / "model.nnef" / "graph.nnef").read_text() == mul_graph()


def test_gil_released_while_tract_runs(tmp_path: Path) -> None:
    """While one thread is inside run(), another keeps executing Python: no long pause."""
    n = 1024
    body = f"  a = tract_core_external(shape = [{n}, {n}], datum_type = 'f32');\n  m0 = matmul(a, a);\n"
    body += "".join(f"  m{i} = matmul(m{i - 1}, a);\n" for i in range(1, 6))
    body += "  y = copy(m5);"
    art = TractArtefact.load(write_artefact(tmp_path, graph(body, inputs="a")))
    a = np.full((n, n), 1e-3, np.float32)
    assert_gil_released(lambda: art.run([a]))
