"""The learning bench's saved rounds, loaded as the gate sees them, for benches that
re-score trained adapters (degenerate_check.py, capability_split.py)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def saved_runs() -> list[Path]:
    """Every learning_smollm2.py run folder under .bench-out/ that kept its adapter."""
    return sorted(p for p in (ROOT / ".bench-out").glob("learning-smollm2-*/runs/*")
                  if (p / "adapter" / "adapter_config.json").is_file())  # fmt: skip


def row_of(run: Path) -> dict[str, Any]:
    """The bench's own figures for ``run`` ({} when it did not get that far)."""
    row = run / "row.json"
    return json.loads(row.read_text()) if row.is_file() else {}


@contextmanager
def loaded_run(run: Path) -> Iterator[tuple[Any, Any, int, list[list[int]]]]:
    """(hyper, torch backend with the run's adapter as parent, pad id, the gate's
    reference prompts: the round's held-out turns as ``capability.choose_prompts``
    picks them)."""
    from rltray.trainer import capability, rounddata

    from tests.support.jobfiles import setup_round

    run = run.resolve()
    job = json.loads((run / "job.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("examples", "heldout"):
            job[name] = str(run / job[name])
        job.update(out=str(Path(tmp) / "out"), parent_adapter=str(run / "adapter"))
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        _, hyper, backend, _, heldout = setup_round(path)
        pad = rounddata.pad_id(backend.tokenizer)
        held_enc, held_kept = rounddata.encode_all(backend.tokenizer, heldout, hyper,
                                                   lambda _: None, "held-out")
        prompts = capability.choose_prompts(held_enc, held_kept, {}, [], int(hyper.ref_prompts))
        yield hyper, backend, pad, prompts
