"""Hook records dropped into ``spool/incoming`` exactly as the hook program leaves them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def drop_record(home: Path, record: dict[str, Any]) -> None:
    """Write ``record`` complete under a hidden temp name, then rename it into place: a
    running service's worker never reads a half-written record, and never takes the
    temp file for one (ingest sets a visible non-record aside)."""
    incoming = home / "spool" / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{str(record.get('turn', ''))[:8]:>8}.json"
    temp = incoming / f".{name}.tmp"
    temp.write_text(json.dumps(record))
    temp.rename(incoming / name)


def spool_turn(home: Path, turn: str, response: str, **fields: Any) -> None:
    """A finished turn's record (Codex's, unless ``fields`` say otherwise) via
    :func:`drop_record`."""
    drop_record(home, {
        "v": 1, "kind": "turn", "agent": "codex", "session": "s1", "turn": turn,
        "prompt": "p", "response": response, "context": [], "cwd": "/work/shop",
        "captured_at": "2026-11-22T10:00:00Z", "event": "stop", **fields,
    })  # fmt: skip
