"""`rltray config|pause|resume|versions|runs|rollback` run in process without a running service."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rltray.app.errors import ExitCode
from rltray.app.paths import Paths
from rltray.app.service import Service
from rltray.app.store import Store

from tests.app.adapterfiles import write_lora
from tests.app.test_cli import cli
from tests.app.test_training import rate_many

_TURNS = itertools.count(1)


def test_config_set_get_list_keeps_comments(rltray_home: Path) -> None:
    code, out, err = cli("config", "set", "training.min_ratings", "12")
    assert code == ExitCode.OK, err
    assert cli("config", "get", "training.min_ratings")[1].strip() == "12"
    text = (rltray_home / "config.toml").read_text()
    (rltray_home / "config.toml").write_text("# mine, keep me\n" + text)
    cli("config", "set", "notify.ask", "nth")
    assert "# mine, keep me" in (rltray_home / "config.toml").read_text()
    code, out, _ = cli("config", "list")
    assert code == ExitCode.OK and 'notify.ask = "nth"' in out and "training.python" in out
    code, _, err = cli("config", "set", "training.min_ratings", "many")
    assert code == ExitCode.USAGE and "training.min_ratings" in err
    code, _, err = cli("config", "set", "no.such", "1")
    assert code == ExitCode.USAGE


def test_pause_and_resume_automatic_training(rltray_home: Path) -> None:
    assert cli("pause")[0] == ExitCode.OK
    status = json.loads(cli("status", "--json")[1])
    assert status["training"]["automatic"] is False and status["service_running"] is False
    assert "not running" in status["training"]["next_training"]
    assert cli("resume")[0] == ExitCode.OK
    assert json.loads(cli("status", "--json")[1])["training"]["automatic"] is True


def test_versions_runs_and_rollback(rltray_home: Path) -> None:
    code, out, _ = cli("versions")
    assert code == ExitCode.OK and "No trained versions yet" in out
    paths = Paths.from_env()
    with Store.open(paths) as store:
        for v in (1, 2):
            folder = write_lora(paths.adapters / f"v{v:04d}")  # a rollback checks its files
            store.add_adapter("tiny", folder, parent_version=v - 1 or None, baseline=0.1 * v)
            store.set_adapter_status(v, "active")
    (row2, row1) = json.loads(cli("versions", "--json")[1])
    assert (row2["version"], row2["active"], row1["active"]) == (2, True, False)
    code, out, err = cli("rollback", "v1")
    assert code == ExitCode.OK and "v1" in out, err
    assert [v["version"] for v in json.loads(cli("versions", "--json")[1]) if v["active"]] == [1]
    code, _, err = cli("rollback", "latest")
    assert code == ExitCode.USAGE and "v3 or 3" in err
    code, out, _ = cli("runs")
    assert code == ExitCode.OK and "No training runs yet" in out


# -- what `rltray train` and `rltray runs` say (issue 20 items 11, 12, 13) ----------


def model_folder(name: str) -> str:
    """A model folder `config set training.base_model` accepts (it has a config.json);
    the fake trainer never reads it. Next to the data folder, inside the test's tmp_path."""
    folder = Paths.from_env().home.parent / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    return str(folder)


