"""The end-to-end check of a remote training machine, for `rltray doctor` and `rltray remote check`.

Each step is the real one a round takes, in order, and the first failure stops
the rest (a step after a failed one could only fail too): SSH with the pinned host
key, the remote folder's mode (a folder other users of the machine can read is a
failed row of its own, after which the steps go on: nothing later depends on it),
the Ray version and its token, then one small Ray job asking for the round's
GPUs (so Ray has one to give) that imports the remote trainer environment (torch,
rltray's trainer), says whether torch sees CUDA, and then trains one optimizer step
on a tiny random Llama there (``rltray.trainer.envcheck``, the proof `rltray
trainer-env create` asks of a local environment): importing torch is not proof that
a round can run (a CUDA wheel without a driver imports fine). Returned as ``(name,
ok, sentence)`` rows so the doctor and the CLI word them their own way.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import Any

from rltray.app.training import remote
from rltray.app.training.remote.rayjobs import TERMINAL
from rltray.app.training.remote.ssh import Connection, RemoteError, join
from rltray.app.training.remote.standin import RemoteConfig, open_cluster

STEP = "rltray.trainer.envcheck --backend torch --device auto"  # one step, one JSON line
PROBE = (
    "import json, torch, rltray.trainer; "
    "print('@rltray-probe ' + json.dumps({'torch': torch.__version__, "
    "'cuda': torch.cuda.is_available(), 'gpus': torch.cuda.device_count()}))"
)


Row = tuple[str, bool, str]


def run(training: Any, secrets: Any = None, limit_s: float = 120.0,
        on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Check the machine ``training.remote_*`` names; one row per step that ran."""
    given = json.loads(remote.handshake(training, secrets))
    cfg = RemoteConfig.from_dict(given["config"])
    keys = {k: v for k, v in given.items() if k in ("ssh_key", "ray_token") and v}
    rows: list[Row] = []

    def add(row: Row) -> None:  # also told at once: the wizard shows each row as it comes
        rows.append(row)
        if on_row is not None:
            on_row(row)

    conn = None
    try:
        conn, jobs = open_cluster(cfg, keys)
        add(("ssh", True, f"{cfg.user or 'you'}@{cfg.host}:{cfg.port}, host key pinned"))
        open_folder = folder_row(conn, cfg)
        if open_folder is not None:
            add(open_folder)
        jobs.check_auth()
        add(("ray", True, f"Ray {jobs.version()} answers with the token only"))
        sid = f"rltray-check-{int(time.time())}"
        extra: dict[str, Any] = {"entrypoint_num_gpus": cfg.gpus} if cfg.gpus > 0 else {}
        python = shlex.quote(cfg.python)
        entry = f"{python} -c {shlex.quote(PROBE)} && {python} -m {STEP}"
        jobs.submit(sid, entry, **extra)
        deadline = time.monotonic() + limit_s
        status = ""
        while time.monotonic() < deadline:
            status = str((jobs.status(sid) or {}).get("status") or "")
            if status in TERMINAL:
                break
            time.sleep(1.0)
        if status not in TERMINAL:
            jobs.stop(sid)
            add(("gpu", False, f"Ray found no free GPU for {cfg.gpus} in {limit_s:.0f} s "
                 "(another job holds it, or the cluster has none)"))  # fmt: skip
            return rows
        add(("gpu", True, f"Ray gave the job {cfg.gpus} GPU(s)"))
        logs = jobs.logs(sid)
        said = [ln for ln in logs.splitlines() if ln.startswith("@rltray-probe ")]
        if not said:  # (a failed step after the probe is the step's row, below)
            last = [ln for ln in logs.splitlines() if ln.strip()][-1:] or [status]
            add(("trainer", False, f"{cfg.python} on {cfg.host} cannot import torch and "
                 f"rltray's trainer: {last[0].strip()}"))  # fmt: skip
            return rows
        found = json.loads(said[-1].split(" ", 1)[1])
        cuda = f"sees {found['gpus']} GPU(s)" if found["cuda"] else "not available"
        add(("trainer", True, f"torch {found['torch']}, CUDA {cuda}"))
        add(step_row(logs, cfg.host))
    except RemoteError as exc:
        add(("ssh" if not rows else "ray", False, str(exc)))
    finally:
        if conn is not None:
            conn.close()
    return rows


def folder_row(conn: Connection, cfg: RemoteConfig) -> Row | None:
    """A failed row when the remote folder (or its runs/ or adapters/) is open to the
    machine's other users: what rounds left there (the ratings they uploaded, the
    adapters trained on them) is theirs to read. None when it is private or not made yet.
    """
    home = conn.realpath(".")
    for folder in (cfg.dir, join(cfg.dir, "runs"), join(cfg.dir, "adapters")):
        mode = conn.mode(folder)
        if mode is None:
            continue
        where = conn.realpath(folder)
        if mode & 0o077:
            if where == home:  # a home open to others is the user's call: look inside
                continue
            return ("folder", False,
                    f"{where} on {cfg.host} is open to other users (mode {mode:04o}): they "
                    f"can read the ratings rltray uploads there; run `chmod -R go= {where}` "
                    f"on {cfg.host} (rltray keeps what it makes there 0700)")  # fmt: skip
        if folder == cfg.dir and where != home:
            return None  # a private folder keeps everything in it private
    return None


def step_row(logs: str, host: str) -> Row:
    """The tiny training step's row, from envcheck's JSON line in the job's log."""
    result: dict[str, Any] = {}
    for line in logs.splitlines():
        if line.startswith("{") and '"backend"' in line:
            try:
                result = json.loads(line)
            except ValueError:
                continue
    if not result:
        last = [ln for ln in logs.splitlines() if ln.strip()][-1:] or ["no output"]
        return ("step", False,
                f"the tiny training step on {host} did not report: {last[0].strip()}")
    if not result.get("ok"):
        return ("step", False, f"the tiny training step on {host} failed: {result.get('why')}")
    return ("step", True, f"one training step on a tiny model on {result.get('device')} "
            f"({result.get('seconds')} s; loss {float(result.get('loss', 0.0)):.3f}, LoRA moved)")
