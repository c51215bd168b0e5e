"""Jobs run real commands in order and turn pip's raw ``Progress N of M`` lines into a percent."""

from __future__ import annotations

import sys
import time

from rltray.web.jobs import Jobs

SCRIPT = (
    "import sys, time\n"
    "print('Collecting torch')\n"
    "for i in (1, 5, 10):\n"
    "    print(f'Progress {i} of 10', flush=True)\n"
    "    time.sleep(0.05)\n"
    "print('Successfully installed torch')\n"
)


def wait(job) -> None:
    deadline = time.monotonic() + 30
    while job.status == "running":
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_progress_lines_become_a_percent_and_other_lines_a_log() -> None:
    seen = []
    jobs = Jobs()
    job = jobs.start("t", [("install", [sys.executable, "-c", SCRIPT])],
                     on_done=lambda j: seen.append(j.percent))  # fmt: skip
    assert jobs.running("t") is job
    wait(job)
    assert job.status == "done" and seen == [100.0] and job.percent == 100.0
    assert job.lines == ["Collecting torch", "Successfully installed torch"]
    assert jobs.running("t") is None and jobs.get(job.id) is job


def test_the_first_failing_step_stops_the_job() -> None:
    job = Jobs().start("t", [
        ("one", [sys.executable, "-c", "print('fine')"]),
        ("two", [sys.executable, "-c", "import sys; print('broken'); sys.exit(4)"]),
        ("three", [sys.executable, "-c", "print('never')"]),
    ])  # fmt: skip
    wait(job)
    assert job.status == "failed" and job.error.startswith("two failed (exit code 4)")
    assert job.lines == ["fine", "broken"]
    missing = Jobs().start("t", [("run", ["/nonexistent/program"])])
    wait(missing)
    assert missing.status == "failed" and "could not run" in missing.lines[0]
