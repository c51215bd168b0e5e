"""One training round and one GGUF materialization per real model shape, 135M to 3B.

Run::

    nice -n 5 .venv/bin/python bench/scale_shapes.py [--shapes smollm2-135m,qwen2.5-0.5b]
        [--ratings 32] [--tokens 300] [--threads 1] [--bf16 0|1|weights] [--rc]
        [--step-only STEPS] [--no-train] [--no-gguf] [--force]

Why: the wizard tells a user whether their model fits (``web/models.memory_fit``)
and the tray says how long a round takes; until this bench nothing above a 0.5B
shape had been measured, so a 1.5B or 3B user got an extrapolation.

What it does, per shape (``SHAPES``: SmolLM2-135M, Qwen2.5-0.5B, Qwen2.5-1.5B,
Llama-3.2-3B, written from their published ``config.json`` values, nothing downloaded):

* **Fit first.** Before anything is built, the wizard's estimate
  (``memory_need_bytes``) and the fp32 weights are printed next to this machine's
  total and available memory. A shape the wizard says does not fit is skipped with
  those numbers unless ``--force`` (the bench then measures what the wizard predicts).
* **Model.** Random weights of the real architecture (Llama or Qwen2, with Qwen2's
  q/k/v biases, the tied head, rope theta and Llama 3's rope scaling) written as
  bfloat16 safetensors one tensor at a time (a published checkpoint is bf16 too;
  the torch backend loads it as fp32 on a CPU), with a small tokenizer (token ids
  are random anyway). Cached in ``--out/model-<shape>``.
* **Round.** ``--ratings`` rated turns, each a short prompt and a ``--tokens``-token
  answer, half +1 half -1, trained by ``python -m rltray.trainer job.json`` (the job
  contract the tray's runner uses; preset ``balanced``, ``epochs`` = ``--passes``)
  at ``--threads`` torch threads, fp32 (``--bf16 1``: CPU autocast; ``--bf16 weights``:
  the base stored in bf16, ``torch_setup.cpu_dtype``). Wall time is the
  process's start to exit; tokens/s = trained prompt+answer tokens x passes / the
  optimisation loop's seconds without the drift guard; share of peak = 4N FLOPs per
  token (N = matmul parameters, see ``train_speed.matmul_params``) against the
  torch matmul peak measured here for the same dtype and thread count; peak RSS is
  the trainer's own ``peak_memory_bytes`` metric.
* **ReinforceClaw 0.1.0** (``--rc``): its own ``train_result`` on the same ratings
  (``reinforceclaw_child.py``, one thread, fp32), peak RSS from ``wait4``.
* **GGUF** (unless ``--no-gguf``): a GGUF of the same shape written with the
  ``gguf`` library (``--gguf-type``, Q8_0 by default; llama.cpp's tensor names,
  streamed one tensor at a time), then ``rltray.trainer.gguf_base.materialize`` in
  a child process, as the app does on first use: time, peak RSS (``VmHWM``), and the
  disk of the GGUF and of the materialized folder.

``--ratings``/``--tokens`` make a 3B round fit an evening on a shared CPU; the rows
say how many ratings were trained, and ``--extrapolate`` adds what 32 x 300 would
take at the measured tokens/s, labelled as extrapolated. The last stdout line is
one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import train_speed  # noqa: E402  (bench modules import each other by name)
from versus_reinforceclaw import ONE_THREAD, WORDS, timed_lines, write_job  # noqa: E402

#: Published config.json values (Hugging Face model cards, read by hand; no download).
#: ``tiny`` is the test's shape: a Llama of a few hundred thousand parameters.
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"arch": "llama", "hidden": 64, "layers": 2, "heads": 4, "kv": 2, "inter": 128,
             "vocab": 1024, "tied": True, "rope_theta": 10000.0, "eps": 1e-5},
    "smollm2-135m": {"arch": "llama", "hidden": 576, "layers": 30, "heads": 9, "kv": 3,
                     "inter": 1536, "vocab": 49152, "tied": True, "rope_theta": 100000.0,
                     "eps": 1e-5, "max_pos": 8192},
    "qwen2.5-0.5b": {"arch": "qwen2", "hidden": 896, "layers": 24, "heads": 14, "kv": 2,
                     "inter": 4864, "vocab": 151936, "tied": True, "rope_theta": 1000000.0,
                     "eps": 1e-6, "max_pos": 32768},
    "qwen2.5-1.5b": {"arch": "qwen2", "hidden": 1536, "layers": 28, "heads": 12, "kv": 2,
                     "inter": 8960, "vocab": 151936, "tied": True, "rope_theta": 1000000.0,
                     "eps": 1e-6, "max_pos": 32768},
    "llama-3.2-3b": {"arch": "llama", "hidden": 3072, "layers": 28, "heads": 24, "kv": 8,
                     "inter": 8192, "vocab": 128256, "tied": True, "rope_theta": 500000.0,
                     "eps": 1e-5, "max_pos": 131072,
                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}},
}
REAL = [k for k in SHAPES if k != "tiny"]
#: ``--bf16`` (``RLTRAY_TRAINER_BF16``) -> what the trainer computes in.
DTYPES = {"0": "fp32", "1": "fp32 weights + bf16 autocast", "weights": "bf16 weights"}


def hf_config(d: dict[str, Any], tok: Any = None) -> Any:
    """The Transformers config of shape ``d`` (LlamaConfig or Qwen2Config)."""
    from transformers import LlamaConfig, Qwen2Config

    ids = {}
    if tok is not None:
        ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
               "pad_token_id": tok.pad_token_id}
    common = dict(vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["inter"],
                  num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                  num_key_value_heads=d["kv"], max_position_embeddings=d.get("max_pos", 2048),
                  tie_word_embeddings=d["tied"], rms_norm_eps=d["eps"], **ids)
    if d["arch"] == "qwen2":
        return Qwen2Config(rope_theta=d["rope_theta"], **common)
    rope = {"rope_type": "default", **(d.get("rope_scaling") or {}), "rope_theta": d["rope_theta"]}
    return LlamaConfig(rope_parameters=rope, **common)


def tensor_shapes(d: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Hugging Face tensor name -> shape as ``save_pretrained`` writes them (no tied head)."""
    h, kvd, inter = d["hidden"], d["kv"] * (d["hidden"] // d["heads"]), d["inter"]
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (d["vocab"], h)}
    for i in range(d["layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kvd, h),
                    p + "self_attn.v_proj.weight": (kvd, h), p + "self_attn.o_proj.weight": (h, h),
                    p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                    p + "mlp.down_proj.weight": (h, inter)})
        if d["arch"] == "qwen2":
            out.update({p + "self_attn.q_proj.bias": (h,), p + "self_attn.k_proj.bias": (kvd,),
                        p + "self_attn.v_proj.bias": (kvd,)})
    out["model.norm.weight"] = (h,)
    if not d["tied"]:
        out["lm_head.weight"] = (d["vocab"], h)
    return out


