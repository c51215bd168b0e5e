"""Do the lessons change what the model writes? Issue 24's behaviour benchmark.

Run (about half an hour on 2 shared CPU cores; generated answers are cached, so a
rerun prints in seconds; needs the cached SmolLM2 GGUF, ``packaging/fetch_test_model.py``):

    nice -n 10 .venv/bin/python bench/lessons_effect.py                # 80 samples a condition
    nice -n 10 .venv/bin/python bench/lessons_effect.py --eval 16      # a quick look

Why a benchmark of its own: rltray tells the agent the user's lessons at session
start, as text in its context, and a lesson only helps if the model acts on it.
The training bench (``learning_smollm2.py``) measures what a round of training on
the ratings does; this one measures what *telling* the same ratings does, on the
same model, ratings and held-out prompts, so the two can be read side by side.

Per preference (``smollm2_world.PREFERENCES``: ``code-first``, ``comment``,
``usage-example``) and seed:

1. **The ratings.** The 64 on-policy answers of the training bench's world (SmolLM2's
   own answers to 32 training tasks, temperature 0.7, 128 new tokens) rated by the
   simulated user (``smollm2_world.rate``, 10% flipped) exactly as
   ``learning_smollm2.build_world`` rates them: the very ratings the training rows
   trained on (its cached world is reused, ``--world``).
2. **The comments.** Each rated answer gets a short comment in a user's words from a
   fixed table (:data:`COMMENTS`, written once, not tuned on the result): a complaint
   when the answer misses the preference, praise when it keeps it, one of two or
   three phrasings picked at random. The comment follows the answer, the rating is
   the simulated user's (so a flipped rating carries a comment that disagrees with
   it, as a careless user's would).
3. **The lessons.** A real rltray data folder (a temporary ``RLTRAY_HOME``): each
   answer is stored as a Claude Code turn of one project folder, rated with its
   comment through ``Service.rate``, lessons switched on for Claude Code. The text is
   what the hook program would read at session start (``lessonfiles.read``, which the
   SessionStart hook hands to the agent word for word as ``additionalContext``); the
   bench checks it equals ``Service.lessons.preview``.
4. **The conditions**, each sampled on the first ``--eval`` of the training bench's
   160 held-out prompts (16 tasks never rated), temperature 0.7, 128 new tokens:
   *none* (SmolLM2's own default system line), *placebo* (that line plus neutral
   prose from ``trainer/assets/neutral.txt`` cut to the lessons text's length in
   tokens), *lessons* (that line plus the lessons text). The extra text goes in
   the system turn because SmolLM2 has no other place for context an agent adds.
   The *none* answers are the training bench's base samples when its cache has them.
5. **Scored** by the simulated user's checks: preferred-answer rate and degenerate rate
   (empty, looping, no code) with Wilson 95% intervals, and the differences
   lessons - none and lessons - placebo with Newcombe's 95% interval. Next to them,
   the training rounds on the same ratings from the training bench's cached rows
   (``--training``; 160 samples each).

Printed: the lessons engine's groups and the text told, the table, then one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import learning_smollm2 as ls  # noqa: E402
import smollm2_world as w  # noqa: E402

#: What a user writes beside a rating, per preference: (complaint when the answer misses
#: it, praise when it keeps it). Written once, in the words a user would use, before any
#: run; the lessons engine decides what becomes of them.
COMMENTS: dict[str, dict[str, tuple[str, ...]]] = {
    "code-first": {
        "missed": ("put the code first, no preamble", "skip the intro, just show the code",
                   "too much text before the code"),
        "kept": ("good, straight to the code", "nice, the code comes first"),
    },
    "comment": {
        "missed": ("add comments to the code", "the code has no comments",
                   "please comment the code"),
        "kept": ("good, the code is commented", "nice, the comments help"),
    },
    "usage-example": {
        "missed": ("no usage example", "show how to call it",
                   "add an example of using the function"),
        "kept": ("good, it shows how to call it", "nice usage example"),
    },
}
AGENT = "claude-code"
PROJECT = "/work/project"  # the folder every rated turn and every session is in
CONDITIONS = ("none", "placebo", "lessons")
Z = 1.959964  # two-sided 95%


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefer", default="code-first,comment,usage-example",
                    help="comma list of smollm2_world.PREFERENCES with a COMMENTS entry")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", type=int, default=80,
                    help="samples per condition: the first N of the world's held-out prompts")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--out", type=Path, default=ROOT / ".bench-out" / "lessons-effect")
    ap.add_argument("--world", type=Path, default=ROOT / ".bench-out" / "learning-smollm2-i20",
                    help="learning_smollm2's --out whose world (ratings, prompts) and base "
                         "samples are reused; built there with its seeds when absent")
    ap.add_argument("--training", default=".bench-out/learning-smollm2-i20*/runs/*/row.json",
                    help="glob (from the repository root) of training rows to print beside")
    ap.add_argument("--fresh", action="store_true",
                    help="rebuild the lessons texts and resample (the world stays cached)")
    a = ap.parse_args(argv)
    unknown = [p for p in a.prefer.split(",") if p not in COMMENTS]
    if unknown:
        ap.error(f"no comment table for {', '.join(unknown)}; known: {', '.join(COMMENTS)}")
    return a


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- the ratings and what rltray makes of them -------------------------------------------


def world_for(a: argparse.Namespace, folder: Path, prefer: str) -> dict[str, Any]:
    """The training bench's world rated for ``prefer`` (the same ratings its rows trained on)."""
    wa = ls.parse(["--out", str(a.world.resolve()), "--eval", "160", "--sources", "on",
                   "--prefer", prefer, "--seed", str(a.seed), "--noise", str(a.noise),
                   "--max-new", str(a.max_new)])
    return ls.build_world(wa, folder, 64)


