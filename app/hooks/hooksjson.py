"""Merge rltray's handlers into a Claude-Code-shaped ``hooks`` object, and take them out.

Claude Code's ``settings.json`` and Codex's ``hooks.json`` share one shape::

    {"hooks": {"Stop": [{"matcher": ..., "hooks": [{"type": "command", "command": ...}]}]}}

These are pure functions on parsed JSON so both installers (and tests) share
them: the user's groups, handlers and keys keep their order; our handler is
recognised by its command (``capture.py --home``), so an entry written with
an older Python or venv path is replaced in place instead of duplicated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from rltray.app.hooks.base import HookInstallError, is_rltray_command


def is_ours(handler: object) -> bool:
    return isinstance(handler, dict) and is_rltray_command(handler.get("command"))


def _hooks_object(doc: dict[str, Any], path: object, create: bool) -> dict[str, Any] | None:
    hooks = doc.get("hooks")
    if hooks is None and create:
        hooks = doc["hooks"] = {}
    if hooks is not None and not isinstance(hooks, dict):
        raise HookInstallError(
            f'"hooks" in {path} is not a JSON object; rltray left the file unchanged.'
        )
    return hooks


def merge(
    doc: dict[str, Any],
    handlers: Mapping[str, dict[str, Any]],
    path: object,
    matchers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A copy of ``doc`` with exactly one of our handlers per event in ``handlers``.

    ``matchers`` names the group matcher an event's new group gets (Claude Code's
    UserPromptExpansion matches the command's name, so rltray's hook runs for `/rl` only).
    """
    doc = copy.deepcopy(doc)
    hooks = _hooks_object(doc, path, create=True)
    assert hooks is not None
    for event, handler in handlers.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise HookInstallError(
                f'"hooks.{event}" in {path} is not a JSON array; rltray left the file unchanged.'
            )
        placed = False
        for group in list(groups):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            kept = []
            for existing in group["hooks"]:
                if not is_ours(existing):
                    kept.append(existing)
                elif not placed:  # replace our (maybe outdated) entry where it stands
                    kept.append(dict(handler))
                    placed = True
            if not kept and group["hooks"]:
                groups.remove(group)  # a group that only held a duplicate of ours
            else:
                group["hooks"] = kept
        if not placed:
            matcher = (matchers or {}).get(event)
            groups.append({**({"matcher": matcher} if matcher else {}), "hooks": [dict(handler)]})
    return doc


def strip(doc: dict[str, Any], path: object) -> dict[str, Any] | None:
    """A copy of ``doc`` without any of our handlers, or None when it holds none.

    Containers that become empty *because* we removed our handler go too
    (a group, an event list, the ``hooks`` object); ones the user left empty stay.
    """
    doc = copy.deepcopy(doc)
    hooks = _hooks_object(doc, path, create=False)
    if not hooks:
        return None
    found = False
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        for group in list(groups):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            kept = [h for h in group["hooks"] if not is_ours(h)]
            if len(kept) == len(group["hooks"]):
                continue
            found = True
            if kept:
                group["hooks"] = kept
            else:
                groups.remove(group)
                if not groups:
                    del hooks[event]
    if not found:
        return None
    if not hooks:
        del doc["hooks"]
    return doc


def find(doc: dict[str, Any], event: str) -> list[dict[str, Any]]:
    """Our handlers registered under ``event`` (normally zero or one)."""
    hooks = doc.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    if not isinstance(groups, list):
        return []
    return [
        h
        for g in groups
        if isinstance(g, dict) and isinstance(g.get("hooks"), list)
        for h in g["hooks"]
        if is_ours(h)
    ]