@pytest.fixture
def fake_trainer(rltray_home: Path, fake_python: str, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """Settings that train with the fake trainer of test_training.py on model ``a``."""
    monkeypatch.setenv("FAKE_MODE", "done")
    monkeypatch.setenv("COLUMNS", "240")  # tables as wide as a terminal that shows them whole
    chosen = (("training.python", fake_python), ("training.base_model", model_folder("a")))
    for key, value in chosen:
        assert cli("config", "set", key, value)[0] == ExitCode.OK
    return Paths.from_env()


def rate(paths: Paths, n: int, start: int) -> None:
    """``n`` ratings alternating good / bad (test_training's ``rate_many``) on new turns."""

    def turn(**fields: str) -> dict[str, object]:
        n = next(_TURNS)
        return {"v": 1, "kind": "turn", "agent": "claude-code", "session": "s", "turn": f"t{n}",
                "context": [], "cwd": "/tmp", "model": None, "event": "stop",
                "transcript": None, "captured_at": "2025-01-01T00:00:00Z", **fields}  # fmt: skip

    with Store.open(paths) as store:
        rate_many(store, turn, n, start=start)


def test_train_says_exactly_what_a_new_base_model_did(fake_trainer: Paths) -> None:
    """Regression (issue 20 item 11): "v6 is now active" was printed while v5 stayed active."""
    rate(fake_trainer, 8, 0)
    code, out, err = cli("train")
    assert code == ExitCode.OK, err
    assert "Accepted: version v1 is now active.\n" in out
    assert "Gate: not measurably worse; no measurable change on the held-out ratings" in out
    assert "  · held-out AUROC 0.50 -> 0.60: no measurable change" in out
    a, b = model_folder("a"), model_folder("b")
    assert cli("config", "set", "training.base_model", b)[0] == ExitCode.OK
    rate(fake_trainer, 8, 8)
    code, out, err = cli("train")
    assert code == ExitCode.OK, err
    assert (
        f"Accepted: version v2 is now active. It starts a new line of versions on {b}, "
        f"trained from that base model; v1 (trained on {a}) is no longer served."
    ) in out
    (v2, v1) = json.loads(cli("versions", "--json")[1])
    assert (v2["active"], v2["parent"], v1["active"]) == (True, None, False)


def test_a_rejected_round_gives_the_gate_reasons_not_done_done(
    fake_trainer: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACCEPT", "0")
    rate(fake_trainer, 8, 0)
    code, out, err = cli("train")
    assert code == ExitCode.OK, err
    assert "Rejected: no new version; the ratings wait for the next round." in out
    assert "Gate: rejected: too far" in out and "done: done" not in out
    code, out, _ = cli("runs")
    assert "rejected: too far" in out
    (row,) = json.loads(cli("runs", "--json")[1])
    assert row["outcome"] == "rejected: too far"


def test_runs_shows_the_cause_of_a_failed_round(
    fake_trainer: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 20 item 12): the error column showed a trainer.log line."""
    rate(fake_trainer, 8, 0)
    for mode in ("crash", "silent"):
        monkeypatch.setenv("FAKE_MODE", mode)
        code, out, _ = cli("train")
        assert code == ExitCode.ERROR and "see runs/" in out
    silent, crash = json.loads(cli("runs", "--json")[1])
    assert silent["outcome"] == "the trainer exited with code 1"
    broke = "the trainer exited with code 1: RuntimeError: the fake trainer broke"
    assert crash["outcome"] == broke
    out = cli("runs")[1]
    assert "RuntimeError: the fake" in out and "--- 20" not in out


def test_train_says_when_it_resumes_a_paused_round(
    fake_trainer: Paths, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.test_training import make_runner, wait_for_a_step

    monkeypatch.setenv("FAKE_MODE", "slow")
    rate(fake_trainer, 8, 0)
    with Store.open(fake_trainer) as store:
        runner, _, changes = make_runner(store, fake_trainer, fake_python, model_folder("a"))
        run_id = runner.start()
        wait_for_a_step(runner, changes)
        runner.stop(pause=True, timeout=20)
    code, out, err = cli("train")
    assert code == ExitCode.OK, err
    assert f"Training run {run_id} resumed from its checkpoint" in out
    assert "Accepted: version v1 is now active." in out
    assert "done, resumed" in cli("runs")[1]


def test_a_second_train_leaves_the_round_of_another_process_alone(
    fake_trainer: Paths, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review r3): a second `rltray train` took the first one's live round for
    a killed tray's leftover: it stopped its trainer and settled the run as failed while
    the first process made its version active (or resumed it as its own)."""
    from tests.app.test_training import make_runner, wait_for_a_step

    monkeypatch.setenv("FAKE_MODE", "slow")
    monkeypatch.setenv("FAKE_STEP_S", "0.25")  # 10 s: the second command runs meanwhile
    rate(fake_trainer, 8, 0)
    with Store.open(fake_trainer) as store:
        # the first `rltray train` (its runner; a process of its own in real life)
        runner, _, changes = make_runner(store, fake_trainer, fake_python, model_folder("a"))
        run_id = runner.start()
        wait_for_a_step(runner, changes)
        code, out, err = cli("train")
        assert code == ExitCode.ALREADY_RUNNING, (out, err)
        assert f"training run {run_id} is already running in another process (pid " in err
        assert "it goes on there. `rltray runs` shows how it goes and how it ended." in err
        assert runner.running() and store.get_run(run_id).status == "running"
        runner.stop(pause=False, timeout=20)
        assert [(r.id, r.status) for r in store.list_runs()] == [(run_id, "cancelled")]


def test_train_never_says_active_for_a_round_of_the_model_set_up_before(
    fake_trainer: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review r2): the model was changed while a round trained; the round was
    made active (and published onto the new model) and `rltray train` said so."""
    from rltray.app import config

    monkeypatch.setenv("FAKE_MODE", "slow")
    rate(fake_trainer, 8, 0)
    a, b = model_folder("a"), model_folder("b")

    def switch_the_model_once_it_trains() -> None:
        deadline = time.monotonic() + 30
        while not list(fake_trainer.runs.glob("*/channel.json")):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        config.set_value(fake_trainer, "training.base_model", b)  # the settings page

    threading.Thread(target=switch_the_model_once_it_trains, daemon=True).start()
    code, out, err = cli("train")
    assert code == ExitCode.OK, err
    assert (
        f"Accepted: version v1 is kept as a candidate, not made active: it was trained on {a}, "
        f"but training.base_model was changed to {b} while it trained"
    ) in out
    assert "now active" not in out
    (v1,) = json.loads(cli("versions", "--json")[1])
    assert (v1["status"], v1["active"]) == ("candidate", False)


@pytest.fixture
def running_service(fake_trainer: Paths) -> Iterator[Service]:
    """The service as `rltray run` has it (its local API up), in this process."""
    from rltray.app.runtime import compose
    from rltray.web.server import SettingsWeb

    service = Service(fake_trainer)
    runtime = compose(service, SettingsWeb(), notifications=False, scheduler=False, api=True)
    try:
        yield service
    finally:
        runtime.close()
        service.close()


def test_nothing_to_do_through_the_service_is_not_a_refusal(running_service: Service) -> None:
    """Regression (issue 22): "The running rltray refused: the base model is already in
    use" and "0 new ratings wait for training; a round starts at 1"."""
    code, _, err = cli("rollback")
    assert code == ExitCode.NOTHING_TO_DO and "refused" not in err
    assert "Nothing to roll back: the base model is already active" in err
    code, _, err = cli("train")
    assert code == ExitCode.NOTHING_TO_DO and "refused" not in err
    assert "No new ratings yet; a round starts after 1 new rating" in err
    rate(running_service.paths, 8, 0)
    assert cli("train", "--wait")[0] == ExitCode.OK
    code, _, err = cli("rollback", "v1")
    assert code == ExitCode.NOTHING_TO_DO
    assert err.strip() == "rltray: Nothing to do: v1 is already the active version."
    code, _, err = cli("rollback", "v9")  # a real refusal still says so
    assert code == ExitCode.USAGE and "The running rltray refused: There is no usable" in err


def test_the_client_knows_every_nothing_to_do() -> None:
    """The codes the CLI says without "refused" are the NothingToDo classes' names."""
    from rltray.app import service  # noqa: F401  (defines AlreadyRated)
    from rltray.app.api.client import NOTHING_TO_DO_CODES
    from rltray.app.errors import NothingToDo
    from rltray.app.training import jobbuild  # noqa: F401  (defines NotEnoughRatings)

    def names(cls: type) -> set[str]:
        return {cls.__name__}.union(*(names(sub) for sub in cls.__subclasses__()))

    assert names(NothingToDo) == NOTHING_TO_DO_CODES


def test_config_set_reads_a_quoted_number(rltray_home: Path) -> None:
    """Regression (issue 22): `config set training.min_ratings '"4"'` (a TOML string, as
    config.toml shows values) was refused as "not '4'"."""
    code, out, err = cli("config", "set", "training.min_ratings", '"4"')
    assert code == ExitCode.OK, err
    assert out.startswith("training.min_ratings = 4 ")
    assert cli("config", "set", "training.preset", "'careful'")[0] == ExitCode.OK
    assert cli("config", "get", "training.preset")[1].strip() == '"careful"'


def test_train_wait_follows_the_running_service(running_service: Service) -> None:
    rate(running_service.paths, 8, 0)
    code, out, err = cli("train", "--wait")
    assert code == ExitCode.OK, err
    assert "started in the running rltray" in out
    assert "Accepted: version v1 is now active." in out and "Gate: " in out


def test_train_says_what_happened_to_ollama(running_service: Service) -> None:
    """Regression (issue 22): a failed publish went only to the activity log; `train
    --wait` (through the running service) and `train` (alone) now say it."""
    rate(running_service.paths, 8, 0)
    code, out, err = cli("train", "--wait")
    assert code == ExitCode.OK, err
    assert "Ollama: not used (ollama.model is empty); `rltray config set ollama.model" in out
    for key, value in (("ollama.model", "tiny:1m"), ("ollama.host", "http://127.0.0.1:9")):
        assert cli("config", "set", key, value)[0] == ExitCode.OK
    rate(running_service.paths, 8, 8)
    code, out, err = cli("train", "--wait")
    assert code == ExitCode.OK, err
    assert (
        "Accepted: version v2 is now active.\nOllama: not reachable at http://127.0.0.1:9 — "
        "v2 is active here but not in Ollama; start Ollama, then run `rltray publish`\n"
    ) in out


def test_train_alone_says_when_ollama_is_down(fake_trainer: Paths) -> None:
    for key, value in (("ollama.model", "tiny:1m"), ("ollama.host", "http://127.0.0.1:9")):
        assert cli("config", "set", key, value)[0] == ExitCode.OK
    rate(fake_trainer, 8, 0)
    code, out, err = cli("train")
    assert code == ExitCode.OK, err
    assert "Ollama: not reachable at http://127.0.0.1:9 — v1 is active here" in out


def test_ctrl_c_while_waiting_leaves_the_round_running_and_says_so(
    running_service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C stops the waiting, not the round the service trains (issue 20 item 12)."""
    monkeypatch.setenv("FAKE_MODE", "slow")
    rate(running_service.paths, 8, 0)
    runner = running_service.runner()

    def interrupt_at_the_first_step() -> None:
        deadline = time.monotonic() + 30
        while not runner.progress.get("step") and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl+C in the terminal sends

    threading.Thread(target=interrupt_at_the_first_step, daemon=True).start()
    code, out, err = cli("train", "--wait")
    assert code == 130, err
    run_id = runner.progress["run_id"]
    assert f"Stopped waiting. Run {run_id} goes on in the running rltray" in out
    assert "`rltray status`" in out and "`rltray runs`" in out
    assert runner.running()
    assert runner.wait(30) and running_service.store.get_run(run_id).status == "done"


def test_status_shows_why_automatic_training_stopped(
    fake_trainer: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 item 13: after 3 failed rounds in a row, status says so with the log tail."""
    from rltray.app import autotrain
    from rltray.app.tray import state as traystate

    monkeypatch.setenv("FAKE_MODE", "crash")
    rate(fake_trainer, 48, 0)
    with Service(fake_trainer) as service:
        from rltray.app.runtime import Runtime

        runtime = Runtime(service)  # not started: what the tray and the gate read
        runner = service.runner()
        for _ in range(3):
            runner.start(reason="scheduled")
            assert runner.wait(30)
        assert json.loads(cli("status", "--json")[1])["training"]["stopped"]["failures"] == 3
        code, out, _ = cli("status")
        assert code == ExitCode.OK
        assert "automatic training stopped after 3 failed or rejected rounds in a row" in out
        assert "last: the trainer exited with code 1: RuntimeError" in out
        assert "noise line 59" in out  # the log tail
        problems = traystate.snapshot(runtime).problems
        assert problems[0].startswith("Automatic training stopped after 3 failed")
        assert problems[1] == "trainer.log: RuntimeError: the fake trainer broke"
        assert "stopped after 3" in autotrain.decide(runtime).reason
        monkeypatch.setenv("FAKE_MODE", "done")
        service.train_now()  # Train now resets the count
        assert runner.wait(30)
        assert service.training_status()["stopped"] is None
        assert "stopped after" not in autotrain.decide(runtime).reason


def test_train_waits_for_a_starting_rltray_and_never_trains_beside_it(
    rltray_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: while a tray held its lock but had not published its API yet (a killed
    tray's trainer being settled takes up to a minute), `rltray train` trained on its own,
    and the tray's first tick started a second trainer on the same ratings."""
    import subprocess
    import sys

    from rltray.app.cli import training

    paths = Paths.from_env()
    paths.ensure()
    holder = subprocess.Popen(  # another process holds the service lock, with no endpoint
        [sys.executable, "-c", "import sys, filelock; l = filelock.FileLock(sys.argv[1]); "
         "l.acquire(); print('held', flush=True); sys.stdin.read()", str(paths.lock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(training, "SERVICE_START_WAIT_S", 0.5)
        code, out, err = cli("train")
        assert code != ExitCode.OK
        assert "does not answer yet; nothing was done here" in err, (out, err)
        assert "Waiting for the running rltray to finish starting" in out
        with Store.open(paths) as store:
            assert store.list_runs() == []
    finally:
        holder.communicate("", timeout=10)


def _three_ticks_that_start(paths: Paths, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    """Three scheduler ticks that each decide to start a round; what the event log says of
    training, and the status line's reason after them."""
    from rltray.app import autotrain
    from rltray.app.runtime import Runtime
    from rltray.app.scheduler import Decision

    monkeypatch.setattr(autotrain, "decide", lambda runtime: Decision(True, False, "now"))
    with Service(paths) as service:
        runtime = Runtime(service)
        for _ in range(3):
            autotrain.gate(runtime)
        assert not service.runner().running()
        said = [e["message"] for e in service.store.events(limit=20) if e["kind"] == "training"]
        return said, runtime.gate_reason


def test_a_round_the_gate_cannot_start_is_said_once_not_every_minute(
    fake_trainer: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of new ratings says enough, but none can be trained (empty answers, or
    too long for the model): each tick logged "could not start", every minute, for ever."""
    with Store.open(fake_trainer) as store:
        for n in range(3):
            turn_id, _ = store.add_turn({"agent": "codex", "session": "s", "turn": f"e{n}",
                                         "prompt": "p", "response": "   ", "context": [],
                                         "captured_at": "2025-01-01T00:00:00Z"})
            store.rate(turn_id, 1 if n % 2 else -1, "cli")
    said, reason = _three_ticks_that_start(fake_trainer, monkeypatch)
    assert len(said) == 1 and said[0].startswith("not started: "), said
    assert reason == said[0].removeprefix("not started: ")


def test_a_trainer_that_cannot_start_is_said_once_not_every_minute(
    fake_trainer: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer environment that is gone fails the same way at every tick: it was logged
    every minute (1,440 rows a day, never pruned)."""
    assert cli("config", "set", "training.python", "/nonexistent/bin/python")[0] == ExitCode.OK
    rate(fake_trainer, 48, 0)
    said, reason = _three_ticks_that_start(fake_trainer, monkeypatch)
    assert len(said) == 1 and said[0].startswith("could not start: "), said
    assert "/nonexistent/bin/python" in reason


# -- review 3: versions ------------------------------------------------------------------


def test_versions_shows_the_held_out_auroc_the_trainer_measured(fake_trainer: Paths) -> None:
    """Regression (review 3 r1): the column read ``heldout_auroc``, a key nothing writes
    (the trainer's is ``auroc_new``), so it always said "—"."""
    rate(fake_trainer, 8, 0)
    assert cli("train")[0] == ExitCode.OK
    code, out, err = cli("versions")
    assert code == ExitCode.OK, err
    (row,) = [line for line in out.splitlines() if "v1" in line]
    assert "0.75" in row.split("│")[5]  # the fake trainer's auroc_new


HUGE = "9" * 20


@pytest.mark.parametrize("argv", [("rollback", HUGE), ("use", "codex", HUGE),
                                  ("export-model", HUGE, "--format", "peft")])  # fmt: skip
def test_a_huge_version_number_is_one_sentence(rltray_home: Path, argv: tuple[str, ...]) -> None:
    """Regression (review 3 r9): 20 digits reached SQLite and came back as "unexpected
    error: OverflowError"; the API's Version refuses them, and so does the CLI now."""
    huge = HUGE
    code, _, err = cli(*argv)
    assert code == ExitCode.USAGE, err
    assert err.strip() == (f"rltray: There is no version {huge}: version numbers have at most "
                           "18 digits; `rltray versions` lists them.")  # fmt: skip


def test_a_round_already_running_exits_alike_with_or_without_the_tray(
    running_service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3 r10): TrainingBusy exited 5 (ALREADY_RUNNING) from `rltray train`
    alone but 2 (USAGE) when the running rltray refused it."""
    from rltray.app.training.runner import TrainingBusy

    monkeypatch.setenv("FAKE_MODE", "slow")
    rate(running_service.paths, 8, 0)
    assert cli("train")[0] == ExitCode.OK
    try:
        code, _, err = cli("train")
        assert code == ExitCode.ALREADY_RUNNING == TrainingBusy.exit_code, err
        assert "The running rltray refused: a training round is running" in err
    finally:
        running_service.runner().stop(pause=False, timeout=20)


def test_the_client_knows_every_already_running_refusal() -> None:
    """The codes the CLI exits ALREADY_RUNNING for are the classes that do so alone."""
    from rltray.app.api.client import ALREADY_RUNNING_CODES
    from rltray.app.errors import UserError
    from rltray.app.training import runner  # noqa: F401  (defines TrainingBusy)

    def subclasses(cls: type) -> set[type]:
        return {cls}.union(*(subclasses(sub) for sub in cls.__subclasses__()))

    busy = {c.__name__ for c in subclasses(UserError) if c.exit_code == ExitCode.ALREADY_RUNNING}
    assert busy == ALREADY_RUNNING_CODES


def test_ctrl_c_during_the_export_of_an_accepted_round_says_it_is_active(
    fake_trainer: Paths, fake_python: str, tmp_path: Path
) -> None:
    """Regression (review 3 r8): Ctrl+C on `rltray train` while the accepted round was being
    exported to Ollama said "Paused. Run `rltray train` again to resume…" of a round that
    was done and active; the export it cut short is what needs doing again."""
    import subprocess
    import sys

    from tests.app.gatedollama import GatedOllama

    ollama = GatedOllama(tmp_path / "ollama").start()
    ollama.hold("POST", "/api/show")  # the export is under way, and stays so
    wrapper = tmp_path / "dispatch-python"  # the export in this venv, the round in the fake
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = "rltray.trainer.export" ]; then exec {sys.executable} "$@"; fi\n'
        f'exec {fake_python} "$@"\n'
    )
    wrapper.chmod(0o755)
    for key, value in (("training.python", str(wrapper)), ("ollama.model", "tiny:1m"),
                       ("ollama.host", ollama.url)):  # fmt: skip
        assert cli("config", "set", key, value)[0] == ExitCode.OK
    rate(fake_trainer, 8, 0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltray.app.cli", "train"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert ollama.held.wait(60), "the export never asked Ollama"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C: the terminal's whole foreground group
        out, _ = proc.communicate(timeout=60)
    finally:
        ollama.release()
        if proc.poll() is None:
            proc.kill()
        ollama.stop()
    assert proc.returncode == 130, out
    assert "v1 is active; its export to Ollama was cut short: run `rltray publish`." in out
    assert "Paused" not in out
    with Store.open(fake_trainer) as store:
        assert store.active_adapter().version == 1
        assert [(r.status, r.adapter_version) for r in store.list_runs()] == [("done", 1)]
