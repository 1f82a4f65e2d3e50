"""The artefact sink: directory / .tar / .tgz, reproducibility, single gzip member,
atomic replacement and clean-up on interruption (nnef-format.md §5)."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from fastnnef import _native
from fastnnef.artefact import Artefact
from fastnnef.exceptions import T2NErrorArtefactIO, T2NErrorInvalidArgument
from tests.helpers import assert_gil_released

GRAPH = "version 1.0;\n"


def write_sample(path: Path, fmt: str, level: int = 0, big: bool = False) -> str:
    rng = np.random.default_rng(7)
    with Artefact(path, fmt, level) as art:
        art.add_file("graph.nnef", GRAPH)
        art.add_tensor("a", torch.arange(6, dtype=torch.float32).reshape(2, 3))
        art.add_tensor("enc/w", torch.from_numpy(rng.standard_normal((40, 64)).astype(np.float32)).T)
        art.add_tensor("m", torch.tensor([True, False, True]))
        if big:
            # Several 1 MiB gzip chunks, half compressible.
            noise = rng.standard_normal(600_000).astype(np.float32)
            art.add_tensor("big", torch.from_numpy(np.concatenate([noise, np.zeros_like(noise)])))
    assert art.path is not None
    return art.path


def member_bytes(path: str) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}


@pytest.mark.parametrize(("fmt", "level"), [("tar", 0), ("tgz", 0), ("tgz", 1), ("tgz", 3), ("tgz", 9)])
def test_archives_are_reproducible_and_readable(tmp_path, fmt, level):
    first = write_sample(tmp_path / f"a.{fmt}", fmt, level, big=True)
    second = write_sample(tmp_path / f"b.{fmt}", fmt, level, big=True)
    assert Path(first).read_bytes() == Path(second).read_bytes()
    members = member_bytes(first)
    assert list(members) == ["graph.nnef", "a.dat", "enc/w.dat", "m.dat", "big.dat"]
    assert members["graph.nnef"] == GRAPH.encode()
    assert _native.dat_decode(members["a.dat"]).array().tolist() == [[0, 1, 2], [3, 4, 5]]
    with tarfile.open(first) as tf:
        for m in tf.getmembers():
            assert (m.mtime, m.uid, m.gid, m.mode, m.uname, m.gname) == (315532800, 0, 0, 0o644, "", "")
            assert m.isfile()


# Level 1: ISA-L (XFL 4, "fastest"); 2: ISA-L; 6: zlib-rs (XFL 0).
@pytest.mark.parametrize(("level", "xfl"), [(1, 4), (2, 0), (6, 0)])
def test_tgz_is_one_gzip_member_with_fixed_header(tmp_path, level, xfl):
    path = write_sample(tmp_path / "m.nnef.tgz", "tgz", level, big=True)
    raw = Path(path).read_bytes()
    # magic, deflate, no flags (so no FNAME), mtime 0, XFL, OS 255.
    assert raw[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes([xfl, 255])
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(raw) + d.flush()
    assert d.eof and d.unused_data == b""
    assert out == gzip.decompress(raw)
    with tarfile.open(fileobj=io.BytesIO(out)) as tf:
        assert "big.dat" in tf.getnames()
    extract = tmp_path / "x"
    extract.mkdir()
    subprocess.run(["tar", "-xzf", path, "-C", str(extract)], check=True)
    assert (extract / "enc" / "w.dat").read_bytes() == member_bytes(path)["enc/w.dat"]


@pytest.mark.parametrize("level", [1, 3, 6])
def test_same_bytes_whatever_the_thread_count(tmp_path, level):
    script = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from tests.test_archive import write_sample; from pathlib import Path;"
        f"write_sample(Path(sys.argv[1]), 'tgz', {level}, big=True)"
    )
    root = Path(__file__).resolve().parent.parent
    outputs = []
    for threads in ("1", "3"):
        out = tmp_path / f"t{threads}.tgz"
        env = dict(os.environ, RAYON_NUM_THREADS=threads)
        subprocess.run([sys.executable, "-c", script, str(out), str(root)], check=True, env=env)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_directory_form(tmp_path):
    path = write_sample(tmp_path / "m.nnef", "dir")
    root = Path(path)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "a.dat", "enc/w.dat", "graph.nnef", "m.dat",
    ]
    assert (root / "m.dat").read_bytes()[128:] == b"\xa0"
    assert [p.name for p in tmp_path.iterdir()] == ["m.nnef"]


@pytest.mark.parametrize("fmt", ["dir", "tar", "tgz"])
@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_interruption_leaves_no_temp_and_keeps_target(tmp_path, fmt, exc):
    target = tmp_path / f"m.{fmt}"
    if fmt == "dir":
        target.mkdir()
        (target / "graph.nnef").write_text("old")
    else:
        target.write_bytes(b"old artefact")
    with pytest.raises(type(exc)):
        with Artefact(target, fmt) as art:
            art.add_file("graph.nnef", GRAPH)
            art.add_tensor("a", torch.ones(1000))
            raise exc
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    if fmt == "dir":
        assert (target / "graph.nnef").read_text() == "old"
    else:
        assert target.read_bytes() == b"old artefact"


def test_archive_replaces_existing_file_but_not_a_non_empty_directory(tmp_path):
    target = tmp_path / "m.tar"
    target.write_bytes(b"old")
    write_sample(target, "tar")
    assert tarfile.is_tarfile(target)
    d = tmp_path / "out"
    d.mkdir()
    (d / "keep").write_text("k")
    with pytest.raises(T2NErrorArtefactIO, match="non-empty directory"):
        with Artefact(d, "dir") as art:
            art.add_file("graph.nnef", GRAPH)
    assert [p.name for p in d.iterdir()] == ["keep"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tar", "out"]


@pytest.mark.parametrize("label", ["", "/abs", "../up", "a/../../b", ".hidden", "a/.b", "a//b", "a/"])
def test_bad_labels_are_rejected(tmp_path, label):
    with Artefact(tmp_path / "m.tar", "tar") as art:
        with pytest.raises(T2NErrorInvalidArgument, match="invalid artefact member name"):
            art.add_tensor(label, torch.zeros(2))
        art.add_tensor("ok", torch.zeros(2))
    assert member_bytes(str(tmp_path / "m.tar")).keys() == {"ok.dat"}


def test_duplicate_labels_and_use_after_finish(tmp_path):
    art = Artefact(tmp_path / "m.tar", "tar")
    art.add_tensor("a", torch.zeros(2))
    with pytest.raises(T2NErrorInvalidArgument, match="already written"):
        art.add_tensor("a", torch.zeros(2))
    art.finish()
    with pytest.raises(T2NErrorInvalidArgument, match="already finished"):
        art.add_tensor("b", torch.zeros(2))


def test_bad_format_and_level(tmp_path):
    with pytest.raises(T2NErrorInvalidArgument, match="dir, tar or tgz"):
        _native.ArtefactWriter(str(tmp_path / "x"), "zip")
    with pytest.raises(T2NErrorInvalidArgument, match="compression level"):
        _native.ArtefactWriter(str(tmp_path / "x"), "tgz", 10)
    with pytest.raises(T2NErrorInvalidArgument, match="compression level"):
        _native.ArtefactWriter(str(tmp_path / "x"), "tar", 3)
    assert list(tmp_path.iterdir()) == []


def test_failed_tensor_poisons_the_writer_and_abort_cleans_up(tmp_path):
    target = tmp_path / "m.tgz"
    with pytest.raises(Exception, match="does not fit f16"):
        with Artefact(target, "tgz", 1) as art:
            art.add_tensor("ok", torch.ones(3))
            art.add_tensor("bad", torch.tensor([1.0, 1e30], dtype=torch.bfloat16), bf16_as="f16")
    assert list(tmp_path.iterdir()) == []


def test_long_member_names_survive(tmp_path):
    label = "/".join(["segment_" + "x" * 60] * 4)
    with Artefact(tmp_path / "m.tgz", "tgz", 1) as art:
        art.add_tensor(label, torch.arange(3, dtype=torch.int64))
    members = member_bytes(str(tmp_path / "m.tgz"))
    assert list(members) == [label + ".dat"]
    assert _native.dat_decode(members[label + ".dat"]).array().tolist() == [0, 1, 2]


def test_gil_released_while_a_tensor_is_encoded_and_compressed(tmp_path):
    """add_tensor (encode + parallel gzip) runs without the GIL."""
    weights = torch.randn(8 << 20)  # 32 MiB of f32, compressed at level 6
    with Artefact(tmp_path / "m.nnef.tgz", "tgz", 6) as art:
        assert_gil_released(lambda: art.add_tensor("w", weights))


# --- size guarantees of the gzip encoder -------------------------------------------------


@pytest.mark.parametrize("level", range(10))
def test_tgz_is_never_larger_than_the_tar_plus_block_headers(tmp_path, level):
    # Incompressible bytes: every chunk falls back to stored blocks.
    rng = np.random.default_rng(level)
    noise = torch.from_numpy(rng.integers(0, 256, 3_000_000, dtype=np.uint8))
    sizes = {}
    for fmt, lvl in (("tar", 0), ("tgz", level)):
        with Artefact(tmp_path / f"n.{fmt}", fmt, lvl) as art:
            art.add_file("graph.nnef", GRAPH)
            art.add_tensor("noise", noise)
        sizes[fmt] = Path(art.path).stat().st_size
    # Stored blocks hold up to 65535 bytes, within each 1 MiB chunk; 18 = gzip header + trailer.
    full, rest = divmod(sizes["tar"], 1 << 20)
    blocks = full * -(-(1 << 20) // 65535) + max(1, -(-rest // 65535))
    assert sizes["tgz"] <= sizes["tar"] + 5 * blocks + 18
    assert tarfile.open(tmp_path / "n.tgz").extractfile("noise.dat").read()[128:] == noise.numpy().tobytes()


@pytest.mark.parametrize("level", [1, 2, 3, 6])
def test_float_weights_are_no_larger_than_python_zlib_at_the_same_level(tmp_path, level):
    """What torch_to_nnef writes (Python tarfile over zlib), on weight-like floats: ISA-L
    for levels 1-3, zlib-rs above."""
    weights = torch.from_numpy(np.random.default_rng(3).standard_normal(1_500_000).astype(np.float32) * 0.02)
    with Artefact(tmp_path / "w.tgz", "tgz", level) as art:
        art.add_file("graph.nnef", GRAPH)
        art.add_tensor("w", weights)
    with Artefact(tmp_path / "w.tar", "tar", 0) as art:
        art.add_file("graph.nnef", GRAPH)
        art.add_tensor("w", weights)
    reference = zlib.compressobj(level, zlib.DEFLATED, -15)
    tar_bytes = (tmp_path / "w.tar").read_bytes()
    python_size = len(reference.compress(tar_bytes) + reference.flush()) + 18
    assert (tmp_path / "w.tgz").stat().st_size <= python_size


# --- failures leave nothing behind ---------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (root and mount(8) needed; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to simulate a full disk: {proc.stderr.strip() or 'mount failed'}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("fmt", ["dir", "tar", "tgz"])
def test_full_disk_leaves_nothing_and_keeps_the_existing_target(small_tmpfs, fmt):
    target = small_tmpfs / ("m.nnef" if fmt == "dir" else f"m.nnef.{fmt}")
    if fmt != "dir":
        target.write_bytes(b"previous artefact")
    weights = torch.from_numpy(np.random.default_rng(0).standard_normal(600_000).astype(np.float32))
    with pytest.raises(T2NErrorArtefactIO) as err:
        with Artefact(target, fmt, 1 if fmt == "tgz" else 0) as art:
            art.add_file("graph.nnef", GRAPH)
            art.add_tensor("w", weights)
    assert err.value.errno == 28  # ENOSPC, named by the OSError-compatible exception
    assert "No space left on device" in str(err.value)
    left = sorted(p.name for p in small_tmpfs.iterdir())
    assert left == ([] if fmt == "dir" else [target.name])
    if fmt != "dir":
        assert target.read_bytes() == b"previous artefact"


# A full disk without privileges: the exports run in a child whose files may not grow past
# 256 KiB (RLIMIT_FSIZE; SIGXFSZ ignored, so a write past it fails with EFBIG instead of
# killing the process). The child runs every case (one torch import) and reports, per
# case, what it raised as JSON.
LIMITED_EXPORTS = """
import json, resource, signal, sys, numpy as np, torch
from fastnnef.artefact import Artefact
from fastnnef.exceptions import T2NError
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF

