"""The training runner over a real store: start, progress, accept, reject, pause, crash, rollback.

Two kinds of trainer: a small fake script (``python -m rltray.trainer JOB`` is
replaced through ``training.python``) that speaks the JSON-line protocol, for the
runner's own logic in well under a second each; and the real trainer on a tiny
Llama built by the test (marked ``ml`` and ``slow``).

Gate settings for the tiny model: a random 64-wide model has no preference to
measure, so ``TINY_HYPER`` names the trainer's test-only gate profile
(``"gate_profile": "tiny-test"``, documented in trainer/evaluate.py): the
held-out preference check is off and said so; the drift caps and the sanity
checks keep their defaults, and ``test_real_gate_rejection`` shows the gate
still rejects through the runner when its KL cap is exceeded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rltray.app.config import Config, TrainingSettings
from rltray.app.errors import NothingToDo, UserError
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.training import jobbuild, leftovers, outcome
from rltray.app.training import versions as adapterversions
from rltray.app.training.publisher import Publisher
from rltray.app.training.runner import TrainingBusy, TrainingRunner

from tests.app import adapterfiles

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
GOOD = [
    "Use a context manager so the file is closed even on errors.",
    "Add a regression test first, then fix the off-by-one in the loop bound.",
    "Return early when the list is empty so the caller gets [] instead of None.",
    "Use pathlib.Path.read_text(encoding='utf-8') instead of open().read().",
]
BAD = [
    "Just wrap everything in try/except: pass and the error goes away.",
    "Delete the failing test, it was probably wrong anyway.",
    "Retry forever in a loop until it works.",
    "Use a global variable to share the state between requests.",
]
TINY_HYPER: dict[str, Any] = {
    "rank": 4, "alpha": 8.0, "lr": 0.01, "warmup_steps": 1, "epochs": 2, "batch_size": 2,
    "step_examples": 4, "max_seq_len": 96, "gate_profile": "tiny-test",
}  # fmt: skip

FAKE_TRAINER = """\
#!{python}
import json, os, stat, sys, time
job_path = sys.argv[-1]
job = json.load(open(job_path))
folder = os.path.dirname(job_path)
mode = os.environ["FAKE_MODE"]
with open(os.path.join(folder, "user_away.txt"), "w") as f:
    f.write(os.environ.get("RLTRAY_TRAINER_USER_AWAY", "unset"))
with open(os.path.join(folder, "channel.json"), "w") as f:
    json.dump({{"parent_pid": os.environ.get("RLTRAY_TRAINER_PARENT_PID"),
               "stdin": os.environ.get("RLTRAY_TRAINER_STDIN"),
               "answer_cache": os.environ.get("RLTRAY_ANSWER_CACHE"),
               "stdin_is_pipe": stat.S_ISFIFO(os.fstat(0).st_mode)}}, f)
# WRITE_LORA
def emit(d):
    print(json.dumps(d), flush=True)
if mode == "silent":  # dies before writing anything (a segfault, an OOM kill)
    sys.exit(1)
if mode == "crash":
    emit({{"type": "log", "message": "loading the model"}})
    for i in range(60):
        print("noise line", i, file=sys.stderr)
    print("RuntimeError: the fake trainer broke", file=sys.stderr)
    sys.exit(1)
if mode == "slow":  # stops as the real trainer does: on the job folder's stop file, no signal
    stop_file = os.path.join(folder, "stop")
    ck = os.path.join(folder, "checkpoint")
    start = 1
    if os.path.exists(os.path.join(ck, "state.json")):
        start = json.load(open(os.path.join(ck, "state.json")))["step"] + 1
        emit({{"type": "log", "message": "resumed"}})
    for step in range(start, 41):
        if os.path.exists(stop_file) and os.environ.get("FAKE_STOP") == "fails":
            emit({{"type": "error", "message": "disk full while saving the checkpoint",
                   "kind": "internal"}})
            sys.exit(1)
        if os.path.exists(stop_file):
            os.makedirs(ck, exist_ok=True)
            json.dump({{"step": step - 1}}, open(os.path.join(ck, "state.json"), "w"))
            emit({{"type": "paused", "checkpoint": ck}})
            sys.exit(3)
        emit({{"type": "progress", "step": step, "total": 40}})
        time.sleep(float(os.environ.get("FAKE_STEP_S", "0.05")))
out = os.path.normpath(os.path.join(folder, job["out"]))
accepted = os.environ.get("FAKE_ACCEPT", "1") == "1"
os.makedirs(out)
if os.environ.get("FAKE_ADAPTER"):  # a real tiny adapter, for tests that export it to Ollama
    import shutil
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(os.path.join(os.environ["FAKE_ADAPTER"], name), out)
else:
    write_lora(out)  # a rollback to it checks its files (tests/app/adapterfiles.py)
meta = {{"job_id": job["id"], "accepted": accepted, "reasons": [] if accepted else ["too far"],
        "metrics": {{"kl_to_base": 0.01, "preference": os.environ.get("FAKE_PREF", "unchanged"),
                    "gate_notes": ["held-out AUROC 0.50 -> 0.60: no measurable change"]}},
        "baseline": job["baseline"] - 0.1}}
if "FAKE_SKIP" in os.environ:  # the first training and held-out examples cannot fit
    rows = [json.loads(x) for x in open(os.path.join(folder, job["examples"]))]
    held = [json.loads(x) for x in open(os.path.join(folder, job["heldout"]))]
    for row, part in ((rows[0], "training"), (held[0], "held-out")):
        emit({{"type": "skipped", "id": row["id"], "set": part, "reason": "example "
               + row["id"] + ": the prompt alone is 812 tokens, so no response token fits "
               "in max_seq_len 96"}})
    meta["trained_ids"] = [r["id"] for r in rows[1:]]  # a skipped one is in neither list
    meta["unseen_ids"] = []
if "FAKE_TRAINED" in os.environ:  # a guard stop: the kept weights saw the first N fresh ones
    rows = [json.loads(x) for x in open(os.path.join(folder, job["examples"]))]
    fresh = [r["id"] for r in rows if not r.get("replay")]
    meta["trained_ids"] = fresh[: int(os.environ["FAKE_TRAINED"])]
    meta["unseen_ids"] = fresh[int(os.environ["FAKE_TRAINED"]) :]
json.dump(meta, open(os.path.join(out, "rltray.json"), "w"))
if mode == "die-after-write":  # killed after writing its adapter, before its done line
    os._exit(137)
