"""The service's intents: one rule set for a rating wherever it comes from, and every
change told to the listeners (issue 21 part 3).

Real parts: a Service over a real SQLite file; `/rl` commands go through the
real spool as hook records; a second Service over the same folder stands in
for the CLI process beside a running rltray.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rltray.app.errors import UserError
from rltray.app.paths import Paths
from rltray.app.service import AlreadyRated, Service


def add_turn(service: Service, turn: str = "t1", session: str = "s1") -> int:
    rec = {"agent": "codex", "session": session, "turn": turn, "prompt": f"prompt {turn}",
           "response": f"answer {turn}", "context": [], "cwd": "/work/shop",
           "captured_at": "2026-11-22T10:00:00Z"}  # fmt: skip
    return service.store.add_turn(rec)[0]


def rl(service: Service, command: str, turn: str, comment: str | None = None, *,
       typed_at: str | None = None, ingest: bool = True) -> None:
    """`/rl <command>` typed in Codex about ``turn`` (now, or ``typed_at``), as the hook
    spools it; then ingest."""
    from datetime import datetime, timezone

    at = typed_at or datetime.now(timezone.utc).isoformat()
    record = {"v": 1, "kind": "command", "agent": "codex", "session": "s1",
              "command": command, "target_turn": turn,
              "captured_at": at, "comment": comment}  # fmt: skip
    incoming = service.paths.spool_incoming
    incoming.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-cmd.json"
    (incoming / name).write_text(json.dumps(record))
    if ingest:
        report = service.ingest()
        assert report.commands == 1 and not report.rejected, report.messages


def history(service: Service, turn_id: int) -> list[tuple[int, str | None, str, bool]]:
    return [(r.value, r.comment, r.source, r.active) for r in service.store.rating_history(turn_id)]


# -- one rule set --------------------------------------------------------------------------


def test_the_same_rating_again_changes_nothing(service: Service) -> None:
    turn = add_turn(service)
    assert service.rate(turn, 1).changed
    again = service.rate(turn, 1, source="web")
    assert not again.changed
    assert history(service, turn) == [(1, None, "cli", True)]


def test_a_new_comment_on_the_same_rating_changes_it_in_place(service: Service) -> None:
    turn = add_turn(service)
    service.rate(turn, -1)
    outcome = service.rate(turn, -1, comment="wrong file")
    assert outcome.changed
    assert history(service, turn) == [(-1, "wrong file", "cli", True)]


def test_changing_the_rating_keeps_the_comment_unless_a_new_one_is_given(
    service: Service,
) -> None:
    turn = add_turn(service)
    service.rate(turn, -1, comment="used the old API")
    service.rate(turn, 1, source="web")
    assert history(service, turn)[-1] == (1, "used the old API", "web", True)
    service.rate(turn, -1, comment="no, really", source="web")
    assert [h[3] for h in history(service, turn)] == [False, False, True]
    assert history(service, turn)[-1] == (-1, "no, really", "web", True)


def test_rl_good_and_rltray_good_follow_the_same_rules(service: Service) -> None:
    """Both rate an already-rated turn the same way: /rl names its turn, so it may change
    it (keeping the comment); the same value again is no new line in the history."""
    turn = add_turn(service, "t1")
    service.rate(turn, -1, comment="broke the build")
    rl(service, "good", "t1")
    assert history(service, turn)[-1] == (1, "broke the build", "agent", True)
    rl(service, "good", "t1")  # the same again: nothing new
    assert len(history(service, turn)) == 2
    # `rltray good` means the newest turn: the same value again is not an error either
    assert not service.rate_newest(1).changed
    with pytest.raises(AlreadyRated, match="--last"):
        service.rate_newest(-1)
    assert service.rate_newest(-1, change=True).rating.value == -1


def test_a_notification_click_never_overrides_a_rating_given_since(service: Service) -> None:
    turn = add_turn(service)
    service.rate(turn, -1, source="cli")  # the user answered in the terminal first
    outcome = service.rate(turn, 1, source="notification")  # then clicked the old bubble
    assert outcome.stale and not outcome.changed
    assert history(service, turn) == [(-1, None, "cli", True)]
    assert any("older notification" in e["message"] for e in service.store.events(limit=5))
    # Regression: its reply, the same verdict with the reason the CLI's lacks, was dropped
    kept = service.rate(turn, -1, comment="broke the build", source="notification")
    assert kept.changed and history(service, turn) == [(-1, "broke the build", "cli", True)]
    assert service.rate(turn, -1, comment="other words", source="notification").stale
    # a notification may still change its own answer, and rates an unrated turn
    other = add_turn(service, "t2")
    service.rate(other, 1, source="notification")
    assert service.rate(other, -1, source="notification").changed


def test_an_rl_read_late_never_overrides_a_rating_given_since(service: Service) -> None:
    """Regression: `/rl bad` waited in the spool (the tray was not running) while the user
    rated the turn good on the ratings page; reading the spool later put the older bad
    back, and withdrew the good one at a time before it was given."""
    from datetime import datetime, timedelta, timezone

    turn = add_turn(service)
    typed = (datetime.now(timezone.utc) - timedelta(seconds=30)).isoformat()
    rl(service, "bad", "t1", "wrong", typed_at=typed, ingest=False)
    service.rate(turn, 1, source="web")  # the user's last word, given after the /rl
    report = service.ingest()
    assert report.commands == 1 and not report.rejected
    assert history(service, turn) == [(1, None, "web", True)]
    assert any("was read after turn" in e["message"] and "kept that" in e["message"]
               for e in service.store.events(limit=5))
    # `/rl undo` read late does not take the newer rating back either
    rl(service, "undo", "t1", typed_at=typed)
    assert history(service, turn) == [(1, None, "web", True)]
    # a reason typed with the same verdict before it is still kept as its comment
    service.rate(turn, -1, source="web")
    rl(service, "bad", "t1", "broke the build", typed_at=typed)
    assert history(service, turn)[-1] == (-1, "broke the build", "web", True)
    # and a /rl typed after the newest rating still changes it
    rl(service, "good", "t1")
    assert history(service, turn)[-1][0::2] == (1, "agent")


def test_a_notification_click_cannot_slip_in_under_a_rating_given_meanwhile(
    service: Service,
) -> None:
    """Regression: the click's check read the turn's rating outside the transaction that
    wrote, so `rltray bad` in another process landing in between was overridden."""
    import threading

    from rltray.app import rating
    from rltray.app.store import Store

    turn = add_turn(service)
    cli = Store.open(service.paths)  # the CLI process's own connection to the same file
    read = service.store.active_rating
    cli_done = threading.Thread(target=lambda: rating.apply(cli, turn, -1, "cli"))

    def then_the_cli_rates(turn_id: int) -> Any:
        current = read(turn_id)  # the click saw no rating ...
        cli_done.start()  # ... and `rltray bad` comes in right now
        cli_done.join(0.5)  # it must wait for the click's write, not land under it
        return current

    service.store.active_rating = then_the_cli_rates  # type: ignore[method-assign]
    rating.apply(service.store, turn, 1, rating.NOTIFICATION)
    cli_done.join(10)
    active = cli.active_rating(turn)
    assert active is not None and (active.value, active.source) == (-1, "cli")
    cli.close()


def test_marking_a_selection_good_keeps_a_graded_answer_and_its_training(
    service: Service,
) -> None:
    """Regression: a bulk Good over a trained 4/5 replaced it with a plain good: reward 0.5
    became 1.0 and the judgement was fresh again, to be trained a second time."""
    graded, plain = add_turn(service, "a"), add_turn(service, "b")
    service.rate(graded, 1, score=4)
    service.rate(plain, -1)
    service.store.add_run("r1")
    service.store.mark_trained([service.store.active_rating(graded).id], "r1")  # type: ignore[union-attr]
    assert service.rate_many([graded, plain], 1) == 1  # only the bad one changes
    kept = service.store.active_rating(graded)
    assert kept is not None and (kept.score, kept.trained_run_id) == (4, "r1")
    assert service.store.active_rating(plain).value == 1  # type: ignore[union-attr]


def test_a_deleted_turns_id_is_never_given_again(service: Service) -> None:
    """Regression: SQLite gave the newest deleted turn's id (and its ratings' ids) to the
    next ones, so `rltray rate 3` copied from an old listing, an open browser tab or an API
    client rated another agent's answer without a word."""
    first, second = add_turn(service, "a"), add_turn(service, "b")
    service.rate(second, 1)
    old_rating = service.store.active_rating(second).id  # type: ignore[union-attr]
    service.delete_turns([second], "a test")
    third = add_turn(service, "c")
    assert third > second > first
    with pytest.raises(UserError, match=f"There is no turn {second}"):
        service.rate(second, -1)
    assert service.rate(third, -1).rating.id > old_rating


