"""The stand-in's own checks of an adapter a remote trainer sent back (remote/verify.py).

Regression (a review): the remote's ``done`` line decided acceptance and the download was
compared with hashes the remote itself computed, so random bytes said to be accepted were
made the active version. Real folders are written by the trainer's own writer, then
damaged the ways a wrong or broken remote result would be.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rltray.app.training.remote import standin, verify
from rltray.trainer import adapters

JOB = "20261129T080000Z-abc123"


def written(folder: Path, job_id: str = JOB, accepted: bool = True, **tensors: Any) -> Path:
    """An adapter folder as the trainer writes it: two modules, rank 4."""
    rng = np.random.default_rng(0)
    arrays = {}
    for layer in (0, 1):
        path = f"model.layers.{layer}.self_attn.q_proj"
        arrays[adapters.peft_name(path, "A")] = rng.normal(size=(4, 16)).astype(np.float32)
        arrays[adapters.peft_name(path, "B")] = rng.normal(size=(16, 4)).astype(np.float32)
    arrays.update(tensors)
    return adapters.write_adapter(folder, arrays, rank=4, alpha=8.0, base_model="/models/tiny",
                                  extra={"job_id": job_id, "accepted": accepted, "reasons": [],
                                         "unseen_ids": []})  # fmt: skip


def done(**changes: Any) -> dict[str, Any]:
    return {"type": "done", "accepted": True, "reasons": [], "unseen_ids": [], **changes}


def test_the_trainers_own_folder_passes(tmp_path: Path) -> None:
    assert verify.problems(written(tmp_path / "out"), JOB, done()) == []


def test_a_folder_of_another_round_or_verdict_is_refused(tmp_path: Path) -> None:
    other = written(tmp_path / "other", job_id="another-job")
    assert any("not of this round" in p for p in verify.problems(other, JOB, done()))
    rejected = written(tmp_path / "rejected", accepted=False)
    assert any("disagree on 'accepted'" in p for p in verify.problems(rejected, JOB, done()))


def _rewrite_weights(folder: Path, edit: Any) -> None:
    path = folder / verify.WEIGHTS
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + length]), bytearray(raw[8 + length :])
    header, data = edit(header, data)
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + bytes(data))


def _nan(header: dict, data: bytearray) -> tuple[dict, bytearray]:
    data[4:8] = struct.pack("<f", float("nan"))
    return header, data


def _inf(header: dict, data: bytearray) -> tuple[dict, bytearray]:
    data[-4:] = struct.pack("<f", float("-inf"))
    return header, data


def _renamed(header: dict, data: bytearray) -> tuple[dict, bytearray]:
    name = next(k for k in header if k.endswith("lora_B.weight"))
    header["model.embed_tokens.weight"] = header.pop(name)
    return header, data


def _past_the_end(header: dict, data: bytearray) -> tuple[dict, bytearray]:
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"] = [0, len(data) + 64]
    return header, data


def _half(header: dict, data: bytearray) -> tuple[dict, bytearray]:
    name = next(k for k in header if k != "__metadata__")
    header[name]["dtype"] = "F16"
    return header, data


@pytest.mark.parametrize(("edit", "says"), [
    (_nan, "not finite"), (_inf, "not finite"), (_renamed, "not a LoRA A or B weight"),
    (_past_the_end, "outside the file"), (_half, "not a float32 matrix"),
])  # fmt: skip
def test_weights_that_are_not_a_finite_lora_adapter_are_refused(
    tmp_path: Path, edit: Any, says: str
) -> None:
    folder = written(tmp_path / "out")
    _rewrite_weights(folder, edit)
    found = verify.problems(folder, JOB, done())
    assert any(says in p for p in found), found


def test_random_bytes_and_a_foreign_config_are_refused(tmp_path: Path) -> None:
    folder = written(tmp_path / "out")
    (folder / verify.WEIGHTS).write_bytes(bytes(range(64)))
    (folder / verify.CONFIG).write_text('{"anything": 1}')
    found = verify.problems(folder, JOB, done())
    assert any("not a PEFT LoRA config" in p for p in found)
    assert any("no readable header" in p for p in found)


def test_the_stand_in_rejects_such_a_folder_in_its_done_line_and_its_rltray_json(
    tmp_path: Path,
) -> None:
    folder = written(tmp_path / "out")
    _rewrite_weights(folder, _nan)
    line = standin._checked_here(folder, JOB, done(metrics={"auroc_new": 0.9}))
    assert line["accepted"] is False and line["metrics"] == {"auroc_new": 0.9}
    assert any("failed a check here" in r for r in line["reasons"])
    meta = adapters.read_metadata(folder)
    assert meta["accepted"] is False and meta["reasons"] == line["reasons"]
    good = written(tmp_path / "good")
    assert standin._checked_here(good, JOB, done()) == done()
