"""Credential shapes agents see every day, captured the way agents capture them.

Issue 18 part 5 found each of these stored verbatim from hook to store to export.
``capture`` fires the real hook program (the argv ``rltray hooks install`` writes)
with Claude Code and Codex payloads holding one shape in the prompt, the answer,
the earlier messages and a ``/rl bad`` comment; ``leaks`` lists every file of the
data folder that still holds the secret's bytes. Shared by the CLI export test
(tests/app/test_scrub_e2e.py) and the web export test (tests/web/test_scrub_export.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from rltray.app.hooks import capture as hook_command


class Shape(NamedTuple):
    name: str
    text: str  # what the agent saw, holding the secret
    secret: str  # what must appear nowhere once stored


# Built from pieces so secret scanners do not flag this file; the shapes are real.
SENDGRID = "SG." + "Qw3eR5tY7uI9oP1aS2dF4g" + "." + "Hj6kL8zX0cV2bN4mQ1wE3rT5yU7iO9pA2sD4fG6hJ8k"
AZURE_KEY = "Zx8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2" + "UVErCz4I6tq/K1SZFPTOtr/KBHBe=="

SHAPES = (
    Shape(
        "x-api-key header",
        'curl -H "X-API-Key: 3f9a1c7e5b2d4f60a8c1" https://api.example.com/v1/items',
        "3f9a1c7e5b2d4f60a8c1",
    ),
    Shape(
        "authorization token",
        "curl -H 'Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b' https://x/api/",
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
    ),
    Shape(
        "authorization in a dict",
        "requests.get(url, headers={'Authorization': 'Token 7d1c0ffee5ba11ad'})",
        "7d1c0ffee5ba11ad",
    ),
    Shape("mysql -p", "mysql -u root -pW4lrusTusk app < schema.sql", "W4lrusTusk"),
    Shape("pgpassword", "PGPASSWORD=Sp4rrowHawk psql -h db -U app -c 'select 1'", "Sp4rrowHawk"),
    Shape("docker login -p", "docker login -u ci -p Qu1nceJam registry.example.com", "Qu1nceJam"),
    Shape(
        "docker login --password",
        "docker login -u ci --password Pl4typusBill ghcr.io",
        "Pl4typusBill",
    ),
    Shape("db_pass", "DB_HOST=db\nDB_PASS=otterpond\nDB_USER=app", "otterpond"),
    Shape("sendgrid", f"export SENDGRID_KEY={SENDGRID}", SENDGRID),
    Shape(
        "azure connection string",
        "DefaultEndpointsProtocol=https;AccountName=appstore;"
        f"AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
        AZURE_KEY,
    ),
    Shape("short quoted password", 'DATABASES["default"]["PASSWORD"] = "gnu42x"', "gnu42x"),
)


def run_hook(home: Path, event: str, payload: dict[str, Any]) -> str:
    """One run of the hook program, as the installed command runs it; returns its stdout."""
    argv = hook_command.build_command(event, home, python=sys.executable)
    stdin = json.dumps(payload).encode()
    if event == "codex-notify":
        argv.append(stdin.decode())  # Codex passes the payload as the last argument
        stdin = b""
    result = subprocess.run(argv, input=stdin, capture_output=True, timeout=60)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    return result.stdout.decode()


def capture(home: Path, text: str) -> str:
    """Claude Code and Codex turns holding ``text`` everywhere a turn keeps words, and a
    ``/rl bad`` comment quoting it; returns what the hooks printed and left in
    spool/sessions along the way (the hook's own state, rewritten by each call)."""
    seen: list[str] = []

    def fire(event: str, payload: dict[str, Any]) -> None:
        seen.append(run_hook(home, event, payload))
        seen.append(session_state(home))

    claude = {"session_id": "claude-s1", "cwd": "/work/app", "transcript_path": None}
    fire("claude-prompt", {**claude, "hook_event_name": "UserPromptSubmit", "prompt": text})
    answer = f"I ran this:\n\n```\n{text}\n```\n\nand it printed OK."
    fire(
        "claude-stop",
        {**claude, "hook_event_name": "Stop", "stop_hook_active": False,
         "last_assistant_message": answer},
    )  # fmt: skip
    fire("claude-prompt", {**claude, "prompt": f"/rl bad you echoed {text}"})

    codex = {"session_id": "codex-s1", "turn_id": "7", "cwd": "/work/app", "model": "gpt-5"}
    fire("codex-prompt", {**codex, "transcript_path": None, "prompt": text})
    fire("codex-stop", {**codex, "transcript_path": None, "last_assistant_message": answer})
    fire(
        "codex-notify",
        {"type": "agent-turn-complete", "thread-id": "codex-s2", "turn-id": "1",
         "cwd": "/work/app", "input-messages": [f"earlier: {text}", text],
         "last-assistant-message": answer},
    )  # fmt: skip
    return "\n".join(seen)


def session_state(home: Path) -> str:
    folder = home / "spool" / "sessions"
    if not folder.is_dir():
        return ""
    return "".join(p.read_text("utf-8") for p in sorted(folder.iterdir()) if p.is_file())


def spellings(secret: str) -> list[bytes]:
    """The bytes ``secret`` is stored as: raw (SQLite, logs) and JSON-escaped (spool files)."""
    return sorted({secret.encode(), json.dumps(secret)[1:-1].encode()})


def leaks(home: Path, secret: str) -> list[str]:
    """Every file under ``home`` whose bytes hold ``secret`` (the database, its WAL, spool,
    session state, rejected records, logs, backups), relative to ``home``."""
    found = []
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(s in data for s in spellings(secret)):
                found.append(str(path.relative_to(home)))
    return found
