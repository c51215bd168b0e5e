"""The PyInstaller bundle, built from this tree and run as a user would run it.

What is real: the PyInstaller build (packaging/build.py, cached while the
sources are unchanged: bundlebuild.py), the bundled executable, Xvfb, a
private dbus-daemon, the tray through GTK + libayatana-appindicator, the
hook command that the bundle's own `rltray hooks install` writes, run through
/bin/sh exactly as Claude Code runs it, and the SQLite store. Fakes: the
notification server and the StatusNotifierWatcher (a panel), both speaking the
real D-Bus protocols (tests/support/dbus_fixtures.py, traybus.py).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.paths import Paths

from tests.support.bundlebuild import build, missing_tools
from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    BusThread,
    NotificationServer,
    PrivateSessionBus,
    notification_server_fixture,
    session_bus_fixture,
    xvfb,
)
from tests.support.traybus import DBusMenu, FakeWatcher, panel_fixture  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="builds the Linux bundle"),
]
FORBIDDEN = ("torch", "transformers", "mlx")
MUST_HOLD = (
    "rltray",
    "rltray-hook",
    "_internal/rltray/app/hooks/capture.py",
    "_internal/rltray/app/hooks/capture_core.pyc",
    "_internal/rltray/app/hooks/events_claude.pyc",
    "_internal/rltray/app/hooks/events_codex.pyc",
    "_internal/rltray/app/hooks/events_openclaw.pyc",
    "_internal/rltray/app/hooks/openclaw_plugin/index.js",
    "_internal/rltray/app/hooks/openclaw_plugin/openclaw.plugin.json",
    "_internal/rltray/app/scrub.py",
    "_internal/rltray/web/templates",
    "_internal/rltray/linux/rltray.desktop",
    "_internal/rltray/icons/rltray.png",
)


@pytest.fixture(scope="session")
def built() -> tuple[Path, str]:
    missing = missing_tools()
    if missing:
        pytest.skip(missing)
    return build()


@pytest.fixture
def bundle(built: tuple[Path, str]) -> Path:
    return built[0] / "rltray"


@pytest.fixture
def display() -> Iterator[str]:
    if shutil.which("Xvfb") is None:
        pytest.skip("needs Xvfb (Debian: apt install xvfb; `make test` installs it as root)")
    with xvfb() as name:
        yield name


@pytest.fixture
def watcher(panel: tuple[FakeWatcher, BusThread]) -> FakeWatcher:
    return panel[0]


def user_env(**extra: str) -> dict[str, str]:
    """The environment a user's session gives the app: no virtualenv, no test keyring."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHON_KEYRING_BACKEND")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # the venv's python is not on it
    return {**env, **extra}


def run(bundle: Path, *args: str, env: dict[str, str], **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bundle), *args], env=env, capture_output=True, text=True, timeout=120, **kw
    )


def test_bundle_holds_the_app_and_no_ml_stack(built: tuple[Path, str]) -> None:
    folder, report = built
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    bad = [f for f in files if any(part.split(".")[0].split("-")[0].lower() in FORBIDDEN
                                   for part in Path(f).parts)]  # fmt: skip
    assert bad == [], bad[:10]
    assert not any("libtorch" in f or "libmlx" in f for f in files)
    for wanted in MUST_HOLD:
        assert wanted in files, wanted
    assert any(f.startswith("_internal/rltray/wheels/rltray-") for f in files)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"\n{len(files)} files, {size / 1e6:.0f} MB on disk\n{report}")
    assert "bundle:" in report and "archive:" in report


@pytest.mark.skipif(os.name != "posix", reason="drives Xvfb and D-Bus")
def test_selftest_passes_with_a_desktop(
    bundle: Path,
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    watcher: FakeWatcher,
) -> None:
    env = user_env(DISPLAY=display, DBUS_SESSION_BUS_ADDRESS=session_bus.address)
    done = run(bundle, "--selftest", env=env)
    lines = done.stdout.splitlines()
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    for part in ("store", "notifications", "hook program", "web server", "tray"):
        assert any(line.startswith(f"✓ {part}:") for line in lines), (part, lines)
    for part in ("keyring", "trainer environment"):  # informational: any state, one line
        assert sum(f" {part}:" in line for line in lines) == 1, (part, lines)
    hook_line = next(line for line in lines if line.startswith("✓ hook program:"))
    assert f"via {bundle.with_name('rltray-hook')} " in hook_line  # the bundle's hook program
    assert "not set up" in next(line for line in lines if "trainer environment:" in line)
    assert notification_server.wait_for_calls(1)[0].summary == "rltray test"
    assert watcher.items, "the tray registered no StatusNotifierItem"
    # the hook's turn went to a scratch data folder, never into the user's
    assert run(bundle, "turns", "--json", env=env).stdout.strip() == "[]"