emit({{"type": "progress", "step": 1, "total": 2}})
emit({{"type": "metric", "name": "auroc_new", "value": 0.75}})
emit({{"type": "progress", "step": 2, "total": 2}})
emit({{"type": "done", "adapter": out, **meta}})
"""
# the adapter writer, its braces doubled for the .format(python=…) the fixtures apply
FAKE_TRAINER = FAKE_TRAINER.replace(
    "# WRITE_LORA\n", adapterfiles.SCRIPT.lstrip().replace("{", "{{").replace("}", "}}"), 1
)


class Recorder(Publisher):
    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def published(self, version: int) -> None:
        self.calls.append(("published", version))

    def rolled_back(self, version: int | None) -> None:
        self.calls.append(("rolled_back", version))


def rate_many(store: Store, make_turn: Any, n: int, start: int = 0) -> list[int]:
    """``n`` ratings alternating good / bad, a minute apart; returns their ids."""
    ids = []
    for i in range(start, start + n):
        text = (GOOD if i % 2 == 0 else BAD)[(i // 2) % 4]
        turn_id, _ = store.add_turn(make_turn(prompt=f"Question {i}: how do I fix it?",
                                              response=text))  # fmt: skip
        rating = store.rate(turn_id, 1 if i % 2 == 0 else -1, "cli", at=T0 + timedelta(minutes=i))
        ids.append(rating.id)
    return ids


def wait_for_a_step(runner: TrainingRunner, changes: list[dict[str, Any]]) -> None:
    deadline = time.monotonic() + 30
    while not any(c.get("step") for c in changes):
        assert runner.running() and time.monotonic() < deadline, "no progress line"
        time.sleep(0.02)


def untrained(store: Store) -> set[int]:
    return {r["rating_id"] for r in store.training_examples(untrained_only=True)}


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    script = tmp_path / "fake-python"
    script.write_text(FAKE_TRAINER.format(python=sys.executable), encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def make_runner(
    store: Store, paths: Paths, python: str, base_model: str = "/models/tiny", **kw: Any
) -> tuple[TrainingRunner, Recorder, list[dict[str, Any]]]:
    training = TrainingSettings(base_model=base_model, backend="torch", python=python)
    publisher, changes = Recorder(), []
    runner = TrainingRunner(
        store, paths, lambda: Config(training=training), publisher, changes.append, **kw
    )
    return runner, publisher, changes


# -- the runner's logic with a fake trainer -------------------------------------


def test_accept_registers_v1_marks_fresh_ratings_and_publishes(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "done")
    ids = rate_many(store, make_turn, 20)
    runner, publisher, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30) and not runner.running()
    run = store.get_run(run_id)
    assert run is not None and run.status == "done" and run.adapter_version == 1
    assert run.metrics["accepted"] is True and run.metrics["auroc_new"] == 0.75
    assert run.metrics["fresh"] == 12 and run.metrics["heldout"] == 8
    v1 = store.active_adapter()
    assert v1 is not None and v1.version == 1 and v1.parent_version is None
    assert v1.path == str(paths.adapters / "v0001") and v1.baseline == pytest.approx(-0.1)
    assert (paths.adapters / "v0001" / "rltray.json").is_file()
    assert not (paths.adapters / f".run-{run_id}").exists()
    assert untrained(store) == set(ids[-8:])  # only the held-out ones wait
    assert publisher.calls == [("published", 1)]
    assert any(c["percent"] == 50.0 for c in changes)
    assert changes[-1]["status"] == "done" and runner.progress["status"] == "done"


@pytest.mark.parametrize(("reason", "away"), [("scheduled", "1"), ("manual", "0")])
def test_the_trainer_hears_whether_the_user_is_away(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch,
    reason: str, away: str,
) -> None:
    """A scheduled round runs while the user is idle and may take every core; Train now may not."""
    monkeypatch.setenv("FAKE_MODE", "done")
    monkeypatch.delenv("RLTRAY_TRAINER_USER_AWAY", raising=False)
    rate_many(store, make_turn, 48)  # a scheduled round needs training.min_ratings fresh ones
    runner, _, _ = make_runner(store, paths, fake_python)
    run_id = runner.start(reason=reason)
    assert runner.wait(30)
    assert (paths.runs / run_id / "user_away.txt").read_text() == away


def test_the_trainer_gets_the_trays_pid_and_a_stdin_pipe_that_stops_it(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 11: under a Windows venv the trainer's parent is a redirector that
    outlives the tray, so the tray names itself; the stdin pipe is its console-free stop."""
    monkeypatch.setenv("FAKE_MODE", "done")
    monkeypatch.delenv("RLTRAY_ANSWER_CACHE", raising=False)
    rate_many(store, make_turn, 4)
    runner, _, _ = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30)
    said = json.loads((paths.runs / run_id / "channel.json").read_text())
    # the base's kept answers go in the data folder, which deleting a turn empties
    assert said == {"parent_pid": str(os.getpid()), "stdin": "stop", "stdin_is_pipe": True,
                    "answer_cache": str(paths.answer_cache)}  # fmt: skip


@pytest.mark.parametrize(("platform", "flags"), [("win32", 0x08000000), ("linux", 0),
                                                 ("darwin", 0)])
def test_the_trainer_opens_no_console_window_on_windows(platform: str, flags: int) -> None:
    """Issue 23 item 11: from the windowed rltray.exe each round opened a console window.
    ``CREATE_NO_WINDOW`` alone: the process group was only for CTRL_BREAK_EVENT, which the
    runner no longer sends (it needs a console the windowed tray does not have)."""
    from rltray.app.training.runner import creation_flags

    assert creation_flags(platform) == flags
    if hasattr(subprocess, "CREATE_NO_WINDOW"):  # on Windows: the constant itself
        assert creation_flags("win32") == subprocess.CREATE_NO_WINDOW


def test_reject_keeps_ratings_and_registers_nothing(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "done")
    monkeypatch.setenv("FAKE_ACCEPT", "0")
    ids = rate_many(store, make_turn, 8)
    runner, publisher, _ = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30)
    run = store.get_run(run_id)
    assert run is not None and run.status == "done" and run.adapter_version is None
    assert run.metrics["accepted"] is False and run.metrics["reasons"] == ["too far"]
    assert run.metrics["baseline"] is None  # the fake moved it; a rejection records none
    assert store.list_adapters() == [] and list(paths.adapters.iterdir()) == []
    assert untrained(store) == set(ids) and publisher.calls == []


def test_a_crash_fails_the_run_with_the_log_tail(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "crash")
    ids = rate_many(store, make_turn, 8)
    runner, publisher, _ = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30)
    run = store.get_run(run_id)
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error.startswith(
        "the trainer exited with code 1: RuntimeError: the fake trainer broke\n"
    )
    assert run.error.rstrip().endswith("RuntimeError: the fake trainer broke")
    assert "noise line 59" in run.error and "noise line 10" not in run.error  # ~40 lines
    assert untrained(store) == set(ids) and store.list_adapters() == []
    assert publisher.calls == [] and not runner.running()
    # a round that failed judged nothing: no rating left training for the held-out set
    assert store.counts()["heldout"] == 0


