"""Remote rounds wait for the quiet hours but not for this machine's idle time or power."""

from __future__ import annotations

from datetime import datetime, timezone

from rltray.app import autotrain


def _rate(service, n: int) -> None:
    for i in range(n):
        turn_id, _ = service.store.add_turn({
            "v": 1, "kind": "turn", "agent": "claude-code", "session": "s", "turn": f"t{i}",
            "prompt": f"p{i}", "response": f"r{i}", "context": [], "cwd": "/w", "model": "m",
            "captured_at": f"2025-01-01T00:00:{i:02d}Z", "event": "stop", "transcript": None,
        })  # fmt: skip
        service.store.rate(turn_id, 1 if i % 2 else -1, "cli")


def test_a_remote_round_needs_no_local_idle_but_keeps_quiet_hours(service, runtime) -> None:
    _rate(service, 6)
    service.set_setting("training.min_ratings", 4)
    service.set_setting("training.require_idle_minutes", 30)
    noon = datetime(2025, 3, 3, 12, 0, tzinfo=timezone.utc)
    local = autotrain.decide(runtime, noon)
    assert not local.train and "idle" in local.reason  # headless here: idle time unknown
    service.set_setting("training.remote_host", "gpu-box")
    remote = autotrain.decide(runtime, noon)
    assert remote.train, remote.reason
    service.set_setting("notify.quiet_hours", "11:00-13:00")
    quiet = autotrain.decide(runtime, noon.astimezone())
    assert not quiet.train and "quiet" in quiet.reason


def test_the_checks_step_row_reads_envchecks_line_and_says_why_it_failed() -> None:
    """The remote check's last row comes from ``rltray.trainer.envcheck``'s JSON line in the
    Ray job's log (the real path runs in test_remote_round's CLI test)."""
    from rltray.app.training.remote.check import step_row

    ok = ('@rltray-probe {"torch": "2.13.0"}\n'
          '{"ok": true, "backend": "torch", "device": "cuda:0", "loss": 0.69, "seconds": 3.1}\n')
    assert step_row(ok, "gpu-box") == (
        "step", True, "one training step on a tiny model on cuda:0 (3.1 s; loss 0.690, LoRA moved)")
    failed = '{"ok": false, "backend": "torch", "why": "RuntimeError: driver too old"}\n'
    assert step_row(failed, "gpu-box") == (
        "step", False, "the tiny training step on gpu-box failed: RuntimeError: driver too old")
    assert step_row("Traceback ...\nKilled\n", "gpu-box") == (
        "step", False, "the tiny training step on gpu-box did not report: Killed")
