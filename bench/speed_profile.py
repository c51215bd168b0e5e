"""Where a round's time goes: ``train_speed.py --versus reinforceclaw --profile``.

Run::

    nice -n 10 .venv/bin/python bench/train_speed.py --versus reinforceclaw --profile

One round of each tool under torch.profiler; self CPU time summed by part:
forward/backward matmuls, log-softmax, attention, other ops, Python between ops,
optimizer, drift guard, data prep, before and after the steps.

rltray's round is profiled in ``train_speed.py --child profile-rltray``
(:func:`child_profile_rltray`), ReinforceClaw's in ``--child rc-torch --profile``
(``reinforceclaw_child.py``, which labels its parts with :func:`labelled` and
groups them with :func:`breakdown`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from train_speed import describe, matmul_params, shape_name, spawn
from versus_reinforceclaw import ONE_THREAD, own_folder, write_job


def labelled(name: str, fn: Any) -> Any:
    """``fn`` inside a torch.profiler ``record_function(name)``, so its ops group under it."""
    import functools

    from torch.profiler import record_function

    @functools.wraps(fn)
    def wrapped(*args: Any, **kw: Any) -> Any:
        with record_function(name):
            return fn(*args, **kw)

    return wrapped


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
#: Labelled parts of a step reported whole (not split into forward/backward op kinds).
PARTS = ("drift guard", "data prep", "optimizer", "lora_state copy")


def op_kind(chain: list[str]) -> str:
    """The op family of an event: the innermost of its ops (itself first) that names one.

    ``log-softmax`` covers ``log_softmax`` and ``logsumexp`` with every op they are
    made of, forward and backward (``LogsumexpBackward0`` ...).
    """
    for name in chain:
        low = name.lower()
        if name in MATMULS:
            return "matmul"
        if "log_softmax" in low or "logsoftmax" in low or "logsumexp" in low:
            return "log-softmax"
        if "attention" in low:
            return "attention"
    return "other ops"


def breakdown(events: Any, labels: dict[str, str]) -> dict[str, float]:
    """Self CPU seconds by ``outer/inner/phase/kind``, and ``op/phase/name`` for each
    op of the ``other ops`` kind inside the steps.

    ``labels`` maps our ``record_function`` names to groups; outer and inner are the
    outermost and innermost of them around an event (``-``: none); phase is ``bwd``
    inside the autograd engine, else ``fwd``; kind is the op family, or ``python``
    for a label's own self time (the Python between the ops it holds). Self times
    add up to the profiled wall time of one thread.
    """
    out: dict[str, float] = {}
    for ev in events:
        chain = [ev.name]
        parent = ev.cpu_parent
        while parent is not None:
            chain.append(parent.name)
            parent = parent.cpu_parent
        mine = [i for i, n in enumerate(chain) if n in labels]
        ours = [labels[chain[i]] for i in mine]
        phase = "bwd" if any(n.startswith("autograd::engine") for n in chain) else "fwd"
        kind = "python" if ev.name in labels else op_kind(chain[: mine[0] if mine else None])
        key = f"{ours[-1] if ours else '-'}/{ours[0] if ours else '-'}/{phase}/{kind}"
        sec = ev.self_cpu_time_total / 1e6
        out[key] = out.get(key, 0.0) + sec
        if kind == "other ops" and ours and ours[-1] == "steps" and ours[0] not in PARTS:
            detail = f"op/{phase}/{ev.name}"
            out[detail] = out.get(detail, 0.0) + sec
    return out


def child_profile_rltray(a: argparse.Namespace) -> dict[str, Any]:
    """One round of the real trainer (``__main__.run`` on the job) under torch.profiler."""
    import threading as th

    from rltray.trainer import data
    from rltray.trainer import train as tr
    from rltray.trainer.__main__ import run
    from rltray.trainer.backends.torch_peft import TorchPeftBackend as Backend
    from torch.profiler import ProfilerActivity, profile

    targets = {
        "round start": (tr, "_round_start"), "steps": (tr, "_optimise"),
        "finish": (tr, "finish"), "forward+backward": (Backend, "accumulate"),
        "optimizer": (Backend, "step"), "lora_state copy": (Backend, "lora_state"),
        "drift guard": (tr.DriftSet, "measure"), "data prep": (data, "collate"),
        "data prep (pad rows)": (tr, "_pad_rows"),
    }
    for name, (owner, attr) in list(targets.items()):
        if not hasattr(owner, attr):  # the trainer changed: profile without that label
            del targets[name]
            continue
        setattr(owner, attr, labelled(name, getattr(owner, attr)))
    lines: list[dict[str, Any]] = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        code = run(a.rows, lines.append, th.Event())
    done = [x for x in lines if x.get("type") == "done"]
    labels = {n: ("data prep" if n.startswith("data prep") else n) for n in targets}
    return {"exit": code, "metrics": done[0]["metrics"] if done else lines[-1:],
            "labels": sorted(targets),
            "breakdown": breakdown(prof.events(), labels)}


def summarise(bd: dict[str, float]) -> dict[str, float]:
    """The steps' self time in named parts (see :func:`breakdown` for the keys)."""
    out: dict[str, float] = {}
    for key, sec in bd.items():
        if key.startswith("op/"):
            continue
        outer, inner, phase, kind = key.split("/", 3)
        if outer != "steps":
            part = {"round start": "before steps: round-start log-probs",
                    "finish": "after steps (rltray: final drift + gate)"}.get(
                outer, "outside (load, save)")
        elif inner in PARTS:
            part = f"steps: {inner}"
        elif kind == "python":
            part = "steps: Python between ops"
        else:
            part = f"steps: {'backward' if phase == 'bwd' else 'forward'} {kind}"
        out[part] = out.get(part, 0.0) + sec
    return dict(sorted(out.items()))


