"""How rltray starts another Python: from a private folder, with the current folder off sys.path.

Why: ``python -m x`` and ``python -c ...`` put the current folder first on
``sys.path``, ahead of the standard library. A child started from wherever rltray
was started (a shared /tmp, a downloaded project) imported any ``venv.py``,
``platform.py`` or ``rltray/`` planted there, as the user (review 3, finding 2;
/tmp/review3-packaging/cwd_hijack.sh, trainerenv_cwd.sh). Two locks, both here:

* ``folder``: the child's current folder is one only the user writes (the data
  folder, else the home folder). This is what protects a child Python older than
  3.11, such as a system Python 3.10 a trainer environment is built from.
* ``PYTHONSAFEPATH=1`` (``environ``): Python 3.11+ leaves the current folder off
  ``sys.path``; older ones ignore it. Not ``-P`` for a Python of unknown version
  (3.10 refuses an unknown option), and not ``-I`` where rltray's own modules are
  needed: ``-I`` also drops PYTHONPATH, which the tests' frozen trainer copies use.
  ``-I`` goes only on children that need the standard library alone (venv, ensurepip).

``own_module`` runs one of rltray's modules with this very interpreter, whose version
is known: ``-P`` on 3.11+, and on 3.10 a one-line start that drops the current folder
from ``sys.path`` before anything is imported from it.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SAFE_PATH_ENV = "PYTHONSAFEPATH"
# Python 3.10 has no -P: drop sys.path[0] (the current folder, for -c) first, then run the
# module as -m would. ``sys`` and ``runpy`` come before the current folder is looked at.
_WITHOUT_CWD = (
    "import sys; del sys.path[0]; import runpy; "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


def environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``PYTHONSAFEPATH=1``."""
    env = dict(os.environ if base is None else base)
    env[SAFE_PATH_ENV] = "1"
    return env


def folder(env: Mapping[str, str] | None = None) -> str:
    """A folder only the user can write, to start a child Python in.

    The data folder (rltray makes it 0700) when it exists and is private, else the
    home folder when it is, else the file system's root, which only root can write.
    Never a fresh temporary folder: a long-lived child (the window) would keep it.
    """
    from rltray.app.paths import Paths

    given = dict(os.environ if env is None else env)
    home = given.get("HOME") or given.get("USERPROFILE")
    for candidate in (Paths.from_env(given).home, Path(home) if home else None):
        if candidate is not None and _private(candidate):
            return str(candidate)
    return os.path.abspath(os.sep)


def options(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``cwd`` and ``env`` keyword arguments of ``subprocess.run``/``Popen`` for a child
    Python: ``env`` (default: this process's) with PYTHONSAFEPATH, started in ``folder``."""
    return {"cwd": folder(env), "env": environ(env)}


def own_module(module: str, *args: str) -> list[str]:
    """The argv that runs ``python -m module args`` with this interpreter, the current
    folder kept off ``sys.path`` on every Python rltray supports."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module, *args]
    return [sys.executable, "-c", _WITHOUT_CWD, module, *args]


def _private(path: Path) -> bool:
    """An existing folder that belongs to this user and no group or other may write."""
    try:
        st = path.stat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if os.name == "nt":
        return True  # ACLs, not modes: a profile folder is the user's own
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