def test_failed_rounds_do_not_drain_the_ratings_into_the_heldout_set(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: each build moved ~15% of the waiting ratings into the standing held-out
    set for good, before the trainer ran; a crash loop drained the training set."""
    monkeypatch.setenv("FAKE_MODE", "crash")
    rate_many(store, make_turn, 40)
    runner, _, _ = make_runner(store, paths, fake_python)
    for _ in range(3):
        runner.start()
        assert runner.wait(30)
    assert store.counts()["heldout"] == 0 and len(untrained(store)) == 40
    monkeypatch.setenv("FAKE_MODE", "done")
    run_id = runner.start()
    assert runner.wait(30) and store.get_run(run_id).status == "done"
    built = jobbuild.read_manifest(paths.runs / run_id)
    assert store.counts()["heldout"] == len(built.heldout_ids) > 0


def test_pause_then_resume_continues_the_same_job(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 8)
    runner, _, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    with pytest.raises(TrainingBusy):
        runner.start()
    wait_for_a_step(runner, changes)
    assert runner.stop(pause=True, timeout=20)
    run = store.get_run(run_id)
    assert run is not None and run.status == "paused" and run.finished_at is None
    paused_at = json.loads((paths.runs / run_id / "checkpoint" / "state.json").read_text())
    assert runner.start() == run_id  # start() resumes the paused run
    assert runner.wait(30)
    steps = [c["step"] for c in changes if c.get("step")]
    assert 40 in steps and paused_at["step"] + 1 in steps
    assert any(c.get("message") == "resumed" for c in changes)  # from the checkpoint
    log = (paths.runs / run_id / "trainer.log").read_text()
    assert log.count("--- ") == 2 and "resume" in log
    assert store.get_run(run_id).status == "done"


def test_a_pause_that_fails_is_a_failure_not_a_pause(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a trainer asked to pause that then failed (an error line, exit 1) was
    recorded as paused: its cause dropped, the failure budget not counting it."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    monkeypatch.setenv("FAKE_STOP", "fails")
    rate_many(store, make_turn, 8)
    runner, _, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    run = store.get_run(run_id)
    assert run.status == "failed" and run.error.startswith("disk full while saving")


def test_stop_without_pause_cancels(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 4)
    runner, _, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    runner.stop(pause=False, timeout=20)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    assert not (paths.runs / run_id / "checkpoint").exists()
    with pytest.raises(NothingToDo):
        runner.resume()


def test_a_paused_run_of_another_model_is_not_resumed(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 4)
    runner, _, changes = make_runner(store, paths, fake_python)
    old = runner.start()
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    monkeypatch.setenv("FAKE_MODE", "done")
    other = TrainingSettings(base_model="/models/other", backend="torch", python=fake_python)
    runner.settings_provider = lambda: Config(training=other)
    new = runner.start()
    assert new != old and runner.wait(30)
    assert store.get_run(old).status == "cancelled" and store.get_run(new).status == "done"
    assert store.active_adapter().base_model == "/models/other"


@pytest.mark.parametrize("change", ["reversed", "deleted"])
def test_a_paused_run_whose_ratings_changed_is_built_afresh(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch,
    change: str,
) -> None:
    """Regression: a paused round resumed from the job files it was built with, so a rating
    reversed while it waited was trained with its old value, and a deleted turn's text
    stayed in the run folder and was trained on."""
    from rltray.app.service import Service

    monkeypatch.setenv("FAKE_MODE", "slow")
    ids = rate_many(store, make_turn, 8)
    runner, _, changes = make_runner(store, paths, fake_python)
    old = runner.start()
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    rating = next(r for r in store.training_examples() if r["rating_id"] == ids[0])
    service = Service(paths, store=store)
    if change == "reversed":
        service.rate(rating["turn_id"], -rating["rating"], source="cli")
    else:
        paths.answer_cache.mkdir(parents=True)
        (paths.answer_cache / "set.json").write_text("{}")  # the base's kept answers
        service.delete_turns([rating["turn_id"]], "a test")
        for name in ("examples.jsonl", "heldout.jsonl"):  # no copy of its text is left
            assert rating["response"] not in (paths.runs / old / name).read_text()
        # nor in the paused round's checkpoint (its prompts' token ids) or the answer cache
        assert store.get_run(old).status == "cancelled"
        assert not (paths.runs / old / "checkpoint").exists()
        assert not paths.answer_cache.exists()
    monkeypatch.setenv("FAKE_MODE", "done")
    new = runner.start()
    assert new != old and runner.wait(30)
    assert store.get_run(old).status == "cancelled"
    if change == "reversed":
        assert "1 of its ratings were changed or deleted" in store.get_run(old).error
    lines = [json.loads(x) for name in ("examples.jsonl", "heldout.jsonl")
             for x in (paths.runs / new / name).read_text().splitlines()]  # fmt: skip
    assert f"rating-{ids[0]}" not in {x["id"] for x in lines}
    if change == "reversed":
        assert any(x["prompt"] == rating["prompt"] and x["rating"] == -rating["rating"]
                   for x in lines)  # fmt: skip


@pytest.mark.parametrize("meanwhile", ["a version became active", "its ratings were trained"])
def test_a_paused_run_overtaken_by_another_round_is_not_resumed(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch,
    meanwhile: str,
) -> None:
    """Regression: a run left "running" by a killed `rltray train` was settled as paused by a
    later start, missing the cancel an accepted round makes; resumed, it re-trained
    ratings already in the active version and ended as a useless candidate."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 8)
    runner, _, changes = make_runner(store, paths, fake_python)
    old = runner.start()
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    built = jobbuild.read_manifest(paths.runs / old)
    if meanwhile == "a version became active":
        folder = paths.adapters / "v0001"
        folder.mkdir(parents=True)
        store.add_adapter("/models/tiny", folder, parent_version=None, baseline=0.0)
        store.set_adapter_status(1, "active")
        why = "another version became active while it was paused"
    else:
        store.add_run("other")
        store.mark_trained(built.fresh_ids[:1], "other")
        why = "a later round trained its ratings while it was paused"
    assert adapterversions.resumable_run(store, paths, "/models/tiny") is None
    assert store.get_run(old).status == "cancelled" and store.get_run(old).error == why


def _turn_of(store: Store, rating_id: int) -> int:
    return next(r["turn_id"] for r in store.training_examples() if r["rating_id"] == rating_id)


def _change(service: Any, turn_id: int, change: str) -> None:
    """What the user does to a rated turn: reverse its rating, withdraw it, delete the turn."""
    if change == "reversed":
        service.rate(turn_id, -service.store.active_rating(turn_id).value, source="cli")
    elif change == "withdrawn":
        service.unrate(turn_id, source="cli")
    else:
        service.delete_turns([turn_id], "a test")


def _nothing_recorded(store: Store, paths: Paths, ids: list[int], publisher: Recorder) -> None:
    """No version, no rating marked trained or held out, nothing left in adapters/."""
    assert store.list_adapters() == [] and publisher.calls == []
    assert store.trained_of(ids) == set()
    assert all(r["heldout_at"] is None for r in store.training_examples())
    assert [p.name for p in paths.adapters.iterdir()] == []


STALE = "ratings changed while it trained: 1 of its ratings was reversed, withdrawn or deleted"
FRESH_ROUND = "a new round will train on what you said now"


@pytest.mark.parametrize("change", ["reversed", "withdrawn", "deleted"])
def test_a_rating_changed_while_its_round_runs_cancels_the_round(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch,
    change: str,
) -> None:
    """Regression (review 2 r2): a rating reversed, withdrawn or deleted while a round ran
    (not paused) was trained with its old verdict, a deleted turn's text with it, and the
    version was published as active. The service's rating listener (the runtime adds the
    runner's) stops the round at once, as cancelled."""
    from rltray.app.service import Service

    monkeypatch.setenv("FAKE_MODE", "slow")
    # a step a second: no progress line (where the reader asks the store itself) comes
    # between the change and the stop file, so the listener alone stopped it
    monkeypatch.setenv("FAKE_STEP_S", "1.0")
    ids = rate_many(store, make_turn, 8)
    runner, publisher, changes = make_runner(store, paths, fake_python)
    service = Service(paths, store=store)
    service.rating_listeners.append(runner.ratings_changed)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    _change(service, _turn_of(store, ids[0]), change)  # the oldest: a fresh training one
    assert (paths.runs / run_id / "stop").read_text() == "cancel"  # asked at once
    assert runner.wait(20)
    run = store.get_run(run_id)
    assert run.status == "cancelled" and run.error == f"{STALE} since it started; {FRESH_ROUND}"
    assert max(c.get("step") or 0 for c in changes) < 40  # stopped, not run to its end
    assert not (paths.runs / run_id / "checkpoint").exists()
    _nothing_recorded(store, paths, ids, publisher)


def test_a_rating_changed_by_another_process_cancels_the_round_too(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rating withdrawn by another process (`rltray undo` while `rltray train` runs)
    reaches no listener of this one: the reader asks the store at each progress line."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    monkeypatch.setenv("FAKE_STEP_S", "0.2")
    ids = rate_many(store, make_turn, 8)
    runner, publisher, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    store.undo("cli", turn_id=_turn_of(store, ids[-1]))  # the newest: a held-out one
    assert runner.wait(20)
    run = store.get_run(run_id)
    assert run.status == "cancelled" and run.error.startswith(STALE)
    assert max(c.get("step") or 0 for c in changes) < 40
    _nothing_recorded(store, paths, ids, publisher)


@pytest.mark.parametrize("how", ["at its end", "settled as a leftover"])
def test_a_result_whose_ratings_changed_meanwhile_is_not_recorded(
    store: Store, paths: Paths, make_turn, fake_python: str, how: str
) -> None:
    """Regression (review 2 r2): ``apply_result`` (a round's end, and a killed tray's
    finished round at the next start) never asked whether the ratings the round was built
    from are still what the user says: the version became active, the ratings trained."""
    ids = rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    built = jobbuild.build_job(store, paths, training, "stale")
    store.add_run("stale", status="running")
    heldout = built.heldout_ids[0]  # a rating the gate judged on counts as much
    runner, publisher, _ = make_runner(store, paths, fake_python)
    if how == "at its end":
        built.out.mkdir(parents=True)
        (built.out / "rltray.json").write_text(json.dumps({"job_id": "stale"}))
        store.undo("cli", turn_id=_turn_of(store, heldout))
        done = {"accepted": True, "reasons": [], "metrics": {"kl_to_base": 0.01}, "baseline": 0.5}
        assert adapterversions.apply_result(store, paths, built, done, {"fresh": 4}) is None
    else:
        _written_adapter(built.out, "stale")
        store.undo("cli", turn_id=_turn_of(store, heldout))
        assert runner.reconcile() == ["stale"]
    run = store.get_run("stale")
    assert run.status == "cancelled" and run.error.startswith(STALE)
    assert run.metrics["stale_ratings"] == [heldout] and run.metrics["baseline"] is None
    _nothing_recorded(store, paths, ids, publisher)


def test_resume_cancels_a_paused_run_whose_ratings_changed(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 2 r2): ``TrainingRunner.resume()`` skipped the check that
    ``start()`` makes (``resumable_run``), so it trained the changed rating's old verdict."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    ids = rate_many(store, make_turn, 8)
    runner, _, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    store.undo("cli", turn_id=_turn_of(store, ids[0]))
    with pytest.raises(NothingToDo, match=f"run {run_id} cannot resume, so it was cancelled: "
                       "1 of its ratings were changed or deleted"):  # fmt: skip
        runner.resume(run_id)
    assert not runner.running() and store.get_run(run_id).status == "cancelled"
    assert not (paths.runs / run_id / "checkpoint").exists()


def test_the_running_rltray_tells_the_runner_when_ratings_change(
    paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The runtime adds the runner to the service's rating listeners (review 2 r2): a
    rating given in the tray (a notification, the window, the API) stops the round."""
    from rltray.app.runtime import compose
    from rltray.app.service import Service

    monkeypatch.setenv("FAKE_MODE", "slow")
    monkeypatch.setenv("FAKE_STEP_S", "1.0")  # no step between the change and the stop file
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    with Service(paths) as service:
        errors, _ = service.save_settings(
            {"training.python": fake_python, "training.base_model": str(model)}
        )
        assert not errors
        ids = rate_many(service.store, make_turn, 8)
        runtime = compose(service, None, notifications=False, scheduler=False, api=False)
        try:
            run_id = service.train_now()["run"]
            deadline = time.monotonic() + 30
            while not service.runner().progress.get("step"):
                assert time.monotonic() < deadline, "no progress line"
                time.sleep(0.02)
            service.rate(_turn_of(service.store, ids[0]), -1, source="cli")
            assert (paths.runs / run_id / "stop").read_text() == "cancel"
            assert service.runner().wait(20)
            run = service.store.get_run(run_id)
            assert run.status == "cancelled" and run.error.startswith(STALE)
        finally:
            runtime.close()


def test_rollback_restores_the_parent_and_its_baseline(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "done")
    runner, publisher, _ = make_runner(store, paths, fake_python)
    rate_many(store, make_turn, 8)
    runner.start()
    runner.wait(30)
    rate_many(store, make_turn, 8, start=8)
    runner.start()
    runner.wait(30)
    v2 = store.active_adapter()
    assert v2 is not None and v2.version == 2 and v2.parent_version == 1
    assert v2.baseline == pytest.approx(-0.2)  # the fake lowers the job's baseline by 0.1
    v1 = runner.rollback()
    assert v1 is not None and v1.version == 1 and v1.status == "active"
    assert store.get_adapter(2).status == "rolled-back"
    rate_many(store, make_turn, 4, start=16)
    run_id = runner.start()
    runner.wait(30)
    job = json.loads((paths.runs / run_id / "job.json").read_text())
    assert job["baseline"] == pytest.approx(-0.1) and job["parent_adapter"] == v1.path
    assert runner.rollback().version == 1  # v3 -> its parent v1
    assert runner.rollback() is None and store.active_adapter() is None  # v1's parent: base
    with pytest.raises(NothingToDo):
        runner.rollback()
    assert runner.rollback(2).version == 2  # any kept version, forward too
    assert runner.rollback(0) is None  # 0: the plain base model
    assert publisher.calls == [("published", 1), ("published", 2), ("rolled_back", 1),
                               ("published", 3), ("rolled_back", 1), ("rolled_back", None),
                               ("rolled_back", 2), ("rolled_back", None)]  # fmt: skip


def test_reconcile_settles_runs_of_a_killed_tray(
    store: Store, paths: Paths, make_turn, fake_python: str
) -> None:
    ids = rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    for name in ("crashed", "checkpointed", "finished"):
        jobbuild.build_job(store, paths, training, name)
        store.add_run(name, status="running")
    ck = paths.runs / "checkpointed" / "checkpoint"
    ck.mkdir()
    (ck / "state.json").write_text("{}")
    out = jobbuild.read_manifest(paths.runs / "finished").out
    _written_adapter(out, "finished")
    (paths.runs / "crashed" / "trainer.pid").write_text(str(os.getpid()))  # not a trainer

    runner, publisher, _ = make_runner(store, paths, fake_python)
    assert sorted(runner.reconcile()) == ["checkpointed", "crashed", "finished"]
    assert store.get_run("crashed").status == "failed"
    assert store.get_run("crashed").error == leftovers.KILLED_TRAY
    assert store.get_run("checkpointed").status == "cancelled"  # stale after v1 was applied
    assert store.get_run("finished").status == "done"
    assert store.active_adapter().version == 1 and store.active_adapter().baseline == 0.3
    assert publisher.calls == [("published", 1)]
    fresh = set(jobbuild.read_manifest(paths.runs / "finished").fresh_ids)
    assert untrained(store) == set(ids) - fresh
    assert runner.reconcile() == []


def _written_adapter(out: Path, job_id: str, accepted: bool = True) -> Path:
    """A real tiny PEFT adapter at ``out`` whose rltray.json is job ``job_id``'s result."""
    pytest.importorskip("numpy", reason="the tiny adapter is written with numpy")
    from tests.support.tinygguf import build_tiny_adapter

    build_tiny_adapter(out)
    meta = json.loads((out / "rltray.json").read_text())
    meta.update(job_id=job_id, accepted=accepted, reasons=[] if accepted else ["too far"],
                baseline=0.3, metrics={"kl_to_base": 0.01})  # fmt: skip
    (out / "rltray.json").write_text(json.dumps(meta))
    return out


def test_a_leftover_adapter_that_fails_the_check_is_rejected_not_applied(
    store: Store, paths: Paths, make_turn, fake_python: str
) -> None:
    """Regression (review, unconfirmed item): reconcile applied a killed trainer's
    rltray.json as accepted without the check trainer/finish.py ``written_result`` makes
    of a folder it wrote (the trainer may die between writing its folder and checking it)."""
    ids = rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    built = jobbuild.build_job(store, paths, training, "unchecked")
    store.add_run("unchecked", status="running")
    _written_adapter(built.out, "unchecked")
    weights = built.out / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])  # cut short: a value is missing
    runner, publisher, _ = make_runner(store, paths, fake_python)
    assert runner.reconcile() == ["unchecked"]
    run = store.get_run("unchecked")
    assert run.status == "done" and run.adapter_version is None and not run.metrics["accepted"]
    assert any(r.startswith("adapter check failed:") for r in run.metrics["reasons"])
    assert store.list_adapters() == [] and publisher.calls == []
    assert not built.out.exists() and untrained(store) == set(ids)


def test_reconcile_leaves_a_round_another_live_process_runs_alone(
    store: Store, paths: Paths, make_turn, fake_python: str
) -> None:
    """Regression (review r3): a second `rltray train` (or a tray starting) took the first
    one's live round for a killed tray's leftover: it stopped its trainer and settled it
    as failed, while the first process made its version active."""
    rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    folder = jobbuild.build_job(store, paths, training, "theirs").folder
    store.add_run("theirs", status="running")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)", str(folder)]
    owner = subprocess.Popen(sleep[:3])  # the other `rltray train`
    trainer = subprocess.Popen(sleep)  # its trainer (its command line names the folder)
    try:
        (folder / "owner.pid").write_text(str(owner.pid))
        (folder / "trainer.pid").write_text(str(trainer.pid))
        runner, _, _ = make_runner(store, paths, fake_python)
        assert runner.reconcile() == []
        assert trainer.poll() is None and store.get_run("theirs").status == "running"
        with pytest.raises(TrainingBusy, match="theirs is already running in another process"):
            runner.start()  # it would train the same ratings beside it
        assert [r.id for r in store.list_runs()] == ["theirs"]
        owner.kill()
        owner.wait(10)
        assert runner.reconcile() == ["theirs"]  # its owner is gone: a leftover now
        assert trainer.wait(30) is not None and store.get_run("theirs").status == "failed"
    finally:
        for proc in (owner, trainer):
            proc.kill()
            proc.wait(10)


