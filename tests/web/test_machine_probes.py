"""The backend probe runs one at a time and is reused for a while (issue 18, 2: a page that
fired fifty probe requests started fifty torch-importing interpreters)."""

from __future__ import annotations

import threading
import time
from typing import Any

from rltray.web.machine import PROBE_FRESH_S, Probes


def test_concurrent_requests_share_one_probe_and_its_answer_is_reused() -> None:
    started: list[str] = []

    def slow_probe(python: str) -> dict[str, Any]:
        started.append(python)
        time.sleep(0.3)
        return {"executable": python}

    now = [100.0]
    probes = Probes(run=slow_probe, clock=lambda: now[0])
    answers: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(probes.probe("/py"))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert started == ["/py"] and answers == [{"executable": "/py"}] * 8
    now[0] += PROBE_FRESH_S - 1
    probes.probe("/py")
    assert started == ["/py"]  # still fresh
    probes.probe("/other")
    assert started == ["/py", "/other"]  # another interpreter is asked itself
    now[0] += PROBE_FRESH_S
    probes.probe("/other")
    assert started == ["/py", "/other", "/other"]  # stale: asked again