def test_selftest_fails_without_a_working_hook_interpreter(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """A required part that fails makes the exit status non-zero (and says which)."""
    broken = tmp_path / "rltray"
    shutil.copytree(built[0], broken, symlinks=True)
    (broken / "_internal" / "rltray" / "app" / "hooks" / "capture.py").unlink()
    done = run(broken / "rltray", "--selftest", env=user_env())
    assert done.returncode == 4, done.stdout
    assert any(line.startswith("✗ hook program:") for line in done.stdout.splitlines())


def test_installed_hook_captures_a_turn_as_claude_code_runs_it(
    bundle: Path, rltray_home: Path, tmp_path: Path
) -> None:
    user_home = Path(os.environ["HOME"])
    (user_home / ".claude").mkdir()
    env = user_env()
    done = run(bundle, "hooks", "install", "--agent", "claude-code", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    settings = json.loads((user_home / ".claude" / "settings.json").read_text())
    commands = {
        event: next(h["command"] for g in settings["hooks"][event] for h in g["hooks"])
        for event in ("UserPromptSubmit", "Stop")
    }
    for command in commands.values():
        argv = shlex.split(command)
        # the bundle's small hook interpreter (packaging/pyinstaller/hook_main.py)
        assert argv[:3] == [str(bundle.with_name("rltray-hook")), "-I", "-S"], argv
        assert Path(argv[3]).is_file() and argv[3].startswith(str(bundle.parent))
    session = {"session_id": "s-bundle", "cwd": str(tmp_path), "transcript_path": None}
    payloads = {
        # "token" makes the hook load the credential scrubber (app/scrub.py) by file
        "UserPromptSubmit": {**session, "hook_event_name": "UserPromptSubmit",
                             "prompt": "rename the variable token_count"},
        "Stop": {**session, "hook_event_name": "Stop", "stop_hook_active": False,
                 "last_assistant_message": "Renamed `x` to `count`."},
    }  # fmt: skip
    for event, command in commands.items():  # as Claude Code runs a command hook: sh -c
        fired = subprocess.run(
            command, shell=True, input=json.dumps(payloads[event]), capture_output=True,
            text=True, env=env, cwd=tmp_path, timeout=30,
        )  # fmt: skip
        assert fired.returncode == 0 and fired.stdout == "", fired
    turns = json.loads(run(bundle, "turns", "--json", env=env).stdout)
    assert [(t["agent"], t["prompt"], t["response"]) for t in turns] == [
        ("claude-code", "rename the variable token_count", "Renamed `x` to `count`.")
    ]
    hook_log = rltray_home / "logs" / "hook.log"
    assert not hook_log.exists() or hook_log.read_text() == "", hook_log.read_text()
    doctor = run(bundle, "doctor", env={**env, "COLUMNS": "400"}).stdout.splitlines()
    line = next(line for line in doctor if "hook program" in line)
    hook = bundle.with_name("rltray-hook")
    assert "✓" in line and f"{hook} runs {commands['Stop'].split()[3]}" in line, doctor


@pytest.mark.skipif(os.name != "posix", reason="drives Xvfb and D-Bus")
def test_the_bundled_tray_shows_its_menu_and_quits_from_it(
    bundle: Path,
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    panel: tuple[FakeWatcher, BusThread],
    tmp_path: Path,
) -> None:
    """`rltray run` from the bundle: GTK + AppIndicator from inside it, the menu over DBusMenu."""
    watcher, thread = panel
    env = user_env(DISPLAY=display, DBUS_SESSION_BUS_ADDRESS=session_bus.address)
    log = tmp_path / "tray.log"
    proc = subprocess.Popen([str(bundle), "run"], env=env, stdout=subprocess.DEVNULL,
                            stderr=log.open("wb"))  # fmt: skip
    try:
        menu = DBusMenu.of_item(thread, watcher.wait_for_item(timeout=60))
        labels = [e.label for e in menu.layout().children if e.label]
        for wanted in ("Rate last answer", "Train now", "Open settings", "Quit rltray"):
            assert any(label.startswith(wanted) for label in labels), labels
        menu.click("Quit rltray")
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_programs_the_bundle_starts_get_the_users_library_path(
    bundle: Path, tmp_path: Path
) -> None:
    """PyInstaller points LD_LIBRARY_PATH at the bundle; a trainer's Python, a browser or a
    chained notify program started from it must not load the bundle's libraries."""
    script = tmp_path / "child.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "print(subprocess.run(['sh', '-c', 'echo \"${LD_LIBRARY_PATH-unset}\"'],\n"
        "                     capture_output=True, text=True).stdout.strip())\n"
    )
    for exe in (bundle, bundle.with_name("rltray-hook")):
        done = run(exe, "-I", "-S", str(script), env=user_env())
        assert done.stdout.strip() == "unset", (exe, done)
        mine = run(exe, "-I", "-S", str(script), env=user_env(LD_LIBRARY_PATH="/opt/mine"))
        assert mine.stdout.strip() == "/opt/mine", (exe, mine)


def _registry_unreachable() -> str | None:
    with_dir = os.environ.get("TMPDIR") or "/tmp"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
         "-d", with_dir, "tomlkit"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def test_the_bundle_builds_its_trainer_environment_from_the_system_python(
    bundle: Path, rltray_home: Path
) -> None:
    """No Python inside the bundle can make a venv: it finds the system's, installs the wheel
    it carries plus one backend's packages, trains one step and records the interpreter.
    (MLX's CPU build here: the same frozen path as torch, in a fraction of the download.)"""
    problem = _registry_unreachable()
    if problem:
        pytest.skip(f"the package registry cannot be reached, so nothing is built: {problem}")
    env = user_env()
    probe = subprocess.run(["sh", "-c", "command -v python3"], env=env, capture_output=True,
                           text=True)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip("needs a system python3 on PATH (Debian: apt install python3-venv)")
    done = subprocess.run(
        [str(bundle), "trainer-env", "create", "--backend", "mlx"],
        env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "built with /usr/" in done.stdout.splitlines()[0]  # the system's, not a venv's
    wheels = bundle.parent / "_internal" / "rltray" / "wheels"
    assert f"Installing rltray's trainer from {wheels}" in done.stdout
    python = rltray_home / "trainer-env" / "bin" / "python"
    training = config.load_config(Paths(rltray_home)).training
    assert (training.python, training.backend) == (str(python), "mlx")
    selftest = run(bundle, "--selftest", env=env).stdout.splitlines()
    line = next(x for x in selftest if "trainer environment:" in x)
    assert line.startswith("✓") and "has mlx" in line, selftest


def test_the_bundled_settings_window_loads_its_page(
    bundle: Path, display: str, session_bus: PrivateSessionBus
) -> None:
    """`rltray window URL` (how the tray opens settings) shows the page with the system's
    WebKitGTK, which the bundle does not carry (packaging/README.md)."""
    import glob
    import http.server
    import threading

    if not glob.glob("/usr/lib/*/girepository-1.0/WebKit2-4.1.typelib"):
        pytest.skip("needs WebKitGTK (Debian: apt install gir1.2-webkit2-4.1)")
    asked: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b"<html><body>rltray settings</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/launch/abc"
    env = user_env(DISPLAY=display, DBUS_SESSION_BUS_ADDRESS=session_bus.address)
    proc = subprocess.Popen([str(bundle), "window"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    proc.stdin.write(json.dumps({"url": url}) + "\n")  # never on the command line
    proc.stdin.close()
    proc.stdin = None  # sent; communicate() below must not flush it again
    try:
        deadline = time.monotonic() + 60
        while not asked and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert asked == ["/launch/abc"], (proc.poll(), asked)
        assert proc.poll() is None  # the window stays open (no browser fallback)
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
        server.shutdown()
    assert "no webview backend" not in err, err