def test_ratings_record_where_they_came_from(service: Service) -> None:
    turn = add_turn(service)
    service.rate(turn, 1, source="api")
    assert service.store.active_rating(turn).source == "api"  # type: ignore[union-attr]


def test_an_unknown_turn_is_one_sentence(service: Service) -> None:
    with pytest.raises(UserError, match="no turn 99"):
        service.rate(99, 1)
    with pytest.raises(UserError, match="no turn 99"):
        service.unrate(99)


def test_rate_many_skips_deleted_turns_and_counts_what_changed(service: Service) -> None:
    a, b, c = add_turn(service, "a"), add_turn(service, "b"), add_turn(service, "c")
    service.rate(a, 1)
    assert service.rate_many([a, b, 4242], 1) == 1  # a already good, 4242 gone
    assert service.rate_many([a, b, c], 0) == 2  # c had none
    assert service.store.active_rating(a) is None and service.store.active_rating(b) is None


# -- every intent tells the listeners --------------------------------------------------------


INTENTS: dict[str, Callable[[Service, int], Any]] = {
    "rate": lambda s, t: s.rate(t, 1),
    "rate_newest": lambda s, t: s.rate_newest(-1),
    "unrate": lambda s, t: (s.rate(t, 1), s.unrate(t)),
    "undo": lambda s, t: (s.rate(t, 1), s.undo()),
    "rate_many": lambda s, t: s.rate_many([t], -1),
    "comment": lambda s, t: (s.rate(t, 1), s.comment(t, "why")),
    "set_tags": lambda s, t: s.set_tags(t, ["refactor"]),
    "tag_turns": lambda s, t: s.tag_turns([t], "refactor"),
    "add_tag": lambda s, t: s.add_tag("later"),
    "remove_tag": lambda s, t: (s.add_tag("later"), s.remove_tag("later")),
    "delete_turns": lambda s, t: s.delete_turns([t], "a test"),
    "rl": lambda s, t: rl(s, "good", "t1"),
}
RATES = {"rate", "rate_newest", "unrate", "undo", "rate_many", "comment", "delete_turns", "rl"}


