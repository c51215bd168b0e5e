"""The local stand-in for a remote round: the trainer's contract, with Ray Jobs behind it.

The runner starts ``python -m rltray.app.training.remote runs/<id>/job.json`` instead
of the trainer when ``training.remote_host`` is set. This process speaks exactly
the trainer's JSON lines and exit codes (0 done, 3 paused, 2 a job/setup problem
the user fixes, 1 anything else), so the runner, scheduler, gate handling and
versions code do not know the round ran elsewhere. Its first stdin line carries
the remote settings and the secrets (SSH key, Ray token) from the OS keyring —
never argv or a file; stdin closing afterwards, the job folder's ``stop`` file
(``cancel`` inside: a cancel) or SIGTERM ask it to stop, as they ask the trainer.

What it does: SSH with the pinned host key (``ssh.Connection``), a local forward to
the dashboard (which stays on the remote's 127.0.0.1), a token check
(``rayjobs``), SFTP upload of the job files into a per-run remote folder (parent
adapters are cached once under ``<dir>/adapters``; checkpoints stay in the run
folder, so Ray's 512 MiB upload cap never applies), one Ray job per attempt
(``rltray-<run>-<n>``) running ``wrap.py``, log polling that keeps only marked
protocol lines and skips those already seen (a replayed log starts from the
beginning), and an SFTP fetch of the adapter when the ``done`` line came.

Ray's stop signals the job's whole process tree at once, then SIGKILLs after
``RAY_JOB_STOP_WAIT_TIME_S``: the grace is set in the job's runtime env, and this
process asks Ray to stop exactly once. Paused or failed is read from the
trainer's own last line, not from Ray's status. ``remote.json`` in the local run
folder names the submission, so a stand-in started again (the tray restarted)
re-attaches to a job that still runs, or collects one that finished meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shlex
import shutil
import signal
import sys
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltray.app.fileio import write_private_atomic
from rltray.app.training.remote import verify, wrap
from rltray.app.training.remote.prune import prune_adapters
from rltray.app.training.remote.rayjobs import TERMINAL, RayHTTPError, RayJobs
from rltray.app.training.remote.ssh import PRIVATE_DIR, Connection, RemoteError, join

EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_PAUSED = 0, 1, 2, 3
STATE_FILE = "remote.json"
STOP_FILE = "stop"
POLL_S = 1.0
#: Trainer environment variables passed on to the remote trainer (the stand-in's own
#: stop channel and parent watch are local matters and stay here).
PASS_ENV = ("RLTRAY_TRAINER_THREADS", "RLTRAY_TRAINER_BF16", "RLTRAY_TRAINER_RECOMPUTE",
            "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "HF_HOME")  # fmt: skip


@dataclass(frozen=True)
class RemoteConfig:
    """``training.remote_*`` as the runner hands it over (no secrets)."""

    host: str
    port: int = 22
    user: str = ""
    host_key: str = ""
    dashboard_port: int = 8265
    dir: str = "rltray-remote"
    python: str = "python3"
    gpus: float = 1.0
    stop_grace_s: int = 300
    base_model: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RemoteConfig:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class StopRequest:
    """Pause or cancel, however it was asked (stdin EOF, stop file, SIGTERM); set once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.event = threading.Event()

    def cancel(self) -> bool:
        try:
            return (self.folder / STOP_FILE).read_text(encoding="utf-8").strip() == "cancel"
        except OSError:
            return False

    def poll(self) -> bool:
        if not self.event.is_set() and (self.folder / STOP_FILE).exists():
            self.event.set()
        return self.event.is_set()