def run(target, fmt, how):
    if how == "sink":
        weights = torch.from_numpy(np.random.default_rng(0).standard_normal(600_000).astype(np.float32))
        with Artefact(target, fmt, 1 if fmt == "tgz" else 0) as art:
            art.add_file("graph.nnef", "version 1.0;")
            art.add_tensor("w", weights)
    else:
        export_model_to_nnef(torch.nn.Linear(600, 1000), torch.randn(1, 600), target,
                             TractNNEF(TractNNEF.latest_version(), check_io=False),
                             compression_level={"dir": None, "tar": 0, "tgz": 1}[fmt])

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
report = {}
for key, (target, fmt, how) in json.loads(sys.argv[1]).items():
    try:
        run(target, fmt, how)
        report[key] = None
    except BaseException as err:
        report[key] = {"type": type(err).__name__, "t2n": isinstance(err, T2NError),
                       "errno": getattr(err, "errno", None), "message": str(err)}
print(json.dumps(report))
"""
FULL_DISK_CASES = [(fmt, how) for fmt in ("dir", "tar", "tgz") for how in ("sink", "export")]


def _previous_target(out: Path, fmt: str) -> Path:
    return out / ("m.nnef" if fmt == "dir" else f"m.nnef.{fmt}")


@pytest.fixture(scope="module")
def size_limited_exports(tmp_path_factory):
    """{(fmt, how): (destination directory, what the export raised)}."""
    import json

    root = tmp_path_factory.mktemp("size_limited")
    jobs = {}
    for fmt, how in FULL_DISK_CASES:
        out = root / f"{fmt}-{how}"
        out.mkdir()
        if fmt != "dir":
            _previous_target(out, fmt).write_bytes(b"previous artefact")
        name = "m.nnef" if fmt == "dir" or how == "export" else f"m.nnef.{fmt}"
        jobs[f"{fmt}-{how}"] = (str(out / name), fmt, how)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python")}
    proc = subprocess.run([sys.executable, "-c", LIMITED_EXPORTS, json.dumps(jobs)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    raised = json.loads(proc.stdout.strip().splitlines()[-1])
    return {(fmt, how): (root / f"{fmt}-{how}", raised[f"{fmt}-{how}"]) for fmt, how in FULL_DISK_CASES}


@pytest.mark.parametrize(("fmt", "how"), FULL_DISK_CASES)
def test_file_size_limit_leaves_nothing_and_keeps_the_existing_target(size_limited_exports, fmt, how):
    """The unprivileged full disk, for the sink and a whole export: a clear fastnnef
    error naming the path and the cause, nothing partial in the destination, a previous
    artefact under the target name intact."""
    import errno

    out, raised = size_limited_exports[(fmt, how)]
    assert raised is not None, "the export succeeded past the file size limit"
    assert raised["t2n"] and raised["type"] == "T2NErrorArtefactIO", raised
    assert raised["errno"] == errno.EFBIG, raised
    assert os.strerror(errno.EFBIG) in raised["message"] and str(out) in raised["message"], raised
    left = sorted(p.name for p in out.iterdir())
    previous = _previous_target(out, fmt)
    assert left == ([] if fmt == "dir" else [previous.name]), left
    if fmt != "dir":
        assert previous.read_bytes() == b"previous artefact"


KILLED_EXPORT = """
import sys, numpy as np, torch
from fastnnef.artefact import Artefact
target, fmt = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
with Artefact(target, fmt, 6 if fmt == "tgz" else 0) as art:
    art.add_file("graph.nnef", "version 1.0;")
    print("started", flush=True)
    for i in range(10_000):  # far more than the test waits for
        art.add_tensor(f"w{i}", torch.from_numpy(rng.standard_normal(1 << 20).astype(np.float32)))
"""


@pytest.mark.parametrize("fmt", ["dir", "tar", "tgz"])
def test_killed_export_leaves_no_file_under_the_target_name(tmp_path, fmt):
    target = tmp_path / ("m.nnef" if fmt == "dir" else f"m.nnef.{fmt}")
    if fmt != "dir":
        target.write_bytes(b"previous artefact")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python")}
    with subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, str(target), fmt], stdout=subprocess.PIPE,
                          env=env) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
        time.sleep(1.0)  # mid-stream
        proc.kill()
    names = sorted(p.name for p in tmp_path.iterdir())
    if fmt == "dir":
        # A directory is built under a temporary name; the next export to it removes it.
        assert [n for n in names if not n.startswith(".m.nnef.tmp-")] == []
        with Artefact(target, "dir") as art:
            art.add_file("graph.nnef", GRAPH)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nnef"]
    else:
        # An unnamed O_TMPFILE archive: nothing at all is left.
        assert names == [target.name]
        assert target.read_bytes() == b"previous artefact"