@pytest.mark.parametrize("intent", sorted(INTENTS))
def test_every_intent_tells_the_listeners(service: Service, intent: str) -> None:
    turn = add_turn(service)
    told: list[str] = []
    rated: list[list[int]] = []
    service.listeners.append(lambda: told.append("changed"))
    service.rating_listeners.append(rated.append)
    INTENTS[intent](service, turn)
    assert told, f"{intent} changed the data and told nobody"
    if intent in RATES - {"comment"}:
        assert [turn] in rated, f"{intent} did not name the turn whose rating changed"


def test_a_listener_that_fails_does_not_stop_the_rating(service: Service) -> None:
    turn = add_turn(service)

    def broken(_turns: list[int]) -> None:
        raise RuntimeError("a window went away")

    service.rating_listeners.append(broken)
    assert service.rate(turn, 1).changed
    assert service.store.active_rating(turn) is not None


def test_another_process_sees_which_turns_were_rated(service: Service, rltray_home: Path) -> None:
    """What the running rltray learns from the store when the CLI (another Service over the
    same folder) rates or withdraws: exactly those turns, once."""
    a, b = add_turn(service, "a"), add_turn(service, "b")
    seen, mark = service.store.rating_changes(None)
    assert seen == []
    with Service(Paths.from_env()) as cli:
        cli.rate(a, 1)
    seen, mark = service.store.rating_changes(mark)
    assert seen == [a]
    assert service.store.rating_changes(mark)[0] == []
    service.rate(b, -1)
    with Service(Paths.from_env()) as cli:
        cli.undo()
    seen, mark = service.store.rating_changes(mark)
    assert sorted(seen) == [b]


