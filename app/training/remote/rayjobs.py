"""Ray Jobs over its REST API (the dashboard's ``/api/jobs/``), through the SSH forward.

Why the REST API and not ``ray.job_submission``: the SDK is Ray itself (hundreds
of MB and its own pinned dependencies) and the tray would carry it only to send
five HTTP requests; the REST API is Ray's documented, versioned interface to the
same server (``dashboard/modules/job/job_head.py``). Every request carries
``Authorization: Bearer <token>``: Ray >= 2.52 with ``RAY_AUTH_MODE=token``
answers 401 without one and 403 to a wrong one, and a job API reachable without
a token runs any command by design, so :func:`check_auth` refuses such a cluster.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from rltray.app.training.remote.ssh import RemoteError

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
#: The oldest Ray whose job API takes token auth (and carries the 2025 CVE fixes).
MIN_RAY = (2, 52)
#: How long a job waits for a head whose job agent is still starting ("No available agent
#: to submit job, please try again later": HTTP 500 for the first seconds after a start).
AGENT_WAIT_S = 45.0


class RayJobs:
    """A thin client of one cluster's Jobs API at ``base`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, base: str, token: str, timeout: float = 30.0) -> None:
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, token: bool = True
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token and self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            said = exc.read().decode("utf-8", "replace")
            if exc.code in (401, 403):
                raise RemoteError(
                    "the Ray cluster refused the token (HTTP "
                    f"{exc.code}); keep the cluster's token with `rltray remote token < FILE`"
                ) from None
            raise RayHTTPError(exc.code, said) from None
        return json.loads(text) if text.strip() else None

    def version(self) -> str:
        return str(self._request("GET", "/api/version")["ray_version"])

    def check_auth(self) -> None:
        """Refuse a cluster whose job API answers without a token, or a too-old Ray."""
        ver = self.version()
        parts = tuple(int(p) for p in ver.split(".")[:2] if p.isdigit())
        if parts < MIN_RAY:
            raise RemoteError(
                f"the cluster runs Ray {ver}; rltray needs Ray 2.52 or newer (token auth)"
            )
        try:
            self._request("GET", "/api/jobs/", token=False)
        except (RemoteError, RayHTTPError):
            return
        raise RemoteError(
            "the cluster's Ray job API answers without a token, so anyone who reaches it can "
            "run commands; start Ray with RAY_AUTH_MODE=token"
        )

    def submit(self, submission_id: str, entrypoint: str, *, agent_wait_s: float = AGENT_WAIT_S,
               **extra: Any) -> None:
        """Submit a job; a head whose job agent is still starting is asked again (it says
        to try again later) for up to ``agent_wait_s`` seconds."""
        deadline = time.monotonic() + agent_wait_s
        while True:
            try:
                self._request(
                    "POST", "/api/jobs/",
                    {"entrypoint": entrypoint, "submission_id": submission_id, **extra},
                )  # fmt: skip
                return
            except RayHTTPError as exc:
                if "already exists" in exc.text:
                    return  # a retry after a lost answer: the job is there
                if "No available agent" in exc.text and time.monotonic() < deadline:
                    time.sleep(1.0)
                    continue
                raise RemoteError(f"Ray did not take the job: {exc.first_line()}") from None

    def status(self, submission_id: str) -> dict[str, Any] | None:
        """The job's details (``status``, ``message``…), None when Ray does not know it."""
        try:
            return dict(self._request("GET", f"/api/jobs/{submission_id}"))
        except RayHTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def logs(self, submission_id: str) -> str:
        return str(self._request("GET", f"/api/jobs/{submission_id}/logs").get("logs") or "")

    def stop(self, submission_id: str) -> bool:
        return bool(self._request("POST", f"/api/jobs/{submission_id}/stop").get("stopped"))


class RayHTTPError(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"HTTP {code}: {text[:300]}")
        self.code, self.text = code, text

    def first_line(self) -> str:
        lines = [ln for ln in self.text.splitlines() if ln.strip()]
        return f"HTTP {self.code}: " + (lines[-1] if lines else "")
