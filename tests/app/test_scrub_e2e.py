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
