"""OpenClaw: rltray's native plugin (``openclaw_plugin/``), linked into the gateway by
OpenClaw's own ``plugins install --link``, loaded at gateway start.

The plugin hands ``agent_end``, ``message_sent``, ``before_agent_run`` and its ``/rl``
command to the same hook program as the other agents (``events_openclaw.py`` reads
them). Its settings are that program's argv (``plugins.entries.rltray.config.command``)
and, opt-in, ``buttons`` (Good/Bad buttons under replies in Telegram direct chats): no
port, no secret. It needs OpenClaw's conversation access
(``plugins.entries.rltray.hooks.allowConversationAccess``), which the user accepts
knowingly (``CONSENT``; ``rltray hooks install --agent openclaw
--accept-conversation-access``).

Install: rltray writes its keys of the ``plugins.entries.rltray`` entry itself (``OURS``,
documented keys only; OpenClaw refuses a config with unknown ones), merged into any the
user set there, backed up and recorded like every agent's config (``managed.Editor``),
then runs ``openclaw plugins install --link <plugin> --force --accept-capabilities``,
which adds ``plugins.load.paths`` and its own ``meta``. It warns when every direct chat
shares one session (``session.dmScope`` "main") and more than one sender can write
(``_shared_dms``). Uninstall runs ``openclaw plugins uninstall rltray --force
--keep-files`` (which drops the whole entry), then puts ``openclaw.json`` back byte for
byte when nobody else changed it since; otherwise it removes only rltray's pieces, and
the user's own keys of the entry stay.
Verified with the real gateway: tests/agents/test_openclaw.py.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from rltray.app import fileio
from rltray.app.hooks import jsonfile, shellcommand
from rltray.app.hooks.base import Agent, AgentStatus, HookInstallError, InstallReport
from rltray.app.hooks.managed import Editor, read_config, read_json_config, sha256
from rltray.app.paths import Paths

LOADED = "openclaw.loaded"  # events_openclaw.LOADED, in spool/sessions/
_VERSION = re.compile(r"\d+\.\d+\.\d+")
PLUGIN_ID = "rltray"  # openclaw_plugin/openclaw.plugin.json's id
PLUGIN_DIR = Path(__file__).resolve().parent / "openclaw_plugin"
CLI_TIMEOUT_S = 300  # a plugin command loads the gateway's whole plugin registry (~5-80 s)
CONSENT = (
    "OpenClaw gives rltray's plugin conversation access: inside the gateway it sees the "
    "messages and answers of every run in every channel (Telegram, Slack, Discord, WhatsApp, "
    "WebChat, ...). rltray keeps each finished run's prompt and answer on this computer "
    "(credentials scrubbed) to ask you for ratings and to train your local model; nothing is "
    "sent anywhere. `rltray hooks uninstall --agent openclaw` takes the access back."
)


BUTTONS_ON = ("Good/Bad buttons go under each reply in Telegram direct chats; only the owner "
              "and allowlisted senders can press them (`--reply-buttons off` removes them).")
BUTTONS_OFF = ("No Good/Bad buttons under replies; rate with /rl, or with a 👍/👎 reaction "
               "in a direct chat (`--reply-buttons on` adds buttons in Telegram direct chats).")
REACTIONS = ("A 👍/👎 reaction rates only in a direct chat: in a group anyone the group admits "
             "could react.")
SHARED_DMS = (
    "OpenClaw's session.dmScope is \"main\" and {who} may write to the agent: every direct "
    "chat shares one session. rltray keeps each chat's last answer apart for /rl, but a "
    "reaction names no chat, so one on a message id found in several chats is not counted, "
    "and each turn's context holds the other chats' messages. Set session.dmScope to "
    "\"per-channel-peer\" in {path} to keep chats apart."
)
#: the keys of ``plugins.entries.rltray`` that rltray writes; the user's own stay as they are
OURS = {"enabled": None, "hooks": ("allowConversationAccess",), "config": ("command", "buttons")}


class OpenClaw(Agent):
    name = "openclaw"
    display_name = "OpenClaw"
    executable = "openclaw"
    verified = ("2026.9.6", "2026.9.6")  # tests/agents/test_openclaw.py installs this one
    shell = shellcommand.BASH  # unused: the plugin spawns the hook's argv without a shell
    consent = CONSENT
    accepted = False  # set by `--accept-conversation-access` after the user read CONSENT
    reply_buttons: bool | None = None  # `--reply-buttons on|off`; None keeps the current choice

    def config_home(self) -> Path:
        """``$OPENCLAW_STATE_DIR``, else ``$OPENCLAW_HOME/.openclaw``, else ``~/.openclaw``."""
        state = self.env.get("OPENCLAW_STATE_DIR")
        if state:
            return Path(state)
        home = self.env.get("OPENCLAW_HOME")
        return (Path(home) if home else self.home_dir()) / ".openclaw"

    def config_path(self) -> Path:
        override = self.env.get("OPENCLAW_CONFIG_PATH")
        return Path(override) if override else self.config_home() / "openclaw.json"

    def hook_command(self, paths: Paths) -> list[str]:
        """The plugin's ``command`` setting: the hook program's argv without its event."""
        return self.command("openclaw-end", paths)[:-1]

    # -- install ---------------------------------------------------------------------------

    def install(self, paths: Paths) -> InstallReport:
        if not self.detect():
            return self.not_found_report()
        report = InstallReport(self.name)
        if not self.accepted:
            report.lines += [CONSENT, "Nothing installed. To accept, run `rltray hooks install "
                             "--agent openclaw --accept-conversation-access`."]
            return report
        state, doc = self._read()
        ours = _entry(doc)
        buttons = self.reply_buttons if self.reply_buttons is not None else _buttons_on(ours)
        new = copy.deepcopy(doc)
        entries = _table(_table(new, "plugins"), "entries")
        # merged into what is there: keys the user set in the entry (a hook timeout, their
        # own config) stay; only rltray's are set
        wanted = entries[PLUGIN_ID] = copy.deepcopy(ours) if ours is not None else {}
        wanted["enabled"] = True
        _table(wanted, "hooks")["allowConversationAccess"] = True
        config = _table(wanted, "config")
        config["command"] = self.hook_command(paths)
        if buttons:
            config["buttons"] = True
        else:
            config.pop("buttons", None)
        editor = Editor(paths, self.name)
        pristine = ours is None and not self._linked(doc)
        recorded = editor.manifest.get(state.path)
        editor.install(state, jsonfile.dumps_like(new, state.data or None), pristine=pristine,
                       report=report)
        try:
            self._cli(["plugins", "install", "--link", str(PLUGIN_DIR), "--force",
                       "--accept-capabilities"], "link rltray's plugin")
        except HookInstallError as exc:  # the entry must not stay enabled with no plugin
            editor.put_back(state, recorded)
            raise HookInstallError(f"{exc} {state.path} is as it was.") from None
        after = read_config(state.path)
        entry = editor.manifest.get(state.path)
        if entry is not None:  # OpenClaw's own edit (load path, meta) is part of the install
            entry["written_sha256"] = sha256(after.data)
            editor.manifest.put(state.path, entry)
        if state.path not in report.changed and after.data != state.data:
            report.changed.append(state.path)
        report.lines.append(f"Linked rltray's plugin {PLUGIN_DIR} into {state.path}; it loads "
                            "when the gateway starts (restart a running gateway).")
        report.lines.append(BUTTONS_ON if buttons else BUTTONS_OFF)
        report.lines.append(REACTIONS)
        shared = _shared_dms(self._parse(after))
        if shared:
            report.lines.append(SHARED_DMS.format(who=shared, path=state.path))
        return report

    def uninstall(self, paths: Paths) -> InstallReport:
        report = InstallReport(self.name)
        path = self.config_path()
        editor = Editor(paths, self.name)
        before = read_config(path)
        entry = editor.manifest.get(before.path)
        untouched = bool(entry and entry.get("written_sha256") == sha256(before.data))
        # the user's own keys in rltray's entry: OpenClaw's uninstall drops the whole entry
        theirs = _theirs(_entry(self._parse(before))) if before.existed else None
        if before.existed and (_entry(self._parse(before)) is not None or self._linked(
                self._parse(before))) and self._program() is not None:
            self._cli(["plugins", "uninstall", PLUGIN_ID, "--force", "--keep-files"],
                      "unlink rltray's plugin")
        state = read_config(path)
        if untouched and entry is not None:  # OpenClaw's uninstall edit is ours to undo too
            entry["written_sha256"] = sha256(state.data)
            editor.manifest.put(state.path, entry)
        stripped = None
        if state.existed:
            doc = self._parse(state)
            clean = _without_ours(doc, theirs)
            if clean != doc:
                stripped = jsonfile.dumps_like(clean, state.data)
        editor.uninstall(state, stripped, report)
        if theirs:
            report.lines.append(
                f"Kept your own keys in plugins.entries.{PLUGIN_ID} ({', '.join(sorted(theirs))}) "
                f"in {state.path}; OpenClaw calls the entry stale now: remove it when you no "
                "longer want it.")
        return report

    # -- status ----------------------------------------------------------------------------

    def status(self, paths: Paths) -> AgentStatus:
        path = self.config_path()
        notes: list[str] = []
        try:
            _, doc = read_json_config(path)
        except HookInstallError as exc:
            doc = {}
            notes.append(str(exc))
        entry = _entry(doc) or {}
        hooks = entry.get("hooks") if isinstance(entry.get("hooks"), dict) else {}
        config = entry.get("config") if isinstance(entry.get("config"), dict) else {}
        command = config.get("command")
        pieces = {
            "plugin linked": self._linked(doc),
            "plugin enabled": entry.get("enabled") is True,
            "conversation access": hooks.get("allowConversationAccess") is True,
            # the linked folder itself: a moved or deleted clone loads nothing at gateway start
            "plugin files": (PLUGIN_DIR / "index.js").is_file()
            and (PLUGIN_DIR / "openclaw.plugin.json").is_file(),
        }
        stale = isinstance(command, list) and command != self.hook_command(paths)
        if stale:
            notes.append("rltray's OpenClaw plugin runs another Python or data folder; "
                         "run `rltray hooks install --agent openclaw "
                         "--accept-conversation-access` again.")
        installed = all(pieces.values()) and isinstance(command, list)
        if installed:
            notes.append(self._loaded_note(paths))
            notes.append(BUTTONS_ON if _buttons_on(entry) else BUTTONS_OFF)
        plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
        disabled = plugins.get("enabled") is False
        if disabled:
            notes.append("OpenClaw's plugins are switched off (plugins.enabled: false).")
        return AgentStatus(
            name=self.name, display_name=self.display_name, detected=self.detect(),
            installed=installed, pieces=pieces,
            config_files=[path], notes=notes, stale=stale, hooks_disabled=disabled,
            commands=[[*command, "openclaw-end"]] if isinstance(command, list) else [],
        )

    def _loaded_note(self, paths: Paths) -> str:
        """When a gateway last loaded the plugin (its ``loaded`` event), and whether that
        OpenClaw is one rltray was verified with."""
        import json

        try:
            record = json.loads(fileio.read_regular_file(paths.hook_state / LOADED))
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("at"), str):
            return ("No OpenClaw gateway has loaded rltray's plugin yet: restart the gateway "
                    "(`openclaw gateway restart`).")
        version = record.get("version")
        said = f"Plugin loaded by the gateway at {record['at'][:19].replace('T', ' ')}"
        if isinstance(version, str) and _VERSION.fullmatch(version):
            said += f" (OpenClaw {version})"
            note = self.version_note(version)
            if note:
                said += f"; {note}"
        return said + "."

    # -- helpers ---------------------------------------------------------------------------

    def _read(self) -> tuple[Any, dict[str, Any]]:
        """The config as read, refusing a file that is not plain JSON (OpenClaw also reads
        JSON5; rltray edits only files it can write back exactly)."""
        return read_json_config(self.config_path())

    @staticmethod
    def _parse(state: Any) -> dict[str, Any]:
        try:
            return jsonfile.parse_object(state.data, state.path) if state.existed else {}
        except jsonfile.JSONFileError as exc:
            raise HookInstallError(f"{exc} rltray left it unchanged.") from exc

    @staticmethod
    def _linked(doc: dict[str, Any]) -> bool:
        return str(PLUGIN_DIR) in _load_paths(doc)

    def _program(self) -> str | None:
        path = self.env.get("PATH") if self._env is not None else None
        return shutil.which(self.executable, path=path)

    def _cli(self, args: list[str], what: str) -> str:
        """Run ``openclaw <args>``; HookInstallError with its last lines when it fails."""
        program = self._program()
        if program is None:
            raise HookInstallError(f"`{self.executable}` is not on PATH, so rltray cannot {what}; "
                                   "install OpenClaw or put it on PATH.")
        env = {**dict(self.env), "NO_COLOR": "1", "OPENCLAW_NO_AUTO_UPDATE": "1"}
        try:
            done = subprocess.run([program, *args], capture_output=True, text=True, env=env,
                                  timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HookInstallError(f"`openclaw {' '.join(args[:2])}` did not finish ({exc}); "
                                   f"rltray could not {what}.") from exc
        if done.returncode != 0:
            tail = " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            raise HookInstallError(f"`openclaw {' '.join(args[:2])}` failed ({tail[:400]}); "
                                   f"rltray could not {what}.")
        return done.stdout


def _buttons_on(entry: dict[str, Any] | None) -> bool:
    config = (entry or {}).get("config")
    return isinstance(config, dict) and config.get("buttons") is True


def _table(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        value = doc[key] = {}
    return value


def _entry(doc: dict[str, Any]) -> dict[str, Any] | None:
    plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
    entries = plugins.get("entries") if isinstance(plugins.get("entries"), dict) else {}
    entry = entries.get(PLUGIN_ID)
    return entry if isinstance(entry, dict) else None


def _load_paths(doc: dict[str, Any]) -> list[str]:
    plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
    load = plugins.get("load") if isinstance(plugins.get("load"), dict) else {}
    found = load.get("paths")
    return [os.path.normpath(p) for p in found if isinstance(p, str)] if isinstance(
        found, list) else []


def _theirs(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The keys of rltray's entry that rltray does not write (``OURS``): the user's own;
    None when there are none. (``enabled`` is rltray's, or OpenClaw's uninstall mark.)"""
    if entry is None:
        return None
    kept = copy.deepcopy(entry)
    for key, inner in OURS.items():
        if inner is None:
            kept.pop(key, None)
        elif isinstance(kept.get(key), dict):
            for name in inner:
                kept[key].pop(name, None)
            if not kept[key]:
                kept.pop(key)
    return kept or None


