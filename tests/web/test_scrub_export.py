"""The ratings browser's export (``/ratings/export.jsonl``) holds none of issue 18 part 5's
credentials: turns captured by the real hook program and ingested by the real service
come out of the settings app redacted (the CLI's export: tests/app/test_scrub_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rltray.app.service import Service

from tests.support.credentials import SHAPES, Shape, capture, leaks


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_ratings_export_holds_no_credential(
    shape: Shape, client: Any, service: Service, rltray_home: Path
) -> None:
    capture(rltray_home, shape.text)
    report = service.ingest()
    assert (report.turns, report.rejected) == (3, 0)

    export = client.get("/ratings/export.jsonl")
    assert export.status_code == 200
    body = export.data.decode("utf-8")
    rows = [json.loads(line) for line in body.splitlines()]
    assert len(rows) == 3 and all("[REDACTED:" in r["prompt"] + r["response"] for r in rows)
    assert shape.secret not in body
    assert leaks(rltray_home, shape.secret) == []