def profile_main(a: argparse.Namespace, d: dict[str, int], folder: Path,
                 rows: list[dict[str, Any]]) -> int:
    """One profiled round per tool; prints where each one's time goes."""
    work = own_folder(a.out, "profile-")
    one = {"RLTRAY_TRAINER_THREADS": "1", "RLTRAY_TRAINER_BF16": "0", **ONE_THREAD}
    job = write_job(work / "rltray", folder, rows, "torch", a.passes)
    rl = spawn(["--child", "profile-rltray", "--rows", str(job)], a.timeout, one)
    rc_dir = work / "reinforceclaw"
    if rc_dir.exists():
        shutil.rmtree(rc_dir)
    (rc_dir / "home").mkdir(parents=True)
    (rc_dir / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
    rc = spawn(["--child", "rc-torch", "--profile", "--model", str(folder), "--rows",
                str(rc_dir / "rows.json"), "--passes", str(a.passes)], a.timeout,
               {"HOME": str(rc_dir / "home"), **one})
    parts = {t: summarise(r["breakdown"]) if "breakdown" in r else {}
             for t, r in (("rltray", rl), ("reinforceclaw", rc))}
    print(f"{describe(shape_name(a), d)}; {matmul_params(d) / 1e6:.1f}M matmul params")
    print(f"profile (torch.profiler, 1 thread, self CPU seconds; load average "
          f"{os.getloadavg()[0]:.1f}); {a.examples} examples x {a.passes} pass(es)")
    print(f"{'part':<44} {'rltray':>8} {'reinforceclaw':>13}")
    for t in parts:  # the optimizer steps alone: what tokens/s over the steps divides by
        parts[t]["= steps without the drift guard"] = sum(
            v for k, v in parts[t].items() if k.startswith("steps:") and "drift" not in k)
    for part in sorted(set(parts["rltray"]) | set(parts["reinforceclaw"])):
        print(f"{part:<44} {parts['rltray'].get(part, 0.0):>8.2f} "
              f"{parts['reinforceclaw'].get(part, 0.0):>13.2f}")
    for t, r in (("rltray", rl), ("reinforceclaw", rc)):
        if "error" in r:
            print(f"{t}: ERROR {r['error']}")
            continue
        ops = sorted(((v, k[3:]) for k, v in r["breakdown"].items() if k.startswith("op/")),
                     reverse=True)[:8]
        print(f"{t}, largest 'other ops' in the steps: "
              + ", ".join(f"{name} {sec:.2f}" for sec, name in ops))
    print(json.dumps({"shape": shape_name(a), "model": d, "profile": parts, "rltray": rl,
                      "reinforceclaw": rc}, default=str))
    return 0 if all("breakdown" in r for r in (rl, rc)) else 1