def test_an_agent_turned_off_is_not_captured(service: Service) -> None:
    """agents.codex = false: its hook records are dropped at ingest, said once in the log,
    and the other agent's turns still come in (the setting used to be read by nothing)."""
    service.set_setting("agents.codex", False)
    incoming = service.paths.spool_incoming
    incoming.mkdir(parents=True, exist_ok=True)
    for i, agent in enumerate(("codex", "claude-code", "codex")):
        record = {"v": 1, "kind": "turn", "agent": agent, "session": "s", "turn": f"t{i}",
                  "prompt": "p", "response": "r", "context": [], "cwd": "/w",
                  "captured_at": "2026-11-22T10:00:00Z"}  # fmt: skip
        (incoming / f"{i:020d}-1-t{i}.json").write_text(json.dumps(record))
    report = service.ingest()
    assert report.turns == 1 and report.ignored == {"codex": 2}
    assert [t.agent for t in service.turns()] == ["claude-code"]
    assert not list(incoming.glob("*.json"))  # dropped, not left to pile up
    assert any("capture from codex is off" in e["message"] for e in service.store.events(10))


# -- graded ratings (issue 22 item 12) -------------------------------------------------------


def test_a_graded_rating_keeps_its_score_and_its_class(service: Service) -> None:
    turn = add_turn(service)
    first = service.rate(turn, 1, score=4)
    assert first.changed and (first.rating.value, first.rating.score) == (1, 4)
    assert not service.rate(turn, 1, score=4).changed  # the same score again: nothing
    five = service.rate(turn, 1, score=5, comment="spot on")
    assert five.changed and five.rating.score == 5  # another score is a new judgement
    plain = service.rate(turn, 1)
    assert plain.changed and plain.rating.score is None  # plain good replaces the 5
    with pytest.raises(UserError, match="3 is the middle of the scale"):
        service.rate(turn, 1, score=3)
    with pytest.raises(UserError, match="A score of 2 is bad, not 1"):
        service.rate(turn, 1, score=2)
    assert [(r.value, r.score, r.active) for r in service.store.rating_history(turn)] == [
        (1, 4, False), (1, 5, False), (1, None, True)]  # fmt: skip


def test_rl_with_a_score_rates_that_answer(service: Service) -> None:
    turn = add_turn(service)
    rl(service, "2", "t1", comment="wrong file")
    rating = service.store.active_rating(turn)
    assert rating is not None and (rating.value, rating.score, rating.comment) == (
        -1, 2, "wrong file")  # fmt: skip
    (example,) = service.store.training_examples()
    assert example["score"] == 2


def test_parse_reads_words_and_scores() -> None:
    from rltray.app import rating

    assert [rating.parse(t) for t in ("good", "BAD", "1", "2", "4", " 5 ")] == [
        (1, None), (-1, None), (-1, 1), (-1, 2), (1, 4), (1, 5)]  # fmt: skip
    for wrong in ("3", "6", "0", "meh"):
        with pytest.raises(UserError):
            rating.parse(wrong)
    assert [rating.reward(1, s) for s in (4, 5)] == [0.5, 1.0]
    assert [rating.reward(-1, s) for s in (1, 2)] == [-1.0, -0.5]
    assert rating.reward(-1, None) == -1.0 and rating.label(1, 4) == "4/5"


