"""A small Llama for the learning benchmark: build, pre-train, sample, score.

Why here and not in the trainer: the benchmark must judge the trainer from the
outside, exactly as the product uses it (a job file and a subprocess), so the
base model, its sampling and every metric are computed by code that shares
nothing with the trainer except the on-disk Hugging Face folder.

The tokenizer is a byte-level BPE (any text encodes, including the off-policy
generator's wording) with a chat template whose role markers are special
tokens with no newline after them, so the response's first token never merges
with the template and "prompt + generation prompt" is an exact token prefix of
"prompt + response".
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

SPECIALS = ("<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(texts: Sequence[str], vocab_size: int = 1024):
    """Byte-level BPE trained on ``texts``, wrapped as a HF fast tokenizer with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        eos_token="<|end|>",
        additional_special_tokens=list(SPECIALS[2:]),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(tokenizer, hidden: int, layers: int, seed: int):
    """A randomly initialised small Llama sized to ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(cfg)


def encode_pair(tokenizer, prompt: str, response: str | None) -> tuple[list[int], list[int]]:
    """(prompt ids incl. generation prompt, response ids incl. end token) via the chat template.

    The response starts where the two tokenisations stop sharing a prefix, as the
    trainer spec prescribes; with this template that is exactly the prompt length.
    """
    user = [{"role": "user", "content": prompt}]
    p_text = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    p_ids = tokenizer(p_text, add_special_tokens=False)["input_ids"]
    if response is None:
        return p_ids, []
    full = tokenizer.apply_chat_template(
        [*user, {"role": "assistant", "content": response}], tokenize=False
    )
    f_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    k = 0
    while k < min(len(p_ids), len(f_ids)) and p_ids[k] == f_ids[k]:
        k += 1
    return f_ids[:k], f_ids[k:]


def _right_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        att[i, : len(s)] = 1
    return ids, att


def pretrain(
    model,
    tokenizer,
    pairs: list[tuple[str, str]],
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    log=print,
) -> float:
    """Plain next-token training on the response tokens of ``pairs``; returns the last loss."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    enc = [encode_pair(tokenizer, p, r) for p, r in pairs]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps)))
        ),
    )
    model.train()
    t0, loss_v = time.time(), float("nan")
    for step in range(steps):
        items = rng.sample(enc, min(batch, len(enc)))
        ids, att = _right_pad([p + r for p, r in items], tokenizer.pad_token_id)
        labels = torch.full_like(ids, -100)
        for i, (p, r) in enumerate(items):
            labels[i, len(p) : len(p) + len(r)] = ids[i, len(p) : len(p) + len(r)]
        out = model(input_ids=ids, attention_mask=att)
        loss = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss_v = float(loss.detach())
        if step % max(1, steps // 8) == 0 or step == steps - 1:
            log(f"  pretrain step {step + 1}/{steps} loss {loss_v:.3f} ({time.time() - t0:.0f}s)")
    model.eval()
    return loss_v


@torch.no_grad()
def sample(
    model, tokenizer, prompts: list[str], *, max_new_tokens: int, seed: int, batch: int = 64
) -> list[tuple[list[int], list[int], str]]:
    """Temperature-1 samples, no top-k/top-p: (prompt ids, response ids incl. end, text)."""
    model.eval()
    pad, end = tokenizer.pad_token_id, tokenizer.eos_token_id
    torch.manual_seed(seed)
    out = []
    for s in range(0, len(prompts), batch):
        chunk = [encode_pair(tokenizer, p, None)[0] for p in prompts[s : s + batch]]
        width = max(len(c) for c in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, c in enumerate(chunk):  # left padding for generation
            ids[i, width - len(c) :] = torch.tensor(c)
            att[i, width - len(c) :] = 1
        gen = model.generate(
            input_ids=ids,
            attention_mask=att,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            eos_token_id=end,
            pad_token_id=pad,
        )
        for i, c in enumerate(chunk):
            resp = gen[i, width:].tolist()
            if end in resp:
                resp = resp[: resp.index(end) + 1]
            text = tokenizer.decode(resp, skip_special_tokens=True)
            out.append((c, resp, text))
    return out


@torch.no_grad()
def token_logprobs(
    model, pairs: list[tuple[list[int], list[int]]], pad: int, batch: int = 32
) -> list[torch.Tensor]:
    """Per-token log-probs of each response given its prompt (one 1-D tensor per pair)."""
    model.eval()
    out: list[torch.Tensor] = []
    for s in range(0, len(pairs), batch):
        chunk = pairs[s : s + batch]
        ids, att = _right_pad([p + r for p, r in chunk], pad)
        lp = torch.log_softmax(model(input_ids=ids, attention_mask=att).logits.float(), -1)
        for i, (p, r) in enumerate(chunk):
            pos = torch.arange(len(p) - 1, len(p) + len(r) - 1)
            out.append(lp[i, pos, ids[i, pos + 1]])
    return out


@torch.no_grad()
def kl_per_token(
    policy, base, pairs: list[tuple[list[int], list[int]]], pad: int, batch: int = 32
) -> float:
    """Exact mean per-token KL(policy || base) over the vocabulary at the response positions."""
    total, count = 0.0, 0
    for s in range(0, len(pairs), batch):
        chunk = [(p, r) for p, r in pairs[s : s + batch] if r]
        if not chunk:
            continue
        ids, att = _right_pad([p + r for p, r in chunk], pad)
        lp = torch.log_softmax(policy(input_ids=ids, attention_mask=att).logits.float(), -1)
        lq = torch.log_softmax(base(input_ids=ids, attention_mask=att).logits.float(), -1)
        kl = (lp.exp() * (lp - lq)).sum(-1)
        for i, (p, r) in enumerate(chunk):
            total += float(kl[i, len(p) - 1 : len(p) + len(r) - 1].sum())
            count += len(r)
    return total / max(1, count)


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Probability that a random good example outscores a random bad one (ties count half)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y > 0]
    neg = [s for s, y in zip(scores, labels, strict=True) if y <= 0]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def save(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    return model, tok
