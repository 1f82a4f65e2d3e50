"""Benches cannot rot: every Python bench runs with ``--smoke`` (its smallest workload, the
same code path) in a fresh interpreter, as a user would run it, and must exit 0, print its
result line, and leave nothing in its temporary directory.

The runs are started together for the whole module, two at a time (most of their time is
importing torch in child processes), and each test waits for its own."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ROOT / "benches"

# Per bench: what its result line looks like in a smoke run. Heaviest first: the runs start
# in this order, two at a time, so that the longest do not start last.
RESULT_LINES = {
    "bench_llm_memory_scale.py": r"^\S+ q4_0: \d+\.\d+ s wall, peak RssAnon \d+ MiB, peak VmHWM \d+ MiB$",
    "bench_llm_vs_torch_to_nnef.py": r"^\s+fastnnef-llm:\s+\d+\.\d+ s wall, peak RSS\s+\d+ MiB",
    "bench_llm_vs_llamacpp.py": r"^fastnnef-f16\s+\d+\.\d+ s\s+\d+\.\d+\s+\d+ MiB\s+[+-]\d+\s+\d+ MiB\s+[+-]\d+",
    "bench_llm_artefact_speed.py": r"^\| llama \| f32 \| fastnnef \| \d+\.\d+ \| \d+\.\d+ \| \d+\.\d \(\d+\.\d\) \|",
    # Where no CUDA driver is, the CUDA row is a skip with its reason; the CPU row runs.
    "bench_llm_gpu.py": r'^\{"family": "mixtral", "form": "q4_0", "runtime": "cpu", "side": "fastnnef", "load_s": ',
    "bench_llm_state_space_speed.py": r"^\| mamba2 \| \d+\.\d \(\d+\.\d\) \| \d+\.\d \(\d+\.\d\) \| \d+\.\d\d \|",
    "bench_multimodal.py": r"^\| 0\.00 GB \| fastnnef-multimodal -nv \| \d+\.\d+ \|",
    "bench_llm_moe_memory.py": r"startup \d+ MiB, peak \d+ MiB, above startup -?\d+ MiB, export \d+\.\d+ s$",
    "bench_llm_capture.py": r"^\s+4 by-layer\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+$",
    "bench_vs_reference.py": r"^\s*\d+\.\d+GB dir\s+fastnnef stream\s+\d+\.\d+\s+\d+",
    "bench_vs_torch_to_nnef.py": r"^mlp 8x32 \(0 MB\)\s+tgz\s+\S+\s+\d+\.\d+",
    "bench_moe_ffn.py": r"^tract_moe_ffn\s+\d+\.\d+\s+\d+\s+\d+\.\d+$",
    "bench_moe_ffn_layout.py": r"^q4_0\s+4\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+canonical \S+, linear\+0 \S+$",
    "bench_peft.py": r"^\| fastnnef-peft \| \d+\.\d+ \|",
    "bench_front_ends.py": r"^attn2\s+ratio export/jit: wall \d+\.\d+, CPU \d+\.\d+ \(target <= 1\.30\)$",
    "bench_graph_build.py": r"^\s+2\s+\d+\s+\d+\.\d+\s+\d+\.\d+",
    "bench_tensors.py": r"^artefact tgz level 1\s+\d+\.\d+ s\s+\d+ MB/s",
    "check_io.py": r"^check_io median/min s: \d+\.\d+ \d+\.\d+$",
    "check_gpu_export.py": r"^\S+ \(.+\): 2 models exported, checked, left on their device$",
    "deflate_encoders.py": r"^python zlib level1\s+\d+\.\d+ MB/s",
}
TIMEOUT_S = 300


def run_smoke(bench: str, tmp: Path, torch_cache: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")])),
        "TMPDIR": str(tmp),  # where the bench's temporary files go: checked empty afterwards
        # Importing transformers' MoE layers creates torch's per-user cache dir under TMPDIR.
        "TORCHINDUCTOR_CACHE_DIR": str(torch_cache),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, str(BENCHES / bench), "--smoke"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def smoke_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Path, Future[subprocess.CompletedProcess[str]]]]]:
    """bench -> (its TMPDIR, its run), started for the benches selected in this session."""
    selected = {
        item.callspec.params["bench"] for item in request.session.items
        if "smoke_runs" in getattr(item, "fixturenames", ()) and hasattr(item, "callspec")
    }
    torch_cache = tmp_path_factory.mktemp("torchinductor")
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {}
        for bench in (b for b in RESULT_LINES if b in selected):
            tmp = tmp_path_factory.mktemp(bench.removesuffix(".py"))
            runs[bench] = (tmp, pool.submit(run_smoke, bench, tmp, torch_cache))
        yield runs


def test_every_bench_has_a_smoke_check() -> None:
    assert sorted(p.name for p in BENCHES.glob("*.py")) == sorted(RESULT_LINES), (
        "add the new bench, with its result line, to RESULT_LINES"
    )


@pytest.mark.parametrize("bench", list(RESULT_LINES))
def test_docstring_states_smoke(bench: str) -> None:
    docstring = ast.get_docstring(ast.parse((BENCHES / bench).read_text())) or ""
    assert "--smoke" in docstring


@pytest.mark.parametrize("bench", list(RESULT_LINES))
def test_smoke_run(bench: str, smoke_runs: dict[str, tuple[Path, Future[subprocess.CompletedProcess[str]]]]) -> None:
    tmp, run = smoke_runs[bench]
    proc = run.result()
    assert proc.returncode == 0, f"{bench} --smoke failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert re.search(RESULT_LINES[bench], proc.stdout, re.MULTILINE), f"no result line in:\n{proc.stdout}"
    assert not list(tmp.iterdir()), f"{bench} --smoke left files behind: {sorted(tmp.iterdir())}"
