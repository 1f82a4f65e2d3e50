"""The test environment's requirements, read from pyproject.toml (their one source).

    python scripts/requirements.py ranges            # every requirement of the test venv
    python scripts/requirements.py floors NAME...    # NAME==<its lower bound>, per NAME

``ranges`` is the library's dependencies plus its ``test``, ``llm`` and ``nemo`` extras: what
``scripts/test.sh --latest`` upgrades to the newest allowed releases, and what
``requirements/test.lock`` pins. ``floors`` gives the oldest release each named package's
range allows (``scripts/test.sh --oldest`` tests transformers there).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRAS = ("test", "llm", "nemo")


def ranges() -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    found = list(project["dependencies"])
    for extra in EXTRAS:
        found += project["optional-dependencies"][extra]
    return sorted(set(found), key=str.lower)


def floors(names: list[str]) -> list[str]:
    pins = []
    for name in names:
        bounds = [m.group(1) for r in ranges() if re.match(rf"{re.escape(name)}\s*[<>=!~]", r, re.I)
                  for m in [re.search(r">=\s*([0-9][^,;\s]*)", r)] if m]
        if not bounds:
            sys.exit(f"requirements.py: no lower bound for {name!r} in {PYPROJECT}")
        pins.append(f"{name}=={max(bounds, key=lambda v: tuple(int(x) for x in re.findall(r'[0-9]+', v)))}")
    return pins


if __name__ == "__main__":
    command, *args = sys.argv[1:] or ["ranges"]
    print("\n".join(ranges() if command == "ranges" else floors(args)))
