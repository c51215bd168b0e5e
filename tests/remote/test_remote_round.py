"""Training rounds on a "bigger machine" through the real path: SSH, Ray Jobs, SFTP.

The remote is this machine reached as a remote would be: a real sshd on a free
127.0.0.1 port with a temporary host key and authorized key, and a real Ray head
with token auth whose dashboard listens on 127.0.0.1 only (reached through the
stand-in's SSH forward). The runner, store and tiny model are the real ones of
tests/app/test_training.py; the round's trainer runs as a Ray job.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rltray.app import secrets as keyring_secrets
from rltray.app.config import Config, TrainingSettings
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.training.runner import TrainingRunner

from tests.support.jobfiles import run_trainer

pytestmark = [pytest.mark.slow, pytest.mark.ml]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
TINY_HYPER: dict[str, Any] = {
    "rank": 4, "alpha": 8.0, "lr": 0.01, "warmup_steps": 1, "epochs": 2, "batch_size": 2,
    "step_examples": 4, "max_seq_len": 96, "gate_profile": "tiny-test",
}  # fmt: skip
ENV = {"RLTRAY_TRAINER_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture
def paths(rltray_home: Path) -> Paths:
    return Paths.from_env()


@pytest.fixture
def store(paths: Paths):
    with Store.open(paths) as opened:
        yield opened


def rate(store: Store, n: int) -> list[int]:
    ids = []
    for i in range(n):
        turn_id, _ = store.add_turn({
            "v": 1, "kind": "turn", "agent": "claude-code", "session": "s", "turn": f"t{i}",
            "prompt": f"Question {i}: how do I fix it?",
            "response": ("Add a regression test first." if i % 2 == 0 else "Delete the test."),
            "context": [], "cwd": "/w", "model": "m", "captured_at": f"2025-01-01T00:00:{i:02d}Z",
            "event": "stop", "transcript": None,
        })  # fmt: skip
        ids.append(store.rate(turn_id, 1 if i % 2 == 0 else -1, "cli",
                              at=T0 + timedelta(minutes=i)).id)  # fmt: skip
    return ids


def remote_training(sshd, ray_head, model: Path, tmp: Path, **over: Any) -> TrainingSettings:
    return TrainingSettings(**{
        "base_model": str(model), "backend": "torch", "remote_host": "127.0.0.1",
        "remote_port": sshd.port, "remote_user": sshd.user, "remote_host_key": sshd.host_key,
        "remote_dashboard_port": ray_head.dashboard_port, "remote_dir": str(tmp / "remote"),
        "remote_python": sys.executable, "remote_stop_grace_s": 60, **over,
    })  # fmt: skip


def keep_secrets(sshd, ray_head, token: str | None = None) -> None:
    keyring_secrets.set_secret("remote-ssh-key", sshd.client_key)
    keyring_secrets.set_secret("ray-token", token or ray_head.token)


def runner_for(store, paths, training, changes: list | None = None, **hyper: Any) -> TrainingRunner:
    return TrainingRunner(
        store, paths, lambda: Config(training=training),
        on_change=(changes.append if changes is not None else None),
        hyper={**TINY_HYPER, **hyper}, device="cpu", env=ENV,
    )  # fmt: skip


def wait_until(cond, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def sha(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_refused_with_one_sentence(sshd, ray_head, store, paths, tiny_model, tmp_path) -> None:
    """An unknown host key, a changed one and a wrong Ray token each stop the round
    before any job exists, with one sentence (and the fingerprint to compare)."""
    rate(store, 4)
    keep_secrets(sshd, ray_head)
    for over, said in [
        ({"remote_host_key": ""}, f"shows the host key {sshd.host_key}, which you have not"),
        ({"remote_host_key": "SHA256:" + "A" * 43}, "not the accepted SHA256:AAAA"),
    ]:
        runner = runner_for(
            store, paths, remote_training(sshd, ray_head, tiny_model, tmp_path, **over)
        )
        run_id = runner.start()
        assert runner.wait(60)
        run = store.get_run(run_id)
        assert run.status == "failed" and said in run.error.splitlines()[0], run.error
        assert run.metrics["exit_code"] == 2
        store.finish_run(run_id, "failed")
    keep_secrets(sshd, ray_head, token="not-the-token")
    runner = runner_for(store, paths, remote_training(sshd, ray_head, tiny_model, tmp_path))
    run_id = runner.start()
    assert runner.wait(60)
    first = store.get_run(run_id).error.splitlines()[0]
    assert first.startswith("the Ray cluster refused the token (HTTP 403)"), first
    assert not (tmp_path / "remote" / "runs").exists()  # nothing uploaded


def test_round_pause_resume_and_the_adapter_comes_back_whole(
    sshd, ray_head, store, paths, tiny_model, tmp_path
) -> None:
    """Train now -> a Ray job; pause checkpoints remotely (Ray's SIGTERM, one signal);
    resume continues from that checkpoint; the adapter is fetched byte-identical
    (the stand-in compares SHA-256 with the remote's files), becomes v1, and holds the
    very weights the local trainer writes for the same job never paused."""
    rate(store, 16)
    keep_secrets(sshd, ray_head)
    changes: list[dict[str, Any]] = []
    # 2 steps an epoch; long enough that a fast machine cannot finish the round between
    # the first progress line and the pause arriving through Ray (40 steps once did)
    epochs = 100
    runner = runner_for(store, paths, remote_training(sshd, ray_head, tiny_model, tmp_path),
                        changes, epochs=epochs)  # fmt: skip
    run_id = runner.start()
    wait_until(lambda: any(c.get("step") for c in changes), 180, "no progress line")
    remote_run = tmp_path / "remote" / "runs" / run_id
    assert (remote_run / "job.json").is_file()
    assert runner.stop(pause=True, timeout=120)
    run = store.get_run(run_id)
    assert run.status == "paused", run.error
    state = json.loads((remote_run / "checkpoint" / "state.json").read_text())
    paused_at = state["global_step"]
    assert 0 < paused_at < 2 * epochs
    log = (paths.runs / run_id / "trainer.log").read_text()
    assert "Traceback" not in log

    changes.clear()
    assert runner.resume() == run_id
    assert runner.wait(300)
    run = store.get_run(run_id)
    assert run.status == "done", run.error
    steps = [c["step"] for c in changes if c.get("step")]
    assert min(steps) > paused_at and max(steps) == 2 * epochs  # continued, not restarted
    assert run.metrics["remote_fetch_verified"] >= 3
    v1 = store.active_adapter()
    assert v1 is not None and (Path(v1.path) / "adapter_model.safetensors").is_file()
    assert not remote_run.exists()  # the remote run folder is cleaned after the fetch
    remote_state = json.loads((paths.runs / run_id / "remote.json").read_text())
    assert remote_state["attempt"] == 2

    # the same job never paused, run by the local trainer: the very same weights
    whole = tmp_path / "whole"
    shutil.copytree(paths.runs / run_id, whole, ignore=shutil.ignore_patterns("remote.json",
                    "stop", "trainer.*"))  # fmt: skip
    job = json.loads((whole / "job.json").read_text())
    (whole / "job.json").write_text(json.dumps({**job, "out": "adapter"}))
    code, _, err = run_trainer(whole / "job.json", timeout=300)
    assert code == 0, err[-2000:]
    weights = "adapter_model.safetensors"
    assert (whole / "adapter" / weights).read_bytes() == (Path(v1.path) / weights).read_bytes()


def test_cancel_cleans_the_remote_folder_and_no_gpu_waits(
    sshd, ray_head, store, paths, tiny_model, tmp_path
) -> None:
    """Two GPUs asked of a one-GPU cluster: the job waits and the tray says so; the tray
    quits (the round is left running) and its next start re-attaches; cancel stops it
    and removes the remote run folder."""
    rate(store, 8)
    keep_secrets(sshd, ray_head)
    changes: list[dict[str, Any]] = []
    training = remote_training(sshd, ray_head, tiny_model, tmp_path, remote_gpus=2)
    runner = runner_for(store, paths, training, changes)
    run_id = runner.start()
    wait_until(lambda: any("waiting for the cluster" in str(c.get("message")) for c in changes),
               60, "no waiting line")  # fmt: skip
    assert (tmp_path / "remote" / "runs" / run_id).is_dir()
    runner.close()  # the tray quits: the remote round is left to run, not paused
    assert store.get_run(run_id).status == "running"
    changes.clear()
    runner = runner_for(store, paths, training, changes)  # the tray's next start
    assert runner.reconcile() == [run_id]
    wait_until(lambda: any("re-attaching" in str(c.get("message")) for c in changes),
               60, "no re-attach")  # fmt: skip
    assert runner.stop(pause=False, timeout=60)
    run = store.get_run(run_id)
    said = [c.get("message") for c in changes]
    assert run.status == "cancelled", (run.status, run.error)
    assert not (tmp_path / "remote" / "runs" / run_id).exists(), said


def test_a_failed_remote_round_leaves_no_copy_of_the_ratings_there(
    sshd, ray_head, store, paths, tiny_model, tmp_path
) -> None:
    """Regression (a privacy review): only a done or cancelled round removed its remote run
    folder; a failed one kept the examples and held-out files on the GPU box for good."""
    rate(store, 4)
    keep_secrets(sshd, ray_head)
    training = remote_training(sshd, ray_head, tiny_model, tmp_path)
    runner = runner_for(store, paths, training, max_seq_len=8)  # no answer token fits
    run_id = runner.start()
    assert runner.wait(180)
    run = store.get_run(run_id)
    assert run.status == "failed" and "max_seq_len" in run.error.splitlines()[0], run.error
    assert not (tmp_path / "remote" / "runs" / run_id).exists()


TRAY = """\
import json, sys, time
from rltray.app.config import Config, TrainingSettings
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.training.runner import TrainingRunner
cfg = json.loads(sys.argv[1])
store = Store.open(Paths.from_env())
training = TrainingSettings(**cfg["training"])
runner = TrainingRunner(store, Paths.from_env(), lambda: Config(training=training),
                        hyper=cfg["hyper"], device="cpu", env=cfg["env"])
runner.on_change = lambda p: print(json.dumps(p), flush=True)
runner.start()
time.sleep(600)
"""


def test_a_killed_tray_reattaches_to_the_running_round(
    sshd, ray_head, store, paths, tiny_model, tmp_path
) -> None:
    """The tray (a real process with its runner and stand-in) is killed mid-round; the
    remote job runs on; the next runner's reconcile re-attaches and finishes the round."""
    rate(store, 16)
    keep_secrets(sshd, ray_head)
    training = remote_training(sshd, ray_head, tiny_model, tmp_path)
    cfg = {"training": training.model_dump(), "hyper": {**TINY_HYPER, "epochs": 20}, "env": ENV}
    # the child tray has no test keyring: it gets the secrets the runner would read
    script = tmp_path / "tray.py"
    script.write_text(TRAY.replace("from rltray.app.training.runner import TrainingRunner",
        "from rltray.app.training import remote\n"
        "remote._secret = lambda name, s: json.loads(sys.argv[2])[name]\n"
        "from rltray.app.training.runner import TrainingRunner"))  # fmt: skip
    given = json.dumps({"remote-ssh-key": sshd.client_key, "ray-token": ray_head.token})
    tray = subprocess.Popen([sys.executable, str(script), json.dumps(cfg), given],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert tray.stdout is not None
        for line in tray.stdout:
            if json.loads(line).get("step"):
                break
        os.killpg(tray.pid, signal.SIGKILL)  # the tray and its stand-in, at once
        tray.wait(10)
    finally:
        if tray.poll() is None:
            os.killpg(tray.pid, signal.SIGKILL)
    (run,) = store.list_runs(limit=5)
    assert run.status == "running"
    changes: list[dict[str, Any]] = []
    runner = runner_for(store, paths, training, changes)
    assert runner.reconcile() == [run.id]
    assert runner.wait(300)
    done = store.get_run(run.id)
    assert done.status == "done", done.error
    assert any("re-attaching" in str(c.get("message")) for c in changes)
    assert store.active_adapter() is not None


def test_the_cli_keeps_key_and_token_in_the_keyring_and_checks_each_step(
    sshd, ray_head, paths, tiny_model, tmp_path
) -> None:
    """`rltray remote key FILE`, `rltray remote token < FILE` and `rltray remote check`
    (SSH, Ray and its token, a GPU from Ray, the remote trainer importing torch, and one
    training step on a tiny model there)."""
    import io

    from rltray.app.cli import main

    key_file = tmp_path / "id_test"
    key_file.write_text(sshd.client_key)
    training = remote_training(sshd, ray_head, tiny_model, tmp_path)
    lines = ["[training]"] + [
        f"{k} = {json.dumps(v)}"
        for k, v in training.model_dump().items()
        if k.startswith("remote_")
    ]
    paths.config.parent.mkdir(parents=True, exist_ok=True)
    paths.config.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    assert main(["remote", "key", str(key_file)], stdout=out, stderr=out) == 0, out.getvalue()
    assert keyring_secrets.get_secret("remote-ssh-key") == sshd.client_key
    stdin = io.StringIO(ray_head.token + "\n")
    assert main(["remote", "token"], stdout=out, stderr=out, stdin=stdin) == 0, out.getvalue()
    assert ray_head.token not in out.getvalue()
    out = io.StringIO()
    code = main(["remote", "check"], stdout=out, stderr=out)
    said = out.getvalue()
    assert code == 0, said
    for step in ("ssh:", "ray: Ray 2.60.0", "gpu:", "trainer: torch",
                 "step: one training step on a tiny model on cpu"):
        assert step in said, said
    out = io.StringIO()
    main(["doctor"], stdout=out, stderr=out)  # other checks may fail on a test box
    for step in ("remote ssh", "remote ray", "remote gpu", "remote trainer", "remote step"):
        assert step in out.getvalue(), out.getvalue()


def test_a_parent_adapter_goes_up_once_by_its_weights_hash(sshd, tmp_path) -> None:
    """The parent is uploaded by SFTP into <dir>/adapters/<sha256 of its weights> and,
    once there (or left there by the round that trained it), never sent again."""
    from rltray.app.training.remote.standin import RemoteConfig, StandIn, StopRequest

    parent = tmp_path / "adapters" / "v0001"
    parent.mkdir(parents=True)
    (parent / "adapter_config.json").write_text('{"r": 4}')
    (parent / "adapter_model.safetensors").write_bytes(b"\0weights" * 1000)
    job = tmp_path / "run" / "job.json"
    job.parent.mkdir()
    job.write_text(json.dumps({"id": "r1", "out": "../adapters/.run-r1"}))
    cfg = RemoteConfig(host="127.0.0.1", port=sshd.port, user=sshd.user,
                       host_key=sshd.host_key, dir=str(tmp_path / "remote"))  # fmt: skip
    said: list[dict[str, Any]] = []
    standin = StandIn(job, cfg, {"ssh_key": sshd.client_key}, said.append, StopRequest(job.parent))
    from rltray.app.training.remote.ssh import Connection

    standin.conn = Connection("127.0.0.1", sshd.port, sshd.user, sshd.host_key, sshd.client_key)
    try:
        root = standin.remote_root()
        first = standin._parent_on_remote(root, parent)
        weights = hashlib.sha256((parent / "adapter_model.safetensors").read_bytes()).hexdigest()
        assert first == f"{root}/adapters/{weights[:32]}"
        assert sha(Path(first)) == sha(parent)  # byte-identical on the remote side
        again = standin._parent_on_remote(root, parent)
        assert again == first
        assert [m["message"] for m in said].count("uploaded the parent adapter v0001") == 1
    finally:
        standin.close()


def test_the_remote_keeps_the_adapters_in_use_and_the_newest_three(sshd, tmp_path) -> None:
    """After a round only the adapters that round used and made, and the three newest,
    stay on the training machine (real SFTP: the sshd's files are this machine's)."""
    import os

    from rltray.app.training.remote.prune import prune_adapters
    from rltray.app.training.remote.ssh import Connection

    folder = tmp_path / "remote" / "adapters"
    for age, name in enumerate(["a6", "a5", "a4", "a3", "a2", "a1"]):  # a6 the oldest
        (folder / name).mkdir(parents=True)
        (folder / name / "adapter_config.json").write_text("{}")
        when = 1_700_000_000 + 100 * age
        os.utime(folder / name, (when, when))
    (folder / "a0.part").mkdir()  # an upload under way
    conn = Connection("127.0.0.1", sshd.port, sshd.user, sshd.host_key, sshd.client_key)
    try:
        gone = prune_adapters(conn, str(folder), in_use={"a6"})
        assert sorted(gone) == ["a4", "a5"]
        assert sorted(p.name for p in folder.iterdir()) == ["a0.part", "a1", "a2", "a3", "a6"]
        assert prune_adapters(conn, str(tmp_path / "nowhere"), set()) == []
    finally:
        conn.close()


def test_what_a_round_uploads_is_private_to_the_login_on_the_remote(sshd, tmp_path) -> None:
    """Regression (review2-sec remote_perms): the round's examples, held-out prompts, job
    and parent adapter went up 0644 in 0755 folders, so any user of a shared GPU machine
    could read the user's rated prompts and answers. Now folders are 0700 (those an older
    rltray left open are closed), files 0600, and `rltray remote check` flags an open
    remote folder with the command that closes it."""
    from rltray.app.training.remote.check import folder_row
    from rltray.app.training.remote.ssh import Connection
    from rltray.app.training.remote.standin import RemoteConfig, StandIn, StopRequest

    remote = tmp_path / "remote"
    (remote / "runs" / "r1").mkdir(parents=True)  # as an older rltray left them
    (remote / "adapters").mkdir()
    (remote / "runs" / "r1" / "job.json").write_text("{}")  # an earlier attempt's
    for folder in (remote, remote / "runs", remote / "runs" / "r1", remote / "adapters"):
        os.chmod(folder, 0o755)
    os.chmod(remote / "runs" / "r1" / "job.json", 0o644)
    parent = tmp_path / "local" / "adapters" / "v0001"
    parent.mkdir(parents=True)
    (parent / "adapter_config.json").write_text('{"r": 4}')
    (parent / "adapter_model.safetensors").write_bytes(b"\0weights" * 100)
    job = tmp_path / "local" / "run" / "job.json"
    job.parent.mkdir()
    (job.parent / "examples.jsonl").write_text('{"prompt": "my secret prompt"}\n')
    (job.parent / "heldout.jsonl").write_text('{"prompt": "a held-out prompt"}\n')
    job.write_text(json.dumps({"id": "r1", "out": "../adapters/.run-r1", "base_model": "m",
                               "examples": "examples.jsonl", "heldout": "heldout.jsonl",
                               "parent_adapter": str(parent)}))  # fmt: skip
    cfg = RemoteConfig(host="127.0.0.1", port=sshd.port, user=sshd.user,
                       host_key=sshd.host_key, dir=str(remote))  # fmt: skip
    standin = StandIn(job, cfg, {"ssh_key": sshd.client_key}, [].append, StopRequest(job.parent))
    standin.conn = Connection("127.0.0.1", sshd.port, sshd.user, sshd.host_key, sshd.client_key)
    try:
        row = folder_row(standin.conn, cfg)
        assert row is not None and row[:2] == ("folder", False), row
        assert "mode 0755" in row[2] and f"chmod -R go= {remote}" in row[2], row
        state: dict[str, Any] = {}
        run_dir = Path(standin._upload(state))
        assert run_dir == remote / "runs" / "r1"
        assert folder_row(standin.conn, cfg) is None
    finally:
        standin.close()
    made = sorted(p for p in remote.rglob("*"))
    assert {p.name for p in made} >= {"examples.jsonl", "heldout.jsonl", "job.json", "wrap.py",
                                      "adapter_config.json", "adapter_model.safetensors"}
    for path in [remote, *made]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} is {mode:04o}"
    assert state["remote_parent"].startswith(str(remote / "adapters"))
