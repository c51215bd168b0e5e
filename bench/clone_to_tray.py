"""From `git clone` to the tray icon: how long a new Linux user waits, and what they read.

Why: the first hour on a Linux desktop (issue 22) began with `make run`
building a venv that had no PyGObject, so the tray never appeared: rltray
ran headless after a few minutes of installing. This times the whole path on
this machine and says what `make run` printed on the way.

What runs: `git clone` of this repository at ``--rev`` into a temporary folder,
then `make run` there (the real Makefile: venv, rltray, the training extras
this machine gets, the desktop's GTK bindings), as a foreground job in a
desktop session: Xvfb, a private session bus with a notification server and a
panel's StatusNotifierWatcher (tests/support/freshclone.py). The clock stops
when the tray item registers with the watcher; where it never does, when
rltray says it runs headless (then it waits ``--grace`` seconds more for an
icon that does not come). Then, ``--hold`` seconds after the first run's setup
window opened (if one did), Ctrl+C goes to the job's process group, as a
terminal sends it. pip's cache is this user's (what a second clone on the same
machine meets; a first-ever install downloads more).

    python bench/clone_to_tray.py [--rev REV] [--no-training] [--log F] [--screenshot F.png]

``--no-training`` runs `make -o .venv/.training-installed venv run` (no torch download).
The last line is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from tests.support.freshclone import (
    Job,
    clone,
    desktop_session,
    screenshot,
    user_env,
    window_processes,
)

TIMEOUT_S = 1800.0


def phase_ends(job: Job) -> dict[str, float]:
    """When make finished each of its steps (the `touch` of its stamp file), in seconds."""
    ends = {}
    for stamp, name in ((".app-installed", "venv + rltray"), (".training-installed", "training")):
        for line in job.lines:
            if line.text.startswith("touch") and stamp in line.text:
                ends[name] = round(line.at, 1)
                break
    return ends


def measure(
    rev: str, training: bool, grace: float, hold: float, shot: Path | None, log: Path | None
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="rltray-clone-") as tmp:
        root = Path(tmp)
        started = time.monotonic()
        repo = clone(root / "rltray", rev)
        cloned = time.monotonic() - started
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
        with desktop_session(root) as (desktop, watcher):
            # `venv` named: an older Makefile's run reached the venv only through the extras
            args = ["run"] if training else ["-o", ".venv/.training-installed", "venv", "run"]
            job = Job(repo, args, user_env(root / "home", root / "data", desktop))
            try:
                first = job.wait_for(lambda: job.first("No tray icon", "rltray is running")
                                     is not None or bool(watcher.items), TIMEOUT_S)  # fmt: skip
                tray = job.wait_for(lambda: bool(watcher.items), grace if first else 0)
                headless = job.first("No tray icon")
                ours, machine = job.before_rltray()
                wizard = job.wait_for(lambda: bool(window_processes(job.proc.pid)), 30)
                time.sleep(hold)  # a user looks at what opened, then presses Ctrl+C
                if shot is not None:
                    screenshot(repo / ".venv" / "bin" / "python", desktop["DISPLAY"], shot)
                code = job.interrupt() if job.proc.poll() is None else job.proc.returncode
            finally:
                job.close()
                if log is not None:
                    log.write_text(job.text + "\n")
    lines = job.text.splitlines()
    rltray_first = job.first("No tray icon", "rltray is running")
    return {
        "rev": commit,
        "make": " ".join(args),
        "clone_s": round(cloned, 2),
        "phases_end_s": phase_ends(job),
        "rltray_first_line_s": None if rltray_first is None else round(rltray_first.at, 1),
        "tray_registered_s": None if tray is None else round(tray, 1),
        "clone_to_tray_s": None if tray is None else round(cloned + tray, 1),
        "headless": None if headless is None else headless.text,
        "wizard_window_s": None if wizard is None else round(wizard, 1),
        "lines_before_rltray": ours,
        "machine_pip_warnings_not_counted": machine,
        "setuptools_banners": job.text.count("Package would be ignored"),
        "ctrl_c_make_exit": code,
        "ctrl_c_last_lines": lines[-2:],
        "make_error_lines": [x for x in lines if x.startswith("make: ***")],
        "tracebacks": job.text.count("Traceback"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to clone (default HEAD)")
    parser.add_argument("--no-training", action="store_true", help="skip the training extras")
    parser.add_argument("--grace", type=float, default=20.0,
                        help="seconds to wait for an icon after rltray's first line")  # fmt: skip
    parser.add_argument("--hold", type=float, default=5.0,
                        help="seconds between the setup window and Ctrl+C")  # fmt: skip
    parser.add_argument("--screenshot", type=Path, help="save the X screen before Ctrl+C")
    parser.add_argument("--log", type=Path, help="write everything make printed here")
    args = parser.parse_args(argv)
    for tool in ("git", "make", "Xvfb", "dbus-daemon"):
        if shutil.which(tool) is None:
            print(f"needs {tool} (Debian: apt install git make xvfb dbus)", file=sys.stderr)
            return 2
    r = measure(args.rev, not args.no_training, args.grace, args.hold, args.screenshot, args.log)
    print(f"git clone → tray at {r['rev']} (`make {r['make']}`)")
    print(f"  git clone {r['clone_s']} s; make steps done at {r['phases_end_s']} s")
    print(f"  rltray's first line at {r['rltray_first_line_s']} s after make started")
    if r["tray_registered_s"] is None:
        print(f"  tray icon: never (waited {args.grace:.0f} s more); {r['headless']}")
    else:
        print(f"  tray icon registered at {r['tray_registered_s']} s: clone → tray "
              f"{r['clone_to_tray_s']} s")  # fmt: skip
    wizard = r["wizard_window_s"]
    print(f"  setup wizard window: {'none' if wizard is None else f'at {wizard} s'}")
    print(f"  lines before rltray's first: {r['lines_before_rltray']} "
          f"(setuptools banners {r['setuptools_banners']}; this machine's pip.conf warnings "
          f"{r['machine_pip_warnings_not_counted']} not counted)")  # fmt: skip
    print(f"  Ctrl+C: make exit {r['ctrl_c_make_exit']}, last lines {r['ctrl_c_last_lines']}, "
          f"tracebacks {r['tracebacks']}")  # fmt: skip
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