def _without_ours(doc: dict[str, Any], theirs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``doc`` without rltray's entry and load path (emptied tables removed); ``theirs``,
    the user's own keys of the entry (``_theirs``), stay as the entry."""
    clean = copy.deepcopy(doc)
    if theirs:
        _table(_table(clean, "plugins"), "entries")[PLUGIN_ID] = copy.deepcopy(theirs)
    plugins = clean.get("plugins")
    if not isinstance(plugins, dict):
        return clean
    entries = plugins.get("entries")
    if isinstance(entries, dict) and not theirs:
        entries.pop(PLUGIN_ID, None)
        if not entries:
            plugins.pop("entries")
    load = plugins.get("load")
    if isinstance(load, dict) and isinstance(load.get("paths"), list):
        load["paths"] = [p for p in load["paths"]
                         if not (isinstance(p, str) and os.path.normpath(p) == str(PLUGIN_DIR))]
        if not load["paths"]:
            load.pop("paths")
        if not load:
            plugins.pop("load")
    if not plugins:
        clean.pop("plugins")
    return clean


def _shared_dms(doc: dict[str, Any]) -> str | None:
    """Who may write to an agent whose direct chats share one session (``session.dmScope``
    "main", OpenClaw's default), when that can be more than one sender or channel: the
    words for ``SHARED_DMS``; None otherwise.

    Why: with one session for every direct chat, a reaction names no chat (rltray cannot
    tell whose message it meant) and each run sees the other chats' messages; a single
    sender on a single channel loses nothing. ``dmPolicy`` "open" or a ``*`` in
    ``allowFrom`` admits anyone; "pairing" (OpenClaw's default) whoever the owner approves,
    which the config does not list."""
    session = doc.get("session") if isinstance(doc.get("session"), dict) else {}
    if session.get("dmScope", "main") != "main":
        return None
    channels = doc.get("channels") if isinstance(doc.get("channels"), dict) else {}
    anyone: set[str] = set()
    pairing: set[str] = set()
    senders: set[str] = set()
    used: set[str] = set()
    for name, channel in channels.items():
        if not isinstance(channel, dict) or channel.get("enabled") is False:
            continue
        accounts = channel.get("accounts") if isinstance(channel.get("accounts"), dict) else {}
        for setting in [channel, *(a for a in accounts.values() if isinstance(a, dict))]:
            policy = setting.get("dmPolicy", "pairing")
            allow = setting.get("allowFrom") if isinstance(setting.get("allowFrom"), list) else []
            if policy == "disabled":
                continue
            used.add(str(name))
            if policy == "open" or "*" in allow:
                anyone.add(str(name))
            elif policy == "pairing":
                pairing.add(str(name))
            senders.update(f"{name}:{entry}" for entry in allow if entry != "*")
    if anyone:
        return f"anyone on {' and '.join(sorted(anyone))}"
    if len(senders) > 1 or len(used) > 1:
        return f"{len(senders) or 'several'} senders on {' and '.join(sorted(used))}"
    if pairing:
        return f"every sender you approve through {' and '.join(sorted(pairing))}'s pairing"
    return None
