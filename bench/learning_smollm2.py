"""Real-model learning benchmark: SmolLM2-135M-Instruct, coding prompts, a simulated user.

Run (on a shared machine use nice; one run is minutes on 2 CPU cores):

    nice -n 10 .venv/bin/python bench/learning_smollm2.py --sizes 64 \\
        --presets careful,balanced,aggressive --sources on,off

What it does (bench/README.md has the results):

1. Builds the base once: the cached SmolLM2 Q4_1 GGUF dequantised by Transformers
   (``bench/smollm2_world.base_folder``).
2. Rated data on 32 training tasks: *on-policy* answers sampled from the base
   (temperature 0.7), *off-policy* answers written by a "cloud model" (the same
   base under another system prompt, so not the policy's own probabilities);
   the simulated user rates +1 when the answer has the ``--prefer`` preference
   (``smollm2_world.PREFERENCES``; ``--probe`` prints their base rates), flips 10%.
3. Held-out: 16 disjoint tasks. The trainer's ``heldout`` file holds 16 rated
   turns of those tasks (same source), as the product's held-out split would;
   every adapter is scored on ``--eval`` fresh samples of held-out prompts.
4. Every run goes through ``python -m rltray.trainer JOB.json`` (the shipped path,
   gate included) at niceness 10, then is scored: preferred-behaviour rate
   before/after with its standard error, degenerate answers (empty, looping, no
   code), KL(policy ‖ base) and the NLL change on reference answers (the base's
   greedy answers to the held-out prompts: capability kept), wall time, and the
   gate's verdict with its drift numbers.

The table goes to stdout; the last line is a JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import smollm2_world as w

ROOT = Path(__file__).resolve().parents[1]
#: Where the bench samples and scores, and the trainer runs (``--device``).
DEVICE = "cpu"
T0 = datetime(2025, 6, 1, 9, 0, tzinfo=timezone.utc)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".bench-out" / "learning-smollm2")
    ap.add_argument("--sizes", default="64")
    ap.add_argument("--presets", default="careful,balanced,aggressive")
    ap.add_argument("--sources", default="on,off")
    ap.add_argument("--backend", default="torch", choices=("torch", "mlx"))
    ap.add_argument("--methods", default="mispo",
                    help="comma list of mispo, reinforce, sft, kto (the last three: baselines "
                         "with the preset's rate, LoRA, steps and clip; torch only)")
    ap.add_argument("--bf16", action="store_true",
                    help="train with CPU bf16 autocast (RLTRAY_TRAINER_BF16=1); scoring stays fp32")
    ap.add_argument("--lr-scale", default="1", help="comma list: x preset rate (20 = collapse)")
    ap.add_argument("--prefer", "--preference", default=w.PREFER, choices=sorted(w.PREFERENCES),
                    help="the simulated user's hidden preference (smollm2_world.PREFERENCES)")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--user-rejects-broken", action="store_true",
                    help="the simulated user also rates broken answers (no function) bad "
                         "whatever their style; rows are keyed apart")
    ap.add_argument("--eval", type=int, default=64, help="samples on held-out prompts")
    ap.add_argument("--heldout", type=int, default=16, help="held-out rated turns per job")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: sample and score on a GPU (fp32) and train there (bf16); "
                         "its rows are keyed apart from CPU rows")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--fresh", action="store_true", help="ignore cached run rows")
    ap.add_argument("--rescore", action="store_true",
                    help="add the split reference NLL to every cached row; print them all")
    ap.add_argument("--probe", action="store_true",
                    help="print every preference's base rate on the base's samples; train nothing")
    return ap.parse_args(argv)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load(folder: Path, adapter: Path | None = None) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(int(os.environ.get("RLTRAY_TRAINER_THREADS", "1")))
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    return model.to(DEVICE).eval(), tok


def cached(path: Path, make: Any) -> Any:
    if path.exists():
        return json.loads(path.read_text())
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return value


#: The rated pools: the policy's own samples and the "cloud model's" (system prompt, temperature).
SOURCES: dict[str, tuple[str | None, float]] = {"on": (None, 0.7), "off": (w.CLOUD_SYSTEM, 0.9)}


def build_world(a: argparse.Namespace, folder: Path, n_max: int) -> dict[str, Any]:
    """Rated pools, held-out ratings, eval prompts and reference answers (cached).

    A world with both pools is used when cached; otherwise only the ``--sources``
    asked for are sampled (on a busy 2-core machine the other pool costs ~10 minutes).
    """
    key = f"world-s{a.seed}-n{n_max}-h{a.heldout}-e{a.eval}-m{a.max_new}"
    wanted = [s for s in SOURCES if s in a.sources.split(",")]
    path = a.out / f"{key}.json"
    if not path.exists() and wanted != list(SOURCES):
        path = a.out / f"{key}-{'-'.join(wanted)}.json"

    def make() -> dict[str, Any]:
        model, tok = load(folder)
        train_tasks, held_tasks = w.split_tasks(a.seed)
        out: dict[str, Any] = {}
        for source in wanted:
            system, temp = SOURCES[source]
            t = time.time()
            ps = w.prompts(train_tasks, n_max, random.Random(a.seed + 10))
            ans = w.generate(model, tok, ps, max_new=a.max_new, temperature=temp,
                             seed=a.seed + 100, system=system)
            hp = w.prompts(held_tasks, a.heldout, random.Random(a.seed + 20))
            hans = w.generate(model, tok, hp, max_new=a.max_new, temperature=temp,
                              seed=a.seed + 200, system=system)
            out[source] = list(zip(ps, ans, strict=True))
            out[f"held_{source}"] = list(zip(hp, hans, strict=True))
            log(f"answers {source}: {time.time() - t:.0f}s")
        out["eval_prompts"] = w.prompts(held_tasks, a.eval, random.Random(a.seed + 30))
        out["reference"] = w.generate(model, tok, out["eval_prompts"][:24], max_new=a.max_new,
                                      temperature=0.0, seed=0)
        return out

    world = cached(path, make)
    rng = random.Random(a.seed + 1)  # the simulated user rates (noisily) at load time
    for name, size in (("on", n_max), ("off", n_max), ("held_on", a.heldout),
                       ("held_off", a.heldout)):
        if name not in world:  # a pool not sampled: draw its noise anyway, so that the
            for _ in range(size):  # others get the same ratings as in a world with both
                rng.random()
            continue
        world[name] = [(p, r, w.rate(r, rng, a.noise, a.prefer, a.user_rejects_broken))
                       for p, r in world[name]]
    return world


def sample_eval(model: Any, tok: Any, world: dict[str, Any], a: argparse.Namespace
                ) -> list[str]:
    """The ``--eval`` temperature-0.7 answers to held-out prompts that every rate is read from."""
    return w.generate(model, tok, world["eval_prompts"], max_new=a.max_new, temperature=0.7,
                      seed=a.seed + 999)


def rates(answers: list[str], prefer: str) -> dict[str, float]:
    """Preferred and degenerate shares of ``answers``, the first with its standard error."""
    n = len(answers)
    pref = sum(w.prefers(x, prefer) for x in answers) / n
    return {"pref": pref, "pref_se": math.sqrt(max(pref * (1 - pref), 1e-9) / n),
            "degenerate": sum(map(w.degenerate, answers)) / n}


def score(folder: Path, adapter: Path | None, world: dict[str, Any], a: argparse.Namespace,
          answers: list[str] | None = None) -> dict[str, Any]:
    """Preferred/degenerate rates on held-out prompts; KL and NLL on reference answers.

    ``answers`` skips the sampling: the base's samples do not depend on the
    preference, so they are drawn once per seed and scored for each preference.
    """
    model, tok = load(folder, adapter)
    t = time.time()
    ans = sample_eval(model, tok, world, a) if answers is None else answers
    ref = reference_nll(model, tok, world, adapter is not None)
    return {**rates(ans, a.prefer), **ref, "eval_s": round(time.time() - t, 1),
            "samples": ans[:3], "answers": ans}


def reference_nll(model: Any, tok: Any, world: dict[str, Any], has_adapter: bool
                  ) -> dict[str, Any]:
    """KL to the base and NLL per token on the reference answers, also split by preference.

    The references are the base's greedy answers to held-out prompts; a round that
    teaches the preference must make the ones *without* it less likely, so the
    split tells capability lost (both parts rise) from preference learnt (only the
    non-preferred part rises).
    """
    import torch

    sums = {"kl": 0.0, "nll": 0.0, "count": 0.0, "nll_pref": 0.0, "count_pref": 0.0,
            "nll_other": 0.0, "count_other": 0.0}
    tok.padding_side = "right"
    for p, r in zip(world["eval_prompts"][:24], world["reference"], strict=True):
        prompt = w.chat(tok, p)
        ids = tok(prompt + r + "<|im_end|>", return_tensors="pt", add_special_tokens=False)
        ids = ids.to(DEVICE)
        start = len(tok(prompt, add_special_tokens=False)["input_ids"])
        with torch.no_grad():
            lp = torch.log_softmax(model(**ids).logits[0, :-1].float(), -1)
            if has_adapter:
                with model.disable_adapter():
                    lq = torch.log_softmax(model(**ids).logits[0, :-1].float(), -1)
            else:
                lq = lp
        tgt = ids["input_ids"][0, 1:]
        sl = slice(start - 1, None)
        nll = float(-lp[sl].gather(-1, tgt[sl, None]).sum())
        count = int(tgt[sl].numel())
        part = "pref" if w.prefers(r) else "other"
        sums["nll"] += nll
        sums["count"] += count
        sums[f"nll_{part}"] += nll
        sums[f"count_{part}"] += count
        sums["kl"] += float((lp[sl].exp() * (lp[sl] - lq[sl])).sum())
    c = sums["count"]
    return {
        "kl": sums["kl"] / c, "nll": sums["nll"] / c,
        "nll_pref": sums["nll_pref"] / max(sums["count_pref"], 1.0),
        "nll_other": sums["nll_other"] / max(sums["count_other"], 1.0),
        "refs_pref": sum(map(w.prefers, world["reference"])),
    }


def nll_changes(ref: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    return {k + "_change": ref[k] / base[k] - 1.0 for k in ("nll", "nll_pref", "nll_other")}


def rescore(a: argparse.Namespace, folder: Path, world: dict[str, Any]) -> None:
    """Add the split reference NLL to every cached row (forward passes only, no sampling)."""
    model, tok = load(folder)
    base = reference_nll(model, tok, world, False)
    log(f"base reference NLL {base['nll']:.4f}: {base['refs_pref']} of 24 references have "
        f"the preference (NLL {base['nll_pref']:.4f}), the others {base['nll_other']:.4f}")
    rows = []
    for row_file in sorted((a.out / "runs").glob("*/row.json")):
        row = json.loads(row_file.read_text())
        adapter = row_file.parent / "adapter"
        # the references are this seed's: another seed's rows are printed, not rescored
        if ("nll_other_change" not in row and adapter.is_dir()
                and row_seed(row["key"]) == a.seed):
            peft_model, tok = load(folder, adapter)
            row.update(nll_changes(reference_nll(peft_model, tok, world, True), base))
            row_file.write_text(json.dumps(row))
        rows.append(row)
    rows.sort(key=lambda r: (r.get("method", "mispo") != "mispo", r.get("method", "mispo"),
                             r["source"], row_prefer(r), r["n"], r["lr_scale"],
                             row_seed(r["key"]), r.get("bf16", False),
                             ("careful", "balanced", "aggressive").index(r["preset"])))
    print(HEADER + f" {'nll+% with / without the preference':>36}")
    for r in rows:
        split = ""
        if "nll_other_change" in r:
            split = (f" {100 * r['nll_pref_change']:>+17.1f}% / "
                     f"{100 * r['nll_other_change']:>+6.1f}%")
        seed = row_seed(r["key"])
        print(fmt(r) + (" bf16" if r.get("bf16") else "") + (f" seed {seed}" if seed else "")
              + split)


def row_seed(key: str) -> int:
    """The seed a cached row was run with (its key ends ``-s<seed>`` or ``-s<seed>-bf16``)."""
    found = re.search(r"-s(\d+)(?:-bf16)?$", key)
    return int(found.group(1)) if found else 0


def probe(a: argparse.Namespace, world: dict[str, Any], base_answers: list[str] | None) -> None:
    """Every preference's base rate on the base's own samples (how the preferences were picked).

    ``on`` / ``held_on`` are the rated pools (temperature 0.7), ``off`` the cloud
    model's, ``eval`` the ``--eval`` samples every row is scored on.
    """
    pools = {name: [r for _, r, _ in world[name]] for name in ("on", "held_on", "off")
             if name in world}
    if base_answers:
        pools["eval"] = base_answers
    print(f"{'preference':14} " + " ".join(f"{k:>7}" for k in pools) + "   (base rates, seed "
          f"{a.seed})")
    for name in w.PREFERENCES:
        print(f"{name:14} " + " ".join(
            f"{sum(w.prefers(x, name) for x in v) / len(v):>7.2f}" for v in pools.values()))
    print(f"{'degenerate':14} " + " ".join(
        f"{sum(map(w.degenerate, v)) / len(v):>7.2f}" for v in pools.values()))


def row_prefer(row: dict[str, Any]) -> str:
    """The preference a row was rated with (older rows only have it inside their key)."""
    if row.get("prefer"):
        return str(row["prefer"])
    return max((p for p in w.PREFERENCES if f"-{p}-" in row["key"]), key=len, default="?")


def example(i: int, p: str, r: str, y: int, prefix: str) -> dict[str, Any]:
    at = (T0 + timedelta(minutes=i)).isoformat().replace("+00:00", "Z")
    return {"id": f"{prefix}{i}", "prompt": p, "response": r, "rating": y, "rated_at": at}



def preset_hyper(folder: Path, preset: str) -> Any:
    sys.path.insert(0, str(ROOT))
    from rltray.trainer import presets

    return presets.resolve(preset, presets.model_info(json.loads((folder / "config.json")
                                                                 .read_text())))


def run_baseline(a: argparse.Namespace, folder: Path, world: dict[str, Any], method: str,
                 preset: str, source: str, n: int, lr_scale: float,
                 base_score: dict[str, Any], key: str, run_dir: Path) -> dict[str, Any]:
    """SFT on the good-rated answers or TRL's KTO, in this process, on the preset's budget."""
    import baselines

    h = preset_hyper(folder, preset)
    budget = baselines.Budget(lr=h.lr * lr_scale, epochs=int(h.epochs),
                              step_examples=int(h.step_examples), warmup_steps=int(h.warmup_steps),
                              rank=int(h.rank), alpha=int(h.alpha), grad_clip=float(h.grad_clip),
                              seed=a.seed)
    rated = [(p, r, y) for p, r, y in world[source][:n]]
    model, tok = load(folder)
    t = time.time()
    train = baselines.train_sft if method == "sft" else baselines.train_kto
    train(model, tok, rated, budget, run_dir / "adapter")
    wall = time.time() - t
    del model
    sc = score(folder, run_dir / "adapter", world, a)
    steps = math.ceil((sum(y > 0 for *_, y in rated) if method == "sft" else n)
                      / budget.step_examples) * budget.epochs
    return {
        "key": key, "method": method, "backend": "torch", "preset": preset, "source": source,
        "n": n, "lr_scale": lr_scale, "lr": budget.lr, "wall_s": round(wall, 1),
        "steps": steps, "accepted": None, "reasons": [], "kl_round": None,
        "pref": sc["pref"], "pref_se": sc["pref_se"], "degenerate": sc["degenerate"],
        "kl_ref": sc["kl"], "nll_change": sc["nll"] / base_score["nll"] - 1.0,
        "eval_s": sc["eval_s"], "samples": sc["samples"], **base_fields(a, base_score),
        **(nll_changes(sc, base_score) if "nll_pref" in base_score else {}),
    }


def run_one(a: argparse.Namespace, folder: Path, world: dict[str, Any], preset: str,
            source: str, n: int, lr_scale: float, base_score: dict[str, Any],
            method: str = "mispo") -> dict[str, Any]:
    evals = "" if a.eval == 64 else f"-e{a.eval}"  # rows of other --eval counts are other rows
    strict = "-strict" if a.user_rejects_broken else ""  # another user: other rows
    key = f"{a.backend}-{a.prefer}-{preset}-{source}-n{n}-x{lr_scale:g}{evals}{strict}-s{a.seed}"
    if method != "mispo":
        key = f"{method}-{key}"
    if a.bf16:
        key += "-bf16"
    if a.device != "cpu":
        key += f"-{a.device}"
    run_dir = a.out / "runs" / key
    row_file = run_dir / "row.json"
    if row_file.exists() and not a.fresh:
        return json.loads(row_file.read_text())
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    train = [example(i, *x, "t") for i, x in enumerate(world[source][:n])]
    held = [example(1000 + i, *x, "h") for i, x in enumerate(world[f"held_{source}"])]
    for name, rows in (("examples.jsonl", train), ("heldout.jsonl", held)):
        (run_dir / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    if method in ("sft", "kto"):
        row = run_baseline(a, folder, world, method, preset, source, n, lr_scale, base_score,
                           key, run_dir)
        row_file.write_text(json.dumps(row))
        return row
    hyper: dict[str, Any] = {"max_seq_len": 512}
    if lr_scale != 1:
        hyper["lr"] = preset_hyper(folder, preset).lr * lr_scale
        hyper["guard_turns"] = 0  # no drift guard: see what the gate does with the result
    if method == "reinforce":  # trainer.objective.REINFORCE, through runs.trainer_command
        hyper["guard_turns"] = 0  # and no drift guard, as before the objective was passed in
    job = {"v": 1, "id": key, "base_model": str(folder), "backend": a.backend, "device": a.device,
           "preset": preset, "hyper": hyper, "examples": "examples.jsonl",
           "heldout": "heldout.jsonl", "out": "adapter", "seed": a.seed, "baseline": 0.0}
    (run_dir / "job.json").write_text(json.dumps(job, indent=1))
    env = {**os.environ, "RLTRAY_TRAINER_THREADS": os.environ.get("RLTRAY_TRAINER_THREADS", "1"),
           "RLTRAY_TRAINER_BF16": "1" if a.bf16 else "0"}
    t = time.time()
    # niceness 10 as the product runs it, or the bench's own when that is higher already
    # (``nice -n 15 bench`` used to give the trainer 19: on a busy machine it starved)
    nice = ["nice", "-n", str(max(0, 10 - os.nice(0)))]
    from runs import trainer_command

    proc = subprocess.run([*nice, *trainer_command(method, run_dir / "job.json")],
                          capture_output=True, text=True, timeout=a.timeout, env=env)
    wall = time.time() - t
    (run_dir / "stdout.jsonl").write_text(proc.stdout)
    (run_dir / "stderr.txt").write_text(proc.stderr[-20000:])
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    done = next((x for x in lines if x["type"] == "done"), None)
    if done is None:
        return {"key": key, "error": (lines[-1] if lines else proc.stderr[-500:])}
    progress = [x for x in lines if x["type"] == "progress"]
    sc = score(folder, run_dir / "adapter", world, a)
    (run_dir / "answers.json").write_text(json.dumps(sc["answers"]))
    m = done["metrics"]
    row = {
        "key": key, "method": method, "backend": a.backend, "preset": preset, "source": source,
        "n": n, "bf16": a.bf16,
        "lr_scale": lr_scale, "wall_s": round(wall, 1), "train_s": m.get("train_seconds"),
        "steps": m.get("steps"), "accepted": done["accepted"], "reasons": done["reasons"],
        "gate_notes": m.get("gate_notes"), "kl_round": m.get("kl_round"),
        "kl_total": m.get("kl_total"), "kl_general": m.get("kl_total_general"),
        "auroc_new": m.get("auroc_new"), "auroc_parent": m.get("auroc_parent"),
        "stopped_early": m.get("stopped_early"),
        "max_grad_norm": max((p["grad_norm"] for p in progress), default=None),
        "max_masked": max((p["masked_tokens"] for p in progress), default=None),
        "pref": sc["pref"], "pref_se": sc["pref_se"], "degenerate": sc["degenerate"],
        "kl_ref": sc["kl"], "nll_change": sc["nll"] / base_score["nll"] - 1.0,
        "eval_s": sc["eval_s"], "samples": sc["samples"], **base_fields(a, base_score),
    }
    if "nll_pref" in base_score:
        row.update(nll_changes(sc, base_score))
    row_file.write_text(json.dumps(row))
    return row


def base_fields(a: argparse.Namespace, base_score: dict[str, Any]) -> dict[str, Any]:
    """What a row needs to be read alone: preference, seed, sample count, the base's rates."""
    return {"prefer": a.prefer, "seed": a.seed, "eval": a.eval, "base_pref": base_score["pref"],
            "base_degenerate": base_score["degenerate"]}


