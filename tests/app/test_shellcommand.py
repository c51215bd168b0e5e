"""Hook command strings as each agent's shell runs them (issue 23 item 9).

No Windows here: the Windows spellings are checked as the decision of
``shellcommand.spell`` (``os_name="nt"``), and the Claude Code one for real through
bash, the shell Claude Code runs it with there (Git Bash): bash's own word splitting
(``printf '%s\\n'`` of the words) must give back exactly the argv, with forward
slashes. A ``C:/Users/me me/...`` tree cannot exist on Linux, so the real capture
through ``bash -c`` runs with this machine's own paths, in a folder with a space.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from rltray.app.hooks import claude_code, codex, registry, shellcommand
from rltray.app.hooks.base import is_rltray_command
from rltray.app.paths import Paths

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="needs bash on PATH")

WINDOWS = [
    r"C:\Users\me me\.venv\Scripts\python.exe",
    "-I",
    "-S",
    r"C:\Users\me me\rltray\app\hooks\capture.py",
    "--home",
    r"C:\Users\me me\AppData\Local\rltray",
    "claude-stop",
]
SHORT = {  # what GetShortPathNameW gives for WINDOWS' paths on a drive with 8.3 names
    WINDOWS[0]: r"C:\Users\MEME~1\.venv\Scripts\python.exe",
    WINDOWS[3]: r"C:\Users\MEME~1\rltray\app\hooks\capture.py",
    WINDOWS[5]: r"C:\Users\MEME~1\AppData\Local\rltray",
}


def bash_words(command: str) -> list[str]:
    """The words bash hands the program when it runs ``command``."""
    done = subprocess.run(
        [BASH or "bash", "-c", "printf '%s\\n' " + command],
        capture_output=True, text=True, timeout=10, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()


# -- Claude Code: bash (Git Bash on Windows) --------------------------------------


@needs_bash
def test_claude_codes_windows_command_reaches_bash_as_forward_slash_paths_with_spaces_kept():
    command = shellcommand.spell(WINDOWS, shellcommand.BASH, os_name="nt")
    assert "\\" not in command
    assert bash_words(command) == [arg.replace("\\", "/") for arg in WINDOWS]
    assert shellcommand.split(command, shellcommand.BASH, os_name="nt") == bash_words(command)
    assert is_rltray_command(command)


@needs_bash
def test_the_old_windows_spelling_loses_its_backslashes_in_bash_and_split_says_so():
    """The bug: list2cmdline's string, as Git Bash reads it, starts `C:Usersme.venv...`."""
    old = subprocess.list2cmdline([a.replace("me me", "me") for a in WINDOWS])
    assert bash_words(old)[0] == "C:Usersme.venvScriptspython.exe"
    assert bash_words(old)[5] == "C:UsersmeAppDataLocalrltray"  # a drive-relative --home
    assert shellcommand.split(old, shellcommand.BASH, os_name="nt") == bash_words(old)


def test_on_linux_and_macos_both_agents_get_posix_quoting():
    argv = ["/opt/rl tray/python", "-I", "-S", "/x/capture.py", "--home", "/d", "codex-stop"]
    for shell in (shellcommand.BASH, shellcommand.CMD):
        command = shellcommand.spell(argv, shell, os_name="posix", shorten=lambda p: "WRONG")
        assert command == shlex.join(argv)
        assert shellcommand.split(command, shell, os_name="posix") == argv


# -- Codex: cmd.exe /C with Rust's argument escaping on Windows --------------------


def test_codexs_windows_command_has_no_quotes_and_short_paths_for_the_spaced_ones():
    command = shellcommand.spell(WINDOWS, shellcommand.CMD, os_name="nt", shorten=SHORT.__getitem__)
    assert command == " ".join(SHORT.get(arg, arg) for arg in WINDOWS)
    assert '"' not in command and "'" not in command
    # Rust and Python escape an argument the same way (MSVCRT rules): a quoted path would
    # reach cmd.exe as \" which it does not read as a quote; this string gets none.
    line = subprocess.list2cmdline(["cmd.exe", "/C", command])
    assert '\\"' not in line and line.endswith(f'"{command}"')
    assert shellcommand.split(command, shellcommand.CMD, os_name="nt") == command.split()
    assert is_rltray_command(command)
    assert shellcommand.problem(WINDOWS, shellcommand.CMD, "nt", SHORT.__getitem__) is None


def test_a_path_without_spaces_is_never_shortened():
    plain = [r"C:\Users\me\.venv\Scripts\python.exe", "-I", "--home", r"C:\d", "codex-stop"]
    command = shellcommand.spell(plain, shellcommand.CMD, "nt", shorten=lambda p: "WRONG")
    assert command == " ".join(plain)


