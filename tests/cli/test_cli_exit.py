"""How a console script's process ends (``cli_exit.end_process``): its exit code, its
output flushed through a pipe, the exit handlers run, and a thread still working waited
for. Each runs in a child process: ending the process is the point."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


@pytest.mark.parametrize("code", [0, 2])
def test_the_exit_code_the_buffered_output_and_the_exit_handlers(code: int) -> None:
    child = run_child(f"""
        import atexit, sys
        from fastnnef.cli_exit import end_process
        atexit.register(lambda: print("exit handler ran"))
        print("summary", end=" ")  # left in stdout's buffer (a pipe)
        print("note", end="", file=sys.stderr)
        end_process({code})
    """)
    assert child.returncode == code, child.stderr
    assert child.stdout == "summary exit handler ran\n"
    assert child.stderr == "note"


def test_a_thread_still_working_is_waited_for() -> None:
    child = run_child("""
        import threading, time
        from fastnnef.cli_exit import end_process
        threading.Thread(target=lambda: (time.sleep(0.5), print("thread done", flush=True))).start()
        end_process(0)
    """)
    assert (child.returncode, child.stdout) == (0, "thread done\n"), child.stderr


def test_the_fastnnef_script_runs_the_demo_and_ends(tmp_path: Path) -> None:
    out = tmp_path / "kws.nnef.tgz"
    child = run_child(f"""
        import sys
        from fastnnef.cli import script
        sys.argv = ["fastnnef", "demo", "-o", {str(out)!r}]
        script()
    """)
    assert child.returncode == 0, child.stderr
    assert "checked in-process by tract" in child.stdout
    assert out.is_file()
