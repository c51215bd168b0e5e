"""``versions.measured_peaks``: the wizard's "last round measured" figure per base model."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.training import jobbuild, versions

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)


def add(store: Store, paths: Paths, run_id: str, minute: int, model: str, status: str,
        peak: object = None, manifest: bool = True) -> None:
    store.add_run(run_id, at=T0 + timedelta(minutes=minute))
    metrics = {} if peak is None else {"peak_memory_bytes": peak}
    store.finish_run(run_id, status, metrics=metrics, at=T0 + timedelta(minutes=minute + 1))
    folder = paths.runs / run_id
    folder.mkdir(parents=True, exist_ok=True)
    if manifest:
        built = jobbuild.BuiltJob(run_id=run_id, folder=folder, out=folder / "out",
                                  fresh_ids=(), heldout_ids=(), replay_ids=(),
                                  parent_version=None, base_model=model)  # fmt: skip
        (folder / jobbuild.MANIFEST_FILE).write_text(json.dumps(built.manifest()))


def test_the_newest_measured_round_per_model_wins(store: Store, paths: Paths) -> None:
    add(store, paths, "r1", 0, "qwen", "done", 3_000_000_000)
    add(store, paths, "r2", 10, "qwen", "done", 2_000_000_000)  # newer: wins
    add(store, paths, "r3", 20, "qwen", "done")  # newest, but measured nothing
    add(store, paths, "r4", 30, "qwen", "cancelled", 1_000_000_000)  # never finished
    add(store, paths, "r5", 5, "smol", "failed", 900_000_000)  # a failed round measured too
    add(store, paths, "r6", 40, "smol", "done", "big")  # not a number: ignored
    assert versions.measured_peaks(store, paths) == {
        "qwen": {"peak_bytes": 2_000_000_000, "run": "r2"},
        "smol": {"peak_bytes": 900_000_000, "run": "r5"},
    }


def test_a_run_without_a_readable_manifest_is_skipped(store: Store, paths: Paths) -> None:
    add(store, paths, "old", 0, "qwen", "done", 3_000_000_000)
    add(store, paths, "lost", 10, "qwen", "done", 2_000_000_000, manifest=False)
    add(store, paths, "torn", 20, "qwen", "done", 1_000_000_000, manifest=False)
    Path(paths.runs / "torn" / jobbuild.MANIFEST_FILE).write_text("{not json")
    assert versions.measured_peaks(store, paths) == {
        "qwen": {"peak_bytes": 3_000_000_000, "run": "old"}
    }