def test_a_bad_rating_with_a_comment_is_told_to_the_sessions_next_prompt(
    service: Service,
) -> None:
    """Issue 24: a Bad click with a comment (not only `/rl bad why`) reaches the agent once."""
    from rltray.app.hooks import lessonfiles

    turn = add_turn(service)
    home = str(service.paths.home)
    service.rate(turn, -1, comment="edited the wrong file", source="notification")
    note = lessonfiles.take_note(home, "codex", "s1")
    assert note is not None and "edited the wrong file" in note
    assert lessonfiles.take_note(home, "codex", "s1") is None  # once
    service.rate(turn, -1, comment="still the wrong file", source="notification")
    service.rate(turn, 1)  # changed their mind: nothing to say
    assert lessonfiles.take_note(home, "codex", "s1") is None
    service.rate(turn, -1, comment="the wrong file after all")
    service.unrate(turn)
    assert lessonfiles.take_note(home, "codex", "s1") is None
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    service.rate(turn, -1, comment=f"you pasted my token {secret}", source="notification")
    said = lessonfiles.take_note(home, "codex", "s1")
    assert said is not None and "you pasted my token" in said and secret not in said


def test_a_waiting_note_follows_a_deleted_turn_a_bulk_unrate_and_an_edited_comment(
    service: Service,
) -> None:
    """Regression: only rate and unrate looked after the note, so a deleted turn's comment
    (or a bulk-withdrawn or cleared one) still reached the agent at its next prompt."""
    from rltray.app.hooks import lessonfiles

    home = str(service.paths.home)
    turn = add_turn(service, "t1")
    service.rate(turn, -1, comment="leaked the design doc")
    service.delete_turns([turn], "a test")
    assert lessonfiles.take_note(home, "codex", "s1") is None
    turn = add_turn(service, "t2")
    service.rate(turn, -1, comment="second thoughts")
    service.rate_many([turn], 0)
    assert lessonfiles.take_note(home, "codex", "s1") is None
    service.rate(turn, -1, comment="first words")
    service.comment(turn, "better words")
    assert "better words" in (lessonfiles.take_note(home, "codex", "s1") or "")
    service.rate(turn, -1, comment="words to take back")
    service.comment(turn, "")
    assert lessonfiles.take_note(home, "codex", "s1") is None


def test_a_press_kept_in_the_spool_never_outlives_a_rating_withdrawn_since(
    service: Service,
) -> None:
    """Regression (review 4, item 3): a Good kept in the spool (the database was busy) was
    applied after the user rated the turn Bad in the window and took that back: with no
    rating left to compare with, the older press was stored, and `rltray undo` (which took
    the rating with the latest time as the last one) said there was nothing to undo."""
    from datetime import datetime, timedelta, timezone

    from rltray.app import spool
    from rltray.app.errors import NothingToDo

    now = datetime.now(timezone.utc)
    turn = add_turn(service)
    spool.spool_press(service.paths, service.store.get_turn(turn), 1, None,
                      now - timedelta(seconds=60))  # fmt: skip
    service.rate(turn, -1, source="web")
    service.unrate(turn, source="web")  # the user's last word: no rating
    report = service.ingest()
    assert report.commands == 1 and not report.rejected and report.rated == []
    assert service.store.active_rating(turn) is None
    assert history(service, turn) == [(-1, None, "web", False)]
    late = service.rate(turn, 1, source="notification", at=now - timedelta(seconds=30))
    assert late.stale and not late.changed and not late.rating.active  # a queued click too
    assert service.store.active_rating(turn) is None
    with pytest.raises(NothingToDo, match="already withdrawn"):
        service.undo()
    # `rltray undo` takes back the rating stored last, though it was given a while ago
    other = add_turn(service, "t2")
    spool.spool_press(service.paths, service.store.get_turn(other), 1, None,
                      now - timedelta(seconds=30))  # fmt: skip
    service.rate(turn, -1, source="cli")
    service.ingest()
    assert service.store.active_rating(other) is not None
    assert service.undo().turn.id == other
    assert service.store.active_rating(turn) is not None


