"""How closely llama.cpp with our GGUF adapter / merged GGUFs follows PEFT: logit-shift cosines.

Run:  nice -n 10 .venv/bin/python bench/export_fidelity.py [--b-std 0.15]

Why: tests/trainer/export/test_export_llamacpp.py asserts thresholds; this prints
the figures behind them. On SmolLM2-135M (Q4_1) with a random rank-8 LoRA
(alpha 16) on every linear layer of every 3rd block, one chat prompt: the shift
of llama.cpp's logits away from the base GGUF's (with our adapter, or from a
merged file) against PEFT's shift on the dequantized model, as a cosine over all
positions and tokens; plus the rounding-noise floor (a 1e-5-sized adapter moves
llama.cpp's logits by a fixed amount: quantized activations flip roundings).

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "trainer" / "export"))
sys.path.insert(0, str(ROOT / "packaging"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--b-std", type=float, default=0.15)
    args = ap.parse_args()
    import gguf
    import torch
    from exportkit import cosine as cos
    from exportkit import llama_logits as llama
    from exportkit import smollm2_random_adapter
    from fetch_test_model import cached_model
    from peft import PeftModel
    from rltray.trainer import gguf_base
    from rltray.trainer.export import gguf_adapter, merge
    from transformers import AutoModelForCausalLM

    model = cached_model()
    if model is None:
        sys.exit("needs SmolLM2: run `python packaging/fetch_test_model.py` first")
    work = Path(tempfile.mkdtemp(prefix="rltray-fidelity-"))
    hf = gguf_base.materialize(model, cache=work / "cache")

    leaves = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    hf_model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    tokens, base = llama(model)
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(model))
    out: dict = {"b_std": args.b_std}
    for label, b_std in (("noise_floor", 1e-5 * args.b_std), ("adapter", args.b_std)):
        folder = smollm2_random_adapter(hf, work / label, leaves=leaves, b_std=b_std)
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
            out["cos_base_llamacpp_vs_transformers"] = cos(base, peft_base)
            for kind in merge.OUT_TYPES:
                report = merge.merge(model, folder, work / f"m-{kind}.gguf", out_type=kind)
                out[label][f"cos_merged_{kind}"] = cos(llama(report.out)[1] - base, peft_shift)
        print(label, json.dumps(out[label]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