def test_a_leftover_settled_meanwhile_by_its_owner_is_left_as_recorded(
    store: Store, paths: Paths, make_turn
) -> None:
    """The settle of a leftover is conditional: a run its owner finished meanwhile (while
    the trainer was being stopped) keeps what the owner recorded."""
    rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    jobbuild.build_job(store, paths, training, "late")
    run = store.add_run("late", status="running")
    store.finish_run("late", "done", metrics={"accepted": False})
    assert leftovers.settle_leftover(store, paths, run, 1.0) is None
    assert store.get_run("late").status == "done"
    assert store.finish_run("late", "failed", only_if="running").status == "done"
    assert store.set_run_status("late", "paused", only_if="running").status == "done"


def test_run_files_are_private_whatever_the_umask(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review item 7): trainer.log and trainer.pid were 0666 under umask 000."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 4)
    runner, _, changes = make_runner(store, paths, fake_python)
    old = os.umask(0)
    try:
        run_id = runner.start()
    finally:
        os.umask(old)
    wait_for_a_step(runner, changes)
    for name in ("trainer.log", "trainer.pid", "owner.pid"):
        assert (paths.runs / run_id / name).stat().st_mode & 0o777 == 0o600, name
    runner.stop(pause=False, timeout=20)
    assert not (paths.runs / run_id / "owner.pid").exists()  # the round is no longer ours


