"""Drop-in: torch_to_nnef's ``collect_env``, the environment (OS, compiler, Python,
packages) described for a bug report, and ``dump_environment_versions`` that writes it to
a ``versions`` file.

Unlike the reference, nothing here runs a shell: commands are argument lists, the package
versions come from ``importlib.metadata`` (no ``pip list | grep``), and a missing tool
reads as ``None``. fastnnef's own debug bundles describe their environment in
``check.py``.
"""

from __future__ import annotations

import getpass
import locale
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

# Packages whose versions a report lists (the reference's `grep "torch\|nnef\|numpy"`).
_REPORTED_PACKAGES = re.compile(r"torch|nnef|numpy", re.IGNORECASE)


def run_lambda(command: str | Sequence[str]) -> tuple[int, str, str]:
    """Run ``command`` (an argument list, or a string split on spaces; no shell) and return
    (return code, stdout, stderr), stripped. A program that is not installed: code 127."""
    args = command.split() if isinstance(command, str) else list(command)
    try:
        done = subprocess.run(args, capture_output=True, check=False)
    except OSError as err:
        return 127, "", str(err)
    enc = locale.getpreferredencoding(False)
    return done.returncode, done.stdout.decode(enc, "replace").strip(), done.stderr.decode(enc, "replace").strip()


def run_and_read_all(command: str | Sequence[str]) -> str | None:
    """The output of ``command``, or None when it fails."""
    rc, out, _ = run_lambda(command)
    return out if rc == 0 else None


def run_and_parse_first_match(command: str | Sequence[str], regex: str) -> str | None:
    """The first group of ``regex``'s first match in the output of ``command``, or None."""
    out = run_and_read_all(command)
    match = re.search(regex, out) if out is not None else None
    return match.group(1) if match else None


def python_version() -> str:
    """The Python version on one line, with the runtime's bitness."""
    return f"{sys.version.replace(chr(10), ' ')} ({sys.maxsize.bit_length() + 1}-bit runtime)"


def get_platform() -> str:
    """``linux``, ``win32``, ``cygwin``, ``darwin``, or ``sys.platform``."""
    for name in ("linux", "win32", "cygwin", "darwin"):
        if sys.platform.startswith(name):
            return name
    return sys.platform


def check_release_file() -> str | None:
    """PRETTY_NAME of /etc/os-release (Linux distributions)."""
    try:
        text = Path("/etc/os-release").read_text(encoding="utf8")
    except OSError:
        return None
    match = re.search(r'^PRETTY_NAME="?(.*?)"?$', text, re.MULTILINE)
    return match.group(1) if match else None


def get_mac_version() -> str | None:
    """The macOS version (``14.5``), or None elsewhere."""
    return platform.mac_ver()[0] or None


def get_windows_version() -> str | None:
    """The Windows edition and version, or None elsewhere."""
    return f"Windows {platform.release()} {platform.version()}" if get_platform() == "win32" else None


def get_lsb_version() -> str | None:
    """``lsb_release``'s description (``Ubuntu 22.04.4 LTS``), or None without it."""
    return run_and_parse_first_match(["lsb_release", "-a"], r"Description:\t(.*)")


def get_hostname() -> str:
    return platform.node()


def get_user() -> str:
    """The login name, or "" when the system has none for this process (containers)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def get_uname() -> str:
    """``uname -a``'s fields, from ``platform.uname``."""
    return " ".join(platform.uname())


def get_os() -> str:
    """The OS on one line: distribution or version, and machine."""
    name = get_platform()
    if name in ("win32", "cygwin"):
        return get_windows_version() or name
    if name == "darwin":
        version = get_mac_version()
        return f"macOS {version} ({platform.machine()})" if version else "macOS unknown version"
    if name == "linux":
        return f"{get_lsb_version() or check_release_file() or name} ({platform.machine()})"
    return name


def get_pip_packages() -> tuple[str, str | None]:
    """("pip3", the installed torch, nnef and numpy packages as ``name==version`` lines)."""
    found = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                    if d.metadata["Name"] and _REPORTED_PACKAGES.search(d.metadata["Name"])})
    return "pip3", "\n".join(found) or None


def get_gcc_version() -> str | None:
    """``gcc --version``'s version, or None without gcc."""
    return run_and_parse_first_match(["gcc", "--version"], r"gcc (.*)")


def dump_environment_versions(pathdir: Path, tract_path: Path) -> None:
    """Write the environment (the tract binary used, OS, compiler, Python, packages) to
    ``pathdir / "versions"``."""
    _, packages = get_pip_packages()
    lines = [f"tract: {Path(tract_path).absolute()}", "", f"os: {get_os()}", f"GCC version: {get_gcc_version()}",
             f"python: {python_version()}", f"python_platform: {platform.platform()}", ""]
    if packages is None:
        lines.append("no package versions found")
    else:
        lines += ["Related python packages:", *packages.splitlines()]
    (Path(pathdir) / "versions").write_text("\n".join(lines) + "\n", encoding="utf8")