#: Issue 20's targets for the default preset, 64 on-policy ratings: share of the gap to 100%
#: closed, reference NLL change, KL to the base, degenerate answers over the base's.
TARGETS = {"gap": 2 / 3, "nll": 0.05, "kl": 0.05, "degen": 0.05}


def gap_closed(r: dict[str, Any]) -> float | None:
    """Share of the gap between the base's preferred rate and 100% the round closed."""
    base = r.get("base_pref")
    return None if base is None or base >= 1 else (r["pref"] - base) / (1 - base)


def misses(r: dict[str, Any]) -> str:
    """The targets a row misses (``-`` none; ``?`` a row from before the base was recorded)."""
    gap = gap_closed(r)
    if gap is None:
        return "?"
    out = [name for name, bad in (
        ("gap", gap < TARGETS["gap"]), ("nll", r["nll_change"] > TARGETS["nll"]),
        ("kl", r["kl_ref"] > TARGETS["kl"]),
        ("degen", r["degenerate"] > r["base_degenerate"] + TARGETS["degen"])) if bad]
    return ",".join(out) or "-"


HEADER = (f"{'method':9} {'backend':7} {'preset':10} {'prefer':13} {'src':3} {'N':>4} "
          f"{'lr x':>4} {'base':>4} {'pref':>12} {'gap':>5} {'degen':>9} {'kl_ref':>7} "
          f"{'nll+%':>6} {'kl_rnd':>7} {'gate':>4} {'steps':>5} {'wall s':>6} misses")


