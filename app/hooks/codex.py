"""Codex (CLI and desktop app): legacy ``notify`` in config.toml plus ``hooks.json``.

Both ways in, because each has a catch: ``notify`` needs no trust but Codex
allows only one notify program (so a user's existing one is chained: our hook
runs theirs with the same payload, and uninstall puts theirs back); user hooks
in ``hooks.json`` carry the prompt and turn id but Codex skips them silently
until the user trusts them in ``/hooks``. config.toml is edited with tomlkit
so the user's comments and key order survive.

Rating: Codex's terminal UI refuses any slash command it does not know ("Unrecognized
command '/rl'"), and 0.169 has no user-defined slash commands (its presets run `/...` as
built-in commands too). It does offer user skills, mentioned as ``$name``: rltray installs
a skill ``rl`` that the model never loads on its own, so ``$rl good`` is known to the
composer and reaches UserPromptSubmit, which blocks it with the rating's sentence. With
the hooks not trusted yet, ``$rl good`` reaches the model (the skill's body tells it what
to answer) and ``notify`` applies it to the previous turn. ``codex exec "/rl good"`` works
too. Verified with the real program: tests/agents/.
"""

from __future__ import annotations

import json
from pathlib import Path

import tomlkit
import tomlkit.exceptions
from rltray.app.hooks import hooksjson, jsonfile, shellcommand
from rltray.app.hooks.base import (
    Agent,
    AgentStatus,
    HookInstallError,
    InstallReport,
    command_argv,
    is_rltray_command,
    join_command,
)
from rltray.app.hooks.managed import Editor, FileState, read_config, read_json_config
from rltray.app.paths import Paths

EVENTS = {"Stop": "codex-stop", "UserPromptSubmit": "codex-prompt", "SessionStart": "codex-start"}
NOTIFY_EVENT = "codex-notify"
SKILL_MARKER = b"Installed by rltray"
SKILL_FILE = (
    b"---\n"
    b"name: rl\n"
    b'description: "rltray command, typed by the user only: $rl good, $rl bad, $rl 1-5, '
    b'$rl undo, $rl status, $rl lesson or $rl lessons. Never use it on your own."\n'
    b"---\n"
    b"<!-- Installed by rltray (`rltray hooks install`); `rltray hooks uninstall` removes it."
    b" -->\n"
    b"The user typed an rltray command (`$rl ...`). rltray's hook takes it before you "
    b"see it once Codex trusts rltray's hooks; until then rltray applies it (a rating to your "
    b"previous answer) when this turn ends. Do nothing else and reply with exactly this line: "
    b"rltray noted your command (trust rltray's hooks in /hooks to use it without a model "
    b"turn).\n"
)
# Codex loads a skill into the model's context unless its policy says only `$rl` invokes it.
SKILL_POLICY = (
    b"# Installed by rltray (`rltray hooks install`); `rltray hooks uninstall` removes it.\n"
    b"policy:\n"
    b"  allow_implicit_invocation: false\n"
)
TRUST_NOTE = (
    "Codex skips user hooks until you trust them: open Codex, type /hooks, and trust the "
    "rltray hooks. Until then rltray still captures turns through `notify`."
)


