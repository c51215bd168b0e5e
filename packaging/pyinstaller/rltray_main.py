"""The bundle's entry point: the `rltray` command, plus the two ways the bundle runs itself.

* ``rltray -I -S <script> ARGS``: run ``script`` as a Python would. Hook
  commands normally start the faster ``rltray-hook`` (hook_main.py) this way;
  this executable answers the same argv when that one is missing.
* ``rltray window`` (the URL on stdin): the settings window's own process (web/server.py).
* no arguments (a double click, the login item on macOS): ``rltray run``.
* anything else: the CLI (``rltray --selftest``, ``rltray doctor``...).

Nothing is imported before the branch is known, so a hook starts as fast as
the bootloader allows.
"""

import sys

# The hook executable's entry script (same folder): one copy of the -I -S runner and
# of the LD_LIBRARY_PATH repair for both executables.
from hook_main import restore_library_path, run_script


def set_windows_app_id():
    """Toasts and the taskbar group under rltray's own name, not "python" (Windows only)."""
    try:
        import ctypes

        ctypes.windll.shell32.SetCurrentProcessExplicitAppUserModelID("dev.rltray.tray")
    except Exception:  # cosmetic: Windows then groups the toasts under the exe
        pass


def main():
    restore_library_path()
    args = sys.argv[1:]
    if len(args) > 2 and args[:2] == ["-I", "-S"]:
        return run_script(args[2:])
    if sys.platform == "win32":
        set_windows_app_id()
    if args[:1] == ["window"]:
        from rltray.web import window

        return window.process_main(args[1:])
    # macOS < 10.9 passed -psn_0_NNN to apps opened from Finder
    args = [a for a in args if not a.startswith("-psn_")] or ["run"]
    from rltray.app.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