def fmt(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['key']}: ERROR {r['error']}"
    gate = "-" if r["accepted"] is None else "yes" if r["accepted"] else "no"
    kl_rnd = "-" if r.get("kl_round") is None else f"{r['kl_round']:.4f}"
    gap = gap_closed(r)
    base = "-" if gap is None else f"{r['base_pref']:.2f}"
    degen = (f"{r['degenerate']:.2f}" if gap is None
             else f"{r['base_degenerate']:.2f}>{r['degenerate']:.2f}")
    prefer = row_prefer(r)
    return (f"{r.get('method', 'mispo'):9} {r['backend']:7} {r['preset']:10} {prefer:13} "
            f"{r['source']:3} {r['n']:>4} {r['lr_scale']:>4g} {base:>4} "
            f"{r['pref']:.2f} ± {r['pref_se']:.2f} {'-' if gap is None else f'{gap:.2f}':>5} "
            f"{degen:>9} {r['kl_ref']:>7.4f} {100 * r['nll_change']:>+5.1f}% {kl_rnd:>7} "
            f"{gate:>4} {r['steps']:>5} {r['wall_s']:>6.0f} {misses(r)}")


def main(argv: list[str] | None = None) -> int:
    global DEVICE
    a = parse(argv)
    DEVICE = a.device
    t0 = time.time()
    a.out = a.out.resolve()  # the job names the base folder; the trainer reads it from run_dir
    a.out.mkdir(parents=True, exist_ok=True)
    w.PREFER = a.prefer
    folder = w.base_folder(a.out.parent)
    sizes = [int(x) for x in a.sizes.split(",")]
    world = build_world(a, folder, max(sizes))
    if a.rescore:
        rescore(a, folder, world)
        return 0
    answers_file = a.out / f"base-answers-s{a.seed}-e{a.eval}-m{a.max_new}.json"
    if a.probe:  # the eval samples too once a run has drawn them
        probe(a, world, json.loads(answers_file.read_text()) if answers_file.exists() else None)
        return 0
    base_answers = cached(answers_file, lambda: sample_eval(*load(folder), world, a))
    for name in (s for s in SOURCES if s in world):
        answers = [r for _, r, _ in world[name]]
        log(f"pool {name}: " + ", ".join(
            f"{k} {sum(map(f, answers)) / len(answers):.2f}" for k, f in w.PREFERENCES.items()))
    base = cached(a.out / f"base-score-s{a.seed}-e{a.eval}-{a.prefer}.json",
                  lambda: {k: v for k, v in score(folder, None, world, a, base_answers).items()
                           if k != "answers"})
    log(f"base: preferred {base['pref']:.3f} ± {base['pref_se']:.3f}, degenerate "
        f"{base['degenerate']:.3f}, reference NLL {base['nll']:.4f}")
    for s in a.sources.split(","):
        ys = [y for *_, y in world[s][: max(sizes)]]
        log(f"rated {s}: {len(ys)} ratings, {sum(y > 0 for y in ys)} good")
    rows = []
    log(HEADER)
    for scale in [float(x) for x in a.lr_scale.split(",")]:
        for n in sizes:
            for source in a.sources.split(","):
                for preset in a.presets.split(","):
                    for method in a.methods.split(","):
                        row = run_one(a, folder, world, preset, source, n, scale, base, method)
                        rows.append(row)
                        log(fmt(row))
    print(f"base model: preferred rate {base['pref']:.3f} ± {base['pref_se']:.3f}, degenerate "
          f"{base['degenerate']:.3f} ({a.eval} samples on held-out prompts)")
    print(HEADER)
    for r in rows:
        print(fmt(r))
    print(json.dumps({"config": {k: str(v) for k, v in vars(a).items()}, "base": base,
                      "rows": rows, "seconds": round(time.time() - t0, 1)}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
