"""Claude Code's opt-in lessons file, for setups where hook context never reaches the model.

The SessionStart hook is how lessons normally reach a session. Where hooks cannot add
context (hooks turned off by policy, a front end that skips them), the user can ask for
a file instead: ``rltray hooks install --lessons-file`` writes rltray's own
``rules/rltray-lessons.md`` in Claude Code's config folder (``~/.claude`` or
``$CLAUDE_CONFIG_DIR``). Claude Code reads every ``*.md`` in that folder at session start
as the user's instructions for all projects (verified with the pinned program:
tests/agents/test_real_lessons.py), so the file holds the lessons for any folder
(``lessonfiles``' global text), never a project's own.

It is rltray's file, beside the user's, never one of theirs: ``refresh`` rewrites it when
the lessons change (the service calls it after writing them) only while it still holds
exactly what rltray last wrote (the install manifest keeps that hash), so once the user
edits it, it is theirs and rltray leaves it alone; deleting it ends the opt-in (only while
its config folder is there: a folder on a drive not mounted now deleted nothing). The files
refreshed are those the manifest records, wherever ``$CLAUDE_CONFIG_DIR`` pointed when
they were installed: the tray refreshing them may not have that variable.
``rltray hooks uninstall`` removes it unless edited (``managed.Editor``). Codex has no
such folder: its own instructions files are the user's (``AGENTS.md``), never written.
"""

from __future__ import annotations

from pathlib import Path

from rltray.app import fileio
from rltray.app.hooks import lessonfiles
from rltray.app.hooks.base import InstallReport
from rltray.app.hooks.managed import Editor, Manifest, read_config, sha256
from rltray.app.paths import Paths

AGENT = "claude-code"  # whose lessons, and whose name the install manifest records
NAME = "rltray-lessons.md"
MARKER = b"Written by rltray"
HEADER = (
    b"<!-- Written by rltray from your ratings (`rltray hooks install --lessons-file`): the "
    b"lessons for every folder. rltray rewrites this file when they change and stops once you "
    b"edit it; `rltray hooks uninstall` removes it. -->\n"
)


def path(config_home: Path) -> Path:
    """The file in Claude Code's config folder ``config_home``."""
    return config_home / "rules" / NAME


def content(paths: Paths) -> bytes:
    """The file's bytes: the header, then the global lessons text (none yet: the header only)."""
    text = lessonfiles.read(str(paths.home), AGENT, None)
    return HEADER + (text.encode("utf-8") + b"\n" if text else b"")


def install(config_home: Path, paths: Paths) -> InstallReport:
    """Write the file the first time; afterwards as ``refresh`` does (never over the user's)."""
    report = InstallReport(AGENT)
    state = read_config(path(config_home))  # refuses a link or a non-regular file
    entry = Manifest(paths).get(state.path)
    if state.existed and entry is not None:
        if entry.get("written_sha256") != sha256(state.data):
            report.lines.append(f"You edited {state.path}, so it is yours now: rltray leaves "
                                "it as it is (delete it and install again to have rltray "
                                "write it).")
        elif _rewrite(paths, state.path, content(paths)):
            report.changed.append(state.path)
            report.lines.append(f"Updated the lessons in {state.path}.")
        return report
    if Editor(paths, AGENT).install_file(state.path, content(paths), report, marker=MARKER):
        has = lessonfiles.read(str(paths.home), AGENT, None) is not None
        report.lines.append(
            f"Wrote the lessons for every folder to {state.path}; Claude Code reads it at "
            "session start." if has else
            f"Wrote {state.path}; it holds no lessons yet, and rltray fills it in when there "
            "are some."
        )
    return report


def refresh(config_home: Path, paths: Paths) -> bool:
    """Rewrite the file with the current lessons if the user asked for it and has not edited
    it since rltray's last write; whether it changed (``ClaudeCode.refresh_lessons_file``).

    Every such file the install manifest records, and the one in ``config_home``: the
    config folder is where the installing shell's ``CLAUDE_CONFIG_DIR`` pointed, and the
    process refreshing (the tray started at login, a desktop launcher) may not have that
    variable; computing the path there skipped the file Claude Code reads, so a deleted
    lesson stayed in it as the user's instruction.
    """
    changed = False
    for target in _targets(config_home, paths):
        changed = _refresh_one(target, paths) or changed
    return changed


def _targets(config_home: Path, paths: Paths) -> list[Path]:
    """The rules files rltray wrote (the manifest's, by their name and folder), and this
    process's own config folder's, once each."""
    found = [path(config_home)]
    for name, entry in Manifest(paths).load().items():
        where = Path(name)
        if (isinstance(entry, dict) and entry.get("agent") == AGENT and where.name == NAME
                and where.parent.name == "rules" and where not in found):  # fmt: skip
            found.append(where)
    return found


def _refresh_one(target: Path, paths: Paths) -> bool:
    manifest = Manifest(paths)
    try:
        state = read_config(target)
    except OSError:  # HookInstallError (a link, not a regular file) is one
        return False
    entry = manifest.get(state.path)
    if entry is None:
        return False  # never asked for
    if not state.existed:
        if state.path.parent.parent.is_dir():  # the user deleted it: that ends the opt-in
            manifest.put(state.path, None)
        # else its config folder is not there now (a drive not mounted, a home folder on a
        # network share that is down): nothing was deleted, it is refreshed once it is back
        return False
    if entry.get("written_sha256") != sha256(state.data):
        return False  # edited: the user's now
    return _rewrite(paths, state.path, content(paths))


def _rewrite(paths: Paths, target: Path, data: bytes) -> bool:
    """Replace rltray's own file (no backup: every version of it is rltray's) and record it."""
    manifest = Manifest(paths)
    entry = manifest.get(target)
    state = read_config(target)
    if entry is None or state.data == data:
        return False
    fileio.write_private_atomic(state.path, data)
    manifest.put(state.path, {**entry, "written_sha256": sha256(data)})
    return True


def uninstall(config_home: Path, paths: Paths, report: InstallReport) -> None:
    """Remove the file when rltray wrote it and nobody edited it since; say so otherwise.
    Nothing at all (not even a line) when there is no such file and none on record."""
    target = read_config(path(config_home)).path
    if target.exists() or Manifest(paths).get(target) is not None:
        Editor(paths, AGENT).uninstall_file(target, report, marker=MARKER)