def test_a_press_kept_in_the_spool_leaves_its_note_as_a_press_stored_at_once_does(
    service: Service,
) -> None:
    """Regression (review 4, item 6): a Bad with a reply that reached the service through
    the spool was stored, but the session's next prompt was never told why, and a Good
    kept so never took a waiting note back."""
    from datetime import datetime, timezone

    from rltray.app import spool
    from rltray.app.hooks import lessonfiles

    home = str(service.paths.home)
    turn = service.store.get_turn(add_turn(service))
    spool.spool_press(service.paths, turn, -1, "edited the wrong file", datetime.now(timezone.utc))
    assert service.ingest().rated == [turn.id]
    assert "edited the wrong file" in (lessonfiles.take_note(home, "codex", "s1") or "")
    service.rate(turn.id, -1, comment="still the wrong file", source="notification")
    spool.spool_press(service.paths, turn, 1, None, datetime.now(timezone.utc))
    service.ingest()
    assert service.store.active_rating(turn.id).value == 1
    assert lessonfiles.take_note(home, "codex", "s1") is None


def test_a_press_kept_in_the_spool_rates_though_its_agents_capture_is_off(
    service: Service,
) -> None:
    """Regression (review 4, item 7): a press kept in the spool for a turn of an agent whose
    capture was switched off since was dropped with that agent's hook records; it is the
    user's rating of a turn already stored, given in rltray."""
    from datetime import datetime, timezone

    from rltray.app import spool

    turn = service.store.get_turn(add_turn(service))
    spool.spool_press(service.paths, turn, -1, None, datetime.now(timezone.utc))
    service.set_setting("agents.codex", False)
    report = service.ingest()
    assert report.ignored == {} and report.rated == [turn.id] and not report.rejected
    rating = service.store.active_rating(turn.id)
    assert rating is not None and (rating.value, rating.source) == (-1, "notification")


def test_an_rl_whose_file_sorts_before_its_turn_waits_for_the_turn(service: Service) -> None:
    """Regression: spool files are named by the wall clock; when it stepped back between
    the Stop hook and the `/rl` (NTP), the command was read first, refused as naming a
    turn "never stored", and the turn stayed unrated for good."""
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    incoming = service.paths.spool_incoming
    incoming.mkdir(parents=True, exist_ok=True)

    def spooled(name: str, record: dict[str, Any]) -> None:
        (incoming / name).write_text(json.dumps({"v": 1, "agent": "codex", "session": "s1",
                                                 **record}))

    def command(target: str, at: datetime) -> dict[str, Any]:
        return {"kind": "command", "command": "bad", "target_turn": target,
                "comment": "wrong file", "captured_at": at.isoformat()}

    spooled("00000000000000000001-1-cmd.json", command("t1", now))
    spooled("00000000000000000002-1-turn.json", {
        "kind": "turn", "turn": "t1", "prompt": "rename it", "response": "renamed",
        "context": [], "captured_at": (now - timedelta(seconds=1)).isoformat()})
    report = service.ingest()
    assert (report.turns, report.commands, report.rejected) == (1, 1, 0), report.messages
    (turn,) = report.new_turns
    assert history(service, turn) == [(-1, "wrong file", "agent", True)]
    # one whose turn has not come yet waits in the spool, and is refused once it is old
    waiting = "00000000000000000003-1-cmd.json"
    spooled(waiting, command("t2", now))
    assert service.ingest().rejected == 0 and (incoming / waiting).exists()
    spooled(waiting, command("t2", now - timedelta(hours=1)))
    assert "was never stored" in service.ingest().messages[0]
    # one naming a turn the user deleted is refused at once, and says so
    service.delete_turns([turn], "a test")
    spooled("00000000000000000004-1-cmd.json", command("t1", now))
    assert "which the user deleted" in service.ingest().messages[0]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_the_setup_mark_is_private_whatever_the_umask(service: Service) -> None:
    import stat

    old = os.umask(0)
    try:
        service.finish_setup()
    finally:
        os.umask(old)
    assert not service.needs_setup()
    assert stat.S_IMODE((service.paths.home / "setup-done").stat().st_mode) == 0o600