@pytest.mark.parametrize("odd", ["a&b", "a(x86)", "50%", "x;y", "it's", "a,b"])
def test_characters_cmd_or_powershell_read_as_syntax_need_a_short_path(odd: str):
    assert shellcommand.needs_quotes(rf"C:\{odd}\python.exe")
    assert not shellcommand.needs_quotes(r"C:\PROGRA~2\Python\python.exe")


def test_a_drive_without_short_names_is_one_sentence_for_codex_only():
    keep = lambda path: path  # noqa: E731 (8.3 names are off: GetShortPathNameW gives it back)
    said = shellcommand.problem(WINDOWS, shellcommand.CMD, "nt", keep)
    assert said is not None and WINDOWS[0] in said and "8.3" in said and "notify" in said
    assert shellcommand.problem(WINDOWS, shellcommand.BASH, "nt", keep) is None
    assert shellcommand.problem(WINDOWS, shellcommand.CMD, "posix", keep) is None


def test_each_agent_names_the_shell_it_runs_hooks_with():
    assert claude_code.ClaudeCode.shell == shellcommand.BASH
    assert codex.Codex.shell == shellcommand.CMD
    assert {a.name: a.shell for a in registry.all_agents()} == {
        "claude-code": shellcommand.BASH, "codex": shellcommand.CMD,
        "openclaw": shellcommand.BASH,  # unused: its plugin spawns the argv, no shell
    }  # fmt: skip


# -- which shell the self-test runs each agent's commands through ------------------


def test_windows_runners_are_git_bash_for_claude_code_and_comspec_for_codex(tmp_path: Path):
    git = r"D:\Tools\Git\cmd\git.exe"
    bash = r"D:\Tools\Git\bin\bash.exe"
    wsl = r"C:\Windows\System32\bash.exe"
    found = {"git": git, "bash": wsl}
    env = {"COMSPEC": r"C:\Windows\system32\cmd.exe"}
    run = shellcommand.runner(shellcommand.BASH, env, "nt", found.get, {bash}.__contains__)
    assert run == [bash, "-c"]
    assert shellcommand.runner(shellcommand.CMD, env, "nt", found.get) == [env["COMSPEC"], "/C"]
    # WSL's bash.exe in System32 is never taken for Git Bash
    assert shellcommand.runner(shellcommand.BASH, env, "nt", found.get, {wsl}.__contains__) is None
    override = {**env, "CLAUDE_CODE_GIT_BASH_PATH": r"E:\git\bin\bash.exe"}
    either = {bash, r"E:\git\bin\bash.exe"}.__contains__
    assert shellcommand.runner(shellcommand.BASH, override, "nt", found.get, either)[0] == (
        r"E:\git\bin\bash.exe"
    )
    installed = {"PROGRAMFILES": r"C:\Program Files"}  # as os.environ spells it on Windows
    default = r"C:\Program Files\Git\bin\bash.exe"
    assert shellcommand.git_bash(installed, lambda name: None, {default}.__contains__) == default


def test_posix_runners_are_bash_and_the_login_shell():
    env = {"SHELL": "/usr/bin/zsh"}
    assert shellcommand.runner(shellcommand.BASH, env, "posix", lambda n: "/bin/bash") == [
        "/bin/bash", "-c",
    ]  # fmt: skip
    assert shellcommand.runner(shellcommand.BASH, env, "posix", lambda n: None) == ["/bin/sh", "-c"]
    assert shellcommand.runner(shellcommand.CMD, env, "posix") == ["/usr/bin/zsh", "-lc"]


# -- the real hook through bash -c ---------------------------------------------------


@needs_bash
def test_claude_codes_installed_command_captures_through_bash_c_from_a_folder_with_spaces(
    tmp_path: Path,
):
    home = tmp_path / "data folder"
    paths = Paths(home).ensure()
    agent = claude_code.ClaudeCode(env={"HOME": str(tmp_path), "PATH": ""})
    command = agent.handlers(claude_code.EVENTS, paths)["Stop"]["command"]
    assert command == shellcommand.spell(agent.command("claude-stop", paths), shellcommand.BASH)
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    payload = {"session_id": "s1", "cwd": str(elsewhere), "hook_event_name": "Stop",
               "stop_hook_active": False, "last_assistant_message": "done"}  # fmt: skip
    done = subprocess.run(
        [BASH or "bash", "-c", command], input=json.dumps(payload), cwd=elsewhere,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "", done.stderr
    records = [json.loads(p.read_text()) for p in paths.spool_incoming.glob("*.json")]
    assert [r.get("response") for r in records] == ["done"], records
    assert list(elsewhere.iterdir()) == []  # nothing landed in the project folder