def test_a_trainer_killed_after_writing_its_adapter_leaves_nothing_in_adapters(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review r8): a trainer that died after writing its adapter but before its
    done line left adapters/.run-<id> for ever (never applied, never removed)."""
    monkeypatch.setenv("FAKE_MODE", "die-after-write")
    rate_many(store, make_turn, 8)
    runner, publisher, _ = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30) and store.get_run(run_id).status == "failed"
    assert sorted(p.name for p in paths.adapters.iterdir()) == []
    # one left by an earlier rltray, and half-written temp folders: swept at reconcile
    left = paths.adapters / f".run-{run_id}"
    _written_adapter(left, run_id)
    (paths.adapters / f"..run-{run_id}.tmp-1-ab").mkdir()
    (paths.adapters / ".run-someone-else").mkdir()  # no run of ours: not touched
    assert runner.reconcile() == []
    assert sorted(p.name for p in paths.adapters.iterdir()) == [".run-someone-else"]
    assert store.list_adapters() == [] and publisher.calls == []


def test_reconcile_keeps_a_checkpointed_run_resumable(
    store: Store, paths: Paths, make_turn, fake_python: str
) -> None:
    rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    jobbuild.build_job(store, paths, training, "left")
    store.add_run("left", status="running")
    (paths.runs / "left" / "checkpoint").mkdir()
    (paths.runs / "left" / "checkpoint" / "state.json").write_text("{}")
    runner, _, _ = make_runner(store, paths, fake_python)
    assert runner.reconcile() == ["left"] and store.get_run("left").status == "paused"


def test_a_publisher_that_fails_is_logged_not_fatal(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "done")
    rate_many(store, make_turn, 4)
    runner, publisher, _ = make_runner(store, paths, fake_python)

    def broken(version: int) -> None:
        raise RuntimeError("ollama is down")

    publisher.published = broken  # type: ignore[method-assign]
    runner.start()
    runner.wait(30)
    assert store.active_adapter().version == 1
    assert any(e["kind"] == "publish-failed" and "ollama is down" in e["message"]
               for e in store.events())  # fmt: skip


def test_a_silent_crash_names_the_exit_code_not_the_log_header(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 20 item 12): the cause was the log's ``--- <time> manual`` header."""
    monkeypatch.setenv("FAKE_MODE", "silent")
    rate_many(store, make_turn, 4)
    runner, _, _ = make_runner(store, paths, fake_python)
    run = store.get_run(runner.start())
    assert runner.wait(30)
    run = store.get_run(run.id)
    assert run.status == "failed"
    assert run.error.splitlines()[0] == "the trainer exited with code 1"


