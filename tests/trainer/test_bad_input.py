"""Bad jobs and inputs: one clear error line last, exit 2, and no adapter folder written.

Most cases call ``__main__.run`` in process (the CLI minus the stdout/signal set-up)
to spare a torch import per case; one case runs the real CLI end to end.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rltray.trainer import adapters
from rltray.trainer.__main__ import EXIT_BAD_INPUT, run

from tests.support.jobfiles import example, make_job, run_trainer


def run_in_process(job: Path) -> tuple[int, list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []
    code = run(str(job), lambda x: lines.append(json.loads(json.dumps(x))), threading.Event())
    return code, lines


def assert_clean_failure(code: int, lines: list[dict[str, Any]], folder: Path, *words: str) -> str:
    assert code == EXIT_BAD_INPUT, lines
    last = lines[-1]
    assert last["type"] == "error" and last["kind"] == "job"
    message = last["message"]
    assert "\n" not in message and "Traceback" not in message
    for w in words:
        assert w in message, message
    assert not (folder / "adapter").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".adapter")]
    return message


def test_missing_example_file_via_the_real_cli(tiny_model_dir: Path, tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", tiny_model_dir)
    (tmp_path / "job" / "examples.jsonl").unlink()
    code, lines, _ = run_trainer(job, timeout=60)
    assert_clean_failure(code, lines, tmp_path / "job", "examples file", "examples.jsonl")


def test_unreadable_job_file(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text("{not json", encoding="utf-8")
    code, lines = run_in_process(tmp_path / "job.json")
    assert_clean_failure(code, lines, tmp_path, "not valid JSON")


def test_empty_example_set(tiny_model_dir: Path, tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", tiny_model_dir, examples=[])
    code, lines = run_in_process(job)
    assert_clean_failure(code, lines, tmp_path / "job", "holds no examples")


@pytest.mark.ml
def test_model_folder_with_a_wrong_architecture(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    model = tmp_path / "weird-model"
    shutil.copytree(tiny_model_dir, model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["model_type"] = "nonsense"
    cfg["architectures"] = ["NonsenseForCausalLM"]
    (model / "config.json").write_text(json.dumps(cfg))
    job = make_job(tmp_path / "job", model)
    code, lines = run_in_process(job)
    assert_clean_failure(code, lines, tmp_path / "job", "nonsense")


def test_model_folder_that_does_not_exist(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", tmp_path / "no-such-model")
    code, lines = run_in_process(job)
    assert_clean_failure(code, lines, tmp_path / "job", "no-such-model")


@pytest.mark.ml
def test_examples_with_no_response_tokens_are_skipped_then_refused(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    long_prompt = "explain " * 200
    rows = [example(0, 1, "Fine.", prompt=long_prompt), example(1, -1, "No.", prompt=long_prompt)]
    job = make_job(tmp_path / "job", tiny_model_dir, examples=rows, hyper={"max_seq_len": 32})
    code, lines = run_in_process(job)
    skipped = [x for x in lines if x["type"] == "skipped"]
    assert [s["id"] for s in skipped] == ["ex0", "ex1"]
    assert_clean_failure(code, lines, tmp_path / "job", "none of the 2 training examples")


@pytest.mark.ml
def test_nan_in_the_parent_adapter(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    shapes = adapters.module_shapes_from_config(cfg)
    assert shapes is not None
    tensors = {}
    for path, (o, i) in shapes.items():
        tensors[adapters.peft_name(path, "A")] = np.zeros((4, i), np.float32)
        tensors[adapters.peft_name(path, "B")] = np.zeros((o, 4), np.float32)
    tensors[adapters.peft_name("model.layers.1.mlp.up_proj", "B")][3, 2] = np.nan
    parent = adapters.write_adapter(
        tmp_path / "parent", tensors, rank=4, alpha=8.0, base_model=str(tiny_model_dir)
    )
    job = make_job(tmp_path / "job", tiny_model_dir, parent_adapter=str(parent))
    code, lines = run_in_process(job)
    assert_clean_failure(code, lines, tmp_path / "job", "parent adapter", "non-finite", "up_proj")


@pytest.mark.ml
def test_a_round_stopped_after_it_wrote_its_adapter_reports_that_folder(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Regression: a pause during the checks after the last step (the runner's second stop
    request ends the trainer at once) left the written adapter and the checkpoint; the
    resumed round was refused ("already exists") and the gated adapter was lost."""
    pytest.importorskip("torch")
    from rltray.trainer.job import load_job

    job = make_job(tmp_path / "job", tiny_model_dir)
    code, lines = run_in_process(job)
    assert code == 0 and lines[-1]["type"] == "done"
    first = lines[-1]
    checkpoint = load_job(job).checkpoint_dir
    checkpoint.mkdir(parents=True, exist_ok=True)  # killed before it was removed
    code, again = run_in_process(job)
    assert code == 0 and again[-1] == first
    assert any("before it was stopped" in x.get("message", "") for x in again)
    assert not checkpoint.exists()
    # the folder is checked again: one damaged after the write is reported rejected
    weights = tmp_path / "job" / "adapter" / adapters.WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:64])
    code, third = run_in_process(job)
    assert code == 0 and third[-1]["accepted"] is False
    assert any("adapter sanity check failed" in r for r in third[-1]["reasons"])
    assert adapters.read_metadata(tmp_path / "job" / "adapter")["accepted"] is False


def test_existing_output_folder_is_never_overwritten(tiny_model_dir: Path, tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", tiny_model_dir)
    (tmp_path / "job" / "adapter").mkdir()
    (tmp_path / "job" / "adapter" / "keep.txt").write_text("mine")
    code, lines = run_in_process(job)
    assert code == EXIT_BAD_INPUT and "already exists" in lines[-1]["message"]
    assert (tmp_path / "job" / "adapter" / "keep.txt").read_text() == "mine"


def test_usage_error_still_ends_with_a_json_error_line() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "rltray.trainer"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == EXIT_BAD_INPUT
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["type"] == "error" and last["kind"] == "job" and "usage" in last["message"]
