"""The owner of the settings: one reader of config.toml for a running rltray.

Why an owner instead of ``config.load_config`` at every use: a typo in the
file then failed each reader on its own, and a failure swallowed in one of
them (the notification path) silently stopped every rating question, while
``rltray status`` refused to print anything. Here the file is re-read when it
changes on disk; a file that does not validate keeps the last valid copy in
effect and is reported once (the tray's attention line, ``status``,
``doctor``), so capture, notifications and status go on while the user fixes
it. Training is the exception: it does not start while the file is broken,
because the user's next intent is in the broken part (``autotrain``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rltray.app.config import Config
    from rltray.app.paths import Paths

log = logging.getLogger(__name__)

Stamp = tuple[int, int, int] | None  # (mtime_ns, size, inode) of config.toml; None: no file


class Settings:
    """config.toml as the running rltray sees it: current, or the last valid copy."""

    def __init__(self, paths: Paths, on_problem: Callable[[str], None] | None = None) -> None:
        self._paths = paths
        self._on_problem = on_problem  # told once per new problem (the event log)
        self._lock = threading.Lock()
        self._stamp: Stamp | tuple[str] = ("never read",)
        self._current: Config | None = None
        self._problem: str | None = None

    def current(self) -> Config:
        """The settings in effect; never raises for a broken file (see ``problem``).

        Before any valid read (a file broken from the start) that is the defaults.
        """
        self.refresh()
        if self._current is None:
            from rltray.app.config import Config

            self._current = Config()
        return self._current

    @property
    def problem(self) -> str | None:
        """Why config.toml is not in effect (one sentence, with the line), None when it is."""
        self.refresh()
        return self._problem

    def refresh(self) -> bool:
        """Re-read config.toml if it changed since the last read; whether it did."""
        stamp = self._stamp_now()
        if stamp == self._stamp:
            return False
        from rltray.app import config  # pydantic: not on the CLI's import path

        broken = None
        with self._lock:
            if stamp == self._stamp:
                return False
            try:
                self._current = config.load_config(self._paths)
            except config.ConfigError as exc:
                broken = str(exc)
            else:
                self._problem = None
            self._stamp = stamp
        if broken is not None:  # outside the lock: the report writes the event log
            self._report(broken)
        return True

    def set(self, key: str, value: Any) -> Any:
        """Change one setting (validated, comments kept); returns its new value.

        A broken file is refused here with its own sentence: writing one key
        over it would either keep the break or drop what the user typed.
        """
        from rltray.app import config

        with self._lock:
            after = config.set_value(self._paths, key, value).get(key)
            self._stamp = ("written",)  # re-read on the next use
        return after

    def save_many(
        self,
        values: Mapping[str, Any],
        *,
        all_or_nothing: bool = False,
        refuse: Callable[[str, Any], str | None] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        """Set each key; returns (errors by key, keys changed).

        ``all_or_nothing`` puts the old values back when any key is refused, so
        a refused request changes nothing; otherwise the valid keys are kept
        (a form with one bad field saves the rest). ``refuse(key, value)``: a
        face's own rule (the web may not set a program path), a sentence or None.
        """
        from rltray.app import config

        known = {s.key for s in config.describe()}
        errors: dict[str, str] = {}
        changed: list[str] = []
        snapshot = config.load_config(self._paths)
        try:
            self._set_each(values, refuse, known, snapshot, errors, changed)
        except BaseException:  # an unexpected failure must not leave half of a request saved
            if all_or_nothing and changed:
                self._put_back(snapshot)
            raise
        if errors and all_or_nothing and changed:
            self._put_back(snapshot)
            changed = []
        return errors, changed

    def _put_back(self, snapshot: Any) -> None:
        """Write ``snapshot`` (the values before a request) over what the request saved."""
        from rltray.app import config

        with self._lock:
            config.save_config(self._paths, snapshot)
            self._stamp = ("written",)

    def _set_each(self, values: Mapping[str, Any], refuse: Any, known: set[str], snapshot: Any,
                  errors: dict[str, str], changed: list[str]) -> None:
        """The loop of :meth:`set_many`: fills ``errors`` and ``changed`` as it goes."""
        from rltray.app import config

        for key, value in values.items():
            if key not in known:
                errors[key] = f"There is no setting {key[:60]!r}."
                continue
            refused = refuse(key, value) if refuse is not None else None
            if refused:
                errors[key] = refused
                continue
            try:
                refused = config.refusal_on_set(key, value, snapshot.get(key))
                if refused:
                    errors[key] = refused
                    continue
                after = self.set(key, value)
            except config.ConfigError as exc:
                errors[key] = str(exc)
                continue
            if snapshot.get(key) != after:  # each key once: the snapshot holds its old value
                changed.append(key)

    def _report(self, problem: str) -> None:
        if problem == self._problem:
            return
        self._problem = problem
        log.warning("config.toml is not in effect: %s", problem)
        if self._on_problem is not None:
            try:
                self._on_problem(problem)
            except Exception:
                log.exception("reporting the settings problem failed")

    def _stamp_now(self) -> Stamp:
        try:
            st = self._paths.config.lstat()
        except FileNotFoundError:
            return None
        except OSError:
            return (-1, -1, -1)  # unreadable: let load_config say why
        return (st.st_mtime_ns, st.st_size, st.st_ino)
