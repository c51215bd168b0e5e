"""What the stand-in checks, here, of an adapter folder a remote trainer sent back.

The remote machine is the user's own (or their lab's): its trainer measures the round
and its gate judges it, and that verdict is the round's. The hashes compared after the
download are computed by the remote too, so they catch a broken transfer, not a wrong
folder. What the files themselves can still get wrong is checked here before the tray
takes them: a folder of another round (its ``rltray.json`` names another job), a verdict
in the ``done`` line that its own ``rltray.json`` does not give, and weights that are not
a LoRA adapter (a missing file, a tensor that is not float32 A/B pairs of the config's
rank, bytes past the header's table, a value that is not finite). A folder that fails
is rejected with the reason, and so never becomes a version.

Standard library only: the tray's environment has no numpy (a safetensors file is an
8-byte header length, a JSON table of dtype, shape and byte offsets, then the bytes).
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG, WEIGHTS, META = "adapter_config.json", "adapter_model.safetensors", "rltray.json"
#: The header of a LoRA adapter's safetensors file is a few kB per module.
MAX_HEADER = 64 * 2**20
#: Bytes read at once when the values are checked (float32).
CHUNK = 16 * 2**20


def problems(folder: Path, job_id: str, done: Mapping[str, Any]) -> list[str]:
    """Every reason not to take ``folder`` as the result of job ``job_id`` (empty: fine)."""
    folder = Path(folder)
    return _meta_problems(folder, job_id, done) + structure_problems(folder)


def structure_problems(folder: Path) -> list[str]:
    """Every reason ``folder``'s config and weights are not a LoRA adapter (empty: fine).

    Also asked before a version becomes active again (app/training/versions.py
    ``rollback``): a folder whose files went missing or were replaced since it was
    trained must not be published as that version.
    """
    folder = Path(folder)
    found: list[str] = []
    rank = None
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        rank = config.get("r") if isinstance(config, dict) else None
        if not isinstance(config, dict) or str(config.get("peft_type", "")).upper() != "LORA":
            found.append(f"{CONFIG} is not a PEFT LoRA config")
        elif not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
            found.append(f"{CONFIG} has no positive rank r")
            rank = None
    except (OSError, ValueError) as exc:
        found.append(f"{CONFIG} cannot be read ({type(exc).__name__})")
    found += _weight_problems(folder / WEIGHTS, rank)
    return found


def _meta_problems(folder: Path, job_id: str, done: Mapping[str, Any]) -> list[str]:
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{META} cannot be read ({type(exc).__name__})"]
    if not isinstance(meta, dict):
        return [f"{META} is not an object"]
    found = []
    if meta.get("job_id") != job_id:
        found.append(f"{META} is of job {meta.get('job_id')!r}, not of this round ({job_id})")
    for key in ("accepted", "reasons", "unseen_ids"):
        if key in done and meta.get(key) != done.get(key):
            found.append(f"the remote's done line and its {META} disagree on {key!r}")
    return found


def _weight_problems(path: Path, rank: int | None) -> list[str]:
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if not 2 <= length <= min(MAX_HEADER, size - 8):
                return [f"{WEIGHTS} has no readable header"]
            table = json.loads(fh.read(length))
            data = size - 8 - length
            found, spans = _table_problems(table, rank, data)
            if not found:
                found += _non_finite(fh, 8 + length, spans)
            return found
    except (OSError, ValueError, struct.error) as exc:
        return [f"{WEIGHTS} cannot be read ({type(exc).__name__})"]


def _table_problems(table: Any, rank: int | None, data: int
                    ) -> tuple[list[str], list[tuple[int, int]]]:
    """Problems of the header's tensor table, and the byte spans of the tensors."""
    if not isinstance(table, dict):
        return [f"{WEIGHTS}'s header is not a table"], []
    tensors = {k: v for k, v in table.items() if k != "__metadata__"}
    if not tensors:
        return [f"{WEIGHTS} holds no tensor"], []
    found, spans, modules = [], [], {}
    for name, spec in sorted(tensors.items()):
        part = "A" if name.endswith(".lora_A.weight") else "B" if name.endswith(
            ".lora_B.weight") else None  # fmt: skip
        shape = spec.get("shape") if isinstance(spec, dict) else None
        offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
        if part is None:
            found.append(f"{name} is not a LoRA A or B weight")
            continue
        if spec.get("dtype") != "F32" or not _ints(shape, 2) or not _ints(offsets, 2):
            found.append(f"{name} is not a float32 matrix")
            continue
        start, end = offsets
        if not 0 <= start <= end <= data or end - start != 4 * shape[0] * shape[1]:
            found.append(f"{name}'s bytes lie outside the file or do not match its shape")
            continue
        spans.append((start, end))
        r = shape[0] if part == "A" else shape[1]
        if rank is not None and r != rank and r != 0:
            found.append(f"{name} has rank {r}, the config says {rank}")
        modules.setdefault(name.rsplit(".lora_", 1)[0], set()).add(part)
    unpaired = sorted(m for m, parts in modules.items() if parts != {"A", "B"})
    if unpaired:
        found.append(f"{len(unpaired)} module(s) lack an A or a B weight, e.g. {unpaired[0]}")
    return found, spans


def _ints(value: Any, n: int) -> bool:
    return (isinstance(value, list) and len(value) == n
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value))


def _non_finite(fh: Any, base: int, spans: list[tuple[int, int]]) -> list[str]:
    """A sum over float32 values is NaN or infinite exactly when one of them is not finite
    (float64 sums of finite float32 values cannot overflow at an adapter's size)."""
    for start, end in sorted(spans):
        fh.seek(base + start)
        left = end - start
        while left > 0:
            raw = fh.read(min(CHUNK, left))
            if len(raw) % 4 or not raw:
                return [f"{WEIGHTS} ends inside a tensor"]
            values = array("f")
            values.frombytes(raw)
            if array("f").itemsize != 4:  # pragma: no cover - every supported platform
                return []
            total = sum(values)
            if total != total or total in (float("inf"), float("-inf")):
                return [f"{WEIGHTS} holds a value that is not finite"]
            left -= len(raw)
    return []
