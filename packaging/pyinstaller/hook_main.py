"""``rltray-hook -I -S capture.py ...``: the bundle's small interpreter for agent hooks.

Why a second executable: every agent turn waits for the hook, and the main
``rltray`` executable spends ~0.3 s before any code of ours runs (PyInstaller's
runtime hooks for GTK, GIO, multiprocessing, setuptools...). This one is built
from a stdlib-only analysis, so it starts in about the time a Python does. It
accepts exactly the argv a Python gets from a hook command
(``-I -S SCRIPT ARGS``) and runs SCRIPT as ``__main__``.
"""

import sys


def restore_library_path(platform=sys.platform, kernel32=None, add_dll_directory=None):
    """Give child programs the user's library search path, not the bundle's.

    PyInstaller's bootloader points LD_LIBRARY_PATH at the bundle's libraries
    for this process; inherited, it makes a trainer's Python, a browser or a
    chained notify program load our copies of libssl, libstdc++ or GTK. The
    loader read it already at start, so this process keeps its own libraries.
    On Windows the bootloader calls ``SetDllDirectoryW(<bundle>)`` instead, which
    child processes inherit just the same (a trainer's torch would load our
    VC runtime or OpenSSL DLLs); ``SetDllDirectoryW(None)`` restores the standard
    search order. This process still finds the bundle's DLLs for the extension
    modules it imports later through ``os.add_dll_directory``, which no child
    inherits. ``kernel32`` and ``add_dll_directory`` are parameters so the Windows
    branch is tested anywhere.
    """
    import os

    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    else:
        os.environ.pop("LD_LIBRARY_PATH", None)
    if platform == "win32":
        if kernel32 is None:  # pragma: no cover - Windows only
            import ctypes

            kernel32 = ctypes.windll.kernel32
        bundle = getattr(sys, "_MEIPASS", None)
        if bundle:
            (add_dll_directory or os.add_dll_directory)(bundle)
        kernel32.SetDllDirectoryW(None)


def run_script(argv):
    """Execute ``argv[0]`` as ``__main__`` with ``sys.argv = argv`` (python's ``-I -S`` run)."""
    path = argv[0]
    sys.argv = list(argv)
    with open(path, "rb") as fh:
        code = compile(fh.read(), path, "exec")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
    return 0


def main():
    restore_library_path()
    args = sys.argv[1:]
    if len(args) < 3 or args[:2] != ["-I", "-S"]:
        print("usage: rltray-hook -I -S SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    return run_script(args[2:])


if __name__ == "__main__":
    sys.exit(main())
