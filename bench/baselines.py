"""Baselines the learning benchmark compares MIS-PO against: KTO (TRL) and SFT on good-only.

Why in-process: neither baseline is part of the product, so there is no job
contract to honour; each trains a LoRA with the *same* rank, alpha, targets,
learning rate, warm-up, epochs, examples per optimizer step and gradient clip as
the trainer job it is compared with, and writes a PEFT adapter folder that the
benchmark then scores exactly like the trainer's output.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tinylm
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Budget:
    """What every method gets: same data, same optimizer budget, same LoRA."""

    lr: float
    epochs: int
    step_examples: int = 8
    warmup_steps: int = 2
    rank: int = 8
    alpha: int = 16
    grad_clip: float = 1.0
    seed: int = 0


def _lora(b: Budget):
    from peft import LoraConfig

    return LoraConfig(
        r=b.rank,
        lora_alpha=b.alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


def train_sft(base, tokenizer, rated: list[tuple[str, str, int]], b: Budget, out: Path) -> Path:
    """Supervised fine-tuning on the good-rated responses only (bad ones are dropped).

    Loss: mean token cross-entropy over each step's response tokens. AdamW, no weight
    decay, linear warm-up then constant, gradient clip: the trainer's optimizer.
    """
    from peft import get_peft_model

    torch.manual_seed(b.seed)
    model = get_peft_model(copy.deepcopy(base), _lora(b))
    good = [tinylm.encode_pair(tokenizer, p, r) for p, r, y in rated if y > 0]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=b.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, b.warmup_steps))
    )
    rng = random.Random(b.seed)
    model.train()
    for _ in range(b.epochs):
        order = good[:]
        rng.shuffle(order)
        for s in range(0, len(order), b.step_examples):
            items = order[s : s + b.step_examples]
            ids, att = tinylm._right_pad([p + r for p, r in items], tokenizer.pad_token_id)
            labels = torch.full_like(ids, -100)
            for i, (p, r) in enumerate(items):
                labels[i, len(p) : len(p) + len(r)] = ids[i, len(p) : len(p) + len(r)]
            logits = model(input_ids=ids, attention_mask=att).logits
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, b.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    model.eval()
    model.save_pretrained(out)
    return out


def train_kto(
    base,
    tokenizer,
    rated: list[tuple[str, str, int]],
    b: Budget,
    out: Path,
    beta: float = 0.1,
) -> Path:
    """TRL's KTOTrainer with a LoRA ``peft_config`` (reference = base with the adapter off).

    KTO's KL estimate pairs each example with a neighbour's completion inside a
    fixed-order batch (TRL requires sequential sampling), so the data is shuffled
    once here with the budget's seed. Class balance uses KTO's own knobs: desirable
    and undesirable weights chosen so both classes carry equal total weight, the
    same balance the trainer's class weights give MIS-PO.
    """
    os.environ.setdefault("WANDB_DISABLED", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    rows = [
        {
            "prompt": [{"role": "user", "content": p}],
            "completion": [{"role": "assistant", "content": r}],
            "label": y > 0,
        }
        for p, r, y in rated
    ]
    random.Random(b.seed).shuffle(rows)
    n, pos = len(rows), sum(1 for r in rows if r["label"])
    neg = n - pos
    dw = n / (2 * pos) if pos and neg else 1.0
    uw = n / (2 * neg) if pos and neg else 1.0
    with tempfile.TemporaryDirectory() as tmp:
        args = KTOConfig(
            output_dir=tmp,
            per_device_train_batch_size=b.step_examples,
            gradient_accumulation_steps=1,
            num_train_epochs=b.epochs,
            learning_rate=b.lr,
            lr_scheduler_type="constant_with_warmup",
            warmup_steps=b.warmup_steps,
            max_grad_norm=b.grad_clip,
            weight_decay=0.0,
            beta=beta,
            desirable_weight=dw,
            undesirable_weight=uw,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=b.seed,
            data_seed=b.seed,
            max_length=512,
            dataloader_num_workers=0,
        )
        model = copy.deepcopy(base)
        trainer = KTOTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=_lora(b),
        )
        with contextlib.redirect_stdout(sys.stderr):  # Trainer prints its summary
            trainer.train()
        trainer.model.eval()
        trainer.model.save_pretrained(out)
    return out
