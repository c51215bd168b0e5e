"""The base model's greedy answers kept between rounds (``trainer/base_answers.py``).

The capability check decodes the base's answers at every round start; the cache serves a
set of prompts answered before, for the same model files, backend, numerics, length and
stop tokens, and decodes everything else as before. The file tests run on any machine;
the round tests on the real tiny Llama.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rltray.trainer import base_answers

PROMPTS = [[1, 2, 3], [4, 5]]
ANSWERS = [[7, 8, 9, 2], [6]]


def test_a_set_comes_back_only_for_the_same_scope_and_the_same_prompts(tmp_path: Path) -> None:
    cache = base_answers.AnswerCache(tmp_path, "model-a")
    assert cache.get(PROMPTS) is None
    cache.put(PROMPTS, ANSWERS)
    assert cache.get(PROMPTS) == ANSWERS
    assert cache.get([[1, 2, 3]]) is None  # another set, even a part of it
    assert cache.get(list(reversed(PROMPTS))) is None  # order is part of the set
    assert base_answers.AnswerCache(tmp_path, "model-b").get(PROMPTS) is None


def test_a_damaged_or_foreign_file_is_a_miss_and_is_written_over(tmp_path: Path) -> None:
    cache = base_answers.AnswerCache(tmp_path, "m")
    cache.put(PROMPTS, ANSWERS)
    (path,) = tmp_path.glob("*.json")
    kept = json.loads(path.read_text(encoding="utf-8"))
    for body in ("{not json", json.dumps({**kept, "prompts_sha256": "0" * 64}),
                 json.dumps({**kept, "answers": [[1]]}),
                 json.dumps({**kept, "v": 99}),
                 json.dumps({"v": 1, "scope": "m", "prompts": PROMPTS, "answers": ANSWERS})):
        path.write_text(body, encoding="utf-8")
        assert cache.get(PROMPTS) is None, body
    cache.put(PROMPTS, ANSWERS)
    assert cache.get(PROMPTS) == ANSWERS


def test_a_file_keeps_the_prompts_hash_not_their_token_ids(tmp_path: Path) -> None:
    """The prompts are the user's own words (token ids decode straight back to them): a
    cache file holds their hash, so it never carries a deleted turn's text."""
    base_answers.AnswerCache(tmp_path, "m").put([[101, 2023, 2003]], ANSWERS[:1])
    (path,) = tmp_path.glob("*.json")
    kept = json.loads(path.read_text(encoding="utf-8"))
    assert "prompts" not in kept and len(kept["prompts_sha256"]) == 64
    assert "2023" not in path.read_text(encoding="utf-8")


def test_a_folder_that_cannot_be_written_keeps_nothing_and_raises_nothing(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    cache = base_answers.AnswerCache(blocked / "answers", "m")  # a folder under a file
    cache.put(PROMPTS, ANSWERS)
    assert cache.get(PROMPTS) is None


def test_the_least_recently_used_sets_go_first(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_answers, "MAX_FILES", 3)
    cache = base_answers.AnswerCache(tmp_path, "m")
    for i in range(3):
        cache.put([[i]], [[i]])
    for i in range(3):  # put in this order, whatever the clock's resolution
        os.utime(cache._file([[i]]), ns=(10 + i, 10 + i))
    assert cache.get([[0]]) == [[0]]  # used again: now the newest
    cache.put([[3]], [[3]])
    assert len(list(tmp_path.glob("*.json"))) == 3
    assert cache.get([[1]]) is None  # the least recently used went
    assert [cache.get([[i]]) for i in (0, 2, 3)] == [[[0]], [[2]], [[3]]]


def test_the_folder_follows_the_variable_and_off_turns_the_cache_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(base_answers.ENV, str(tmp_path / "elsewhere"))
    assert base_answers.root() == tmp_path / "elsewhere"
    monkeypatch.setenv(base_answers.ENV, "off")
    assert base_answers.root() is None
    monkeypatch.delenv(base_answers.ENV)
    root = base_answers.root()
    assert root is not None and root.name == "base-answers"
    assert root.parent.name in ("rltray", "rltray-cache")  # beside gguf-bases


def test_a_changed_model_file_is_another_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"x" * 10)
    first = base_answers.model_fingerprint(tmp_path)
    assert base_answers.model_fingerprint(tmp_path) == first
    weights.write_bytes(b"y" * 11)  # re-downloaded, re-converted
    assert base_answers.model_fingerprint(tmp_path) != first


# ---- on the real tiny Llama ------------------------------------------------------------


