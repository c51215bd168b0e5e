"""Claude Code: ``Stop`` and ``UserPromptSubmit`` command hooks in the user's settings.json.

User-level settings (``$CLAUDE_CONFIG_DIR/settings.json``, else
``~/.claude/settings.json``) are shared by the terminal app and Claude Code
Desktop, so one install covers both. Neither event takes a ``matcher``.
"""

from __future__ import annotations

from pathlib import Path

from rltray.app import jsonfile
from rltray.app.hooks import hooksjson
from rltray.app.hooks.base import (
    Agent,
    AgentStatus,
    InstallReport,
)
from rltray.app.hooks.managed import Editor, read_json_config
from rltray.app.paths import Paths

# Claude Code event name -> the hook program's event argument.
EVENTS = {"Stop": "claude-stop", "UserPromptSubmit": "claude-prompt"}


class ClaudeCode(Agent):
    name = "claude-code"
    display_name = "Claude Code"
    executable = "claude"

    def config_home(self) -> Path:
        override = self.env.get("CLAUDE_CONFIG_DIR")
        return Path(override).expanduser() if override else self.home_dir() / ".claude"

    def settings_file(self) -> Path:
        return self.config_home() / "settings.json"

    def install(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        if not self.detect():
            return self.not_found_report()
        state, doc = read_json_config(self.settings_file())
        new_doc = hooksjson.merge(doc, self.handlers(EVENTS, paths), state.path)
        if new_doc == doc:
            report.lines.append(f"Already installed in {state.path}; nothing changed.")
            return report
        pristine = hooksjson.strip(doc, state.path) is None
        Editor(paths, self.name).install(
            state,
            jsonfile.dumps_like(new_doc, state.data if state.existed else None),
            pristine=pristine,
            report=report,
        )
        verb = "Installed" if pristine else "Updated"
        report.lines.append(f"{verb} the Stop and UserPromptSubmit hooks in {state.path}.")
        if report.backups:
            report.lines.append(f"Backup of the previous file: {report.backups[-1]}")
        report.lines.append("Start a new Claude Code session (or run /hooks) so it picks them up.")
        return report

    def uninstall(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        state, doc = read_json_config(self.settings_file())
        stripped = hooksjson.strip(doc, state.path)
        new = None if stripped is None else jsonfile.dumps_like(stripped, state.data)
        Editor(paths, self.name).uninstall(state, new, report)
        return report

    def status(self, paths: Paths) -> AgentStatus:
        state, doc = read_json_config(self.settings_file())
        wanted = self.handlers(EVENTS, paths)
        pieces, stale = {}, False
        for event, handler in wanted.items():
            found = hooksjson.find(doc, event)
            pieces[event] = bool(found)
            stale = stale or any(h.get("command") != handler["command"] for h in found)
        notes = []
        disabled = doc.get("disableAllHooks") is True
        if disabled:
            notes.append(f'"disableAllHooks" is true in {state.path}: Claude Code runs no hooks.')
        if stale:
            notes.append(
                "A hook points at another Python or data folder; run `rltray hooks install` again."
            )
        if any(pieces.values()) and not all(pieces.values()):
            notes.append("Only part of the hooks is installed; run `rltray hooks install` again.")
        return AgentStatus(
            name=self.name,
            display_name=self.display_name,
            detected=self.detect(),
            installed=all(pieces.values()),
            pieces=pieces,
            config_files=[state.path],
            notes=notes,
            stale=stale,
            hooks_disabled=disabled,
        )
