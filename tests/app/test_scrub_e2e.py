"""Each credential shape of issue 18 part 5, end to end: hook -> spool -> store -> export.

Regression: ``curl -H "X-API-Key: …"``, ``Authorization: Token …``, ``mysql -pPW``,
``PGPASSWORD=PW psql``, ``docker login -p PW``, ``DB_PASS=PW``, SendGrid keys, Azure
``AccountKey=`` and short quoted passwords were kept verbatim in spool/sessions, the
database and ``rltray export``. The real hook program captures a Claude Code and a Codex
turn holding the shape, ``rltray serve --once`` ingests into a real SQLite file and
``rltray export`` writes the turns out; the secret's bytes may then be nowhere: not in any
file of the data folder (database, WAL, session state, logs), not in what the hooks printed,
not in either export.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rltray.app import cli

from tests.support.credentials import SHAPES, Shape, capture, leaks, session_state


def run_cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_credential_is_stored_and_exported_nowhere(
    shape: Shape, rltray_home: Path, tmp_path: Path
) -> None:
    assert shape.secret in shape.text
    printed = capture(rltray_home, shape.text)
    assert shape.secret not in printed, "hook output or spool/sessions state"
    assert shape.secret not in session_state(rltray_home)

    run_cli("serve", "--once")
    exported = run_cli("export")
    run_cli("export", "--output", str(tmp_path / "export.jsonl"))
    rows = [json.loads(line) for line in exported.splitlines()]

    # The turns really went through: three turns, the redaction marker where the secret was.
    assert len(rows) == 3
    assert all("[REDACTED:" in row["prompt"] + row["response"] for row in rows)
    assert any(row["rating"] and "[REDACTED:" in row["rating"]["comment"] for row in rows)
    assert shape.secret not in exported
    assert shape.secret not in (tmp_path / "export.jsonl").read_text("utf-8")
    assert leaks(rltray_home, shape.secret) == []


def test_a_credential_in_a_comment_given_outside_the_agent_is_stored_and_told_nowhere(
    rltray_home: Path,
) -> None:
    """Regression (review 3, finding 7): a comment given with `rltray bad -c`, `rltray rate`,
    the ratings window (``Service.comment``) or a lesson's own words was stored as typed, so
    a token in it was written to the lesson files, told to every new session, and copied to
    Claude Code's rules file; only the note for the next prompt was scrubbed."""
    from rltray.app.hooks import lessonfiles, rulesfile
    from rltray.app.hooks.claude_code import ClaudeCode
    from rltray.app.paths import Paths
    from rltray.app.service import Service

    from tests.app.test_capture import run_hook

    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    other = "glpat-" + "Zy9Xw8Vu7Ts6Rq5Po4Nm"
    session = {"session_id": "s1", "cwd": "/work/shop", "transcript_path": None}
    for n in (1, 2):
        run_hook(rltray_home, "claude-prompt", {**session, "prompt": f"push release {n}"})
        run_hook(rltray_home, "claude-stop", {**session, "last_assistant_message": f"no auth {n}"})
    (Path.home() / ".claude").mkdir()
    run_cli("lessons", "on", "--agent", "claude-code")
    run_cli("hooks", "install", "--agent", "claude-code", "--lessons-file")
    run_cli("bad", "-c", f"use the token {token} from the vault instead of asking me")
    run_cli("rate", "1", "bad", "-c", f"the token is {token}, just use it")
    run_cli("lessons", "add", "--global", f"Deploy with {other}")
    with Service(Paths.from_env()) as service:
        newest = max(t.id for t in service.store.list_turns())
        service.comment(newest, f"use {other} and {token} from the vault")  # the window's edit
        drawn = [row["id"] for row in service.lessons.listing() if not row["user_added"]]
        service.lessons.edit(drawn[0], f"Authenticate with {token}")
        lessons = service.lessons.listing()
    assert len(lessons) >= 2 and all("[REDACTED:" in row["words"] for row in lessons)
    told = run_hook(rltray_home, "claude-start", {**session, "hook_event_name": "SessionStart",
                                                  "source": "startup"}).stdout.decode()
    assert "[REDACTED:" in told
    rules = rulesfile.path(ClaudeCode().config_home()).read_text()
    assert "[REDACTED:" in rules and lessonfiles.read(str(rltray_home), "claude-code", None)
    for secret in (token, other):
        assert secret not in told and secret not in rules
        assert leaks(rltray_home, secret) == []
