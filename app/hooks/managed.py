"""Safe edits of agent config files: refuse, back up, write atomically, undo exactly.

Every agent installer goes through here so the guarantees are written once:

- a symlinked or non-regular config file is refused (never followed), and so is one
  that replacing would change behind the user's back: read-only, owned by another
  user, or hard-linked elsewhere (a new file in its place would split the link);
- a file that changed between our read and our write (the agent saved it meanwhile)
  is left as the agent wrote it and the command says to try again;
- the agent computes the new bytes from a parsed copy first, so a file that
  does not parse is refused before anything (not even a backup) is written;
- before a file changes, its current bytes are copied into ``Paths.backups``
  (timestamped, 0600), and the file is replaced atomically with its mode kept
  (new files 0600);
- a 0600 manifest (``install-manifest.json``) remembers, per config file, the
  backup of the bytes as they were before rltray and the sha256 of the bytes
  rltray wrote. Uninstall restores the original byte for byte when the file
  still holds exactly our bytes; if the user edited it since, only our entries
  are removed (the agent supplies that surgical version) and their edits stay.

Whole files that are rltray's own (Claude Code's ``/rl`` command, Codex's ``$rl`` skill)
go through ``install_file``/``uninstall_file``: never over a file of the user's, and the
folders created for them are removed again when they are empty.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rltray.app import fileio
from rltray.app.hooks import jsonfile
from rltray.app.hooks.base import HookInstallError, InstallReport
from rltray.app.paths import Paths, make_folders

MANIFEST_NAME = "install-manifest.json"

#: Backups kept per config file besides the originals the manifest restores from.
BACKUPS_KEPT = 10


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileState:
    """A config file as read once, without following links."""

    path: Path
    existed: bool
    data: bytes
    mode: int | None
    links: int = 1
    owner: int | None = None

    def refusal(self) -> str | None:
        """Why replacing this file would not be the edit the user expects, or None.

        Replacing writes a new inode: a hard link elsewhere would keep the old bytes, and
        the mode bits the user set to keep the file fixed would be ours to override.
        """
        if not self.existed:
            return None
        if self.mode is not None and not self.mode & stat.S_IWUSR:
            return (
                f"{self.path} is read-only; rltray leaves it alone. Make it writable "
                f"(chmod u+w) and try again, or edit it by hand."
            )
        if self.owner is not None and hasattr(os, "geteuid") and self.owner != os.geteuid():
            return (
                f"{self.path} belongs to another user; rltray leaves it alone. "
                "Edit it as that user, or by hand."
            )
        if self.links > 1:
            return (
                f"{self.path} has {self.links} hard links; replacing it would leave the "
                "other names with the old content, so rltray leaves it alone. Edit it by hand."
            )
        return None


def read_config(path: Path) -> FileState:
    """Read ``path`` (missing is fine); refuse symlinks and anything but a regular file."""
    path = Path(os.path.abspath(path))
    if path.is_symlink():
        raise HookInstallError(
            f"{path} is a symbolic link; rltray never edits files through links, "
            "so edit the file it points to by hand or replace the link with a regular file."
        )
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return FileState(path, False, b"", None)
    if not stat.S_ISREG(info.st_mode):
        raise HookInstallError(f"{path} is not a regular file; rltray leaves it alone.")
    try:
        data = fileio.read_regular_file(path)
    except OSError as exc:
        raise HookInstallError(f"rltray cannot read {path}: {exc.strerror or exc}.") from exc
    return FileState(
        path, True, data, stat.S_IMODE(info.st_mode), links=info.st_nlink, owner=info.st_uid
    )


def read_json_config(path: Path) -> tuple[FileState, dict[str, Any]]:
    """Read a JSON object config file safely; a parse error is one sentence naming it."""
    state = read_config(path)
    try:
        doc = jsonfile.parse_object(state.data, state.path)
    except jsonfile.JSONFileError as exc:
        raise HookInstallError(f"{exc} rltray left it unchanged; fix it and try again.") from exc
    return state, doc


class Manifest:
    """The install manifest: one entry per config file rltray changed."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.file = paths.backups / MANIFEST_NAME

    def load(self) -> dict[str, Any]:
        """All entries; an unreadable manifest counts as empty (uninstall then edits surgically)."""
        try:
            doc = json.loads(fileio.read_regular_file(self.file))
        except (OSError, ValueError):
            return {}
        files = doc.get("files") if isinstance(doc, dict) else None
        return files if isinstance(files, dict) else {}

    def get(self, path: Path) -> dict[str, Any] | None:
        entry = self.load().get(str(path))
        return entry if isinstance(entry, dict) else None

    def put(self, path: Path, entry: dict[str, Any] | None) -> None:
        files = self.load()
        if entry is None:
            files.pop(str(path), None)
        else:
            files[str(path)] = entry
        self.paths.ensure()
        data = json.dumps({"v": 1, "files": files}, indent=2, sort_keys=True) + "\n"
        fileio.write_private_atomic(self.file, data.encode("utf-8"), mode=0o600)


