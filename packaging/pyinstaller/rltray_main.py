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


REPLACED = (
    "rltray was replaced on disk while it ran ({exe}), so it cannot load {name}; quit "
    "rltray (Quit rltray in its menu) and start it again, and next time quit it before "
    "replacing its folder"
)


class ReplacedGuard:
    """Fails an import with one sentence once this executable was replaced on disk.

    Why (review 3, finding 6): PyInstaller reads every later import from the executable
    by path, at the offsets of the build that started. Replacing the folder while the
    tray runs (tar -x over it) made its next menu item, settings page or command fail
    with a raw unmarshal or zlib error, or load the new build's bytes. A first finder on
    ``sys.meta_path`` compares the file's identity (device, inode, size, mtime) with the
    one at start before each module not loaded yet: one stat, only on a new import.
    """

    def __init__(self, exe):
        self.exe = exe
        self.seen = self.identity()

    def identity(self):
        import os

        try:
            st = os.stat(self.exe)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def find_spec(self, name, path=None, target=None):
        if self.identity() != self.seen:
            raise ImportError(REPLACED.format(exe=self.exe, name=name), name=name)
        return None  # the bundle's own finders answer


def main():
    restore_library_path()
    args = sys.argv[1:]
    if len(args) > 2 and args[:2] == ["-I", "-S"]:
        return run_script(args[2:])
    if getattr(sys, "frozen", False):  # the tray and the window import lazily for hours
        sys.meta_path.insert(0, ReplacedGuard(sys.executable))
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