def _counting(backend, monkeypatch: pytest.MonkeyPatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Rows of each base greedy call (the real ``greedy`` runs)."""
    rows: list[int] = []
    greedy = backend.greedy

    def counted(batch, *args, **kw):  # type: ignore[no-untyped-def]
        if not kw.get("adapter"):
            rows.append(len(batch))
        return greedy(batch, *args, **kw)

    monkeypatch.setattr(backend, "greedy", counted)
    return rows


@pytest.mark.ml
def test_kept_answers_are_what_decoding_gives_and_only_new_prompts_are_decoded(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("peft")
    from rltray.trainer import capability

    from tests.trainer.test_capability import loaded

    monkeypatch.setenv(base_answers.ENV, str(tmp_path / "kept"))
    hyper, backend, pad, held_enc, held_kept = loaded(tmp_path / "j", tiny_model_dir)
    prompts = capability.choose_prompts(held_enc, held_kept, {}, [], 3)
    plain = capability.round_start(backend, prompts, hyper, pad, has_parent=False)
    assert plain["answers_kept"] == 0

    everyday = capability.general_prompts(backend.tokenizer, int(hyper.general_prompts))
    assert prompts and everyday
    rows = _counting(backend, monkeypatch)
    first = capability.round_start(backend, prompts, hyper, pad, has_parent=False,
                                   keep_answers=True)
    assert rows == [len(prompts) + len(everyday)]  # decoded, in one batch, as without a cache
    assert first["answers_kept"] == 0
    rows.clear()
    again = capability.round_start(backend, prompts, hyper, pad, has_parent=False,
                                   keep_answers=True)
    assert rows == [] and again["answers_kept"] == 2  # nothing decoded
    for state in (first, again):
        assert state["answers"] == plain["answers"]
        assert state["general"]["answers"] == plain["general"]["answers"]
        assert state["nll_base"] == plain["nll_base"]
        assert state["general"]["nll_base"] == plain["general"]["nll_base"]
    # a new held-out prompt among the round's: only the round's set is decoded again
    other = capability.choose_prompts(held_enc, held_kept, {}, [], 2)
    third = capability.round_start(backend, other, hyper, pad, has_parent=False,
                                   keep_answers=True)
    assert rows == [len(other)] and third["answers_kept"] == 1
    assert third["answers"] == plain["answers"][:2]
    # other greedy settings are another key
    longer = base_answers.for_round(backend, int(hyper.ref_tokens) + 1, set())
    assert longer is not None and longer.get(prompts) is None


@pytest.mark.ml
def test_a_second_round_on_the_same_base_decodes_no_base_answer_and_judges_the_same(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("peft")
    from rltray.trainer.backends.torch_peft import TorchPeftBackend

    from tests.support.jobfiles import make_job, run_round

    monkeypatch.setenv(base_answers.ENV, "off")
    cold, _ = run_round(make_job(tmp_path / "cold", tiny_model_dir))
    monkeypatch.setenv(base_answers.ENV, str(tmp_path / "kept"))
    first, first_lines = run_round(make_job(tmp_path / "first", tiny_model_dir))
    calls: list[bool] = []  # adapter on?
    real = TorchPeftBackend.greedy

    def counted(self, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(bool(k.get("adapter")))
        return real(self, *a, **k)

    monkeypatch.setattr(TorchPeftBackend, "greedy", counted)
    second, lines = run_round(make_job(tmp_path / "second", tiny_model_dir))
    assert calls == [True]  # only the new adapter answers (the broken-answer count)
    said = [x["message"] for x in lines if x.get("type") == "log"]
    assert any("came from an earlier round (2 prompt set(s)" in m for m in said), said
    assert not any("earlier round" in str(x.get("message")) for x in first_lines)
    keys = ("ref_nll_base", "ref_nll_parent", "ref_nll_new", "ref_tokens", "general_nll_base",
            "general_nll_new", "ref_degenerate_base", "ref_degenerate_new", "kl_round")
    assert [o.result.metrics["ref_answers_kept"] for o in (cold, first, second)] == [0, 0, 2]
    for outcome in (first, second):
        assert outcome.status == "done" and outcome.result.accepted == cold.result.accepted
        assert {k: outcome.result.metrics[k] for k in keys} == {
            k: cold.result.metrics[k] for k in keys}


def test_no_cache_folder_means_decoding_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trainer environment built without platformdirs, or a backend with no model folder:
    the round decodes the base's answers as it always did, and does not fail."""
    import sys

    class NoFolder:
        name, numerics = "torch", "cpu float32"

        def model_folder(self) -> Path:
            raise OSError("gone")

    monkeypatch.delenv(base_answers.ENV, raising=False)
    assert base_answers.for_round(NoFolder(), 128, {2}) is None
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    assert base_answers.for_round(object(), 128, {2}) is None


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_the_cache_folder_is_private_and_its_parents_never_open_to_writes(
    tmp_path: Path,
) -> None:
    """Regression (review2-sec cache_umask): under umask 000 ~/.cache, ~/.cache/rltray and
    base-answers were made 0777 (others could swap the answers), under 022 0755."""
    folder = tmp_path / ".cache" / "rltray" / "base-answers"
    old = os.umask(0)
    try:
        base_answers.AnswerCache(folder, "m").put(PROMPTS, ANSWERS)
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o700
    for parent in (tmp_path / ".cache", tmp_path / ".cache" / "rltray"):
        assert parent.stat().st_mode & 0o777 == 0o755, parent
    (path,) = folder.glob("*.json")
    assert path.stat().st_mode & 0o777 == 0o600