def test_a_guard_stop_retires_only_the_ratings_the_kept_weights_saw(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 item 8: a stop at step k kept weights that saw k x step_examples ratings."""
    monkeypatch.setenv("FAKE_MODE", "done")
    monkeypatch.setenv("FAKE_TRAINED", "5")
    ids = rate_many(store, make_turn, 20)
    runner, _, _ = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30)
    built = jobbuild.read_manifest(paths.runs / run_id)
    fresh = len(built.fresh_ids)
    assert fresh > 5
    run = store.get_run(run_id)
    assert run.adapter_version == 1 and run.metrics["trained"] == 5
    assert untrained(store) == set(ids) - set(built.fresh_ids[:5])
    assert any(f"saw 5 of the {fresh} fresh ratings" in n for n in run.metrics["notes"])


def test_a_result_without_trained_ids_retires_every_fresh_rating(
    store: Store, paths: Paths, make_turn, fake_python: str
) -> None:
    """An older trainer's result (no ``trained_ids``) keeps today's meaning: all were seen."""
    rate_many(store, make_turn, 8)
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    built = jobbuild.build_job(store, paths, training, "older")
    store.add_run("older")
    built.out.mkdir()
    done = {"accepted": True, "reasons": [], "metrics": {}, "baseline": 0.1}
    assert adapterversions.apply_result(store, paths, built, done, {}) == 1
    assert store.get_run("older").metrics["trained"] == len(built.fresh_ids) > 0
    assert untrained(store) == set(built.heldout_ids)


SKIP_WHY = "the prompt alone is 812 tokens, so no response token fits in max_seq_len 96"


def test_examples_the_trainer_skips_are_named_and_not_retired(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 2 r4): the runner dropped the trainer's ``skipped`` lines; a
    skipped fresh rating was marked trained (retired for good), a skipped held-out one
    joined the standing held-out set without being judged on, and nothing said so."""
    monkeypatch.setenv("FAKE_MODE", "done")
    monkeypatch.setenv("FAKE_SKIP", "1")  # the first training and held-out examples
    ids = rate_many(store, make_turn, 16)
    runner, _, _ = make_runner(store, paths, fake_python)
    run_id = runner.start()
    assert runner.wait(30)
    built = jobbuild.read_manifest(paths.runs / run_id)
    fresh, held = built.fresh_ids[0], built.heldout_ids[0]
    run = store.get_run(run_id)
    assert run.status == "done" and run.adapter_version == 1
    assert run.metrics["skipped"] == [
        {"rating": fresh, "id": f"rating-{fresh}", "set": "training",
         "reason": f"example rating-{fresh}: {SKIP_WHY}"},
        {"rating": held, "id": f"rating-{held}", "set": "held-out",
         "reason": f"example rating-{held}: {SKIP_WHY}"},
    ]  # fmt: skip
    # neither trained on nor judged on: not trained, not in the standing held-out set
    assert store.trained_of(ids) == set(built.fresh_ids) - {fresh}
    assert run.metrics["trained"] == len(built.fresh_ids) - 1
    standing = {r["rating_id"] for r in store.training_examples() if r["heldout_at"]}
    assert standing == set(built.heldout_ids) - {held}
    # said: in `rltray runs` and in the run's notes
    summary = outcome.summary({"status": run.status, "metrics": run.metrics})
    assert summary.endswith(f"; skipped 2 ratings it could not fit (rating {fresh}: "
                            f"{SKIP_WHY}; 1 more in the run's notes)")  # fmt: skip
    notes = run.metrics["notes"]
    assert f"the trainer skipped rating {fresh} (training part): {SKIP_WHY}" in notes
    assert f"the trainer skipped rating {held} (held-out part): {SKIP_WHY}" in notes
    assert not any("kept weights saw" in n for n in notes)  # no guard stop: none waits
    # a later round with the same window leaves them out (they would be skipped again) ...
    training = TrainingSettings(base_model="/models/tiny", backend="torch")
    with pytest.raises(jobbuild.NotEnoughRatings, match=r"No new ratings yet; .*; 2 more could "
                       r"not be fitted to this model's max_seq_len in an earlier round"):
        jobbuild.build_job(store, paths, training, "nothing-new")
    rate_many(store, make_turn, 8, start=16)
    same = jobbuild.build_job(store, paths, training, "same-window")
    assert {fresh, held}.isdisjoint(same.rating_ids)
    assert any("left out 2 ratings an earlier round on this model could not fit" in n
               for n in same.notes)  # fmt: skip
    # ... and one with a longer max_seq_len offers them again
    longer = jobbuild.build_job(store, paths, training, "longer", hyper={"max_seq_len": 4096})
    assert {fresh, held} <= set(longer.rating_ids)


def test_a_new_base_model_starts_a_new_line_that_becomes_active(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 20 item 11): after the model changed every round was kept as a
    candidate, never active, its ratings used up, while the CLI said "now active"."""
    monkeypatch.setenv("FAKE_MODE", "done")
    rate_many(store, make_turn, 8)
    runner, publisher, _ = make_runner(store, paths, fake_python)
    runner.start()
    assert runner.wait(30) and store.active_adapter().version == 1
    other = TrainingSettings(base_model="/models/other", backend="torch", python=fake_python)
    runner.settings_provider = lambda: Config(training=other)
    for start in (8, 16):
        rate_many(store, make_turn, 8, start=start)
        run_id = runner.start()
        assert runner.wait(30)
    v2, v3 = store.get_adapter(2), store.get_adapter(3)
    assert (v2.base_model, v2.parent_version, v2.status) == ("/models/other", None, "superseded")
    assert (v3.parent_version, v3.status) == (2, "active")  # the new line goes on from v2
    first = store.list_runs()[1]
    assert first.metrics["new_line"] is True and first.metrics["kept_as"] == "active"
    assert first.metrics["active_before"] == {"version": 1, "base_model": "/models/tiny"}
    job = json.loads((paths.runs / first.id / "job.json").read_text())
    assert job["parent_adapter"] is None and job["baseline"] == 0.0
    assert store.get_run(run_id).metrics["new_line"] is False
    assert not untrained(store) & set(jobbuild.read_manifest(paths.runs / first.id).fresh_ids)
    assert publisher.calls == [("published", 1), ("published", 2), ("published", 3)]
    # Regression: rolling back to v1 (trained on /models/tiny) merged it onto the model set
    # up now, a pairing nothing judged; the tray offered it as one click.
    with pytest.raises(UserError, match=r"v1 was trained on /models/tiny, but the model set up"):
        runner.rollback(1)
    assert store.active_adapter().version == 3 and len(publisher.calls) == 3
    from rltray.app.tray.state import _versions

    rows = [{"version": a.version, "status": a.status, "base_model": a.base_model}
            for a in store.list_adapters()]  # fmt: skip
    offered = [c.version for c in _versions(rows, 3, "/models/other")]
    assert 1 not in offered and {2, 3, None} <= set(offered)


def test_a_rollback_in_the_same_line_while_training_keeps_a_candidate(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process switched versions under the round: the new one is not switched in."""
    monkeypatch.setenv("FAKE_MODE", "done")
    runner, publisher, changes = make_runner(store, paths, fake_python)
    for start in (0, 8):
        rate_many(store, make_turn, 8, start=start)
        runner.start()
        assert runner.wait(30)
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 8, start=16)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    adapterversions.rollback(store, paths, 1)  # as `rltray rollback 1` from another process
    assert runner.wait(30)
    run = store.get_run(run_id)
    assert run.adapter_version == 3 and run.metrics["kept_as"] == "candidate"
    assert store.active_adapter().version == 1 and store.get_adapter(3).status == "candidate"
    assert "trained from v2, but v1 became active" in run.metrics["notes"][-1]
    assert publisher.calls == [("published", 1), ("published", 2)]
    # Regression: the candidate marked its ratings trained, so the active line never
    # learned them; they wait for a round of the active version.
    fresh = set(jobbuild.read_manifest(paths.runs / run_id).fresh_ids)
    assert fresh and fresh <= untrained(store) and run.metrics["trained"] == 0


