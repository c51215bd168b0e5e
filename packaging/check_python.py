"""Stop `make` before the venv step when its Python is too old for rltray, naming one to use.

Why: a stock Mac's ``python3`` is 3.9 (Xcode's command line tools); given it, the
venv step got as far as ``pip install -e .`` and ended in pip's "requires a
different Python: 3.9.6 not in '>=3.10'" (issue 23 item 8). The Makefile runs this
first with the very Python it was given, so it is written for any Python 3.7+.
"""

from __future__ import annotations

import sys

MINIMUM = (3, 10)  # pyproject.toml's requires-python
WHERE = {
    "darwin": "python.org's macOS installer or Homebrew (`brew install python@3.12`)",
    "win32": "python.org or `winget install Python.Python.3.12`",
}


def problem(version: tuple[int, ...], platform: str, python: str) -> str | None:
    """One sentence when ``version`` is below ``MINIMUM``, else None."""
    if tuple(version[:2]) >= MINIMUM:
        return None
    where = WHERE.get(platform, "your package manager (for example `apt install python3.11-venv`)")
    return (
        f"rltray needs Python {MINIMUM[0]}.{MINIMUM[1]} or newer, but {python} is "
        f"{version[0]}.{version[1]}; install one from {where}, then run "
        "`make run PYTHON=python3.12` (or that Python's path)."
    )


def main() -> int:
    said = problem(tuple(sys.version_info), sys.platform, sys.executable)
    if said:
        print(said, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
