"""What the hook's fast paths (issue 25) must keep exact: the transcript read backwards in
chunks, the tool results skipped unparsed, and the few ``os`` rules the hook program
carries itself so that a hook run never imports ``os``.

The reader is checked against the plain answer (``split`` of the whole file) on many
shapes; the path rules against ``os.path``; ``getenv`` and ``makedirs`` in a real
``-I -S`` interpreter where ``os`` is not loaded, as an agent starts the hook.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from rltray.app.hooks import capture_core, events_claude, lessonfiles

from tests.app.test_capture import (  # noqa: F401 (tmpdir_env: the autouse temp folder)
    CLAUDE,
    EXPECTED,
    fixture,
    run_hook,
    spooled,
    tmpdir_env,
)

HOOKS = Path(capture_core.__file__).parent
posix_only = pytest.mark.skipif(os.name != "posix", reason="the hook's own path rules are POSIX's")


def expected_lines(data: bytes, limit: int) -> list[bytes]:
    """The old reader's answer: the last ``limit`` bytes split, a cut first line dropped."""
    start = max(0, len(data) - limit)
    lines = data[start:].split(b"\n")
    return list(reversed(lines[1:] if start else lines))


@pytest.mark.parametrize("seed", range(40))
def test_lines_from_end_equal_the_split_file(seed: int) -> None:
    rng = random.Random(seed)
    lines = [b"x" * rng.choice([0, 1, 5, 30, 200]) for _ in range(rng.randint(0, 40))]
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
    first, limit = rng.choice([1, 3, 7, 64]), rng.choice([len(data) + 5, len(data), 50, 11, 1])
    got = list(
        events_claude.lines_from_end(
            lambda start, length: data[start : start + length], len(data), limit, first
        )
    )
    assert got == expected_lines(data, limit)


def test_a_stop_scan_reads_only_the_chunks_it_needs() -> None:
    """Prompt and context in the last chunk: nothing before it is read."""
    lines = [json.dumps({"type": "user", "message": {"role": "user", "content": "old"}})] * 5000
    lines += (CLAUDE / "transcript.jsonl").read_text().splitlines()
    data = "\n".join(lines).encode() + b"\n"
    reads: list[tuple[int, int]] = []

    def read_at(start: int, length: int) -> bytes:
        reads.append((start, length))
        return data[start : start + length]

    events_claude.core = capture_core
    msgs, anchor = events_claude.scan_transcript(
        events_claude.lines_from_end(read_at, len(data)), None, False
    )
    assert anchor is not None and msgs[anchor][1] == EXPECTED["p2"]
    assert len(msgs) == anchor + 1 + capture_core.MAX_CONTEXT + 1  # stopped 20 past the prompt
    assert reads[0] == (len(data) - events_claude.TAIL_READ_FIRST, events_claude.TAIL_READ_FIRST)
    assert len(reads) == 1


def test_words_about_tool_results_are_still_conversation(
    rltray_home: Path, tmp_path: Path
) -> None:
    """A prompt and an answer that quote the `"toolUseResult"` key are kept: in JSON text
    the quotes are escaped, so the skip that passes over tool results never sees the key."""
    prompt = 'Why does my record hold "toolUseResult": {} and "tool_result"?'
    answer = 'Claude Code adds "toolUseResult" to the user record that carries a tool\'s output.'
    result = {
        "type": "user",
        "toolUseResult": {"stdout": "ok"},
        "message": {"role": "user", "content": [{"type": "tool_result", "content": "y" * 500}]},
    }
    records = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": prompt}},
        result,
        {"type": "assistant", "uuid": "a1", "message": {"id": "m1", "role": "assistant",
                                                        "content": [{"type": "text",
                                                                     "text": answer}]}},
        result,
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    stop = fixture(CLAUDE / "stop_no_message.json", transcript_path=str(path))
    run_hook(rltray_home, "claude-stop", stop)
    (rec,) = spooled(rltray_home)
    assert (rec["prompt"], rec["response"], rec["turn"]) == (prompt, answer, "a1")


@posix_only
@pytest.mark.parametrize(
    "parts",
    [("/a", "b"), ("/a/", "b", "c.json"), ("", "b"), ("a", "/abs"), ("/", "x"), ("rel", "x")],
)
def test_join_is_os_path_join(parts: tuple[str, ...]) -> None:
    assert capture_core.join(*parts) == os.path.join(*parts)


@posix_only
@pytest.mark.parametrize(
    "path",
    ["/a/b/c.py", "/a/b/", "/a", "/", "a", "", "a/b", "//a//b", "/a/./b", "/a/../b", "/.hidden/x"],
)
def test_dirname_and_abspath_are_os_paths(path: str) -> None:
    assert capture_core.dirname(path) == os.path.dirname(path)
    assert capture_core.abspath(path) == os.path.abspath(path)


@posix_only
def test_a_hook_interpreter_reads_its_environment_and_makes_folders_without_os(
    tmp_path: Path,
) -> None:
    """In ``python -I -S`` (no ``os`` loaded) ``getenv`` decodes posix's bytes environment as
    os.environ would, undecodable bytes included, and ``makedirs`` creates private folders."""
    target = tmp_path / "a" / "b" / "home"
    code = (
        f"import sys; sys.path.insert(0, {str(HOOKS)!r}); import capture_core as c; "
        f"c.makedirs({str(target)!r}); c.makedirs({str(target)!r}); "
        "print(ascii([c.getenv('RLTRAY_T'), c.getenv('RLTRAY_NONE'), 'os' in sys.modules]))"
    )
    env = {**os.environ, "RLTRAY_T": "ü".encode() + b"\xff"}
    env.pop("RLTRAY_NONE", None)
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], env=env, capture_output=True, check=True
    ).stdout
    assert out.decode().strip() == ascii([os.fsdecode("ü".encode() + b"\xff"), None, False])
    assert target.is_dir() and target.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("session", ["s", "0f8e6c2a-5d1b", "ü\ud800", "x" * 500])
def test_the_note_a_prompt_looks_for_is_the_one_lessonfiles_leaves(
    session: str, tmp_path: Path
) -> None:
    """A prompt looks for the bad rating's note by name before loading lessonfiles; the name
    must be lessonfiles' own, or the note would never be said."""
    for agent in ("claude-code", "codex"):
        left = Path(lessonfiles.note_path(str(tmp_path), agent, session))
        assert left.parent == tmp_path / "spool" / "sessions"
        assert capture_core.state_file_name(agent, session)[: -len(".json")] + ".note" == left.name