def comments(rated: list[tuple[str, str, int]], prefer: str, seed: int) -> list[str]:
    """One comment per rated answer from :data:`COMMENTS`, by whether the answer has it."""
    rng = random.Random(f"comments-{prefer}-{seed}")
    table = COMMENTS[prefer]
    return [rng.choice(table["kept" if w.prefers(r, prefer) else "missed"]) for _, r, _ in rated]


def lessons_of(rated: list[tuple[str, str, int]], said: list[str]) -> dict[str, Any]:
    """The text a Claude Code session in :data:`PROJECT` is told, from a real data folder.

    The ratings go in as the product takes them (a captured turn, then ``Service.rate``
    with the comment); the text is read back the way the SessionStart hook reads it.
    """
    from rltray.app.hooks import lessonfiles
    from rltray.app.paths import Paths
    from rltray.app.service import Service

    with (tempfile.TemporaryDirectory(prefix="rltray-lessons-") as home,
          Service(Paths(Path(home))) as service):
        service.lessons.switch(AGENT, True)
        for i, ((prompt, answer, value), comment) in enumerate(zip(rated, said, strict=True)):
            turn_id, _ = service.store.add_turn({
                "v": 1, "kind": "turn", "agent": AGENT, "session": f"bench-{i // 8}",
                "turn": f"t{i}", "prompt": prompt, "response": answer, "context": [],
                "cwd": PROJECT, "model": "SmolLM2-135M-Instruct",
                "captured_at": f"2025-06-01T09:{i:02d}:00Z", "event": "stop",
                "transcript": None})  # fmt: skip
            service.rate(turn_id, value, comment=comment, source="cli")
        text = lessonfiles.read(home, AGENT, PROJECT)
        preview = service.lessons.preview(PROJECT, AGENT)
        if preview.text != text:
            raise SystemExit("the service's preview differs from what the hook reads")
        listing = [{k: row[k] for k in ("id", "kind", "bad", "good", "status",
                                        "contradiction", "words")}
                   for row in service.lessons.listing()]
    return {"text": text or "", "told": preview.lessons, "lessons": listing}


def placebo(tok: Any, tokens: int) -> str:
    """Neutral prose (no code) as long as the lessons in tokens, whole words, from the
    trainer's neutral texts: the same amount of added context, saying nothing about code.

    Tokens, not characters, because tokens are what the model reads: the lessons'
    dates and counts take more tokens per character than prose (85 vs 56 tokens for
    the same 250 characters), so a placebo cut to the characters would be a third shorter.
    """
    paragraphs = (ROOT / "trainer" / "assets" / "neutral.txt").read_text().split("\n\n")
    prose = [p.strip() for p in paragraphs
             if p.strip().endswith(".") and not any(c in p for c in "{}();=")]
    words = " ".join(" ".join(prose) for _ in range(4)).split()
    out = ""
    for word in words:
        longer = f"{out} {word}" if out else word
        if len(tok(longer)["input_ids"]) > tokens:
            break
        out = longer
    return out


