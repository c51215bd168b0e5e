"""What each agent accepts on a command hook's stdout, per event: the documented keys and
their types, for checking rltray's answers key by key.

Written from the agents' documentation and the pinned programs' own schemas: Codex 0.169.0
embeds one JSON schema per event (``<event>.command.output``, every object with
``additionalProperties: false``; it refuses an answer with any other key as "invalid ...
JSON output"); Claude Code 2.1.197 checks a zod schema. tests/agents/test_real_lessons.py
reads both from the pinned programs and checks this table against them.
"""

from __future__ import annotations

from typing import Any

# (top-level keys -> type, hookSpecificOutput keys -> type); hookEventName must equal the event
COMMON: dict[str, Any] = {"continue": bool, "suppressOutput": bool, "stopReason": str,
                          "systemMessage": str}
SHAPES: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {
    ("codex", "SessionStart"): (
        {**COMMON, "hookSpecificOutput": dict},
        {"hookEventName": str, "additionalContext": str},
    ),
    ("codex", "UserPromptSubmit"): (
        {**COMMON, "decision": ("block",), "reason": str, "hookSpecificOutput": dict},
        {"hookEventName": str, "additionalContext": str},
    ),
    ("claude-code", "SessionStart"): (
        {**COMMON, "decision": ("approve", "block"), "reason": str, "terminalSequence": str,
         "hookSpecificOutput": dict},
        {"hookEventName": str, "additionalContext": str, "initialUserMessage": str,
         "sessionTitle": str, "watchPaths": list, "reloadSkills": bool},
    ),
    ("claude-code", "UserPromptSubmit"): (
        {**COMMON, "decision": ("approve", "block"), "reason": str, "terminalSequence": str,
         "hookSpecificOutput": dict},
        {"hookEventName": str, "additionalContext": str, "sessionTitle": str,
         "suppressOriginalPrompt": bool},
    ),
}


def problems(agent: str, event: str, answer: object) -> list[str]:
    """Every way ``answer`` breaks ``agent``'s schema for ``event`` ([] when it conforms)."""
    top, specific = SHAPES[(agent, event)]
    if not isinstance(answer, dict):
        return [f"the answer is a {type(answer).__name__}, not an object"]
    found = _check(answer, top, "")
    inner = answer.get("hookSpecificOutput")
    if isinstance(inner, dict):
        found += _check(inner, specific, "hookSpecificOutput.")
        if inner.get("hookEventName") != event:
            found.append(f"hookSpecificOutput.hookEventName is {inner.get('hookEventName')!r}, "
                         f"not {event!r}")
    return found


def _check(obj: dict[str, Any], allowed: dict[str, Any], where: str) -> list[str]:
    found = []
    for key, value in obj.items():
        want = allowed.get(key)
        if want is None:
            found.append(f"{where}{key} is not a documented key")
        elif isinstance(want, tuple):
            if value not in want:
                found.append(f"{where}{key} is {value!r}, not one of {want}")
        elif not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            found.append(f"{where}{key} is a {type(value).__name__}, not a {want.__name__}")
    return found