class Codex(Agent):
    name = "codex"
    display_name = "Codex"
    executable = "codex"
    verified = ("0.169.0", "0.169.0")  # tests/agents/ installs the newest from npm
    shell = shellcommand.CMD  # %COMSPEC% /C on Windows

    def config_home(self) -> Path:
        override = self.env.get("CODEX_HOME")
        return Path(override).expanduser() if override else self.home_dir() / ".codex"

    def config_file(self) -> Path:
        return self.config_home() / "config.toml"

    def hooks_file(self) -> Path:
        return self.config_home() / "hooks.json"

    def skill_files(self) -> dict[Path, bytes]:
        """The ``rl`` skill that makes `$rl` known to Codex's composer: path -> bytes."""
        folder = self.config_home() / "skills" / "rl"
        return {folder / "SKILL.md": SKILL_FILE, folder / "agents" / "openai.yaml": SKILL_POLICY}

    # -- reading -----------------------------------------------------------------

    def _read_toml(self) -> tuple[FileState, tomlkit.TOMLDocument]:
        state = read_config(self.config_file())
        try:
            doc = tomlkit.parse(state.data.decode("utf-8"))
        except (UnicodeDecodeError, tomlkit.exceptions.TOMLKitError) as exc:
            raise HookInstallError(
                f"{state.path} is not valid TOML ({exc}); "
                "rltray left it unchanged, fix it and try again."
            ) from exc
        return state, doc

    # -- notify ------------------------------------------------------------------

    def _notify_plan(
        self, doc: tomlkit.TOMLDocument, paths: Paths, path: Path
    ) -> tuple[list[str] | None, list[str] | None]:
        """(our new notify argv, the user's program we chain) for the current ``doc``."""
        current = doc.get("notify")
        if current is None:
            return self.command(NOTIFY_EVENT, paths), None
        value = current.unwrap() if hasattr(current, "unwrap") else current
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise HookInstallError(
                f"`notify` in {path} is not a list of strings; rltray left the file unchanged."
            )
        chain = chained_program(value) if is_rltray_command(value) else value
        if chain == []:
            chain = None
        return self.command(NOTIFY_EVENT, paths, chain=chain), chain

    def _with_notify(self, doc: tomlkit.TOMLDocument, argv: list[str] | None, path: Path) -> bytes:
        """``doc`` serialised with top-level ``notify`` set to ``argv`` (or removed when None)."""
        before = {k: v for k, v in doc.unwrap().items() if k != "notify"}
        doc = tomlkit.parse(tomlkit.dumps(doc))  # private copy, same formatting
        current = doc.get("notify")
        if argv is None:
            doc.pop("notify", None)
        elif current is None or current.unwrap() != argv:
            doc["notify"] = argv  # tomlkit keeps a top-level key above the first table
        text = tomlkit.dumps(doc)
        # Guard against a tomlkit change that would nest the key inside a table.
        after = tomlkit.parse(text).unwrap()
        if (
            after.get("notify") != argv
            or {k: v for k, v in after.items() if k != "notify"} != before
        ):
            raise HookInstallError(
                f"rltray could not place `notify` safely in {path}; file left unchanged."
            )
        return text.encode("utf-8")

    # -- install / uninstall -----------------------------------------------------

    def install(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        if not self.detect():
            return self.not_found_report()
        # Read and plan both files before writing either: a bad file stops everything.
        toml_state, toml_doc = self._read_toml()
        hooks_state, hooks_doc = read_json_config(self.hooks_file())
        argv, chain = self._notify_plan(toml_doc, paths, toml_state.path)
        current_notify = toml_doc.get("notify")
        toml_pristine = current_notify is None or not is_rltray_command(current_notify.unwrap())
        new_toml = self._with_notify(toml_doc, argv, toml_state.path)
        new_hooks_doc = hooksjson.merge(hooks_doc, self.handlers(EVENTS, paths), hooks_state.path)

        editor = Editor(paths, self.name)
        extra = {"chained_notify": chain}
        if editor.install(toml_state, new_toml, pristine=toml_pristine, report=report, extra=extra):
            report.lines.append(f"Set `notify` in {toml_state.path}.")
            if chain and toml_pristine:
                report.lines.append(
                    f"Your notify program ({join_command(chain)}) still runs: "
                    "rltray's hook calls it."
                )
        if new_hooks_doc != hooks_doc:
            editor.install(
                hooks_state,
                jsonfile.dumps_like(
                    new_hooks_doc, hooks_state.data if hooks_state.existed else None
                ),
                pristine=hooksjson.strip(hooks_doc, hooks_state.path) is None,
                report=report,
            )
            report.lines.append(
                f"Installed the Stop, UserPromptSubmit and SessionStart hooks in "
                f"{hooks_state.path}."
            )
        skill = [editor.install_file(p, d, report, marker=SKILL_MARKER)
                 for p, d in self.skill_files().items()]
        if any(skill):
            report.lines.append(
                f"Added the $rl skill ({self.config_home() / 'skills' / 'rl'}): in Codex, "
                "type `$rl good`, `$rl bad`, `$rl undo` or `$rl status`."
            )
        if not report.changed:
            report.lines.append(f"Already installed in {self.config_home()}; nothing changed.")
        for backup in report.backups:
            report.lines.append(f"Backup of the previous file: {backup}")
        if hooks_disabled(toml_doc):
            report.lines.append(_disabled_note(toml_state.path))
        if problem := self.shell_problem(EVENTS, paths):
            report.lines.append(problem)
        report.lines.append(TRUST_NOTE)
        return report

    def uninstall(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        toml_state, toml_doc = self._read_toml()
        hooks_state, hooks_doc = read_json_config(self.hooks_file())
        editor = Editor(paths, self.name)

        current = toml_doc.get("notify")
        stripped_toml = None
        if current is not None and is_rltray_command(current.unwrap()):
            theirs = chained_program(current.unwrap()) or None
            stripped_toml = self._with_notify(toml_doc, theirs, toml_state.path)
        editor.uninstall(toml_state, stripped_toml, report)

        stripped = hooksjson.strip(hooks_doc, hooks_state.path)
        new_hooks = None if stripped is None else jsonfile.dumps_like(stripped, hooks_state.data)
        editor.uninstall(hooks_state, new_hooks, report)
        for path in reversed(list(self.skill_files())):  # the deepest folder empties first
            editor.uninstall_file(path, report, marker=SKILL_MARKER)
        return report

    def status(self, paths: Paths) -> AgentStatus:
        toml_state, toml_doc = self._read_toml()
        hooks_state, hooks_doc = read_json_config(self.hooks_file())
        notify = toml_doc.get("notify")
        notify_value = notify.unwrap() if notify is not None else None
        ours = is_rltray_command(notify_value)
        pieces = {"notify": ours}
        stale = False
        commands = [command_argv(notify_value)] if ours else []
        if ours:
            want, _ = self._notify_plan(toml_doc, paths, toml_state.path)
            stale = notify_value != want
        for event, handler in self.handlers(EVENTS, paths).items():
            found = hooksjson.find(hooks_doc, event)
            pieces[event] = bool(found)
            stale = stale or any(h.get("command") != handler["command"] for h in found)
            commands += [self.split_command(h.get("command")) for h in found]
        skill = {p: read_config(p) for p in self.skill_files()}
        pieces["$rl skill"] = all(s.data == self.skill_files()[p] for p, s in skill.items())
        stale = stale or any(s.existed and SKILL_MARKER in s.data and not pieces["$rl skill"]
                             for s in skill.values())
        notes = []
        disabled = hooks_disabled(toml_doc)
        if disabled:
            notes.append(_disabled_note(toml_state.path))
        if problem := self.shell_problem(EVENTS, paths):
            notes.append(problem)
        if pieces["Stop"] or pieces["UserPromptSubmit"] or pieces["SessionStart"]:
            notes.append(TRUST_NOTE)
        if ours and chained_program(notify_value):
            notes.append(
                f"Chains your notify program: {join_command(chained_program(notify_value))}"
            )
        if stale:
            notes.append(
                "An entry points at another Python or data folder; "
                "run `rltray hooks install` again."
            )
        if any(pieces.values()) and not all(pieces.values()):
            notes.append("Only part of the hooks is installed; run `rltray hooks install` again.")
        return AgentStatus(
            name=self.name,
            display_name=self.display_name,
            detected=self.detect(),
            installed=all(pieces.values()),
            pieces=pieces,
            config_files=[toml_state.path, hooks_state.path, *skill],
            notes=notes,
            stale=stale,
            hooks_disabled=disabled,
            commands=commands,
        )


def chained_program(argv: list[str]) -> list[str]:
    """The user's notify argv carried in our notify's ``--chain <json list>`` ([] if none)."""
    try:
        raw = argv[argv.index("--chain") + 1]
        value = json.loads(raw)
    except (ValueError, IndexError):
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return []


def hooks_disabled(doc: tomlkit.TOMLDocument) -> bool:
    """True when config.toml explicitly turns Codex hooks off (``hooks`` or ``codex_hooks``)."""
    features = doc.unwrap().get("features")
    if not isinstance(features, dict):
        return False
    return features.get("hooks") is False or features.get("codex_hooks") is False


def _disabled_note(path: Path) -> str:
    return (
        f"Codex hooks are turned off in {path} ([features] hooks = false); "
        "rltray captures turns through `notify` only."
    )