def n_params(d: dict[str, Any]) -> int:
    return sum(int(np.prod(s)) for s in tensor_shapes(d).values())


def matmul_params(d: dict[str, Any]) -> int:
    """Parameters in matrix multiplies per token (block linears + the head)."""
    return train_speed.matmul_params(d)


def _draw(shape: tuple[int, ...], name: str, rng: Any) -> Any:
    import torch

    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    return (torch.randn(shape, generator=rng) * 0.02).to(torch.bfloat16)


def build_model(folder: Path, d: dict[str, Any], shard_bytes: int = 2 * 1024**3) -> Path:
    """Random bf16 safetensors of shape ``d``, written tensor by tensor in shards.

    Why not ``save_pretrained`` of a built model: a 3B model built in fp32 holds 12 GB
    and takes minutes of initialisation; here one tensor lives at a time.
    """
    if (folder / "config.json").exists():
        return folder
    import torch
    from rltray.trainer.tiny import build_tokenizer
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok = build_tokenizer(tmp)
    cfg = hf_config(d, tok)
    cfg.architectures = ["Qwen2ForCausalLM" if d["arch"] == "qwen2" else "LlamaForCausalLM"]
    cfg.dtype = "bfloat16"
    rng = torch.Generator().manual_seed(0)
    shards: list[dict[str, Any]] = [{}]
    size = 0
    index: dict[str, str] = {}
    files: list[str] = []

    def flush() -> None:
        name = f"model-{len(files) + 1:05d}.safetensors"
        save_file(shards[-1], str(tmp / name), metadata={"format": "pt"})
        files.append(name)
        index.update({k: name for k in shards[-1]})
        shards[-1] = {}

    for name, shape in tensor_shapes(d).items():
        shards[-1][name] = _draw(shape, name, rng)
        size += shards[-1][name].numel() * 2
        if size >= shard_bytes:
            flush()
            size = 0
    if shards[-1]:
        flush()
    if len(files) == 1:
        (tmp / files[0]).rename(tmp / "model.safetensors")
    else:
        (tmp / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": index}), encoding="utf-8")
    cfg.save_pretrained(tmp)
    tmp.rename(folder)
    return folder


# ---- the GGUF of a shape, written with the gguf library --------------------------------

_GGUF_LEAF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
              "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf: str) -> str:
    """llama.cpp's tensor name for a Hugging Face one (llama and qwen2 share them)."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, block, rest = hf.split(".", 3)
    leaf, kind = rest.rsplit(".", 1)
    return f"blk.{block}.{_GGUF_LEAF[leaf]}.{kind}"


def write_gguf(path: Path, d: dict[str, Any], qtype_name: str = "Q8_0") -> Path:
    """A GGUF of shape ``d`` with random weights: 2-D weights in ``qtype_name``, norms
    and biases F32, a ``gpt2`` vocabulary of ``vocab`` tokens Transformers can read.

    Tensors are described first and written one at a time (``write_tensor_data``), so
    a 3B file never sits in memory whole.
    """
    import gguf
    from gguf import quants

    qtype = gguf.GGMLQuantizationType[qtype_name]
    rng = np.random.default_rng(0)
    tmp = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(tmp, d["arch"])
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(f"rltray-bench-{d['arch']}")
    w.add_block_count(d["layers"])
    w.add_context_length(d.get("max_pos", 2048))
    w.add_embedding_length(d["hidden"])
    w.add_feed_forward_length(d["inter"])
    w.add_head_count(d["heads"])
    w.add_head_count_kv(d["kv"])
    w.add_layer_norm_rms_eps(d["eps"])
    w.add_rope_freq_base(d["rope_theta"])
    w.add_vocab_size(d["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype_name == "Q8_0"
                    else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(d["vocab"])])
    w.add_token_merges([])
    w.add_token_types([1] * d["vocab"])
    w.add_token_scores([0.0] * d["vocab"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

    def value(name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, Any]:
        if len(shape) == 1:
            one = np.ones(shape, np.float32) if name.endswith("norm.weight") else None
            return (one if one is not None else
                    rng.normal(0, 0.02, shape).astype(np.float32)), None
        x = rng.normal(0, 0.02, shape).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            return x.astype(np.float16), None
        return quants.quantize(x, qtype), qtype

    shapes = tensor_shapes(d)
    for hf, shape in shapes.items():  # describe every tensor first (sizes only)
        if len(shape) == 1:
            w.add_tensor_info(gguf_name(hf), shape, np.dtype(np.float32), 4 * shape[0])
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor_info(gguf_name(hf), shape, np.dtype(np.float16), 2 * int(np.prod(shape)))
        else:
            block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
            row = shape[1] // block * nbytes
            w.add_tensor_info(gguf_name(hf), (shape[0], row), np.dtype(np.uint8), shape[0] * row,
                              raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for hf, shape in shapes.items():
        w.write_tensor_data(value(hf, shape)[0])
    w.close()
    tmp.rename(path)
    return path


# ---- measurements ----------------------------------------------------------------------


def _rss_now() -> float:
    """This process's peak RSS (GiB): VmHWM on Linux (fork+exec does not carry it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return train_speed.peak_rss_mb() / 1024


def child_materialize(gguf_path: str, cache: str) -> dict[str, Any]:
    """Inside its own process: ``gguf_base.materialize`` as the app calls it on first use."""
    from rltray.trainer import gguf_base

    start_gib = _rss_now()
    t0 = time.perf_counter()
    folder = gguf_base.materialize(Path(gguf_path), Path(cache))
    seconds = time.perf_counter() - t0
    disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"seconds": seconds, "peak_rss_gib": _rss_now(), "rss_after_imports_gib": start_gib,
            "folder_bytes": disk, "converter": gguf_base.converter()}