class StandIn:
    """One remote attempt at one job folder, from connect to the last line."""

    def __init__(
        self, job_path: Path, cfg: RemoteConfig, secrets: dict[str, str],
        emit: Callable[[dict[str, Any]], None], stop: StopRequest,
    ) -> None:  # fmt: skip
        self.job_path = job_path
        self.folder = job_path.parent
        self.job = json.loads(job_path.read_text(encoding="utf-8"))
        self.run_id = str(self.job["id"])
        self.cfg = cfg
        self.secrets = secrets
        self.emit = emit
        self.stop = stop
        self.conn: Connection | None = None
        self.jobs: RayJobs | None = None
        self.seen = 0
        self.final: dict[str, Any] | None = None
        self.exit_code: int | None = None
        self.stop_sent = False
        self.said_waiting = False

    # -- connection ----------------------------------------------------------

    def connect(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.jobs = open_cluster(self.cfg, self.secrets)

    def remote_root(self) -> str:
        assert self.conn is not None
        return self.conn.realpath(self.cfg.dir)

    # -- state ---------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.folder / STATE_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return {}

    def _save_state(self, state: dict[str, Any]) -> None:
        data = (json.dumps(state, indent=1) + "\n").encode("utf-8")
        write_private_atomic(self.folder / STATE_FILE, data, 0o600)

    # -- the round -----------------------------------------------------------

    def run(self) -> int:
        self.emit({"type": "log", "message": f"connecting to {self.cfg.host} over SSH"})
        self.connect()
        assert self.jobs is not None
        self.jobs.check_auth()
        state = self._state()
        sid = state.get("submission_id")
        attach = False
        details = self.jobs.status(sid) if sid else None
        if details is not None:
            running = details.get("status") not in TERMINAL
            # a job this stand-in stopped is not followed again (its stop may be queued)
            attach = (running and state.get("stopped") != sid) or self._ended_done(str(sid))
        if attach:
            self.emit({"type": "log", "message": f"re-attaching to the remote job {sid}"})
        else:
            if details is not None and details.get("status") == "RUNNING":
                self._wait_stopped(str(sid))  # a stopped one still writing its checkpoint
            sid = self._submit(state)
        return self._follow(sid, state)

    def _wait_stopped(self, sid: str) -> None:
        """Let a job we stopped finish its checkpoint before a new one uses its folder."""
        assert self.jobs is not None
        self.emit({"type": "log", "message": f"waiting for {sid} to finish its checkpoint"})
        deadline = time.monotonic() + self.cfg.stop_grace_s + 30
        while time.monotonic() < deadline:
            if (self.jobs.status(sid) or {}).get("status") in TERMINAL:
                return
            time.sleep(2.0)

    def _ended_done(self, sid: str) -> bool:
        assert self.jobs is not None
        return any(line.get("type") == "done" for _, line in marked(self.jobs.logs(sid)))

    def _submit(self, state: dict[str, Any]) -> str:
        assert self.conn is not None and self.jobs is not None
        t0 = time.monotonic()
        run_dir = self._upload(state)
        upload_s = time.monotonic() - t0
        attempt = int(state.get("attempt") or 0) + 1
        sid = f"rltray-{self.run_id}-{attempt}"
        state.update(submission_id=sid, attempt=attempt, remote_run=run_dir)
        self._save_state(state)
        py = shlex.quote(self.cfg.python)
        entry = f"cd {shlex.quote(run_dir)} && exec {py} wrap.py {py} job.json"
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env.update(RAY_JOB_STOP_WAIT_TIME_S=str(self.cfg.stop_grace_s), PYTHONUNBUFFERED="1",
                   RLTRAY_TRAINER_USER_AWAY="1")  # fmt: skip
        extra: dict[str, Any] = {
            "runtime_env": {"env_vars": env},
            "metadata": {"rltray_run": self.run_id},
        }
        if self.cfg.gpus > 0:
            extra["entrypoint_num_gpus"] = self.cfg.gpus
        t1 = time.monotonic()
        self.jobs.submit(sid, entry, **extra)
        self.submitted_at = t1
        self.emit({"type": "metric", "name": "remote_upload_s", "value": round(upload_s, 3)})
        self.emit({"type": "log", "message": f"submitted {sid} to Ray on {self.cfg.host}"})
        return sid

    def _upload(self, state: dict[str, Any]) -> str:
        """The job's files into its remote run folder, private to the login; that folder.

        The files hold the user's prompts, answers and ratings, and a lab's GPU machine
        has other users: the remote folder, its runs/ and adapters/ and the run folder
        are 0700 (made so when they exist already), every file 0600.
        """
        assert self.conn is not None
        root = self.remote_root()
        private_folders(self.conn, root)
        run_dir = join(root, "runs", self.run_id)
        self.conn.makedirs(run_dir)
        self.conn.chmod(run_dir, PRIVATE_DIR)  # one an earlier attempt left, too
        job = dict(self.job)
        job["base_model"] = self.cfg.base_model or job["base_model"]
        job["out"] = "out"
        if job.get("parent_adapter"):
            job["parent_adapter"] = self._parent_on_remote(root, Path(job["parent_adapter"]))
            state["remote_parent"] = job["parent_adapter"]
        for key in ("examples", "heldout"):
            if job.get(key):
                self.conn.put(self.folder / job[key], join(run_dir, job[key]))
        self.conn.write_text(join(run_dir, "job.json"), json.dumps(job, indent=1) + "\n")
        self.conn.write_text(join(run_dir, "wrap.py"), Path(wrap.__file__).read_text("utf-8"))
        self.conn.rmtree(join(run_dir, "out"))  # a half-written one from a hard kill
        return run_dir

    def _parent_on_remote(self, root: str, local: Path) -> str:
        """The parent adapter's remote copy, uploaded only when the remote lacks it.

        Remote adapters are named by the SHA-256 of their weights file: the adapter a
        round fetched back stays there under that name (:meth:`_conclude`), so the
        next round's parent - usually that very adapter - is never sent back up.
        """
        assert self.conn is not None
        target = join(root, "adapters", adapter_key(file_hashes(local)))
        if not self.conn.exists(join(target, "adapter_config.json")):
            tmp = target + ".part"
            self.conn.rmtree(tmp)
            self.conn.makedirs(join(root, "adapters"))
            self.conn.put(local, tmp)
            self.conn.rmtree(target)
            self.conn.rename(tmp, target)
            self.emit({"type": "log", "message": f"uploaded the parent adapter {local.name}"})
        return target

    def _follow(self, sid: str, state: dict[str, Any]) -> int:
        """Poll status and logs until the trainer's exit line; reconnect on a drop."""
        first_line_at: float | None = None
        stop_at = 0.0
        ended_at: float | None = None
        failures = 0
        while True:
            try:
                assert self.jobs is not None
                if self.stop.poll() and not self.stop_sent:
                    self.stop_sent = True  # once: a second SIGTERM would skip the checkpoint
                    stop_at = time.monotonic()
                    self.emit({"type": "log", "message": "asking Ray to stop the job (checkpoint)"})
                    self.jobs.stop(sid)
                    self._save_state({**state, "stopped": sid})
                details = self.jobs.status(sid) or {}
                status = str(details.get("status") or "")
                before = self.seen
                self._take(self.jobs.logs(sid))
                if self.seen > before and first_line_at is None:
                    first_line_at = time.monotonic()
                    if hasattr(self, "submitted_at"):
                        wait = round(first_line_at - self.submitted_at, 3)
                        self.emit({"type": "metric", "name": "remote_submit_s", "value": wait})
                if status == "PENDING" and not self.said_waiting and self.seen == 0:
                    self.said_waiting = True
                    why = str(details.get("message") or "").strip()
                    self.emit({"type": "log", "message": "waiting for the cluster to start the "
                               f"job (a free GPU){': ' + why if why else ''}"})  # fmt: skip
                failures = 0
                if self.exit_code is not None:
                    break
                if self.stop_sent and status == "PENDING" and time.monotonic() - stop_at > 5:
                    # Ray queues the stop until the job gets its resources (there is no
                    # kill for a job waiting on a GPU): it stops the moment it starts
                    self.emit({"type": "log", "message": "the job never started; Ray stops it "
                               "as soon as it gets a GPU"})  # fmt: skip
                    break
                if status in TERMINAL:
                    ended_at = ended_at or time.monotonic()
                    trail = 10 if self.seen else 4  # logs trail the status a little
                    if time.monotonic() - ended_at > trail:
                        break
            except (RemoteError, RayHTTPError, urllib.error.URLError, OSError, TimeoutError) as exc:
                failures += 1
                if isinstance(exc, RemoteError) and "token" in str(exc):
                    raise
                if failures > 30:
                    raise RemoteError(f"lost the connection to {self.cfg.host}: {exc}") from None
                self.emit({"type": "log", "message": f"reconnecting to {self.cfg.host} ({exc})"})
                time.sleep(min(10.0, 1.0 * failures))
                try:
                    self.connect()
                except RemoteError:
                    continue
            time.sleep(POLL_S)
        return self._conclude(sid, state)

    def _remote_hashes(self, folder: str) -> dict[str, str]:
        """SHA-256 of each file of a remote folder, computed there by the remote Python."""
        assert self.conn is not None
        code = ("import hashlib,json,os,sys;d=sys.argv[1];print(json.dumps({n: hashlib.sha256("
                "open(os.path.join(d,n),'rb').read()).hexdigest() for n in sorted(os.listdir(d))"
                " if os.path.isfile(os.path.join(d,n))}))")  # fmt: skip
        status, said = self.conn.run(
            f"{shlex.quote(self.cfg.python)} -c {shlex.quote(code)} {shlex.quote(folder)}", 120
        )
        if status != 0:
            raise RemoteError(f"could not check the adapter on {self.cfg.host}: {said.strip()}")
        return dict(json.loads(said.strip().splitlines()[-1]))

    def _take(self, logs: str) -> None:
        for seq, line in marked(logs):
            if seq <= self.seen:
                continue  # replayed from the beginning: already passed on
            self.seen = seq
            kind = line.get("type")
            if kind == "_exit":
                self.exit_code = int(line.get("code", 1))
            elif kind in ("done", "paused", "error"):
                self.final = line
            else:
                self.emit(line)

    def _forget_run(self, run_dir: str) -> None:
        """Remove a run folder on the remote machine; a failure to is said, not raised."""
        if not run_dir or self.conn is None:
            return
        try:
            self.conn.rmtree(run_dir)
            self.emit({"type": "log", "message": f"removed {run_dir} on {self.cfg.host}"})
        except Exception as exc:  # the round's own outcome matters more than its cleanup
            self.emit({"type": "log", "message": f"could not remove {run_dir} on "
                       f"{self.cfg.host}: {exc}"})  # fmt: skip

    def _conclude(self, sid: str, state: dict[str, Any]) -> int:
        assert self.conn is not None
        final, run_dir = self.final, str(state.get("remote_run") or "")
        kind = (final or {}).get("type")
        if kind == "done":
            t0 = time.monotonic()
            out = Path(os.path.normpath(self.folder / self.job["out"]))
            part = out.with_name(out.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            self.conn.get(join(run_dir, "out"), part)
            fetch_s = time.monotonic() - t0
            there = self._remote_hashes(join(run_dir, "out"))
            here = file_hashes(part)
            if here != there:
                shutil.rmtree(part, ignore_errors=True)
                raise RemoteError(
                    f"the adapter fetched from {self.cfg.host} differs from the remote copy "
                    "(a broken transfer); train again to fetch it anew"
                )
            shutil.rmtree(out, ignore_errors=True)
            os.replace(part, out)
            self.emit({"type": "metric", "name": "remote_fetch_s", "value": round(fetch_s, 3)})
            self.emit({"type": "metric", "name": "remote_fetch_verified", "value": len(here)})
            final = _checked_here(out, str(self.job.get("id")), final or {})
            adapters = join(self.remote_root(), "adapters")
            kept = join(adapters, adapter_key(here))
            if not self.conn.exists(kept):  # the next round's parent, already there
                self.conn.makedirs(adapters)
                self.conn.rename(join(run_dir, "out"), kept)
            self.conn.rmtree(run_dir)
            in_use = {posixpath.basename(kept), posixpath.basename(state.get("remote_parent", ""))}
            for name in prune_adapters(self.conn, adapters, in_use):
                self.emit({"type": "log", "message": f"removed the old adapter {name} on "
                           f"{self.cfg.host}"})  # fmt: skip
            self.emit({**final, "adapter": str(out), "remote_job": sid})  # type: ignore[dict-item]
            return EXIT_DONE
        if kind is None and self.stop_sent:
            # stopped before the trainer said anything (still waiting for a GPU, or
            # killed past the grace): resumable from whatever checkpoint is there
            final, kind = {"type": "paused", "checkpoint": None}, "paused"
        if kind == "paused":
            if self.stop.cancel():
                self.conn.rmtree(run_dir)
                self.emit({"type": "log", "message": f"removed {run_dir} on {self.cfg.host}"})
            self.emit(dict(final or {}))
            return EXIT_PAUSED
        # A failed round is never resumed (the next one is built afresh), and its folder
        # holds a copy of the user's ratings: it does not stay on the remote machine.
        self._forget_run(run_dir)
        if kind == "error":
            self.emit(dict(final or {}))
            return EXIT_BAD_INPUT if final and final.get("kind") == "job" else EXIT_FAILED
        details = (self.jobs.status(sid) if self.jobs else None) or {}
        self.emit({"type": "error", "kind": "internal", "message":
                   f"the remote job {sid} ended {details.get('status', 'unknown')} without a "
                   f"result: {str(details.get('message') or '').strip()}"})  # fmt: skip
        return EXIT_FAILED

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of each file of a local folder, by name."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def adapter_key(hashes: dict[str, str]) -> str:
    """An adapter's remote folder name: its weights' SHA-256 (all files' when none)."""
    weights = hashes.get("adapter_model.safetensors")
    if weights is None:
        weights = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()
    return weights[:32]


def private_folders(conn: Connection, root: str) -> None:
    """Make the remote folder, its runs/ and its adapters/ private to the login (0700),
    as they are or made now: one an older rltray, or the login's umask, made open to
    the machine's other users is closed here. The remote folder is left as it is
    when it is the login's home (``training.remote_dir`` set to ``.``)."""
    home = conn.realpath(".")
    for folder in (root, join(root, "runs"), join(root, "adapters")):
        conn.makedirs(folder)
        if folder != home:
            conn.chmod(folder, PRIVATE_DIR)


def open_cluster(cfg: RemoteConfig, secrets: dict[str, str]) -> tuple[Connection, RayJobs]:
    """SSH to the machine (pinned host key) and the Jobs API through a local forward."""
    conn = Connection(
        cfg.host, cfg.port, cfg.user or os.environ.get("USER", ""), cfg.host_key,
        secrets.get("ssh_key") or None,
    )  # fmt: skip
    try:
        port = conn.forward(cfg.dashboard_port)
    except BaseException:
        conn.close()
        raise
    return conn, RayJobs(f"http://127.0.0.1:{port}", secrets.get("ray_token") or "")


def marked(logs: str) -> list[tuple[int, dict[str, Any]]]:
    """The protocol lines in a Ray job log: ``(seq, line)`` for each ``@rltray SEQ {...}``."""
    out = []
    for raw in logs.splitlines():
        if not raw.startswith(wrap.MARK + " "):
            continue
        parts = raw.split(" ", 2)
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        try:
            line = json.loads(parts[2])
        except ValueError:
            continue
        if isinstance(line, dict):
            out.append((int(parts[1]), line))
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point: settings and secrets from the first stdin line, then the round."""
    argv = sys.argv[1:] if argv is None else argv
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # a library that prints cannot corrupt a protocol line
    lock = threading.Lock()

    def emit(line: dict[str, Any]) -> None:
        with lock:
            try:
                out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
                out.flush()
            except (OSError, ValueError):
                pass

    if len(argv) != 1:
        emit({"type": "error", "kind": "job",
              "message": "usage: python -m rltray.app.training.remote JOB.json"})  # fmt: skip
        return EXIT_BAD_INPUT
    job_path = Path(argv[0]).resolve()
    first = sys.stdin.readline()
    try:
        given = json.loads(first)
        cfg = RemoteConfig.from_dict(given["config"])
    except (ValueError, KeyError, TypeError):
        emit({"type": "error", "kind": "job", "message": "the remote settings did not arrive"})
        return EXIT_BAD_INPUT
    secrets = {k: str(v) for k, v in given.items() if k in ("ssh_key", "ray_token") and v}
    stop = StopRequest(job_path.parent)

    def stdin_closed() -> None:
        sys.stdin.read()
        stop.event.set()

    threading.Thread(target=stdin_closed, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.event.set())
    parent = int(os.environ.get("RLTRAY_TRAINER_PARENT_PID") or 0)
    if parent:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    standin = StandIn(job_path, cfg, secrets, emit, stop)
    try:
        return standin.run()
    except RemoteError as exc:
        emit({"type": "error", "kind": "job", "message": str(exc)})
        return EXIT_BAD_INPUT
    except Exception as exc:
        emit({"type": "error", "kind": "internal",
              "message": f"remote training failed: {type(exc).__name__}: {exc}"})  # fmt: skip
        return EXIT_FAILED
    finally:
        standin.close()


def _watch_parent(pid: int) -> None:
    """The tray died: leave quietly; the remote job runs on and the next tray re-attaches."""
    while True:
        time.sleep(2.0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(EXIT_FAILED)
        except OSError:
            pass


def _checked_here(out: Path, job_id: str, final: dict[str, Any]) -> dict[str, Any]:
    """The ``done`` line, rejected with the reasons when the fetched folder fails the
    checks made here (:mod:`.verify`); its ``rltray.json`` then says so too, as the
    trainer's own late rejection does, so no path takes the folder as accepted."""
    bad = verify.problems(out, job_id, final)
    if not bad:
        return final
    reasons = [*(final.get("reasons") or []),
               *(f"the adapter fetched from the remote machine failed a check here: {p}"
                 for p in bad)]  # fmt: skip
    meta_path = out / verify.META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta = meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        meta = {}
    meta.update(accepted=False, reasons=reasons, job_id=meta.get("job_id"))
    write_private_atomic(meta_path, (json.dumps(meta, indent=2) + "\n").encode("utf-8"), 0o600)
    return {**final, "accepted": False, "reasons": reasons}