# ---- sampling ----------------------------------------------------------------------------


def default_system(tok: Any) -> str:
    """SmolLM2's own system line (its template adds it when a chat has no system turn)."""
    text = w.chat(tok, "x")
    start = text.index("<|im_start|>system\n") + len("<|im_start|>system\n")
    return text[start : text.index("<|im_end|>", start)]


def sample(a: argparse.Namespace, model: Any, tok: Any, prompts: list[str], extra: str | None,
           name: str) -> list[str]:
    """Answers with ``extra`` added to the system turn (None: no system turn), cached by text."""
    system = None if extra is None else f"{default_system(tok)}\n\n{extra}"
    digest = hashlib.sha256(json.dumps([system, prompts, a.max_new, a.seed]).encode())
    path = a.out / f"answers-{name}-{digest.hexdigest()[:12]}.json"
    if path.exists() and not a.fresh:
        return json.loads(path.read_text())
    t = time.time()
    answers = w.generate(model, tok, prompts, max_new=a.max_new, temperature=0.7,
                         seed=a.seed + 999, system=system)
    log(f"sampled {name}: {len(prompts)} answers in {time.time() - t:.0f} s")
    path.write_text(json.dumps(answers))
    return answers


def no_guidance(a: argparse.Namespace, model_tok: Any, world: dict[str, Any],
                prompts: list[str]) -> list[str]:
    """The base's samples the training rows are compared with (same prompts, seed and
    batching), when the training bench cached them; else sampled here the same way."""
    cached = a.world / f"base-answers-s{a.seed}-e160-m{a.max_new}.json"
    if cached.exists():
        answers = json.loads(cached.read_text())
        if len(answers) >= len(prompts) and world["eval_prompts"][: len(prompts)] == prompts:
            return answers[: len(prompts)]
    return sample(a, *model_tok(), prompts, None, "none")


# ---- statistics --------------------------------------------------------------------------


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson's 95% interval of a share k/n (sound at 0 and 1, unlike p ± 2 SE)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def newcombe(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float, float]:
    """p1 - p2 with Newcombe's hybrid-score 95% interval (from the two Wilson intervals)."""
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1)
    l2, u2 = wilson(k2, n2)
    d = p1 - p2
    return (d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2),
            d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


def share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n:.2f} [{lo:.2f}, {hi:.2f}]"


# ---- the training rows on the same ratings -----------------------------------------------


def training_rows(pattern: str, prefer: str, seed: int) -> list[dict[str, Any]]:
    """The training bench's cached rounds on these 64 on-policy ratings (one per preset and
    rate, the newest folder's when two hold one)."""
    found: dict[tuple[str, float], dict[str, Any]] = {}
    for path in sorted(ROOT.glob(pattern)):
        r = json.loads(path.read_text())
        if (r.get("prefer") == prefer and r.get("seed", 0) == seed and r.get("source") == "on"
                and r.get("n") == 64 and r.get("eval") == 160 and "error" not in r
                and r.get("method", "mispo") == "mispo" and not r["key"].endswith("-cuda")
                and not r.get("bf16")):
            r["folder"] = str(path.parent.parent.parent.relative_to(ROOT))
            r["row_mtime"] = path.stat().st_mtime
            key = (r["preset"], float(r["lr_scale"]))
            if key not in found or found[key]["row_mtime"] < r["row_mtime"]:
                found[key] = r
    return sorted(found.values(), key=lambda r: (r["preset"], r["lr_scale"]))


