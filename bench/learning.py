"""Learning benchmark: does training on N single good/bad ratings make the model better?

Run:  .venv/bin/python bench/learning.py [--quick] [--out .bench-out/learning]
      .venv/bin/python bench/learning.py --presets careful,balanced,aggressive \
          --backends torch,mlx --sizes 64 --pool-size 128      # preset mode

What it does (see bench/README.md for results and how long it takes):

1. Builds a small Llama and pre-trains it on a synthetic coding-assistant corpus
   whose answers come in three styles (terse code, chatty preamble, apology); the
   pre-trained base is cached under the output folder.
2. A simulated user prefers one style and rates with noise. Rated data comes two
   ways: sampled from the base model (on-policy) and written by a different
   generator (off-policy, like a cloud model's answers).
3. For each method -- MIS-PO (our trainer, through its job file), plain REINFORCE
   (our trainer's round with ``objective.REINFORCE``: masks and KL off), KTO (TRL)
   and SFT on good-only -- with the same data, LoRA and optimizer budget: a
   learning-rate sweep at the middle N, MIS-PO ablations (beta, masks, epochs) at
   its best rate, then every N at each method's best rate.
4. Scores each adapter on held-out prompts: preferred-style rate, implicit-reward
   AUROC on held-out ratings, per-token KL to the base, held-out NLL change.

Preset mode (``--presets``) replaces steps 3's sweep: MIS-PO through the trainer
with each preset's *own* hyper-parameters (no rate or epoch override) on each
backend of ``--backends``, to show whether any preset collapses the model (issue 8,
"Safe presets"). Its table adds the steps run / planned, whether the drift guard
stopped the round, the largest gradient norm and k3 of the progress lines, and a
``collapsed`` verdict (:func:`collapsed`).

The table is printed; the last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import runs
import synthetic
import tinylm

MIX = {"terse": 0.25, "chatty": 0.5, "apology": 0.25}
ABLATIONS: dict[str, dict[str, Any]] = {
    "beta=0": {"beta": 0.0},
    "beta=0.1": {"beta": 0.1},
    "no-token-mask": {"rho_lo": 0.0, "rho_hi": 1e9},
    "no-drift-gate": {"delta_lo": -1e9, "delta_hi": 1e9},
    "tight-drift": {"delta_lo": -0.1, "delta_hi": 0.1},
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a few minutes end to end")
    ap.add_argument("--out", type=Path, default=Path(".bench-out/learning"))
    ap.add_argument("--sizes", default="32,64,128", help="numbers of ratings N")
    ap.add_argument("--lrs", default="1e-3,3e-3,1e-2", help="learning-rate sweep")
    ap.add_argument("--methods", default="mispo,reinforce,kto,sft")
    ap.add_argument("--sources", default="on,off")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--ablations", default=",".join(ABLATIONS) + ",epochs=1,epochs=4")
    ap.add_argument("--ablation-sources", default="on,off", help="sources for the ablations")
    ap.add_argument("--prefer", default="terse", choices=synthetic.STYLES)
    ap.add_argument("--noise", type=float, default=0.1, help="rating flip probability")
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--heldout-ratings", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900.0, help="per trainer run, seconds")
    ap.add_argument("--fresh", action="store_true", help="ignore cached run results")
    ap.add_argument("--presets", default="",
                    help="preset mode: comma list of trainer presets, each with its own numbers")
    ap.add_argument("--backends", default="torch", help="preset mode: torch,mlx")
    ap.add_argument("--pool-size", type=int, default=0,
                    help="ratings per rated pool (default: the largest N); the held-out set "
                         "and eval prompts depend on it, so keep it fixed across invocations")
    ap.add_argument("--gate-profile", default="standard", choices=("standard", "tiny-test"),
                    help="preset mode: the job's hyper gate_profile")
    ap.add_argument("--hyper", default="",
                    help="preset mode: extra job hyper overrides KEY=VALUE[,KEY=VALUE], e.g. "
                         "guard_turns=0 to see a preset without its drift guard")
    a = ap.parse_args(argv)
    if a.quick:  # small sizes, except where a flag was given explicitly
        quick = {
            "sizes": "16", "lrs": "3e-3", "ablations": "beta=0", "eval_prompts": 32,
            "heldout_ratings": 16, "hidden": 64, "layers": 2, "pretrain_steps": 40,
            "max_new_tokens": 24,
        }
        for k, v in quick.items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    return a


def _same_priority_as_trainer() -> None:
    """Run at the trainer's niceness (10) so in-process baselines and the trainer's
    child process compete for the CPU on equal terms (their seconds are comparable)."""
    try:
        cur = os.nice(0)
        if cur < 10:
            os.nice(10 - cur)
    except (AttributeError, OSError):
        pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_base(a: argparse.Namespace) -> Path:
    """Pre-train (or reuse from the cache) the base model for these settings."""
    key = json.dumps([a.hidden, a.layers, a.pretrain_steps, a.seed, MIX, 3], sort_keys=True)
    folder = a.out / f"base-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    if (folder / "config.json").exists():
        log(f"base model: cached {folder}")
        return folder
    log(f"base model: pre-training hidden={a.hidden} layers={a.layers} steps={a.pretrain_steps}")
    tok = tinylm.build_tokenizer(synthetic.vocab_texts(), 1024)
    model = tinylm.build_model(tok, a.hidden, a.layers, a.seed)
    n_corpus = max(2000, 32 * a.pretrain_steps // 2)
    corpus = synthetic.base_corpus(n_corpus, random.Random(a.seed), MIX)
    tinylm.pretrain(
        model, tok, [(p, r) for p, r, _ in corpus], steps=a.pretrain_steps, batch=32,
        lr=3e-3, seed=a.seed, log=log,
    )
    tmp = folder.with_name(folder.name + ".tmp")
    tinylm.save(model, tok, tmp)
    tmp.rename(folder)
    return folder


def build_world(a: argparse.Namespace, base_dir: Path, n_max: int) -> runs.World:
    """Rated pools (on- and off-policy), held-out ratings, eval prompts, neutral texts."""
    base, tok = tinylm.load(base_dir)
    user = synthetic.SimulatedUser(a.prefer, a.noise)
    train_tasks, held_tasks = synthetic.split_tasks(a.seed)
    rng = random.Random(a.seed + 1)

    def rated(tasks: list[int], n: int, seed: int) -> dict[str, list[tuple[str, str, int]]]:
        ps = synthetic.prompts(tasks, n, random.Random(seed))
        on = tinylm.sample(base, tok, [p.text for p in ps], max_new_tokens=128, seed=seed)
        off = synthetic.cloud_examples(ps, random.Random(seed + 1))
        return {
            "on": [(p.text, t, user.rate(t, rng)) for p, (*_, t) in zip(ps, on, strict=True)],
            "off": [(p, r, user.rate(r, rng)) for p, r in off],
        }

    pools = rated(train_tasks, n_max, a.seed + 100)
    held = rated(held_tasks, a.heldout_ratings, a.seed + 200)
    eval_prompts = [p.text for p in synthetic.prompts(held_tasks, a.eval_prompts, rng)]
    neutral = [
        tinylm.encode_pair(tok, p, r)
        for p, r, _ in synthetic.base_corpus(128, random.Random(a.seed + 300), MIX)
    ]
    return runs.World(
        base_dir=base_dir, base=base, tokenizer=tok, rated=pools, heldout_rated=held,
        eval_prompts=eval_prompts, neutral=neutral, max_new_tokens=a.max_new_tokens, seed=a.seed,
    )


def best_lr(rows: list[dict[str, Any]], method: str, source: str) -> float | None:
    """Highest preferred-style rate among sane runs (NLL up < 25%); ties -> lower KL."""
    ok = [
        r for r in rows
        if r["method"] == method and r["source"] == source and r["variant"] == "default"
        and "error" not in r and r["ppl_change"] < 0.25
    ]
    ok = ok or [r for r in rows if r["method"] == method and r["source"] == source
                and "error" not in r and r["variant"] == "default"]
    if not ok:
        return None
    return max(ok, key=lambda r: (round(r["pref"], 3), -r["kl"]))["lr"]


def fmt_row(r: dict[str, Any]) -> str:
    head = (
        f"{r['method']:<9} {r['source']:<3} {r['n']:>4} {r['lr']:>7.0e} {r['epochs']:>2} "
        f"{r['variant']:<14}"
    )
    if "error" in r:
        return f"{head} ERROR {r['error'][:80]}"
    mix = r["mix"]
    acc = {True: "yes", False: "no", None: "-"}[r.get("accepted")]
    return (
        f"{head} {r['pref']:>5.2f} {mix['chatty']:>5.2f} {mix['apology']:>5.2f}"
        f" {mix['other']:>5.2f}"
        f" {r['auroc']:>6.3f} {r['kl']:>6.3f} {100 * r['ppl_change']:>+7.1f}% {acc:>4}"
        f" {r['seconds']:>6.1f}"
    )


#: Collapse thresholds (preset mode): perplexity up more than this share, or KL above.
COLLAPSE_NLL = 0.25
COLLAPSE_KL = 0.5


def collapsed(row: dict[str, Any], pref0: float, n_eval: int) -> list[str]:
    """Why a run counts as collapsed; empty when it does not.

    The rule (issue 8: no preset may wreck the model): preferred-style rate below the
    base rate by more than 2 standard errors of a rate measured on ``n_eval`` samples,
    ``sqrt(p0 (1 - p0) / n_eval)``; or held-out perplexity up more than 25%
    (the ``nll+%`` column); or per-token KL to the base above 0.5.
    """
    if "error" in row:
        return ["error"]
    se = math.sqrt(pref0 * (1.0 - pref0) / max(n_eval, 1))
    why = []
    if row["pref"] < pref0 - 2.0 * se:
        why.append(f"pref {row['pref']:.2f} < {pref0:.2f} - 2x{se:.3f}")
    if not row["ppl_change"] <= COLLAPSE_NLL:  # NaN counts as collapsed
        why.append(f"nll {100 * row['ppl_change']:+.1f}% > +{100 * COLLAPSE_NLL:.0f}%")
    if not row["kl"] <= COLLAPSE_KL:
        why.append(f"kl {row['kl']:.3f} > {COLLAPSE_KL}")
    return why


PRESET_HEADER = (
    f"{'backend':<7} {'preset':<10} {'src':<3} {'N':>4} {'lr':>7} {'ep':>2} {'pref':>5} "
    f"{'chat':>5} {'apol':>5} {'oth':>5} {'auroc':>6} {'kl':>6} {'nll+%':>8} {'gate':>4} "
    f"{'steps':>5} {'guard':>5} {'gnorm':>6} {'k3':>6} {'collapsed':>9} {'sec':>6}"
)


def fmt_preset_row(r: dict[str, Any]) -> str:
    """One preset-mode row: the usual columns plus steps, guard stop, grad norm, k3, verdict."""
    head = (
        f"{r['backend']:<7} {r['variant']:<10} {r['source']:<3} {r['n']:>4} {r['lr']:>7.1e} "
        f"{r['epochs']:>2}"
    )
    if "error" in r:
        return f"{head} ERROR {r['error'][:100]}"
    mix = r["mix"]
    acc = {True: "yes", False: "no", None: "-"}[r.get("accepted")]
    steps = f"{r.get('steps_run')}/{r.get('steps_planned')}"
    guard = "stop" if r.get("stopped_early") else "-"

    def num(x: Any) -> str:
        return f"{x:>6.3f}" if isinstance(x, (int, float)) else f"{'-':>6}"

    return (
        f"{head} {r['pref']:>5.2f} {mix['chatty']:>5.2f} {mix['apology']:>5.2f}"
        f" {mix['other']:>5.2f} {r['auroc']:>6.3f} {r['kl']:>6.3f}"
        f" {100 * r['ppl_change']:>+7.1f}% {acc:>4} {steps:>5} {guard:>5}"
        f" {num(r.get('max_grad_norm'))} {num(r.get('max_k3'))}"
        f" {'YES' if r.get('collapsed') else 'no':>9} {r['seconds']:>6.1f}"
    )


HEADER = (
    f"{'method':<9} {'src':<3} {'N':>4} {'lr':>7} {'ep':>2} {'variant':<14} {'pref':>5} "
    f"{'chat':>5} {'apol':>5} {'oth':>5} {'auroc':>6} {'kl':>6} {'nll+%':>8} {'gate':>4} {'sec':>6}"
)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    t_start = time.time()
    _same_priority_as_trainer()
    a.out.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in a.sizes.split(",")]
    lrs = [float(x) for x in a.lrs.split(",")]
    methods, sources = a.methods.split(","), a.sources.split(",")
    mid = sizes[(len(sizes) - 1) // 2]  # the sweep's N: the middle (lower middle) size

    base_dir = build_base(a)
    world = build_world(a, base_dir, max(a.pool_size, max(sizes)))
    before = runs.evaluate(world, world.base)
    world.base_nll = before["nll"]
    pref0 = before["mix"][a.prefer]
    log(f"base: preferred-style rate {pref0:.3f}, mix {before['mix']}")
    for s in sources:
        ys = [y for *_, y in world.rated[s]]
        log(f"rated pool {s}: {len(ys)} ratings, {sum(y > 0 for y in ys)} good")

    rows: list[dict[str, Any]] = []

    def do(spec: runs.Spec, quiet: bool = False) -> dict[str, Any]:
        cache = a.out / "runs" / spec.key.replace("/", "_") / "row.json"
        if cache.exists() and not a.fresh:
            row = json.loads(cache.read_text())
        else:
            row = runs.run(world, spec, a.out, a.timeout, a.prefer)
            if "error" not in row:  # a failed run is retried next time
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps(row))
        rows.append(row)
        if not quiet:
            log(fmt_row(row))
        return row

    if a.presets:
        return run_presets(a, world, do, rows, pref0, before, sizes, sources, t_start)

    log(HEADER)
    # Phase A: learning-rate sweep at the middle N, every method and source.
    for source in sources:
        for method in methods:
            for lr in lrs:
                do(runs.Spec(method, source, mid, lr, a.epochs))
    best = {(m, s): best_lr(rows, m, s) for m in methods for s in sources}
    # Phase B: MIS-PO ablations at its best rate.
    for source in [s for s in a.ablation_sources.split(",") if s in sources]:
        lr = best.get(("mispo", source))
        if lr is None or "mispo" not in methods:
            continue
        for name in filter(None, a.ablations.split(",")):
            if name.startswith("epochs="):
                do(runs.Spec("mispo", source, mid, lr, int(name.split("=")[1]), name))
            else:
                do(runs.Spec("mispo", source, mid, lr, a.epochs, name, ABLATIONS[name]))
    # Phase C: every N at each method's best rate.
    for n in sizes:
        if n == mid:
            continue
        for source in sources:
            for method in methods:
                if best[(method, source)] is not None:
                    do(runs.Spec(method, source, n, best[(method, source)], a.epochs))

    print(f"base model: preferred ('{a.prefer}') rate before training = {pref0:.3f}; "
          f"mix {', '.join(f'{k} {v:.2f}' for k, v in before['mix'].items())}")
    print(HEADER)
    for r in rows:
        print(fmt_row(r))
    print("best lr per method/source: " + ", ".join(
        f"{m}/{s}={v:g}" for (m, s), v in best.items() if v is not None))
    summary = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "base": {"pref": pref0, "mix": before["mix"], "kl": before["kl"],
                 "nll": before["nll"], "auroc_on": before["auroc_on"],
                 "auroc_off": before["auroc_off"]},
        "best_lr": {f"{m}/{s}": v for (m, s), v in best.items()},
        "rows": rows,
        "seconds": round(time.time() - t_start, 1),
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


def _value(text: str) -> Any:
    """A ``--hyper`` value as the job file would hold it: JSON (0, 1e-3, true), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def run_presets(
    a: argparse.Namespace, world: runs.World, do: Any, rows: list[dict[str, Any]],
    pref0: float, before: dict[str, Any], sizes: list[int], sources: list[str], t_start: float,
) -> int:
    """Preset mode: every N x source x backend x preset, each preset with its own numbers."""
    presets = [p for p in a.presets.split(",") if p]
    backends = [b for b in a.backends.split(",") if b]
    overrides = {"gate_profile": a.gate_profile} if a.gate_profile != "standard" else {}
    extra = dict(kv.split("=", 1) for kv in a.hyper.split(",") if kv)
    overrides.update({k: _value(v) for k, v in extra.items()})
    tag = "".join(f"+{k}={v}" for k, v in extra.items())  # the variant names the overrides
    log(PRESET_HEADER)
    for n in sizes:
        for source in sources:
            for backend in backends:
                for preset in presets:
                    h = runs.preset_hyper(world.base_dir, preset, overrides)
                    spec = runs.Spec(
                        "mispo", source, n, h.lr, h.epochs, preset + tag, overrides, preset=preset,
                        backend=backend, digest=runs.hyper_digest(h),
                    )
                    row = do(spec, quiet=True)
                    why = collapsed(row, pref0, len(world.eval_prompts))
                    row.update(collapsed=bool(why), collapse_reasons=why)
                    log(fmt_preset_row(row))
    se = math.sqrt(pref0 * (1.0 - pref0) / len(world.eval_prompts))
    print(f"base model: preferred ('{a.prefer}') rate before training = {pref0:.3f} "
          f"(standard error {se:.3f} on {len(world.eval_prompts)} samples); "
          f"mix {', '.join(f'{k} {v:.2f}' for k, v in before['mix'].items())}")
    print(f"collapsed = pref < {pref0:.3f} - 2 x {se:.3f}, or nll+% > "
          f"{100 * COLLAPSE_NLL:.0f}%, or kl > {COLLAPSE_KL}")
    print(PRESET_HEADER)
    for r in rows:
        print(fmt_preset_row(r))
    for r in rows:  # the sentences behind a guard stop, a rejection or a collapse
        if r.get("stopped_early") or r.get("collapse_reasons") or r.get("accepted") is False:
            print(f"  {r['backend']} {r['variant']} {r['source']} N={r['n']}: "
                  f"{r.get('stopped_early') or 'ran every step'}; "
                  f"gate: {'; '.join(r.get('reasons') or []) or 'accepted'}; "
                  f"collapse: {', '.join(r.get('collapse_reasons') or []) or 'none'}")
    summary = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "base": {"pref": pref0, "pref_se": se, "mix": before["mix"], "kl": before["kl"],
                 "nll": before["nll"], "auroc_on": before["auroc_on"],
                 "auroc_off": before["auroc_off"]},
        "rows": rows,
        "seconds": round(time.time() - t_start, 1),
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