def rated_examples(tok: Any, n: int, answer_tokens: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` ratings: a 20-word prompt and an answer of ``answer_tokens`` tokens, +1/-1."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        prompt = " ".join(str(w) for w in rng.choice(WORDS, size=20))
        words = [str(w) for w in rng.choice(WORDS, size=answer_tokens)]
        while len(tok(" ".join(words), add_special_tokens=False)["input_ids"]) > answer_tokens:
            words.pop()
        rows.append({"prompt": prompt, "response": " ".join(words), "rating": 1 - 2 * (i % 2)})
    return rows


def _tail(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["no output"]
    return lines[-1][:300]


def _last_metric(parsed: list[tuple[float, dict[str, Any]]], name: str) -> float | None:
    """The value of the trainer's last ``metric`` line called ``name`` (its peak memory
    lines come just before the final line, outside the done line's metrics)."""
    values = [d["value"] for _, d in parsed if d.get("type") == "metric" and d.get("name") == name]
    return values[-1] if values else None


def round_rltray(work: Path, model: Path, rows: list[dict[str, Any]], a: argparse.Namespace
                 ) -> dict[str, Any]:
    """One round of ``python -m rltray.trainer job.json`` at ``--threads``, fp32 or bf16."""
    job = write_job(work, model, rows, "torch", a.passes, a.device)
    env = {**ONE_THREAD, "RLTRAY_TRAINER_THREADS": str(a.threads),
           "OMP_NUM_THREADS": str(a.threads), "RLTRAY_TRAINER_BF16": a.bf16}
    lines, start, end, code, rss = timed_lines(
        [sys.executable, "-m", "rltray.trainer", str(job)], env, a.timeout, work / "stderr.log")
    parsed = [(t, json.loads(x)) for t, x in lines if x.startswith("{")]
    done = [d for _, d in parsed if d.get("type") == "done"]
    if code != 0 or not done:
        return {"error": f"exit {code}: {_tail(work / 'stderr.log')}", "wall_s": end - start,
                "peak_rss_gib": rss}
    m = done[0]["metrics"]
    peak = _last_metric(parsed, "peak_memory_bytes")
    gpu = _last_metric(parsed, "peak_gpu_memory_bytes")
    return {"wall_s": end - start, "steps": m["steps"], "loop_s": m["train_seconds"],
            "gpu_peak_gib": gpu / 2**30 if gpu else None,
            "guard_s": m["guard_seconds"], "step_s": m["train_seconds"] - m["guard_seconds"],
            "round_start_s": m.get("round_start_s"), "finish_s": m.get("finish_seconds"),
            "peak_rss_gib": peak / 2**30 if peak else rss, "status": done[0].get("status")}


def round_rc(work: Path, model: Path, rows: list[dict[str, Any]], a: argparse.Namespace
             ) -> dict[str, Any]:
    """ReinforceClaw 0.1.0's own round (``reinforceclaw_child.child_rc``), one thread, fp32."""
    home = work / "home"
    shutil.rmtree(work, ignore_errors=True)
    home.mkdir(parents=True)
    (work / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
    kind = "rc-cuda" if a.device == "cuda" else "rc-torch"
    lines, start, end, code, rss = timed_lines(
        [sys.executable, train_speed.__file__, "--child", kind, "--model", str(model),
         "--rows", str(work / "rows.json"), "--passes", str(a.passes)],
        {"HOME": str(home), **ONE_THREAD}, a.timeout, work / "stderr.log")
    objs = [json.loads(x) for _, x in lines if x.startswith("{")]
    if code != 0 or not objs:
        return {"error": f"exit {code}: {_tail(work / 'stderr.log')}", "wall_s": end - start,
                "peak_rss_gib": rss}
    r = objs[-1]
    if r["result"].get("status") != "trained" or not r["ends"]:
        return {"error": f"not trained: {r['result']}"}
    gpu = r.get("gpu_peak_bytes")
    return {"wall_s": end - start, "steps": len(r["ends"]), "step_s": r["ends"][-1] - r["loop"],
            "tokens": r["tokens"], "peak_rss_gib": rss,
            "gpu_peak_gib": gpu / 2**30 if gpu else None}


def matmul_peak(a: argparse.Namespace, model: Path) -> dict[str, Any]:
    """torch's best n x n matmul at ``--threads`` in the round's dtype (``train_speed``'s
    child); on ``--device cuda`` the GPU's bf16 (the trainer's dtype there)."""
    kind = "matmul-torch" if a.bf16 == "0" else "matmul-torch-bf16"
    if a.device == "cuda":
        kind = "matmul-torch-cuda"
    return train_speed.spawn(["--child", kind, "--matmul-n", str(a.matmul_n), "--model",
                              str(model)], a.timeout,
                             {"RLTRAY_TRAINER_THREADS": str(a.threads),
                              "OMP_NUM_THREADS": str(a.threads)})


#: One fp32 training step's peak RSS = base + per x fp32 weights (GiB), measured here:
#: the Qwen2.5-1.5B shape's step (one 64-token sequence) peaked at 8.97 GiB with 5.75
#: GiB of weights. A forced shape that needs more than the available memory is refused.
STEP_BASE_GIB = 1.14
STEP_PER_WEIGHT = 1.36


def gpu_fit_line(name: str, d: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    """On ``--device cuda``: the bf16 weights against the GPU's free memory. The wizard's
    rule is about a CPU round's RAM, so it is not asked; a shape is tried when its
    weights take under a third of what the GPU has free (weights, activations and the
    reference pass's logits stay well inside that on every shape here)."""
    import torch

    params = n_params(d)
    free, total = torch.cuda.mem_get_info()
    info = {"params": params, "bf16_weights_gib": params * 2 / 2**30,
            "gpu_total_gib": total / 2**30, "gpu_free_gib": free / 2**30,
            "gpu": torch.cuda.get_device_name()}
    fits = 3 * params * 2 <= free
    text = (f"{name}: {params / 1e9:.3f}B parameters, bf16 weights "
            f"{info['bf16_weights_gib']:.2f} GiB; {info['gpu']} with {info['gpu_free_gib']:.1f} "
            f"of {info['gpu_total_gib']:.1f} GiB free: " + ("fits" if fits else "does NOT fit"))
    return fits, text, info


def fit_line(name: str, d: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    """Whether the wizard would let this shape train here, said with the numbers."""
    import psutil
    from rltray.web.models import FIT_SHARE, memory_need_bytes

    params = n_params(d)
    need = memory_need_bytes(params)
    vm = psutil.virtual_memory()
    fits = need <= FIT_SHARE * vm.total
    info = {"params": params, "wizard_need_gib": need / 2**30,
            "fp32_weights_gib": params * 4 / 2**30, "total_gib": vm.total / 2**30,
            "available_gib": vm.available / 2**30}
    text = (f"{name}: {params / 1e9:.3f}B parameters, fp32 weights {info['fp32_weights_gib']:.2f} "
            f"GiB; the wizard's estimate {info['wizard_need_gib']:.2f} GiB against "
            f"{FIT_SHARE:.0%} of {info['total_gib']:.1f} GiB = {FIT_SHARE * info['total_gib']:.1f}"
            f" GiB ({info['available_gib']:.1f} GiB available now): "
            + ("fits" if fits else "does NOT fit by the wizard's rule"))
    return fits, text, info


def run_shape(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """Fit check, model, matmul peak, rltray's round, ReinforceClaw's, the GGUF; one row."""
    from transformers import AutoTokenizer

    d = SHAPES[name]
    fits, text, info = (gpu_fit_line if a.device == "cuda" else fit_line)(name, d)
    print(text, flush=True)
    row: dict[str, Any] = {"shape": name, **info, "wizard_fits": fits}
    if not fits and not a.force and not a.no_train:
        row["skipped"] = "the wizard's estimate does not fit (--force measures it anyway)"
        print(f"  skipped: {row['skipped']}", flush=True)
        return row
    step_gib = STEP_BASE_GIB + STEP_PER_WEIGHT * info.get("fp32_weights_gib", 0.0)
    if a.device == "cpu":  # a CPU round's RAM; a GPU's fit was read above
        row["step_estimate_gib"] = step_gib
    if not a.no_train and a.device == "cpu" and step_gib > info["available_gib"]:
        row["skipped"] = (f"one fp32 step needs about {step_gib:.1f} GiB ({STEP_BASE_GIB} + "
                          f"{STEP_PER_WEIGHT} x {info['fp32_weights_gib']:.2f} GiB of weights, "
                          f"measured on the 1.5B step) and {info['available_gib']:.1f} GiB is "
                          "available now: the OOM killer would pick a process")
        print(f"  skipped: {row['skipped']}", flush=True)
        return row
    if a.no_train:
        work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=a.out))
        row["gguf"] = gguf_row(name, d, a, work)
        print(f"  gguf: {row['gguf']}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
        return row
    t0 = time.perf_counter()
    model = build_model(a.out / f"model-{name}", d)
    row["build_s"] = time.perf_counter() - t0
    tok = AutoTokenizer.from_pretrained(model)
    rows = rated_examples(tok, a.ratings, a.tokens)
    from rltray.trainer import data as rdata
    from rltray.trainer.job import example_from_dict

    tokens = sum(len(rdata.encode(tok, example_from_dict(
        {**r, "id": str(i), "rated_at": "2026-01-01T00:00:00Z"}), 4096).input_ids)
        for i, r in enumerate(rows))
    n_mm = matmul_params(d)
    row.update(ratings=a.ratings, answer_tokens=a.tokens, tokens=tokens * a.passes,
               passes=a.passes, matmul_params=n_mm, threads=a.threads, device=a.device,
               dtype="bf16 (the trainer's CUDA dtype)" if a.device == "cuda" else DTYPES[a.bf16])
    peak = matmul_peak(a, model)
    row["matmul_peak_gflops"] = peak.get("gflops")
    if a.step_only:
        row.update(ratings=1, tokens=a.tokens)
        row["rltray"] = step_row(model, a, n_mm, row["matmul_peak_gflops"])
        print(f"  rltray, one step: {row['rltray']}", flush=True)
        return row
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=a.out))
    r = round_rltray(work / "rltray", model, rows, a)
    row["rltray"] = _rates(r, tokens * a.passes, n_mm, row["matmul_peak_gflops"])
    print(f"  rltray: {_say(row['rltray'])}", flush=True)
    if a.rc:
        r = round_rc(work / "rc", model, rows, a)
        row["reinforceclaw"] = _rates(r, r.get("tokens"), n_mm, row["matmul_peak_gflops"])
        print(f"  reinforceclaw: {_say(row['reinforceclaw'])}", flush=True)
    if not a.no_gguf:
        row["gguf"] = gguf_row(name, d, a, work)
        print(f"  gguf: {row['gguf']}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return row


def step_row(model: Path, a: argparse.Namespace, n_mm: int, peak: float | None
             ) -> dict[str, Any]:
    """PER STEP, not a round: ``train_speed``'s child loads the model through the torch
    backend and times ``--step-only`` MIS-PO steps of one ``--tokens``-token sequence
    (a round-start forward, a warm-up step, one timed step). For shapes whose whole
    round does not fit the time at hand; its peak RSS is the model plus one step's
    activations, without a round's reference logits, drift guard and gate."""
    t0 = time.time()
    r = train_speed.spawn(["--child", "torch", "--model", str(model), "--batch", "1",
                           "--seq", str(a.tokens), "--steps", str(a.step_only)], a.timeout,
                          {**ONE_THREAD, "RLTRAY_TRAINER_THREADS": str(a.threads),
                           "OMP_NUM_THREADS": str(a.threads),
                           "RLTRAY_TRAINER_BF16": a.bf16})
    if "error" in r:
        return r
    tok_s = r["train_tokens_per_s"]
    gflops = 4 * n_mm * tok_s / 1e9
    return {"per_step": True, "wall_s": time.time() - t0, "load_s": r["load_s"],
            "step_s": r["step_s"], "tok_s": tok_s, "forward_tok_s": r["forward_tokens_per_s"],
            "gflops_4n": gflops, "of_peak": gflops / peak if peak else None,
            "peak_rss_gib": r["peak_rss_mb"] / 1024, "recomputes": r.get("recomputes"),
            "extrapolated_32x300_step_s": 32 * 330 / tok_s}


def _rates(r: dict[str, Any], tokens: int | None, n_mm: int, peak: float | None
           ) -> dict[str, Any]:
    if "error" in r or not tokens or not r.get("step_s"):
        return r
    r["tok_s"] = tokens / r["step_s"]
    r["gflops_4n"] = 4 * n_mm * r["tok_s"] / 1e9
    r["of_peak"] = r["gflops_4n"] / peak if peak else None
    r["extrapolated_32x300_step_s"] = 32 * 330 / r["tok_s"]  # ~330 tokens per rating
    return r


def _say(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error']} (peak RSS {r.get('peak_rss_gib', float('nan')):.2f} GiB)"
    share = f"{100 * r['of_peak']:.1f}%" if r.get("of_peak") else "-"
    gpu = f", GPU peak {r['gpu_peak_gib']:.2f} GiB" if r.get("gpu_peak_gib") else ""
    return (f"wall {r['wall_s']:.1f} s, steps {r['step_s']:.1f} s, {r['tok_s']:.1f} tok/s, "
            f"{share} of peak, peak RSS {r['peak_rss_gib']:.2f} GiB{gpu}")


def gguf_row(name: str, d: dict[str, Any], a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Write the shape's GGUF, then materialize it in a child process; time, RSS, disk."""
    path = a.out / f"{name}-{a.gguf_type}.gguf"
    t0 = time.perf_counter()
    if not path.exists():
        write_gguf(path, d, a.gguf_type)
    written = time.perf_counter() - t0
    cache = work / "gguf-cache"
    proc = subprocess.run(
        [sys.executable, __file__, "--child-materialize", str(path), "--cache", str(cache)],
        capture_output=True, text=True, timeout=a.timeout, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        out: dict[str, Any] = {"error": f"exit {proc.returncode}: {tail[:300]}"}
    else:
        out = json.loads(lines[-1])
    out.update(type=a.gguf_type, gguf_bytes=path.stat().st_size, write_s=written)
    shutil.rmtree(cache, ignore_errors=True)
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The results as text lines (also what bench/README.md quotes)."""
    out = [f"{'shape':<13} {'tool':<6} {'ratings':>7} {'tokens':>6} {'wall s':>7} {'steps s':>7} "
           f"{'tok/s':>7} {'of peak':>7} {'peak GiB':>8} {'GPU GiB':>7} {'32x300 s*':>9}"]
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['shape']:<13} skipped: {r['skipped']}")
            continue
        for tool in ("rltray", "reinforceclaw"):
            x = r.get(tool)
            if x is None:
                continue
            label = "rltray" if tool == "rltray" else "RC"
            if x.get("per_step"):
                label = "step*"
            if "error" in x:
                out.append(f"{r['shape']:<13} {label:<6} ERROR {x['error'][:80]}")
                continue
            share = f"{100 * x['of_peak']:.1f}%" if x.get("of_peak") else "-"
            gpu = f"{x['gpu_peak_gib']:.2f}" if x.get("gpu_peak_gib") else "-"
            out.append(f"{r['shape']:<13} {label:<6} {r['ratings']:>7} {r['tokens']:>6} "
                       f"{x['wall_s']:>7.1f} {x['step_s']:>7.1f} {x['tok_s']:>7.1f} {share:>7} "
                       f"{x['peak_rss_gib']:>8.2f} {gpu:>7} "
                       f"{x['extrapolated_32x300_step_s']:>9.1f}")
        g = r.get("gguf")
        if g and "error" not in g:
            out.append(f"{r['shape']:<13} gguf   {g['type']} {g['gguf_bytes'] / 1e9:.2f} GB "
                       f"written in {g['write_s']:.0f} s; materialize {g['seconds']:.1f} s, "
                       f"peak RSS {g['peak_rss_gib']:.2f} GiB, "
                       f"folder {g['folder_bytes'] / 1e9:.2f} GB")
        elif g:
            out.append(f"{r['shape']:<13} gguf   ERROR {g['error'][:100]}")
    out.append("step*: one sequence per step, train_speed's child (load, forward, warm-up, "
               "timed steps), not a round; wall s is that child's")
    out.append("* 32x300 s: the optimisation steps of 32 ratings of 300-token answers at the "
               "measured tokens/s (extrapolated, steps only)")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="a round and a GGUF materialization per real shape")
    ap.add_argument("--shapes", default=",".join(REAL), help=f"comma list of {', '.join(SHAPES)}")
    ap.add_argument("--ratings", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=300, help="tokens per rated answer")
    ap.add_argument("--passes", type=int, default=1, help="epochs over the ratings")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the trainer")
    ap.add_argument("--bf16", default="0", choices=("0", "1", "weights"),
                    help="RLTRAY_TRAINER_BF16: 0 fp32, 1 bf16 autocast, weights bf16 base weights")
    ap.add_argument("--rc", action="store_true", help="also ReinforceClaw 0.1.0's round")
    ap.add_argument("--no-gguf", action="store_true", help="skip the GGUF write + materialize")
    ap.add_argument("--step-only", type=int, default=0, metavar="STEPS",
                    help="time STEPS single-sequence steps instead of a round (labelled per step)")
    ap.add_argument("--no-train", action="store_true", help="only the GGUF write + materialize")
    ap.add_argument("--gguf-type", default="Q8_0", choices=("Q8_0", "F16"))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: the trainer's CUDA path (bf16) on a GPU machine, and "
                         "ReinforceClaw's own CUDA backend with --rc")
    ap.add_argument("--force", action="store_true", help="run shapes the wizard says do not fit")
    ap.add_argument("--matmul-n", type=int, default=2048)
    ap.add_argument("--timeout", type=float, default=6 * 3600.0)
    ap.add_argument("--out", type=Path, default=Path(".bench-out/scale_shapes"))
    ap.add_argument("--child-materialize", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    unknown = [s for s in a.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child_materialize:
        print(json.dumps(child_materialize(a.child_materialize, a.cache)))
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    what = ("cuda, bf16" if a.device == "cuda"
            else f"torch {a.threads} thread(s), {DTYPES[a.bf16]}")
    print(f"{a.ratings} ratings x {a.tokens}-token answers x {a.passes} pass(es); {what}; "
          "load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    rows = [run_shape(name, a) for name in a.shapes.split(",")]
    for line in table(rows):
        print(line)
    print(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
                      "loadavg": os.getloadavg()[0]}, sort_keys=True, default=str))
    bad = [r for r in rows if "error" in (r.get("rltray") or {})]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
