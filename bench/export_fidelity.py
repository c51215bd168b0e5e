"""How much of an adapter each publish path delivers, on Q8_0, Q4_1 and F16 bases.

Run:  nice -n 10 .venv/bin/python bench/export_fidelity.py [--median 1e-4] [--every 3] [--no-llama]
      [--bases Q4_1,Q8_0,F16]
      nice -n 10 .venv/bin/python bench/export_fidelity.py --peft   # the random-adapter check

Why (issue 20): a trained adapter's delta is tiny (median |delta| ~1e-4 on
SmolLM2-135M after a round, against a Q8_0 half-step of ~1.7e-3), and a merge that
re-quantizes it onto the base tensor's own grid rounds it away. A random adapter
1000x larger (the old version of this bench) cannot see that.

The bases: SmolLM2-135M-Instruct as shipped (Q4_1 block weights), and the same
weights re-written with the ``gguf`` library (dequantize every Q4_1 tensor, then
quantize to Q8_0 / cast to F16; every other tensor and key byte for byte). The
adapter: rank 8, alpha 16, on every linear layer of every ``--every``-th block (3 by
default, to keep the run to minutes; the bases re-write those blocks), random factors
scaled so the median |delta| is ``--median`` (trained size).

For each base and publish path (the GGUF adapter; the merge to q8_0, f16 and the
base's type), before (the merge as it was: ``choose_type`` without the own-grid rule,
no floor) and after this change:

* **delivered**: weight space, ``<Q(w+d) - w, d> / ||d||²`` read back from the files,
  ``||d||²``-weighted mean over the adapted tensors and the smallest one (the GGUF
  adapter stores the factors in F32 and llama.cpp adds them exactly: 1 by construction);
* **served** (with llama-cpp-python): the publish step's own check
  (``rltray.trainer.export.fidelity.check_served``: the real file loaded and scored,
  the amplified probe's log-prob shift share and cosine against llama.cpp's base +
  F32 adapter on held-out chats) and whether publish would go ahead.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support
sys.path.insert(0, str(ROOT / "packaging"))

def table(args: argparse.Namespace, model: Path, work: Path) -> dict[str, Any]:
    from rltray.trainer.export import fidelity, merge

    from tests.support.exportkit import (
        measured_delivered,
        merge_as_before,
        rewrite_base,
        trained_size_adapter,
    )

    use_llama = not args.no_llama and fidelity.llama_cpp_missing() is None
    every = args.every
    makers = {"Q4_1": lambda: model,
              "Q8_0": lambda: rewrite_base(model, work / "q8_0.gguf", "Q8_0", every),
              "F16": lambda: rewrite_base(model, work / "f16.gguf", "F16", every)}
    bases = {label: makers[label]() for label in args.bases.split(",")}
    adapter = trained_size_adapter(model, work / "adapter", args.median, every=every)
    rows: dict[str, Any] = {}
    for label, base in bases.items():
        row: dict[str, Any] = {}
        for kind in merge.OUT_TYPES:
            for when in ("before", "after"):
                out = work / f"m-{label}-{kind}-{when}.gguf"
                if when == "before":
                    with merge_as_before():
                        report = merge.merge(base, adapter, out, out_type=kind)
                else:
                    report = merge.merge(base, adapter, out, out_type=kind)
                cell = {"types": report.types, "size_mb": round(report.size / 1e6, 1),
                        "delivered": measured_delivered(base, out, adapter)}
                if use_llama:
                    check = fidelity.check_served(base, adapter, out, report, work,
                                                  out_type=kind)
                    cell["served"] = check.as_dict()
                    cell["published"] = check.ok
                row[f"merge {kind} {when}"] = cell
                out.unlink()
                print(label, kind, when, json.dumps(cell), flush=True)
        rows[label] = row
    return rows


def _probe(cell: dict[str, Any]) -> str:
    srv = cell.get("served") or {}
    return "—" if srv.get("share") is None else f"{srv['share']:.2f}/{srv['cosine']:.2f}"


def _published(cell: dict[str, Any]) -> str:
    return {True: "yes", False: "refused"}.get(cell.get("published"), "—")


def print_table(rows: dict[str, Any]) -> None:
    print("\n| base | path | stored before -> after | delivered mean (min) before | after "
          "| llama.cpp probe share/cos before | after | published before | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, row in rows.items():
        print(f"| {label} | GGUF adapter | F32 factors | 1.000 (1.000) | 1.000 (1.000) "
              "| (the reference) | (the reference) | yes | yes |")
        for kind in ("q8_0", "f16", "base"):
            b, n = row[f"merge {kind} before"], row[f"merge {kind} after"]
            print(f"| {label} | merge {kind} | {'+'.join(b['types'])} -> {'+'.join(n['types'])} "
                  f"| {b['delivered']['mean']:.3f} ({b['delivered']['min']:.3f}) "
                  f"| {n['delivered']['mean']:.3f} ({n['delivered']['min']:.3f}) "
                  f"| {_probe(b)} | {_probe(n)} | {_published(b)} | {_published(n)} |")


def random_adapter_vs_peft(model: Path, work: Path, b_std: float) -> dict[str, Any]:
    """The earlier check: a large random adapter, llama.cpp's logit shift against PEFT's."""
    import gguf
    import torch
    from peft import PeftModel
    from rltray.trainer import gguf_base
    from rltray.trainer.export import gguf_adapter, merge
    from transformers import AutoModelForCausalLM

    from tests.support.exportkit import cosine as cos
    from tests.support.exportkit import llama_logits as llama
    from tests.support.exportkit import smollm2_random_adapter

    hf = gguf_base.materialize(model, cache=work / "cache")
    leaves = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    hf_model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    tokens, base = llama(model)
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(model))
    out: dict[str, Any] = {"b_std": b_std}
    for label, std in (("noise_floor", 1e-5 * b_std), ("adapter", b_std)):
        folder = smollm2_random_adapter(hf, work / label, leaves=leaves, b_std=std)
        peft = PeftModel.from_pretrained(hf_model, str(folder))
        x = torch.tensor([tokens])
        with torch.no_grad():
            with peft.disable_adapter():
                peft_base = peft(x).logits[0].double().numpy()
            peft_shift = peft(x).logits[0].double().numpy() - peft_base
        peft.unload()
        lora = gguf_adapter.export(folder, work / f"{label}.gguf", arch_info=arch)
        shift = llama(model, lora)[1] - base
        out[label] = {"cos_adapter": cos(shift, peft_shift),
                      "norm_llamacpp": float(np.linalg.norm(shift)),
                      "norm_peft": float(np.linalg.norm(peft_shift))}
        if label == "adapter":
            for kind in merge.OUT_TYPES:
                report = merge.merge(model, folder, work / f"m-{kind}.gguf", out_type=kind)
                out[label][f"cos_merged_{kind}"] = cos(llama(report.out)[1] - base, peft_shift)
        print(label, json.dumps(out[label]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--median", type=float, default=1e-4, help="median |delta| of the adapter")
    ap.add_argument("--every", type=int, default=3, help="adapt every N-th block (1: all)")
    ap.add_argument("--bases", default="Q4_1,Q8_0,F16", help="which bases, comma-separated")
    ap.add_argument("--no-llama", action="store_true", help="weight-space figures only")
    ap.add_argument("--peft", action="store_true", help="the random-adapter check vs PEFT")
    ap.add_argument("--b-std", type=float, default=0.15, help="--peft: the random B's std")
    args = ap.parse_args()
    from fetch_test_model import cached_model

    model = cached_model()
    if model is None:
        sys.exit("needs SmolLM2: run `python packaging/fetch_test_model.py` first")
    work = Path(tempfile.mkdtemp(prefix="rltray-fidelity-"))
    if args.peft:
        print(json.dumps(random_adapter_vs_peft(model, work, args.b_std)))
        return
    rows = table(args, model, work)
    print_table(rows)
    print(json.dumps({"median_delta": args.median, "every": args.every, "rows": rows}))


if __name__ == "__main__":
    main()