class Editor:
    """Applies one agent's planned edits to its config files with the guarantees above."""

    def __init__(self, paths: Paths, agent: str) -> None:
        self.paths = paths
        self.agent = agent
        self.manifest = Manifest(paths)

    def install(
        self,
        state: FileState,
        new: bytes,
        *,
        pristine: bool,
        report: InstallReport,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """Write ``new`` over ``state`` unless identical; returns whether the file changed.

        ``pristine``: the current file holds none of our entries, so its bytes are
        "the original" that uninstall restores. ``extra`` is stored in the manifest
        entry (e.g. the notify program rltray chained).
        """
        if state.existed and new == state.data:
            return False
        _refuse_unless_replaceable(state)
        entry = self.manifest.get(state.path)
        backup = self._backup(state)
        if backup is not None:
            report.backups.append(backup)
        if pristine or entry is None:
            entry = {
                "agent": self.agent,
                "existed": state.existed,
                "backup": str(backup) if backup else None,
                "original_sha256": sha256(state.data) if state.existed else None,
                "mode": state.mode,
                # Our entries were already there without a record of the
                # original: only a surgical uninstall is safe.
                "restorable": pristine,
            }
        elif entry.get("written_sha256") != sha256(state.data):
            entry["restorable"] = False  # user edits since our last write would be lost
        entry["written_sha256"] = sha256(new)
        entry["installed_at"] = _now().isoformat()
        entry.update(extra or {})
        self._write(state, new)
        self.manifest.put(state.path, entry)
        report.changed.append(state.path)
        return True

    def install_file(
        self, path: Path, data: bytes, report: InstallReport, *, marker: bytes
    ) -> bool:
        """Create or update ``path``, a file wholly rltray's; True when it changed.

        A file there already that lacks ``marker`` is the user's: left alone and said so.
        """
        state = read_config(path)
        if state.existed and marker not in state.data:
            report.lines.append(f"{state.path} is not rltray's; left it alone.")
            return False
        created, folder = [], state.path.parent
        while not folder.exists():
            created.append(str(folder))
            folder = folder.parent
        extra = {"created_dirs": created} if created else None
        return self.install(state, data, pristine=not state.existed, report=report, extra=extra)

    def uninstall_file(self, path: Path, report: InstallReport, *, marker: bytes) -> None:
        """Remove a file ``install_file`` wrote, unless someone changed it since."""
        state = read_config(path)
        entry = self.manifest.get(state.path)
        if not state.existed:
            report.lines.append(f"{state.path} does not exist; nothing to remove.")
        elif _untouched(entry, state):
            self._restore(state, entry, None, report)  # type: ignore[arg-type]
        elif entry is None and marker in state.data:  # written before the manifest knew it
            backup = self._backup(state)  # the user may have edited it since: keep a copy
            if backup is not None:
                report.backups.append(backup)
            os.unlink(state.path)
            report.changed.append(state.path)
            report.lines.append(f"Deleted {state.path} (rltray's; a copy is in {backup}).")
        else:
            report.lines.append(f"{state.path} changed since rltray wrote it; left it alone.")
        if entry is not None:
            self.manifest.put(state.path, None)

    def uninstall(self, state: FileState, stripped: bytes | None, report: InstallReport) -> None:
        """Undo our edit of one file.

        ``stripped`` is the current file without our entries (None when it holds
        none). Restores the recorded original byte for byte when the file still
        holds exactly what we wrote; otherwise writes ``stripped``.
        """
        entry = self.manifest.get(state.path)
        name = state.path
        if not state.existed:
            report.lines.append(f"{name} does not exist; nothing to remove.")
        elif _untouched(entry, state):
            self._restore(state, entry, stripped, report)
        elif stripped is not None and stripped != state.data:
            _refuse_unless_replaceable(state)
            backup = self._backup(state)
            if backup is not None:
                report.backups.append(backup)
            self._write(state, stripped)
            report.changed.append(name)
            if entry:
                report.lines.append(
                    f"{name} changed since rltray installed its hooks; removed only rltray's "
                    "entries and kept your edits."
                )
            else:
                report.lines.append(f"Removed rltray's entries from {name}.")
        else:
            report.lines.append(f"{name} holds no rltray entries; left unchanged.")
        if entry is not None:
            self.manifest.put(state.path, None)

    def _restore(
        self, state: FileState, entry: dict[str, Any], stripped: bytes | None, report: InstallReport
    ) -> None:
        name = state.path
        if not entry.get("existed"):
            os.unlink(name)
            report.changed.append(name)
            report.lines.append(f"Deleted {name} (rltray had created it).")
            for folder in entry.get("created_dirs") or ():  # deepest first, only when empty
                try:
                    os.rmdir(folder)
                except OSError:
                    break
            return
        original = None
        backup = entry.get("backup")
        if backup:
            try:
                original = fileio.read_regular_file(backup)
            except OSError:
                original = None
        if original is None or sha256(original) != entry.get("original_sha256"):
            if stripped is not None:
                self._write(state, stripped)
                report.changed.append(name)
            report.lines.append(
                f"The backup of {name} is missing or changed; removed only rltray's entries."
            )
            return
        mode = entry.get("mode")
        self._write(state, original, mode=mode if isinstance(mode, int) else None)
        report.changed.append(name)
        report.lines.append(f"Restored {name} exactly as it was before rltray.")

    def _backup(self, state: FileState) -> Path | None:
        """Copy the current bytes into Paths.backups (0600, never overwriting); None if no file."""
        if not state.existed:
            return None
        self.paths.ensure()
        stamp = _now().strftime("%Y%m%dT%H%M%S%fZ")
        base = f"{self.agent}-{state.path.name}-{stamp}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        for n in range(100):
            target = self.paths.backups / (base + (f"-{n}" if n else "") + ".bak")
            try:
                fd = os.open(target, flags, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as fh:
                fh.write(state.data)
                fh.flush()
                os.fsync(fh.fileno())
            self._prune_backups(f"{self.agent}-{state.path.name}-", keep=target)
            return target
        raise HookInstallError(
            f"rltray cannot create a backup of {state.path} in {self.paths.backups}."
        )

    def _prune_backups(self, prefix: str, keep: Path) -> None:
        """Drop this file's oldest backups past ``BACKUPS_KEPT``.

        Every install, update and uninstall makes one, so without this the folder grows
        for as long as rltray is used. The originals the manifest restores from are
        never dropped, nor is the one just made.
        """
        recorded = {str(e.get("backup")) for e in self.manifest.load().values()
                    if isinstance(e, dict)}
        try:
            names = sorted(n for n in os.listdir(self.paths.backups)
                           if n.startswith(prefix) and n.endswith(".bak"))
        except OSError:
            return
        others = [self.paths.backups / n for n in names]
        others = [p for p in others if str(p) not in recorded and p != keep]
        for old in others[: max(0, len(others) - (BACKUPS_KEPT - 1))]:
            with contextlib.suppress(OSError):
                old.unlink()

    def put_back(self, state: FileState, entry: dict[str, Any] | None) -> None:
        """Undo an :meth:`install` whose install went no further: the file as ``state``
        read it (gone again if it did not exist), the manifest entry as it was."""
        if state.existed:
            self._write(state, state.data, check=False)
        else:
            state.path.unlink(missing_ok=True)
        self.manifest.put(state.path, entry)

    def _write(
        self, state: FileState, data: bytes, mode: int | None = None, *, check: bool = True
    ) -> None:
        """Replace the file with ``data``, unless it is not ours to replace or changed.

        ``check``: the file must still hold what ``state`` read (no file if there was
        none), which narrows an agent's save racing ours to the instant before the
        rename. Off only when putting back our own write.
        """
        make_folders(state.path.parent, 0o700)
        if mode is None:
            mode = state.mode if state.mode is not None else 0o600
        if check:
            _refuse_unless_replaceable(state)
            if _current(state.path) != (state.data if state.existed else None):
                raise HookInstallError(
                    f"{state.path} changed while rltray was editing it (was the agent "
                    "saving it?); rltray left it as it is now. Try again."
                )
        try:
            fileio.write_private_atomic(state.path, data, mode=mode)
        except OSError as exc:
            reason = exc.strerror or exc
            raise HookInstallError(f"rltray cannot write {state.path}: {reason}.") from exc


def _refuse_unless_replaceable(state: FileState) -> None:
    refusal = state.refusal()
    if refusal is not None:
        raise HookInstallError(refusal)


def _current(path: Path) -> bytes | None:
    """The file's bytes now, None when there is none (an unreadable one reads as changed)."""
    try:
        return fileio.read_regular_file(path)
    except FileNotFoundError:
        return None
    except OSError:
        return b"\0unreadable"


def _untouched(entry: dict[str, Any] | None, state: FileState) -> bool:
    """The file holds exactly the bytes rltray wrote, and the original is on record."""
    return bool(
        entry and entry.get("restorable") and entry.get("written_sha256") == sha256(state.data)
    )


def _now() -> datetime:
    return datetime.now(timezone.utc)