def test_a_candidate_made_active_by_rollback_retires_its_ratings(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review r7): a version kept as a candidate marked none of its ratings
    trained, and making it active later left them fresh: the next round trained them a
    second time on top of weights that had learned them."""
    monkeypatch.setenv("FAKE_MODE", "done")
    runner, _, changes = make_runner(store, paths, fake_python)
    rate_many(store, make_turn, 8)
    runner.start()
    assert runner.wait(30)
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 8, start=8)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    adapterversions.rollback(store, paths, 0)  # as `rltray rollback 0` from another process
    assert runner.wait(30) and store.get_adapter(2).status == "candidate"
    fresh = set(jobbuild.read_manifest(paths.runs / run_id).fresh_ids)
    assert fresh and fresh <= untrained(store)  # the active line never learned them
    assert runner.rollback(2).version == 2  # the user picks the candidate
    assert not fresh & untrained(store)
    assert {r["trained_run_id"] for r in store.training_examples() if r["rating_id"] in fresh} == {
        run_id
    }
    monkeypatch.setenv("FAKE_MODE", "done")
    rate_many(store, make_turn, 2, start=16)
    next_run = runner.start()
    assert runner.wait(30)
    assert not fresh & set(jobbuild.read_manifest(paths.runs / next_run).fresh_ids)


def test_a_round_that_ends_after_the_base_model_changed_is_kept_as_a_candidate(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review r2): a round built on model A that ended after
    training.base_model was set to B was made active and published onto B's Ollama model,
    a pairing nothing judged."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 8)
    runner, publisher, changes = make_runner(store, paths, fake_python)
    run_id = runner.start()
    wait_for_a_step(runner, changes)
    other = TrainingSettings(base_model="/models/other", backend="torch", python=fake_python)
    runner.settings_provider = lambda: Config(training=other)  # the settings page, meanwhile
    assert runner.wait(30)
    run = store.get_run(run_id)
    assert run.status == "done" and run.adapter_version == 1
    assert store.active_adapter() is None and store.get_adapter(1).status == "candidate"
    assert (run.metrics["kept_as"], run.metrics["base_now"]) == ("candidate", "/models/other")
    assert publisher.calls == []  # never published
    row = {"status": run.status, "metrics": run.metrics, "adapter_version": 1}
    said = outcome.accepted_sentence(row)
    assert said.startswith("version v1 is kept as a candidate, not made active: it was "
                           "trained on /models/tiny, but training.base_model was changed "
                           "to /models/other while it trained")  # fmt: skip
    assert "now active" not in said and "now active" not in outcome.notice(row)[1]
    # its ratings wait for a round of the model set up now, which starts from that base
    assert set(jobbuild.read_manifest(paths.runs / run_id).fresh_ids) <= untrained(store)
    with pytest.raises(UserError, match="v1 was trained on /models/tiny"):
        runner.rollback(1)


def test_a_resumed_round_says_so_and_train_now_marks_it_by_hand(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 48)
    runner, _, changes = make_runner(store, paths, fake_python)
    run_id = runner.start(reason="scheduled")
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    assert store.get_run(run_id).metrics["by_hand"] is False
    assert runner.start(reason="manual") == run_id
    assert runner.progress["resumed"] is True
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    assert runner.start(reason="scheduled") == run_id and runner.wait(30)
    metrics = store.get_run(run_id).metrics
    assert metrics["by_hand"] is True and metrics["resumes"] == 2  # Train now stays recorded


def test_a_train_now_round_resumed_by_the_scheduler_is_the_schedulers_round(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: Train now, Stop training, and the scheduler resumed the run while the user
    was away; the gate still took it for Train now (same run id) and let it go on on battery
    and while the user worked, with the trainer told it could take every core."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate_many(store, make_turn, 48)
    runner, _, changes = make_runner(store, paths, fake_python)
    run_id = runner.start(reason="manual")
    assert runner.running_for_the_user()
    wait_for_a_step(runner, changes)
    runner.stop(pause=True, timeout=20)
    assert runner.start(reason="scheduled") == run_id
    assert runner.running() and not runner.running_for_the_user()
    runner.stop(pause=True, timeout=20)


# -- the real trainer on a tiny model -----------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from rltray.trainer.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def real_runner(
    store: Store, paths: Paths, model: Path, **hyper: Any
) -> tuple[TrainingRunner, Recorder, list[dict[str, Any]]]:
    return make_runner(
        store, paths, sys.executable, str(model), hyper={**TINY_HYPER, **hyper}, device="cpu",
        env={"RLTRAY_TRAINER_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip


def finished(runner: TrainingRunner, store: Store, run_id: str):
    assert runner.wait(180), "the trainer did not finish in 3 minutes"
    run = store.get_run(run_id)
    assert run is not None
    log = Path(runner.paths.runs / run_id / "trainer.log").read_text()
    assert run.status != "failed", (run.error or "") + log[-2000:]
    return run


@pytest.mark.ml
@pytest.mark.slow
def test_real_rounds_then_rollback(store: Store, paths: Paths, make_turn, tiny_model: Path) -> None:
    first = rate_many(store, make_turn, 16)
    runner, publisher, _ = real_runner(store, paths, tiny_model)
    run1 = finished(runner, store, runner.start())
    assert run1.status == "done" and run1.metrics["accepted"] is True, run1.metrics
    assert run1.metrics["gate_notes"] and run1.metrics["preference"] == "unmeasured"
    assert run1.metrics["trained"] == run1.metrics["fresh"]  # no guard stop: every fresh one
    v1 = store.active_adapter()
    assert v1 is not None and v1.version == 1 and v1.parent_version is None
    assert (Path(v1.path) / "adapter_model.safetensors").is_file()
    assert untrained(store) == set(first[-8:])  # the held-out 4 good + 4 bad
    assert v1.baseline == run1.metrics["baseline"] and v1.baseline != 0.0

    rate_many(store, make_turn, 8, start=16)
    run2 = finished(runner, store, runner.start())
    assert run2.metrics["accepted"] is True, run2.metrics
    v2 = store.active_adapter()
    assert v2 is not None and v2.version == 2 and v2.parent_version == 1
    meta = json.loads((Path(v2.path) / "rltray.json").read_text())
    assert meta["parent"] == v1.path and meta["job_id"] == run2.id
    assert run2.metrics["auroc_parent"] is not None  # compared against v1 this time

    back = runner.rollback()
    assert back is not None and back.version == 1 and back.baseline == v1.baseline
    assert store.active_adapter().version == 1
    assert publisher.calls == [("published", 1), ("published", 2), ("rolled_back", 1)]


@pytest.mark.ml
@pytest.mark.slow
def test_real_pause_needs_no_signal_and_resume_finishes(
    store: Store, paths: Paths, make_turn, tiny_model: Path
) -> None:
    """The runner pauses the real trainer the way it must on Windows, where the windowed
    tray has no console for CTRL_BREAK_EVENT (issue 23 item 11): stop file and stdin."""
    ids = rate_many(store, make_turn, 16)
    runner, _, changes = real_runner(store, paths, tiny_model, epochs=30)  # 60 steps
    first_step = threading.Event()

    def watch(progress: dict[str, Any]) -> None:
        if progress.get("step"):
            first_step.set()

    runner.on_change = lambda p: (changes.append(p), watch(p))
    run_id = runner.start()
    assert first_step.wait(120), "no progress line"
    runner.stop(pause=True, timeout=60)
    run = store.get_run(run_id)
    assert run is not None and run.status == "paused", run.error
    state = json.loads((paths.runs / run_id / "checkpoint" / "state.json").read_text())
    paused_at = state["global_step"]
    assert 0 < paused_at < 60 and untrained(store) == set(ids)

    changes.clear()
    assert runner.resume() == run_id
    run = finished(runner, store, run_id)
    assert run.status == "done" and run.adapter_version is not None
    steps = [c["step"] for c in changes if c.get("step")]
    assert min(steps) > paused_at and max(steps) == 60  # continued, not restarted
    assert not (paths.runs / run_id / "checkpoint").exists()


@pytest.mark.ml
@pytest.mark.slow
def test_real_crash_on_a_missing_base_model(
    store: Store, paths: Paths, make_turn, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    ids = rate_many(store, make_turn, 8)
    runner, _, _ = real_runner(store, paths, tmp_path / "no-such-model")
    run_id = runner.start()
    assert runner.wait(120)
    run = store.get_run(run_id)
    assert run is not None and run.status == "failed" and run.error
    assert "no-such-model" in run.error.splitlines()[0]
    assert "trainer.log (last lines)" in run.error
    assert untrained(store) == set(ids) and store.list_adapters() == []


@pytest.mark.ml
@pytest.mark.slow
def test_real_gate_rejection(store: Store, paths: Paths, make_turn, tiny_model: Path) -> None:
    ids = rate_many(store, make_turn, 16)
    runner, publisher, _ = real_runner(store, paths, tiny_model, kl_cap=1e-9)
    run = finished(runner, store, runner.start())
    assert run.status == "done" and run.metrics["accepted"] is False
    assert any("KL" in r for r in run.metrics["reasons"])
    said = outcome.verdict({"status": run.status, "metrics": run.metrics})
    assert said.startswith("rejected: ") and "KL" in said  # what `rltray train` prints
    assert store.list_adapters() == [] and publisher.calls == []
    assert [p.name for p in paths.adapters.iterdir()] == []
    assert untrained(store) == set(ids)


@pytest.mark.ml
@pytest.mark.slow
def test_real_skipped_example_is_named_and_stays_untrained(
    store: Store, paths: Paths, make_turn, tiny_model: Path
) -> None:
    """Review 2 r4 with the real trainer: its ``skipped`` line (trainer/rounddata.py) for a
    prompt longer than max_seq_len is kept in the run, said, and the rating not retired."""
    pasted = "Traceback (most recent call last):\n  File x.py line 3\n" * 40  # ~800 tokens
    ids = []
    for i in range(16):
        prompt = f"Question {i}: fix this\n{pasted}" if i == 0 else f"Question {i}: how?"
        turn_id, _ = store.add_turn(make_turn(prompt=prompt, context=[],
                                              response=(GOOD if i % 2 == 0 else BAD)[i // 2 % 4]))
        ids.append(store.rate(turn_id, 1 if i % 2 == 0 else -1, "cli",
                              at=T0 + timedelta(minutes=i)).id)  # fmt: skip
    runner, _, _ = real_runner(store, paths, tiny_model)
    run = finished(runner, store, runner.start())
    (skip,) = run.metrics["skipped"]
    assert (skip["rating"], skip["id"], skip["set"]) == (ids[0], f"rating-{ids[0]}", "training")
    assert skip["reason"].endswith("so no response token fits in max_seq_len 96"), skip
    assert ids[0] not in store.trained_of(ids) and run.metrics["examples_skipped"] == 1
    said = outcome.summary({"status": run.status, "metrics": run.metrics})
    assert f"; skipped 1 rating it could not fit (rating {ids[0]}: the prompt alone is " in said


def test_a_stop_while_the_done_round_publishes_returns_at_once(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the publish to Ollama runs after the trainer exits, while the runner
    still counts as running; the gate's stop (the user came back) waited for the whole
    publish, logged "paused" for a round that was done, and left a stop file behind."""
    import threading

    monkeypatch.setenv("FAKE_MODE", "done")
    rate_many(store, make_turn, 20)
    runner, publisher, _ = make_runner(store, paths, fake_python)
    publishing, release = threading.Event(), threading.Event()

    def slow_publish(version: int) -> None:
        publishing.set()
        release.wait(30)

    publisher.published = slow_publish  # type: ignore[method-assign]
    run_id = runner.start()
    assert publishing.wait(30) and runner.running()
    started = time.monotonic()
    assert runner.stop(pause=True, timeout=20) is False
    assert time.monotonic() - started < 2
    assert not (paths.runs / run_id / "stop").exists()
    release.set()
    assert runner.wait(30)
    run = store.get_run(run_id)
    assert run is not None and run.status == "done" and run.adapter_version == 1


