"""The bundle's entry point: the `rltray` command, plus the two ways the bundle runs itself.

* ``rltray -I -S <script> ARGS``: run ``script`` as a Python would. Hook
  commands normally start the faster ``rltray-hook`` (hook_main.py) this way;
  this executable answers the same argv when that one is missing.
* ``rltray window URL``: the settings window's own process (web/server.py).
* no arguments (a double click, the login item on macOS): ``rltray run``.
* anything else: the CLI (``rltray --selftest``, ``rltray doctor``...).

Nothing is imported before the branch is known, so a hook starts as fast as
the bootloader allows.
"""

import sys


def run_script(argv):
    """Execute ``argv[0]`` as ``__main__`` with ``sys.argv = argv`` (python's ``-I -S`` run)."""
    path = argv[0]
    sys.argv = list(argv)
    with open(path, "rb") as fh:
        code = compile(fh.read(), path, "exec")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
    return 0


def set_windows_app_id():
    """Toasts and the taskbar group under rltray's own name, not "python" (Windows only)."""
    try:
        import ctypes

        ctypes.windll.shell32.SetCurrentProcessExplicitAppUserModelID("dev.rltray.tray")
    except Exception:  # cosmetic: Windows then groups the toasts under the exe
        pass


def restore_library_path():
    """Give child programs the user's LD_LIBRARY_PATH, not the bundle's.

    PyInstaller's bootloader points LD_LIBRARY_PATH at the bundle's libraries
    for this process; inherited, it makes a trainer's Python, a browser or a
    chained notify program load our copies of libssl, libstdc++ or GTK. The
    loader read it already at start, so this process keeps its own libraries.
    """
    import os

    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    else:
        os.environ.pop("LD_LIBRARY_PATH", None)


def main():
    restore_library_path()
    args = sys.argv[1:]
    if len(args) > 2 and args[:2] == ["-I", "-S"]:
        return run_script(args[2:])
    if sys.platform == "win32":
        set_windows_app_id()
    if args[:1] == ["window"]:
        from rltray.web import window

        return window.main(args[1:])
    # macOS < 10.9 passed -psn_0_NNN to apps opened from Finder
    args = [a for a in args if not a.startswith("-psn_")] or ["run"]
    from rltray.app.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
