"""Job building from a real store: which ratings train, which are held out, what is replayed.

The written folder is read back with the trainer's own loaders (trainer/job.py), so
the contract between app and trainer is checked by the side that enforces it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rltray.app.config import TrainingSettings
from rltray.app.errors import UserError
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.training import jobbuild, versions
from rltray.trainer.job import load_examples, load_job

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def rate_many(store: Store, make_turn: Any, values: list[int], start: int = 0) -> list[int]:
    """One turn per value, rated a minute apart (oldest first); returns the rating ids."""
    ids = []
    for i, value in enumerate(values, start=start):
        turn_id, _ = store.add_turn(make_turn(response=f"answer {i}"))
        ids.append(store.rate(turn_id, value, "cli", at=T0 + timedelta(minutes=i)).id)
    return ids


def row(rid: int, rating: int, minute: int, trained: str | None = None) -> dict[str, Any]:
    return {
        "rating_id": rid,
        "rating": rating,
        "rated_at": (T0 + timedelta(minutes=minute)).isoformat(),
        "trained_run_id": trained,
        "prompt": f"p{rid}",
        "response": f"r{rid}",
        "context": [],
    }


def settings(**kw: Any) -> TrainingSettings:
    return TrainingSettings(**{"base_model": "/models/tiny", "backend": "torch", **kw})


# -- pure selection ------------------------------------------------------------


def test_heldout_is_the_newest_of_each_class() -> None:
    rows = [row(i, 1 if i % 2 else -1, i) for i in range(40)]  # 20 good, 20 bad
    train, held = jobbuild.split_heldout(rows, fraction=0.15)
    assert len(train) + len(held) == 40
    good = [r["rating_id"] for r in held if r["rating"] > 0]
    bad = [r["rating_id"] for r in held if r["rating"] < 0]
    # round(6 * 20/40) = 3 each, raised to the minimum of 4
    assert good == [33, 35, 37, 39] and bad == [32, 34, 36, 38]
    assert [r["rating_id"] for r in train] == sorted(r["rating_id"] for r in train)


def test_heldout_is_stratified_even_when_one_class_is_rare() -> None:
    good_ids = (3, 9, 15, 21, 24, 27, 33, 36)
    rows = [row(i, 1 if i in good_ids else -1, i) for i in range(40)]
    _, held = jobbuild.split_heldout(rows, fraction=0.15)
    good = [r["rating_id"] for r in held if r["rating"] > 0]
    assert good == [24, 27, 33, 36]  # raised to the minimum of 4, the newest good ones
    assert sum(r["rating"] < 0 for r in held) == 5  # round(round(0.15 * 40) * 32/40) = 5


def test_a_class_short_of_four_holds_out_only_its_share() -> None:
    """7 good can give only 3 (half): no top-up to 4 this round, only the 15% share."""
    rows = [row(i, -1, i) for i in range(20)] + [row(20 + i, 1, 20 + i) for i in range(7)]
    train, held = jobbuild.split_heldout(rows)
    assert [r["rating_id"] for r in held] == [17, 18, 19, 26]  # 15% of 20 bad, of 7 good
    assert len(train) == 23
    sel = jobbuild.select(rows)
    assert "decides on drift and sanity alone" in sel.notes[0]


def test_the_standing_heldout_set_stays_and_grows_by_the_share() -> None:
    """Issue 20 item 4: held-out ratings stay held out; a round adds 15%, not 4 + 4."""
    standing = [{**row(i, 1 if i % 2 else -1, i), "heldout_at": "x"} for i in range(8)]
    new = [row(100 + i, 1 if i % 2 else -1, 100 + i) for i in range(20)]  # 10 good, 10 bad
    train, held = jobbuild.split_heldout(standing + new)
    ids = [r["rating_id"] for r in held]
    assert ids[:8] == list(range(8))  # every standing one, oldest as they are
    assert ids[8:] == [116, 117, 118, 119]  # round(0.15 * 10) = 2 newest of each class
    assert len(train) == 16
    sel = jobbuild.select(standing + new)
    assert sel.new_count == 20 and "8 of them kept from earlier rounds" in sel.notes[0]


def test_past_the_cap_the_oldest_heldout_rotate_into_training() -> None:
    standing = [{**row(i, 1, i), "heldout_at": "x"} for i in range(6)]
    standing += [{**row(10 + i, -1, 10 + i), "heldout_at": "x"} for i in range(4)]
    new = [row(100 + i, 1, 100 + i) for i in range(14)]  # 2 good join the held-out set
    train, held = jobbuild.split_heldout(standing + new, cap_per_class=6)
    good = [r["rating_id"] for r in held if r["rating"] > 0]
    assert good == [2, 3, 4, 5, 112, 113]  # the two oldest (0, 1) rotated into training
    assert [r["rating_id"] for r in train][:2] == [0, 1]
    assert sum(r["rating"] < 0 for r in held) == 4


def test_replay_takes_the_newest_trained_ratings() -> None:
    trained = [row(i, 1 if i % 2 else -1, i, trained="old") for i in range(10)]
    fresh = [row(100 + i, 1 if i % 2 else -1, 100 + i) for i in range(8)]
    sel = jobbuild.select(trained + fresh, replay_share=0.25, heldout_fraction=0.0)
    assert [r["rating_id"] for r in sel.train] == [100 + i for i in range(8)]
    assert [r["rating_id"] for r in sel.replay] == [8, 9]  # 25% of 8, newest first


def test_replayed_and_cut_off_rows_are_flagged_for_the_trainer() -> None:
    from rltray.trainer.job import example_from_dict

    line = jobbuild.example_line({**row(5, 1, 5), "truncated": True}, replay=True)
    assert line is not None and line["truncated"] is True and line["replay"] is True
    ex = example_from_dict(line)  # the trainer reads both flags
    assert ex.truncated and ex.replay
    plain = jobbuild.example_line(row(6, -1, 6))
    assert plain is not None and "truncated" not in plain and "replay" not in plain


def test_rows_the_trainer_would_refuse_are_left_out_and_said() -> None:
    empty = {**row(1, 1, 1), "response": "  "}
    odd_time = {**row(2, -1, 2), "rated_at": "yesterday"}
    ctx = {**row(3, 1, 3), "context": [{"role": "tool", "content": "x"},
                                       {"role": "user", "content": "before"}]}  # fmt: skip
    sel = jobbuild.select([empty, odd_time, ctx], heldout_fraction=0.0)
    assert [s[0] for s in sel.skipped] == [1, 2]
    line = jobbuild.example_line(ctx)
    assert line is not None and line["messages"] == [{"role": "user", "content": "before"}]
    assert line["id"] == "rating-3" and line["rating"] == 1


def test_backend_auto_is_mlx_only_on_apple_silicon() -> None:
    assert jobbuild.resolve_backend("auto", "darwin", "arm64") == "mlx"
    assert jobbuild.resolve_backend("auto", "darwin", "x86_64") == "torch"
    assert jobbuild.resolve_backend("auto", "linux", "aarch64") == "torch"
    assert jobbuild.resolve_backend("mlx", "linux", "x86_64") == "mlx"


# -- the interpreter -----------------------------------------------------------


def test_a_missing_trainer_interpreter_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(jobbuild.TrainingNotSetUp, match=r"^set up training first: ") as err:
        jobbuild.training_python(settings(python=str(tmp_path / "nope" / "python")))
    assert "\n" not in str(err.value)


def test_our_own_python_trains_only_when_it_has_the_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert jobbuild.training_python(settings(python=sys.executable)) == sys.executable
    monkeypatch.setattr(jobbuild.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(jobbuild.TrainingNotSetUp, match="this Python has no torch"):
        jobbuild.training_python(settings())


# -- building a folder from the store -----------------------------------------


def test_build_job_writes_what_the_trainer_reads(store: Store, paths: Paths, make_turn) -> None:
    values = [1, -1] * 10
    ids = rate_many(store, make_turn, values)
    built = jobbuild.build_job(store, paths, settings(), "run-1", hyper={"epochs": 1}, seed=5)

    job = load_job(built.job_path)  # the trainer's own validation
    assert job.id == "run-1" and job.backend == "torch" and job.seed == 5
    assert job.parent_adapter is None and job.baseline == 0.0
    assert job.out == paths.adapters / ".run-run-1" and dict(job.hyper) == {"epochs": 1}
    train = load_examples(job.examples)
    held = load_examples(job.heldout)
    assert {e.id for e in train} == {f"rating-{i}" for i in built.fresh_ids}
    assert {e.id for e in held} == {f"rating-{i}" for i in built.heldout_ids}
    assert sorted(built.fresh_ids + built.heldout_ids) == ids
    assert built.heldout_ids == tuple(ids[-8:])  # 4 newest good + 4 newest bad
    assert [e.rated_at for e in train] == sorted(e.rated_at for e in train)
    assert train[0].messages == ({"role": "user", "content": "earlier 1"},)
    if os.name == "posix":
        assert stat.S_IMODE(built.folder.stat().st_mode) == 0o700
        for name in ("job.json", "examples.jsonl", "heldout.jsonl", "ratings.json"):
            assert stat.S_IMODE((built.folder / name).stat().st_mode) == 0o600, name
    assert jobbuild.read_manifest(built.folder) == built


def test_the_parent_and_baseline_come_from_the_active_adapter(
    store: Store, paths: Paths, make_turn, tmp_path: Path
) -> None:
    rate_many(store, make_turn, [1, -1, 1, -1])
    folder = paths.adapters / "v0001"
    folder.mkdir()
    store.add_adapter("/models/tiny", folder, baseline=-0.25)
    store.set_adapter_status(1, "active")
    built = jobbuild.build_job(store, paths, settings(), "run-a")
    job = json.loads(built.job_path.read_text())
    assert job["parent_adapter"] == str(folder) and job["baseline"] == -0.25
    assert built.parent_version == 1

    other = jobbuild.build_job(store, paths, settings(base_model="/models/other"), "run-b")
    job = json.loads(other.job_path.read_text())
    assert job["parent_adapter"] is None and job["baseline"] == 0.0  # another base model


def test_too_few_ratings_and_no_model_are_refused(store: Store, paths: Paths, make_turn) -> None:
    # issue 22: the empty model says where to choose one
    with pytest.raises(UserError, match=r"No model to train is chosen yet .*`rltray setup`.*"
                                        r"`rltray config set training.base_model PATH`"):
        jobbuild.build_job(store, paths, settings(base_model=" "), "r0")
    # issue 22: "0 new ratings wait for training; a round starts at 1" read as nonsense
    with pytest.raises(jobbuild.NotEnoughRatings,
                       match=r"^No new ratings yet; a round starts after 1 new rating \("):
        jobbuild.build_job(store, paths, settings(), "r1")
    rate_many(store, make_turn, [1, -1, 1])
    with pytest.raises(jobbuild.NotEnoughRatings,
                       match=r"^3 new ratings wait for training; a round starts at 32$"):
        jobbuild.build_job(store, paths, settings(), "r2", min_fresh=32)
    assert jobbuild.not_enough(1, 4) == "1 new rating waits for training; a round starts at 4"
    assert "starts after 32 new ratings (" in jobbuild.not_enough(0, 32)
    assert not (paths.runs / "r1").exists() and not (paths.runs / "r2").exists()


def test_a_later_round_reuses_the_standing_heldout_set(
    store: Store, paths: Paths, make_turn
) -> None:
    """The held-out set is kept in the store: the next round holds out the same ratings."""
    first = rate_many(store, make_turn, [1, -1] * 10)
    one = jobbuild.build_job(store, paths, settings(), "run-1")
    assert one.heldout_ids == tuple(first[-8:])
    assert store.counts()["heldout"] == 0  # building judged nothing yet
    store.add_run("run-1")
    one.out.mkdir(parents=True)
    done = {"accepted": True, "reasons": [], "metrics": {}, "baseline": 0.1}
    assert versions.apply_result(store, paths, one, done, {}) == 1  # the result is recorded
    assert store.counts()["untrained"] == 0 and store.counts()["heldout"] == 8
    with pytest.raises(jobbuild.NotEnoughRatings, match="No new ratings yet"):
        jobbuild.build_job(store, paths, settings(), "run-2")  # the held-out set is not new
    second = rate_many(store, make_turn, [1, -1] * 10, start=40)
    two = jobbuild.build_job(store, paths, settings(), "run-3")
    assert set(one.heldout_ids) < set(two.heldout_ids)
    assert set(two.heldout_ids) - set(one.heldout_ids) == set(second[-4:])  # 2 + 2 added
    assert two.fresh_ids == tuple(second[:-4])


def test_trained_ratings_are_replayed_not_retrained(store: Store, paths: Paths, make_turn) -> None:
    old = rate_many(store, make_turn, [1, -1] * 4)
    store.add_run("old-run")
    store.mark_trained(old, "old-run")
    new = rate_many(store, make_turn, [1, -1] * 4, start=20)
    built = jobbuild.build_job(store, paths, settings(), "run-r", heldout_fraction=0.0)
    assert built.fresh_ids == tuple(new)
    assert built.replay_ids == tuple(old[-2:])
    lines = load_examples(built.folder / "examples.jsonl")
    assert [e.id for e in lines][:2] == [f"rating-{i}" for i in old[-2:]]  # oldest first
    # replayed lines are flagged: their rewards are not counted into the baseline again
    assert [e.replay for e in lines] == [True, True] + [False] * len(new)


def test_each_preset_brings_its_own_data_shares(store: Store, paths: Paths, make_turn) -> None:
    """The split is the app's to decide, per preset (jobbuild.DATA_SHARES): careful replays
    half of the fresh count, aggressive a tenth."""
    old = rate_many(store, make_turn, [1, -1] * 10)
    store.add_run("old-run")
    store.mark_trained(old, "old-run")
    rate_many(store, make_turn, [1, -1] * 10, start=40)
    careful = jobbuild.build_job(store, paths, settings(preset="careful"), "run-c")
    aggressive = jobbuild.build_job(store, paths, settings(preset="aggressive"), "run-a")
    trained = len(careful.fresh_ids)
    assert len(careful.replay_ids) == round(0.5 * trained)
    assert len(aggressive.replay_ids) == round(0.1 * len(aggressive.fresh_ids))


def test_custom_sends_the_hyper_table_and_other_presets_do_not(
    store: Store, paths: Paths, make_turn
) -> None:
    rate_many(store, make_turn, [1, -1] * 6)
    table = {"lr": 5e-5, "epochs": 3}
    custom = jobbuild.build_job(store, paths, settings(preset="custom", hyper=table), "run-1")
    job = json.loads((custom.folder / "job.json").read_text())
    assert (job["preset"], job["hyper"]) == ("custom", table)
    plain = jobbuild.build_job(store, paths, settings(preset="balanced", hyper=table), "run-2")
    assert json.loads((plain.folder / "job.json").read_text())["hyper"] == {}


def test_a_graded_rating_goes_to_the_trainer_as_its_reward() -> None:
    """Issue 22 item 12: (score - 3) / 2 beside the +-1 class; plain ratings carry none."""
    from rltray.app.training.jobbuild import example_line

    row = {"rating_id": 7, "rating": 1, "rated_at": "2026-11-22T10:00:00+00:00",
           "prompt": "p", "response": "r", "context": [], "score": 4}  # fmt: skip
    assert example_line(row)["reward"] == 0.5 and example_line(row)["rating"] == 1
    assert example_line({**row, "rating": -1, "score": 1})["reward"] == -1.0
    assert "reward" not in example_line({**row, "score": None})