# ---- the run -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    t0 = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    folder = w.base_folder(ROOT / ".bench-out")
    loaded: list[Any] = []

    def model_tok() -> Any:  # loaded once, and only when something must be sampled
        if not loaded:
            loaded.extend(ls.load(folder))
        return loaded

    def tokenizer() -> Any:
        if loaded:
            return loaded[1]
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(folder)

    results: list[dict[str, Any]] = []
    for prefer in a.prefer.split(","):
        world = world_for(a, folder, prefer)
        rated = [tuple(x) for x in world["on"]]
        prompts = world["eval_prompts"][: a.eval]
        said = comments(rated, prefer, a.seed)
        lessons_file = a.out / f"lessons-{prefer}-s{a.seed}.json"
        if lessons_file.exists() and not a.fresh:
            told = json.loads(lessons_file.read_text())
        else:
            told = lessons_of(rated, said)
            lessons_file.write_text(json.dumps(told, indent=1))
        text = told["text"]
        tok = tokenizer()
        fake = placebo(tok, len(tok(text)["input_ids"]))
        answers = {"none": no_guidance(a, model_tok, world, prompts)}
        if text:
            answers["placebo"] = sample(a, *model_tok(), prompts, fake, f"placebo-{prefer}")
            answers["lessons"] = sample(a, *model_tok(), prompts, text, f"lessons-{prefer}")
        else:  # nothing told: the session starts as with no lessons at all
            answers["placebo"] = answers["lessons"] = answers["none"]
        n = len(prompts)
        counts = {c: {"pref": sum(w.prefers(x, prefer) for x in answers[c]),
                      "degenerate": sum(map(w.degenerate, answers[c]))} for c in CONDITIONS}
        results.append({
            "prefer": prefer, "n": n, "counts": counts,
            "good_ratings": sum(y > 0 for *_, y in rated),
            "has_preference": sum(w.prefers(r, prefer) for _, r, _ in rated),
            "lessons": told["lessons"], "told": told["told"], "text": text,
            "text_chars": len(text), "placebo_chars": len(fake),
            "text_tokens": len(tok(text)["input_ids"]),
            "placebo_tokens": len(tok(fake)["input_ids"]),
            "placebo": fake, "samples": {c: answers[c][:2] for c in CONDITIONS},
            "training": training_rows(a.training, prefer, a.seed),
        })
    report(results)
    print(json.dumps({"config": {k: str(v) for k, v in vars(a).items()},
                      "results": [{k: v for k, v in r.items() if k != "training"}
                                  | {"training": [{k: t.get(k) for k in (
                                      "key", "folder", "preset", "lr_scale", "pref",
                                      "degenerate", "nll_change", "kl_ref", "accepted",
                                      "base_pref")} for t in r["training"]]}
                                  for r in results],
                      "seconds": round(time.time() - t0, 1)}))
    return 0


def report(results: list[dict[str, Any]]) -> None:
    for r in results:
        print(f"== {r['prefer']}: 64 on-policy ratings, {r['good_ratings']} good; "
              f"{r['has_preference']} answers have the preference")
        for lesson in r["lessons"]:
            held = lesson["status"] if lesson["status"] != "told" else "told"
            print(f"  lesson {lesson['id']:>4} {lesson['kind']:5} bad {lesson['bad']:>2} good "
                  f"{lesson['good']:>2} {held:13} {lesson['words']!r}")
        print(f"  told ({r['told']} lessons, {r['text_chars']} chars, {r['text_tokens']} "
              f"tokens; placebo {r['placebo_chars']} chars, {r['placebo_tokens']} tokens):")
        for line in (r["text"] or "(nothing)").splitlines():
            print(f"    | {line}")
    print()
    print(f"{'preference':13} {'condition':22} {'n':>4} {'preferred [95% CI]':>20} "
          f"{'degenerate [95% CI]':>20}")
    for r in results:
        n, c = r["n"], r["counts"]
        for cond in CONDITIONS:
            print(f"{r['prefer']:13} {cond:22} {n:>4} {share(c[cond]['pref'], n):>20} "
                  f"{share(c[cond]['degenerate'], n):>20}")
        for other in ("none", "placebo"):
            d, lo, hi = newcombe(c["lessons"]["pref"], n, c[other]["pref"], n)
            print(f"{'':13} {'lessons - ' + other:22} {'':>4} "
                  f"{f'{d:+.2f} [{lo:+.2f}, {hi:+.2f}]':>20}")
        for t in r["training"]:
            k, m = round(t["pref"] * 160), 160
            scale = "" if t["lr_scale"] == 1 else f" x{t['lr_scale']:g}"
            label = f"trained {t['preset']}{scale}"
            gate = {True: "accepted", False: "rejected", None: "-"}[t.get("accepted")]
            print(f"{'':13} {label:22} {m:>4} {share(k, m):>20} "
                  f"{share(round(t['degenerate'] * m), m):>20}   base {t['base_pref']:.2f}, "
                  f"NLL {100 * t['nll_change']:+.1f}%, gate {gate}")


if __name__ == "__main__":
    sys.exit(main())
