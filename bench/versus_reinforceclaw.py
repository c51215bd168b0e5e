"""Side by side with ReinforceClaw 0.1.0 (issue 8): ``train_speed.py --versus reinforceclaw``.

Run::

    nice -n 10 .venv/bin/python bench/train_speed.py --versus reinforceclaw [--versus-backend mlx]

* Both tools train the same 32 rated examples (200-386 tokens of chat-templated
  prompt + response, half rated +1, half -1; fixed seed) on the same model (the
  60M Llama, or ``--shape smollm2-135m`` / ``qwen-0.5b``, see ``train_speed.SHAPES``),
  one pass each, at one torch thread and niceness 10, through their own entry
  points: ``python -m rltray.trainer JOB.json`` (preset ``balanced``, ``epochs`` =
  ``--passes``) and ReinforceClaw's ``trainer.train_result(config, conn)`` with its
  ``balanced`` preset on a fresh database (``batch_size`` = all examples, ``steps``
  = examples x passes, ``grad_accum`` 1, so each example is trained once per pass,
  one example per optimizer step as ReinforceClaw does). Rounds are interleaved
  (rltray, ReinforceClaw, rltray, ...) and medians reported.
* Tokens/s over the steps = trained prompt+response tokens (no padding) / the
  optimizer steps' seconds. rltray: its ``train_seconds`` minus ``guard_seconds``
  (the drift guard after each step, shown separately and in ``+guard``).
  ReinforceClaw: from its loop's ``backend.reset_peak_memory()`` to its last
  step's ``guard.log_step``. Wall = process start to exit; ``before``/``after``
  split it around the steps. FLOP/s = 4N per trained token against the 1-thread
  matmul peak, measured before and after the rounds (the better one is used).

ReinforceClaw's side runs in a child process (``train_speed.py --child rc-torch``,
see ``reinforceclaw_child.py``); ``--profile`` is in ``speed_profile.py``. This
module is imported by ``train_speed.main`` and imports its shared helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import train_speed
from train_speed import describe, matmul_params, shape_name, spawn

#: Words the synthetic prompts and responses are drawn from (a coding assistant's talk).
WORDS = (
    "the", "a", "to", "of", "and", "in", "is", "for", "that", "with", "def", "return",
    "import", "class", "self", "if", "else", "while", "try", "except", "raise", "print",
    "list", "dict", "value", "key", "error", "test", "file", "path", "function", "loop",
    "index", "string", "number", "result", "data", "user", "model", "train", "fix", "bug",
    "add", "remove", "update", "check", "config", "run", "build", "install", "module",
    "package", "please", "can", "you", "why", "does", "this", "fail", "variable",
)


def versus_examples(tokenizer: Any, n: int, lo: int, hi: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rated turns whose chat-templated text is ``lo``..``hi`` tokens (about a
    quarter prompt), alternately rated +1 and -1; identical input for both tools."""
    rng = np.random.default_rng(seed)

    def size(prompt: str, words: list[str]) -> int:
        chat = [{"role": "user", "content": prompt},
                {"role": "assistant", "content": " ".join(words)}]
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    rows = []
    for i in range(n):
        target = int(rng.integers(lo, hi + 1))
        prompt = " ".join(str(w) for w in rng.choice(WORDS, size=max(2, target // 10)))
        words = [str(rng.choice(WORDS))]
        while size(prompt, words) < target:
            words.append(str(rng.choice(WORDS)))
        rows.append({"prompt": prompt, "response": " ".join(words), "rating": 1 - 2 * (i % 2)})
    return rows


#: Environment that holds every math library to one thread (torch is set in-process).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def timed_lines(cmd: list[str], env: dict[str, str], timeout: float, log: Path
                ) -> tuple[list[tuple[float, str]], float, float, int, float]:
    """Run ``cmd``: every stdout line with its arrival time (epoch s), start, end, exit
    code, and the child's peak RSS in GiB (``wait4``'s ``ru_maxrss``: the process itself,
    not ours; NaN where there is no wait4)."""
    with log.open("w", encoding="utf-8") as err:
        start = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
                                env={**os.environ, **env})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        assert proc.stdout is not None
        lines = [(time.time(), line) for line in proc.stdout]
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            rss = usage.ru_maxrss / 2**20  # KiB on Linux
        except (AttributeError, ChildProcessError):  # no wait4 (Windows)
            code, rss = proc.wait(), float("nan")
        end = time.time()
        timer.cancel()
    return lines, start, end, code, rss


def _fail(tool: str, log: Path, code: int) -> dict[str, Any]:
    tail = (log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["no output"])
    return {"tool": tool, "error": f"exit {code}: {tail[-1][:300]}"}


def write_job(folder: Path, model: Path, rows: list[dict[str, Any]], backend: str,
              passes: int, device: str = "cpu") -> Path:
    """A fresh job folder for the trainer: the ratings, preset ``balanced``, ``passes`` epochs."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with (folder / "examples.jsonl").open("w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            f.write(json.dumps({"id": f"ex{i:03d}", "rated_at": f"2026-01-01T00:{i % 60:02d}:00Z",
                                **r}) + "\n")
    job = {"v": 1, "id": folder.name, "base_model": str(model.resolve()), "backend": backend,
           "device": device, "preset": "balanced", "hyper": {"epochs": passes},
           "examples": "examples.jsonl", "out": "adapter", "seed": 0}
    (folder / "job.json").write_text(json.dumps(job), encoding="utf-8")
    return folder / "job.json"


def run_rltray(folder: Path, model: Path, rows: list[dict[str, Any]], backend: str,
               passes: int, tokens: int, timeout: float, bf16: str = "0") -> dict[str, Any]:
    """One round of the real trainer (``python -m rltray.trainer job.json``) at 1 thread,
    in fp32 like ReinforceClaw unless ``bf16`` (``RLTRAY_TRAINER_BF16``: ``auto`` is what
    a user's round does, bf16 autocast where the CPU has native bf16).

    Step seconds = the round's ``train_seconds`` (the optimisation loop) minus
    ``guard_seconds`` (the drift guard after each step); both are reported. Tokens =
    ``passes`` x the prompt+response tokens of every example as the trainer encodes
    them (padding not counted).
    """
    job = write_job(folder, model, rows, backend, passes)
    lines, start, end, code, _ = timed_lines(
        [sys.executable, "-m", "rltray.trainer", str(job)],
        {"RLTRAY_TRAINER_THREADS": "1", "RLTRAY_TRAINER_BF16": bf16, **ONE_THREAD}, timeout,
        folder / "stderr.log")
    parsed = [(t, json.loads(x)) for t, x in lines if x.startswith("{")]
    prog = [(t, d) for t, d in parsed if d.get("type") == "progress"]
    done = [d for _, d in parsed if d.get("type") == "done"]
    if code != 0 or not done or not prog:
        return _fail("rltray", folder / "stderr.log", code)
    m = done[0]["metrics"]
    peaks = [d["value"] for _, d in parsed
             if d.get("type") == "metric" and d.get("name") == "peak_memory_bytes"]
    loop_start = prog[0][0] - prog[0][1]["elapsed_s"]
    trained = tokens * passes if m["steps"] == prog[0][1]["total"] else None
    step_s = m["train_seconds"] - m["guard_seconds"]
    return {
        "tool": "rltray", "tokens": trained, "steps": m["steps"], "step_s": step_s,
        "guard_s": m["guard_seconds"], "loop_s": m["train_seconds"], "wall_s": end - start,
        "before_s": loop_start - start, "after_s": end - prog[-1][0],
        "round_start_s": m.get("round_start_s"), "finish_s": m.get("finish_seconds"),
        # the base's answer sets the round took from the cache (RLTRAY_ANSWER_CACHE)
        "answers_kept": m.get("ref_answers_kept"),
        "progress_tokens_per_s": [d["tokens_per_s"] for _, d in prog],
        "peak_mb": peaks[-1] / 2**20 if peaks else None,
    }


def run_rc(folder: Path, model: Path, rows: list[dict[str, Any]], backend: str, passes: int,
           timeout: float) -> dict[str, Any]:
    """ReinforceClaw's ``train_result`` in a child process (``reinforceclaw_child.child_rc``)."""
    home = folder / "home"
    if folder.exists():
        shutil.rmtree(folder)
    home.mkdir(parents=True)
    (folder / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
    lines, start, end, code, _ = timed_lines(
        [sys.executable, train_speed.__file__, "--child", f"rc-{backend}", "--model", str(model),
         "--rows", str(folder / "rows.json"), "--passes", str(passes)],
        {"HOME": str(home), **ONE_THREAD}, timeout, folder / "stderr.log")
    objs = [json.loads(x) for _, x in lines if x.startswith("{")]
    if code != 0 or not objs:
        return _fail("reinforceclaw", folder / "stderr.log", code)
    r = objs[-1]
    if r["result"].get("status") != "trained" or not r["ends"]:
        return {"tool": "reinforceclaw", "error": f"not trained: {r['result']}"}
    return {
        "tool": "reinforceclaw", "tokens": r["tokens"], "steps": len(r["ends"]),
        "step_s": r["ends"][-1] - r["loop"], "guard_s": 0.0, "loop_s": r["ends"][-1] - r["loop"],
        "wall_s": end - start, "before_s": r["loop"] - start, "after_s": end - r["ends"][-1],
        "lora": f"{r['lora_target']} r{r['lora_rank']}", "threads": r["threads"],
        "batch": r["result"].get("batch_size"),
    }


def own_folder(out: Path, prefix: str) -> Path:
    """A fresh folder for this invocation's job and home folders: two runs sharing an
    ``--out`` must not delete or overwrite each other's (a rltray round refuses to write
    over an adapter folder another run created)."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=out))


def versus_main(a: argparse.Namespace, d: dict[str, int], folder: Path) -> int:
    """Interleaved rounds (rltray, ReinforceClaw, rltray, ...) on identical data; medians."""
    import statistics

    from rltray.trainer import data as rdata
    from rltray.trainer.job import example_from_dict
    from transformers import AutoTokenizer

    if a.versus != "reinforceclaw":
        raise SystemExit(f"--versus knows only reinforceclaw, not {a.versus!r}")
    tok = AutoTokenizer.from_pretrained(folder)
    rows = versus_examples(tok, a.examples, a.min_tokens, a.max_tokens, seed=0)
    tokens = sum(
        len(rdata.encode(tok, example_from_dict(
            {**r, "id": str(i), "rated_at": "2026-01-01T00:00:00Z"}), 2048).input_ids)
        for i, r in enumerate(rows))
    if a.profile:
        from speed_profile import profile_main  # it imports this module: not at the top

        return profile_main(a, d, folder, rows)
    n_mm = matmul_params(d)
    common = ["--matmul-n", str(a.matmul_n), "--model", str(folder)]
    peak_kind = "matmul-torch" if a.versus_backend == "torch" else "matmul-mlx"
    one = {"RLTRAY_TRAINER_THREADS": "1", **ONE_THREAD}
    peaks = [spawn(["--child", peak_kind, *common], a.timeout, one)]
    loads = [os.getloadavg()[0]]
    runs: list[dict[str, Any]] = []
    work = own_folder(a.out, f"versus-{a.versus_backend}-")
    for rep in range(a.reps):
        for tool in ("rltray", "reinforceclaw"):
            sub = work / f"{tool}-{rep}"
            if tool == "rltray":
                r = run_rltray(sub, folder, rows, a.versus_backend, a.passes, tokens, a.timeout,
                               a.rltray_bf16)
            else:
                r = run_rc(sub, folder, rows, a.versus_backend, a.passes, a.timeout)
            r.update(rep=rep, loadavg=os.getloadavg()[0])
            loads.append(r["loadavg"])
            runs.append(r)
    peaks.append(spawn(["--child", peak_kind, *common], a.timeout, one))
    peak = max((p.get("gflops", 0.0) for p in peaks), default=0.0) or None

    def rates(r: dict[str, Any]) -> None:
        if "error" in r or not r.get("tokens"):
            return
        r["tok_s_steps"] = r["tokens"] / r["step_s"]
        r["tok_s_loop"] = r["tokens"] / r["loop_s"]
        r["tok_s_wall"] = r["tokens"] / r["wall_s"]
        r["gflops_4n"] = 4 * n_mm * r["tok_s_steps"] / 1e9
        r["of_peak"] = r["gflops_4n"] / peak if peak else None

    for r in runs:
        rates(r)
    keys = ("tokens", "step_s", "guard_s", "tok_s_steps", "tok_s_loop", "wall_s", "before_s",
            "after_s", "tok_s_wall", "gflops_4n", "of_peak")
    med: dict[str, dict[str, Any]] = {}
    for tool in ("rltray", "reinforceclaw"):
        ok = [r for r in runs if r["tool"] == tool and "tok_s_steps" in r]
        med[tool] = {k: statistics.median(r[k] for r in ok) for k in keys
                     if ok and all(r.get(k) is not None for r in ok)}
        med[tool]["runs"] = len(ok)
    ratio = {}
    if med["rltray"].get("tok_s_steps") and med["reinforceclaw"].get("tok_s_steps"):
        ratio = {k: med["rltray"][k] / med["reinforceclaw"][k]
                 for k in ("tok_s_steps", "tok_s_loop", "tok_s_wall")}
    print(f"{describe(shape_name(a), d)}; {n_mm / 1e6:.1f}M matmul params; "
          f"{a.examples} examples of {a.min_tokens}-"
          f"{a.max_tokens} tokens ({tokens} tokens) x {a.passes} pass(es); backend "
          + ("torch at 1 thread" if a.versus_backend == "torch" else
             "mlx (its own CPU threads; OMP/OpenBLAS/MKL held to 1)")
          + f"; load average {min(loads):.1f}-{max(loads):.1f} "
          f"on {os.cpu_count()} CPUs")
    what = "fp32 torch matmul peak, 1 thread" if a.versus_backend == "torch" else "mlx matmul peak"
    if a.rltray_bf16 != "0":
        print(f"rltray with RLTRAY_TRAINER_BF16={a.rltray_bf16} (ReinforceClaw's CPU stand-in "
              "stays fp32): its 'of peak' is against the fp32 peak")
    print(f"{what} (n={a.matmul_n}, before/after): "
          + " / ".join(f"{p['gflops']:.1f}" if "gflops" in p else p["error"] for p in peaks)
          + " GFLOP/s")
    head = (f"{'tool':<13} {'rep':>3} {'tokens':>7} {'step s':>7} {'guard s':>7} "
            f"{'tok/s steps':>11} {'+guard':>7} {'wall s':>7} {'before':>7} {'after':>6} "
            f"{'tok/s wall':>10} {'GFLOP/s':>7} {'of peak':>7}")
    print(head)

    def row(name: str, rep: str, r: dict[str, Any]) -> str:
        if "error" in r:
            return f"{name:<13} {rep:>3} ERROR {r['error']}"
        frac = r.get("of_peak")
        return (f"{name:<13} {rep:>3} {r['tokens']:>7.0f} {r['step_s']:>7.1f} "
                f"{r['guard_s']:>7.1f} {r['tok_s_steps']:>11.1f} {r['tok_s_loop']:>7.1f} "
                f"{r['wall_s']:>7.1f} {r['before_s']:>7.1f} {r['after_s']:>6.1f} "
                f"{r['tok_s_wall']:>10.1f} {r['gflops_4n']:>7.1f} "
                + (f"{100 * frac:>6.0f}%" if frac is not None else "      -"))

    for r in runs:
        print(row(r["tool"], str(r["rep"]), r if "error" in r or "tok_s_steps" in r
                  else {"error": "no tokens counted"}))
    for tool in ("rltray", "reinforceclaw"):
        if med[tool]["runs"]:
            print(row(tool, "med", med[tool]))
    kept = [str(r.get("answers_kept")) for r in runs if r.get("tool") == "rltray"]
    if kept:
        print("rltray rounds: the base's answer sets taken from the cache "
              "(trainer/base_answers.py; RLTRAY_ANSWER_CACHE=off for none): " + ", ".join(kept))
    held = [r["peak_mb"] for r in runs if r.get("peak_mb")]
    if held:
        print("rltray trainer peak RSS (peak_memory_bytes) per round: "
              + ", ".join(f"{x:.0f}" for x in held) + " MiB")
    if ratio:
        print(f"rltray / reinforceclaw: tok/s over the steps {ratio['tok_s_steps']:.2f}x "
              f"(with rltray's drift guard {ratio['tok_s_loop']:.2f}x), on wall time "
              f"{ratio['tok_s_wall']:.2f}x")
    print(json.dumps({"versus": a.versus, "backend": a.versus_backend,
                      "shape": shape_name(a), "model": d,
                      "matmul_params": n_mm, "examples": a.examples, "tokens": tokens,
                      "passes": a.passes, "reps": a.reps, "loadavg": [min(loads), max(loads)],
                      "matmul_peak": peaks, "runs": runs, "median": med, "ratio": ratio},
                     sort_keys=True, default=str))
    ok = all(med[t]["runs"] == a.reps for t in med)
    return 0 if ok else 1