def test_a_rollback_goes_ahead_while_the_finished_round_publishes(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3 r5): once the trainer exited and its result was recorded, the
    publish to Ollama (tens of minutes for a big merge and upload) still counted as a
    running round, so `rltray rollback` was refused for all of it. The publisher serializes
    with the rollback itself (its lock, then ``latest`` follows what is active)."""
    monkeypatch.setenv("FAKE_MODE", "done")
    rate_many(store, make_turn, 20)
    runner, publisher, _ = make_runner(store, paths, fake_python)
    publishing, release = threading.Event(), threading.Event()

    def slow_publish(version: int) -> None:
        publisher.calls.append(("published", version))
        publishing.set()
        release.wait(30)

    publisher.published = slow_publish  # type: ignore[method-assign]
    run_id = runner.start()
    try:
        assert publishing.wait(30) and runner.running() and runner.exporting()
        assert runner.rollback(0) is None and store.active_adapter() is None
        assert store.get_adapter(1).status == "rolled-back"
        with pytest.raises(TrainingBusy):  # a new round still waits: the runner has one child
            runner.start()
    finally:
        release.set()
    assert runner.wait(30) and not runner.exporting()
    assert publisher.calls == [("published", 1), ("rolled_back", None)]
    run = store.get_run(run_id)
    assert run is not None and run.status == "done" and run.adapter_version == 1


def test_a_version_records_the_digests_of_its_files_and_rollback_checks_them(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3 r7): rollback only checked that the folder existed, so a version
    whose weights were deleted or replaced since was made active and published under its
    number. Refused now before the store switches or anything is published."""
    import hashlib

    monkeypatch.setenv("FAKE_MODE", "done")
    runner, publisher, _ = make_runner(store, paths, fake_python)
    for start in (0, 8):
        rate_many(store, make_turn, 8, start=start)
        runner.start()
        assert runner.wait(30)
    v1 = store.get_adapter(1)
    weights = Path(v1.path) / adapterfiles.WEIGHTS
    original = weights.read_bytes()
    assert v1.files == {
        name: hashlib.sha256((Path(v1.path) / name).read_bytes()).hexdigest()
        for name in (adapterfiles.WEIGHTS, adapterfiles.CONFIG)
    }
    weights.write_bytes(adapterfiles.weights_bytes(0.9))  # another adapter, well formed
    with pytest.raises(UserError, match=r"^v1 cannot be made active: adapter_model\.safetensors "
                       r"in its folder .* was replaced since it was trained, so it would not "
                       r"serve what was trained; pick another version"):
        runner.rollback(1)
    weights.unlink()
    with pytest.raises(UserError, match=r"adapter_model\.safetensors is missing from its folder"):
        runner.rollback(1)
    assert store.active_adapter().version == 2 and store.get_adapter(1).status != "active"
    assert publisher.calls == [("published", 1), ("published", 2)]  # nothing republished
    weights.write_bytes(original)
    assert runner.rollback(1).version == 1


def test_a_version_without_recorded_digests_gets_the_structure_check(
    store: Store, paths: Paths
) -> None:
    """A version from before digests were recorded (``files`` NULL) is still checked as a
    remote round's result is: a folder that is not a LoRA adapter is never made active."""
    runner, publisher, _ = make_runner(store, paths, "python")
    folder = adapterfiles.write_lora(paths.adapters / "v0001")
    store.add_adapter("/models/tiny", folder)
    (folder / adapterfiles.CONFIG).write_text('{"peft_type": "LORA"}')  # no rank
    with pytest.raises(UserError, match=r"^v1 cannot be made active: adapter_config\.json has "
                       "no positive rank r in its folder"):
        runner.rollback(1)
    assert store.active_adapter() is None and publisher.calls == []
    adapterfiles.write_lora(folder)
    assert runner.rollback(1).version == 1 and store.get_adapter(1).files is None


def test_a_rollback_just_before_the_result_is_recorded_is_not_overwritten(
    store: Store, paths: Paths, make_turn, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3 r11): ``apply_result`` read the active version before the
    transaction that activates the new one, so a rollback another process made in between
    was overwritten: the new version became active over the user's choice."""
    monkeypatch.setenv("FAKE_MODE", "done")
    runner, publisher, _ = make_runner(store, paths, fake_python)
    rate_many(store, make_turn, 8)
    runner.start()
    assert runner.wait(30)
    rate_many(store, make_turn, 8, start=8)
    batch = store.batch
    landed: list[bool] = []

    def rollback_first() -> Any:
        if not landed:  # `rltray rollback 0` in another process, just before the batch
            landed.append(True)
            with Store.open(paths) as other:
                adapterversions.rollback(other, paths, 0)
        return batch()

    monkeypatch.setattr(store, "batch", rollback_first)
    run_id = runner.start()
    assert runner.wait(30) and landed
    run = store.get_run(run_id)
    assert run is not None and run.adapter_version == 2 and run.metrics["kept_as"] == "candidate"
    assert store.active_adapter() is None and store.get_adapter(2).status == "candidate"
    assert publisher.calls == [("published", 1)]
