"""The Ray Jobs client against a real HTTP server that answers as a starting Ray head does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rltray.app.training.remote.rayjobs import RayJobs
from rltray.app.training.remote.ssh import RemoteError

NO_AGENT = "No available agent to submit job, please try again later."


@pytest.fixture
def head() -> Iterator[tuple[str, list[str], list[int]]]:
    """A head that answers the first ``busy[0]`` job submissions with Ray's HTTP 500."""
    seen: list[str] = []
    busy = [2]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body["submission_id"])
            if busy[0] > 0:
                busy[0] -= 1
                self._answer(500, NO_AGENT)
            else:
                self._answer(200, json.dumps({"submission_id": body["submission_id"]}))

        def _answer(self, code: int, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen, busy
    finally:
        server.shutdown()
        server.server_close()


def test_a_head_whose_job_agent_is_starting_is_asked_again(head) -> None:
    """Regression (a CI run of the remote wizard's check): a head started moments before
    answers HTTP 500 "No available agent ... try again later"; the job was refused."""
    base, seen, _ = head
    RayJobs(base, "token").submit("job-1", "echo hi", agent_wait_s=10)
    assert seen == ["job-1", "job-1", "job-1"]


def test_a_head_that_never_gets_an_agent_is_refused_in_one_sentence(head) -> None:
    base, seen, busy = head
    busy[0] = 10_000
    with pytest.raises(RemoteError, match="Ray did not take the job: HTTP 500: No available"):
        RayJobs(base, "token").submit("job-2", "echo hi", agent_wait_s=1.5)
    assert 1 < len(seen) <= 4
