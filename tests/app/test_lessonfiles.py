"""The lesson files' contract between the service (writes) and the hook program (reads)."""

from __future__ import annotations

from pathlib import Path

from rltray.app.hooks import lessonfiles


def test_a_project_gets_its_own_text_and_any_other_folder_the_global_one(tmp_path: Path) -> None:
    home = str(tmp_path)
    shop = tmp_path / "work" / "shop"
    lessonfiles.write_all(home, "codex", {lessonfiles.key(str(shop)): "Run one test.",
                                          lessonfiles.GLOBAL: "Be brief."})  # fmt: skip
    assert lessonfiles.read(home, "codex", str(shop)) == "Run one test."
    assert lessonfiles.read(home, "codex", str(tmp_path / "elsewhere")) == "Be brief."
    assert lessonfiles.read(home, "claude-code", str(shop)) is None  # off for that agent
    folder = Path(lessonfiles.agent_folder(home, "codex"))
    assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o600}
    lessonfiles.write_all(home, "codex", {lessonfiles.GLOBAL: "Be brief."})
    assert lessonfiles.read(home, "codex", str(shop)) == "Be brief."  # the project's went
    lessonfiles.clear(home, "codex")
    assert lessonfiles.read(home, "codex", str(shop)) is None and not folder.exists()


def test_the_hook_cuts_what_it_reads_to_the_hard_cap(tmp_path: Path) -> None:
    folder = Path(lessonfiles.agent_folder(str(tmp_path), "codex"))
    folder.mkdir(parents=True)
    (folder / "global.md").write_text("x" * 50_000)  # written by hand
    assert len(lessonfiles.read(str(tmp_path), "codex", "/any")) == lessonfiles.MAX_CHARS
    assert lessonfiles.key("/a/b") == lessonfiles.key("/a/b/") != lessonfiles.key("/a/c")
