"""Where rltray keeps its state on each OS.

One switch moves everything: ``RLTRAY_HOME`` relocates the database, spool,
adapters, runs, config, locks and logs, so tests and benchmarks never touch a
user's real data. Without it, platformdirs picks the per-OS data folder.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rltray.app.errors import DataFolderNotWritable

ENV_HOME = "RLTRAY_HOME"
APP_NAME = "rltray"
#: The most a folder rltray makes on the way to one of its own may be (less the umask):
#: never writable by others, who could otherwise rename what is in it and put their own
#: in its place (a data folder with their settings, a login entry running their program).
PARENT_MODE = 0o755


class DataFolderNotSafe(DataFolderNotWritable):
    """The data folder belongs to another user or others can write it (ssh's StrictModes)."""


def default_home(env: dict[str, str] | None = None) -> Path:
    """The data folder: ``$RLTRAY_HOME`` if set, else platformdirs' user data dir."""
    env = os.environ if env is None else env
    override = env.get(ENV_HOME)
    if override:
        return Path(override).expanduser().absolute()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


@dataclass(frozen=True)
class Paths:
    """Every file and folder rltray writes, derived from one root."""

    home: Path

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Paths:
        return cls(default_home(env))

    @property
    def db(self) -> Path:
        return self.home / "rltray.db"

    @property
    def config(self) -> Path:
        return self.home / "config.toml"

    @property
    def spool(self) -> Path:
        return self.home / "spool"

    @property
    def spool_incoming(self) -> Path:
        return self.spool / "incoming"

    @property
    def spool_rejected(self) -> Path:
        return self.spool / "rejected"

    @property
    def hook_state(self) -> Path:
        """Per-session scratch the hook keeps between UserPromptSubmit and Stop."""
        return self.spool / "sessions"

    @property
    def adapters(self) -> Path:
        return self.home / "adapters"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def hook_log(self) -> Path:
        return self.logs / "hook.log"

    @property
    def backups(self) -> Path:
        """Copies of agent config files taken before rltray edits them."""
        return self.home / "backups"

    @property
    def answer_cache(self) -> Path:
        """The base model's greedy answers the trainer keeps between rounds
        (trainer/base_answers.py): answers to the user's own prompts, so they live in the
        private data folder, and deleting a turn empties it (``Service.delete_turns``)."""
        return self.home / "cache" / "base-answers"

    @property
    def lock(self) -> Path:
        return self.home / "rltray.lock"

    @property
    def launch_pages(self) -> Path:
        """0600 redirect pages that open the settings in a browser without a URL in argv.

        Made on demand by the window process (web/window.py), not by ``ensure``."""
        return self.home / "launch"

    @property
    def endpoint(self) -> Path:
        """Port and pid of the running tray's local API (0600)."""
        return self.home / "endpoint.json"

    def folders(self) -> tuple[Path, ...]:
        """Every folder rltray writes into, parents before children."""
        return (
            self.home,
            self.spool,
            self.spool_incoming,
            self.spool_rejected,
            self.hook_state,
            self.adapters,
            self.runs,
            self.logs,
            self.backups,
        )

    def ensure(self, access: Callable[[Path, int], bool] | None = None) -> Paths:
        """Create missing folders private to the user (0700) and check all are writable.

        A folder that exists keeps the mode the user gave it: rltray never
        changes permissions (``rltray doctor`` warns when others can read it). A data
        folder another user owns, or others can write, is refused (DataFolderNotSafe):
        rltray takes settings, and programs to run, from it. Missing parents are made
        at most 0755 (``make_folders``).
        Raises DataFolderNotWritable, one sentence naming the folder, instead of
        an OSError from deep inside a command. ``access`` defaults to
        ``os.access``; tests pass their own, because root may write anywhere.
        """
        access = access or os.access
        for folder in self.folders():
            if folder.is_dir():
                if folder == self.home:
                    why = not_yours(folder, "The data folder")
                    if why:
                        raise DataFolderNotSafe(why)
                if not access(folder, os.W_OK | os.X_OK):
                    raise DataFolderNotWritable(not_writable(folder, self.home))
                continue
            _create(folder, self.home, access)
        return self


def not_writable(folder: Path, home: Path) -> str:
    """The sentence for a folder rltray cannot write: what, where, and the two ways out."""
    try:
        mode = f" (mode {stat.S_IMODE(folder.stat().st_mode):04o})"
    except OSError:
        mode = ""
    what = "The data folder" if folder == home else "The folder"
    return (
        f"{what} {folder} is not writable{mode}; rltray needs to write there: "
        f"run `chmod u+w {folder}` or set {ENV_HOME} to another folder."
    )


def _create(folder: Path, home: Path, access: Callable[[Path, int], bool]) -> None:
    parent = folder.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.is_dir() and not access(parent, os.W_OK | os.X_OK):
        raise DataFolderNotWritable(not_writable(parent, home))
    try:
        if make_folders(folder, 0o700) and os.name == "posix":
            os.chmod(folder, 0o700)  # only a folder made just now: mkdir honours the umask
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise DataFolderNotWritable(
            f"The folder {folder} cannot be created ({reason}); rltray keeps its data there: "
            f"fix the path or set {ENV_HOME} to another folder."
        ) from None


def make_folders(folder: Path, mode: int = PARENT_MODE) -> bool:
    """Make ``folder`` (``mode`` less the umask) and its missing parents; True when
    ``folder`` itself was made now.

    ``Path.mkdir(parents=True)`` makes the parents 0777 less the umask: under umask 000
    any user may then swap what is in them (review2-sec swap_datafolder). Here each
    missing parent is made ``PARENT_MODE`` (0755) less the umask, never writable by others.
    """
    missing: list[Path] = []
    step = folder
    while not os.path.lexists(step) and step != step.parent:
        missing.append(step)
        step = step.parent
    made = False
    for step in reversed(missing):
        try:
            os.mkdir(step, mode if step == folder else PARENT_MODE)
            made = step == folder
        except FileExistsError:  # made meanwhile by another process: fine if a folder
            if not step.is_dir():
                raise
    return made


def not_yours(path: Path, what: str, st: os.stat_result | None = None) -> str | None:
    """Why rltray refuses ``path`` (ssh's StrictModes): it belongs to another user (root
    aside), or others can write it; the sentence says how to fix it. None when it is
    fine, or off POSIX (no owners to compare). ``st`` is its stat, if already taken."""
    if os.name != "posix":
        return None
    st = path.stat() if st is None else st
    me, mode = os.geteuid(), stat.S_IMODE(st.st_mode)
    user = _user_name(me)
    if st.st_uid not in (me, 0):
        chown = "chown -R" if stat.S_ISDIR(st.st_mode) else "chown"
        return (
            f"{what} {path} belongs to {_user_name(st.st_uid)}, not to you ({user}), so another "
            f"user may have put it there, and rltray runs programs its settings name: if it "
            f"is yours, run `sudo {chown} {user} {path}`; if not, move it aside "
            f"(`mv {path} {path}.suspect`) and look at what it holds."
        )
    if mode & 0o022:
        fix = "700" if stat.S_ISDIR(st.st_mode) else "600"
        return (
            f"{what} {path} can be changed by other users (mode {mode:04o}), who could put "
            f"their own settings, and programs to run, there: run `chmod {fix} {path}`."
        )
    return None


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"
