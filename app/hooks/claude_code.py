"""Claude Code: ``Stop``, ``UserPromptSubmit`` and ``SessionStart`` command hooks in the user's
settings.json.

User-level settings (``$CLAUDE_CONFIG_DIR/settings.json``, else
``~/.claude/settings.json``) are shared by the terminal app and Claude Code
Desktop, so one install covers both. None of these events takes a ``matcher``
(SessionStart without one runs on startup, resume, clear and compact alike: the
lessons rltray wrote for the folder become the session's context each time).

``/rl``: Claude Code answers an unknown slash command itself ("Unknown command: /rl")
before any hook runs, in ``-p`` and in the terminal UI. A user-level custom command
(``commands/rl.md``) makes ``/rl`` known; the typed ``/rl good`` then reaches the
UserPromptSubmit hook, which blocks it with the rating's sentence. A UserPromptExpansion
hook matched to ``rl`` (it fires when a typed slash command expands, before the model
sees it) is the second net. The command's body only reaches the model when no hook ran,
and then says so. Verified with the real program: tests/agents/.
"""

from __future__ import annotations

from pathlib import Path

from rltray.app.hooks import hooksjson, jsonfile, rulesfile, shellcommand
from rltray.app.hooks.base import (
    Agent,
    AgentStatus,
    InstallReport,
)
from rltray.app.hooks.managed import Editor, read_config, read_json_config
from rltray.app.paths import Paths

# Claude Code event name -> the hook program's event argument.
EVENTS = {"Stop": "claude-stop", "UserPromptSubmit": "claude-prompt",
          "UserPromptExpansion": "claude-expand", "SessionStart": "claude-start"}
MATCHERS = {"UserPromptExpansion": "rl"}  # only rltray's own command expands into our hook
COMMAND_MARKER = b"Installed by rltray"
COMMAND_FILE = (
    b"---\n"
    b"description: Rate Claude's last answer for rltray (good, bad, 1-5, undo, status) or "
    b"give it a lesson (lesson, lessons)\n"
    b"argument-hint: good|bad|1-5|undo|status|lesson|lessons [comment or lesson]\n"
    b"disable-model-invocation: true\n"
    b"---\n"
    b"<!-- Installed by rltray (`rltray hooks install`); `rltray hooks uninstall` removes it."
    b" -->\n"
    b"The user typed `/rl $ARGUMENTS`, an rltray command that rltray's hooks take "
    b"before it reaches you. You see it, so those hooks did not run and nothing was rated "
    b"or saved. Do nothing else and reply with exactly this line: rltray's hooks did not run, "
    b"so nothing was rated or saved; run `rltray doctor`.\n"
)


class ClaudeCode(Agent):
    name = "claude-code"
    display_name = "Claude Code"
    executable = "claude"
    verified = ("2.1.197", "2.1.197")  # tests/agents/ installs the newest from npm
    shell = shellcommand.BASH  # Git Bash on Windows

    def config_home(self) -> Path:
        override = self.env.get("CLAUDE_CONFIG_DIR")
        return Path(override).expanduser() if override else self.home_dir() / ".claude"

    def settings_file(self) -> Path:
        return self.config_home() / "settings.json"

    def command_file(self) -> Path:
        """The user-level custom command that makes `/rl` known to Claude Code."""
        return self.config_home() / "commands" / "rl.md"

    def install(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        if not self.detect():
            return self.not_found_report()
        state, doc = read_json_config(self.settings_file())
        new_doc = hooksjson.merge(doc, self.handlers(EVENTS, paths), state.path, MATCHERS)
        editor = Editor(paths, self.name)
        if new_doc != doc:
            pristine = hooksjson.strip(doc, state.path) is None
            editor.install(
                state,
                jsonfile.dumps_like(new_doc, state.data if state.existed else None),
                pristine=pristine,
                report=report,
            )
            verb = "Installed" if pristine else "Updated"
            report.lines.append(
                f"{verb} the Stop, UserPromptSubmit, UserPromptExpansion and SessionStart hooks "
                f"in {state.path}."
            )
            if report.backups:
                report.lines.append(f"Backup of the previous file: {report.backups[-1]}")
        if editor.install_file(self.command_file(), COMMAND_FILE, report, marker=COMMAND_MARKER):
            report.lines.append(f"Added the /rl command ({self.command_file()}).")
        if not report.changed:
            report.lines.append(f"Already installed in {self.config_home()}; nothing changed.")
            return report
        report.lines.append("Start a new Claude Code session (or run /hooks) so it picks them up.")
        return report

    def uninstall(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        state, doc = read_json_config(self.settings_file())
        stripped = hooksjson.strip(doc, state.path)
        new = None if stripped is None else jsonfile.dumps_like(stripped, state.data)
        editor = Editor(paths, self.name)
        editor.uninstall(state, new, report)
        editor.uninstall_file(self.command_file(), report, marker=COMMAND_MARKER)
        rulesfile.uninstall(self.config_home(), paths, report)
        return report

    def install_lessons_file(self, paths: Paths) -> InstallReport:
        """`rltray hooks install --lessons-file`: the opt-in rules file (see rulesfile.py)."""
        return rulesfile.install(self.config_home(), paths)

    def refresh_lessons_file(self, paths: Paths) -> bool:
        """Rewrite the opt-in rules file with the current lessons unless the user edited it."""
        return rulesfile.refresh(self.config_home(), paths)

    def status(self, paths: Paths) -> AgentStatus:
        state, doc = read_json_config(self.settings_file())
        wanted = self.handlers(EVENTS, paths)
        pieces, stale, commands = {}, False, []
        for event, handler in wanted.items():
            found = hooksjson.find(doc, event)
            pieces[event] = bool(found)
            stale = stale or any(h.get("command") != handler["command"] for h in found)
            commands += [self.split_command(h.get("command")) for h in found]
        command = read_config(self.command_file())
        pieces["/rl command"] = command.existed and command.data == COMMAND_FILE
        stale = stale or (command.existed and COMMAND_MARKER in command.data
                          and command.data != COMMAND_FILE)
        notes = []
        if command.existed and COMMAND_MARKER not in command.data:
            notes.append(f"{command.path} is your own /rl command: rltray's hooks still take "
                         "`/rl good|bad|undo|status` before it runs.")
            pieces["/rl command"] = True
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
            config_files=[state.path, command.path],
            notes=notes,
            stale=stale,
            hooks_disabled=disabled,
            commands=commands,
        )
