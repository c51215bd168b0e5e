"""Job and example files: valid inputs load; every mistake is one clear sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rltray.trainer.job import (
    Example,
    JobError,
    TrainResult,
    error_line,
    load_examples,
    load_job,
)

GOOD = {
    "id": "e1",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "hello"}],
    "prompt": "fix it",
    "response": "fixed",
    "rating": 1,
    "rated_at": "2025-01-02T03:04:05Z",
}


def write_lines(path: Path, objs: list) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs),
                    encoding="utf-8")
    return path


def make_job(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_lines(folder / "examples.jsonl", [GOOD])
    job = {"v": 1, "id": "run-1", "base_model": "org/model", "backend": "torch",
           "examples": "examples.jsonl", "out": "adapter"}
    job.update(changes)
    job = {k: v for k, v in job.items() if v is not ...}
    path = folder / "job.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    return path


def test_minimal_job_gets_defaults_and_absolute_paths(tmp_path: Path) -> None:
    job = load_job(make_job(tmp_path / "j"))
    folder = (tmp_path / "j").resolve()
    assert job.examples == folder / "examples.jsonl"
    assert job.out == folder / "adapter"
    assert job.checkpoint_dir == folder / "checkpoint"
    assert (job.device, job.preset, job.seed, job.baseline) == ("auto", "balanced", 0, 0.0)
    assert job.heldout is None and job.parent_adapter is None and job.revision is None
    assert job.trust_remote_code is False and dict(job.hyper) == {}
    assert job.base_model == "org/model"  # a hub id stays as written


def test_full_job_resolves_relative_paths_against_job_folder(tmp_path: Path) -> None:
    folder = tmp_path / "j"
    (folder / "parent").mkdir(parents=True)
    (folder / "model").mkdir()
    write_lines(folder / "held.jsonl", [GOOD])
    job = load_job(make_job(folder, heldout="held.jsonl", parent_adapter="parent",
                            base_model="model", backend="mlx", device="cpu", preset="careful",
                            seed=7, baseline=-0.25, revision="abc", trust_remote_code=True,
                            hyper={"lr": 1e-3}))
    assert job.heldout == folder.resolve() / "held.jsonl"
    assert job.parent_adapter == folder.resolve() / "parent"
    assert job.base_model == str(folder.resolve() / "model")
    assert (job.backend, job.device, job.preset, job.seed) == ("mlx", "cpu", "careful", 7)
    assert job.baseline == -0.25 and job.hyper == {"lr": 1e-3} and job.trust_remote_code


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"learning_rate": 1.0}, "unknown key 'learning_rate'"),
        ({"out": ...}, "missing the required key 'out'"),
        ({"v": 2}, "v=1"),
        ({"backend": "jax"}, "'backend' must be one of torch, mlx"),
        ({"device": "tpu"}, "'device' must be one of"),
        ({"preset": "wild"}, "'preset' must be one of"),
        ({"seed": "7"}, "'seed' must be a whole number"),
        ({"seed": True}, "'seed' must be a whole number"),
        ({"baseline": 3}, "'baseline' must be a number from -1 to 1"),
        ({"trust_remote_code": "yes"}, "'trust_remote_code' must be true or false"),
        ({"id": ""}, "'id' must be a non-empty string"),
        ({"hyper": [1]}, "'hyper' must be an object"),
        ({"examples": "nope.jsonl"}, "the examples file"),
        ({"heldout": "nope.jsonl"}, "the heldout file"),
        ({"parent_adapter": "missing"}, "parent adapter folder"),
    ],
)
def test_bad_job_is_one_clear_sentence(tmp_path: Path, changes: dict, needle: str) -> None:
    path = make_job(tmp_path / "j", **changes)
    with pytest.raises(JobError) as err:
        load_job(path)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message and str(path.resolve()) in message


def test_unknown_hyper_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="unknown hyperparameter 'lerning_rate'"):
        load_job(make_job(tmp_path / "j", hyper={"lerning_rate": 1e-3}))


def test_missing_unreadable_and_non_object_job_files(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="does not exist"):
        load_job(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops", encoding="utf-8")
    with pytest.raises(JobError, match="not valid JSON"):
        load_job(bad)
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(JobError, match="must hold a JSON object"):
        load_job(bad)


def test_examples_load_with_context_and_line_numbers(tmp_path: Path) -> None:
    second = {**GOOD, "id": "e2", "rating": -1, "messages": [],
              "behaviour_logprobs": [-0.5, -1, 0]}
    path = write_lines(tmp_path / "ex.jsonl", [GOOD, "", second])
    examples = load_examples(path)
    assert [e.id for e in examples] == ["e1", "e2"]
    assert [e.line for e in examples] == [1, 3]
    assert examples[0].messages[0] == {"role": "system", "content": "be brief"}
    assert examples[1].rating == -1 and examples[1].behaviour_logprobs == (-0.5, -1.0, 0.0)
    assert examples[0].behaviour_logprobs is None
    again = write_lines(tmp_path / "again.jsonl", [e.to_dict() for e in examples])
    assert [(e.id, e.prompt, e.messages) for e in load_examples(again)] == [
        (e.id, e.prompt, e.messages) for e in examples
    ]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ({**GOOD, "rating": 0}, "'rating' must be 1 or -1"),
        ({**GOOD, "rating": 2}, "'rating' must be 1 or -1"),
        ({**GOOD, "rating": True}, "'rating' must be 1 or -1"),
        ({**GOOD, "extra": 1}, "unknown key 'extra'"),
        ({k: v for k, v in GOOD.items() if k != "prompt"}, "missing the required key 'prompt'"),
        ({**GOOD, "response": ""}, "'response' is empty"),
        ({**GOOD, "response": 5}, "'response' must be a string"),
        ({**GOOD, "rated_at": "yesterday"}, "'rated_at' must be an ISO-8601 time"),
        ({**GOOD, "messages": [{"role": "tool", "content": "x"}]}, "messages[0] must be"),
        ({**GOOD, "messages": "hi"}, "'messages' must be a list"),
        ({**GOOD, "behaviour_logprobs": [0.5]}, "'behaviour_logprobs' must be a list"),
        ({**GOOD, "behaviour_logprobs": ["x"]}, "'behaviour_logprobs' must be a list"),
        ("{not json", "is not valid JSON"),
        ("[1]", "must be a JSON object"),
    ],
)
def test_bad_example_names_file_and_line(tmp_path: Path, line, needle: str) -> None:
    other = {**GOOD, "id": "first"}
    path = write_lines(tmp_path / "ex.jsonl", [other, line])
    with pytest.raises(JobError) as err:
        load_examples(path)
    message = str(err.value)
    assert f"{path}, line 2" in message and needle in message and "\n" not in message


def test_duplicate_ids_and_empty_files_are_errors(tmp_path: Path) -> None:
    dup = write_lines(tmp_path / "dup.jsonl", [GOOD, GOOD])
    with pytest.raises(JobError, match="line 2 repeats the example id 'e1' from line 1"):
        load_examples(dup)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(JobError, match="holds no examples"):
        load_examples(empty)
    with pytest.raises(JobError, match="does not exist"):
        load_examples(tmp_path / "missing.jsonl")


def test_output_line_helpers() -> None:
    result = TrainResult(adapter="/a", accepted=False, reasons=["kl too high"],
                         metrics={"kl": 0.5}, baseline=0.1)
    assert result.line() == {"type": "done", "adapter": "/a", "accepted": False,
                             "reasons": ["kl too high"], "metrics": {"kl": 0.5},
                             "baseline": 0.1, "trained_ids": [], "unseen_ids": []}
    assert error_line("bad", "job") == {"type": "error", "message": "bad", "kind": "job"}
    assert isinstance(Example(id="x", prompt="p", response="r", rating=1, rated_at="t"), Example)


def test_example_truncated_and_replay_flags(tmp_path) -> None:
    from rltray.trainer.job import JobError, example_from_dict

    base = {"id": "a", "prompt": "p", "response": "r", "rating": 1,
            "rated_at": "2025-01-01T00:00:00Z"}
    plain = example_from_dict(base)
    assert plain.truncated is False and plain.replay is False
    flagged = example_from_dict({**base, "truncated": True, "replay": True})
    assert flagged.truncated and flagged.replay
    assert example_from_dict(flagged.to_dict()) == flagged  # round-trips through JSONL
    for key in ("truncated", "replay"):
        try:
            example_from_dict({**base, key: "yes"}, where="x.jsonl, line 3")
        except JobError as exc:
            assert str(exc) == f"x.jsonl, line 3: {key!r} must be true or false, not 'yes'"
        else:
            raise AssertionError("a non-boolean flag was accepted")


def test_a_graded_ratings_reward_is_checked_and_used() -> None:
    """Issue 22 item 12: the job contract carries (score - 3) / 2 beside the +-1 class."""
    from rltray.trainer.job import example_from_dict

    base = {"id": "a", "prompt": "p", "response": "r", "rating": -1,
            "rated_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    plain = example_from_dict(base)
    assert plain.reward is None and plain.value == -1.0 and "reward" not in plain.to_dict()
    graded = example_from_dict({**base, "reward": -0.5})
    assert graded.value == -0.5 and graded.rating == -1
    assert example_from_dict(graded.to_dict()) == graded
    for wrong in (0.5, 0, -1.5, True, "x", float("nan")):
        with pytest.raises(JobError, match="'reward' must be a number in \\[-1, 1\\]"):
            example_from_dict({**base, "reward": wrong})


def test_rewards_set_the_advantages_and_the_classes_keep_their_balance() -> None:
    """What train._optimise does with a round's values: a 4/5 pushes half as hard as a plain
    good one, and the good and the bad class still push equally."""
    from rltray.trainer.objective import advantages, class_weights, push_ratio

    values = [0.5, 1.0, -1.0, -0.5, -1.0]  # 4/5, good, bad, 2/5, bad
    adv = advantages(values, baseline=0.0)
    assert adv == values
    weights = class_weights(values, adv)
    assert push_ratio(values, adv, weights) == pytest.approx(1.0)
