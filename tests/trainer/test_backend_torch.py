"""Torch + PEFT backend: LoRA placement, log-prob shapes and masking, accumulation,
warm-up, exact KL, checkpoints, and PEFT interchange — on a tiny llama built in process.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer import adapters  # noqa: E402
from rltray.trainer.backends.torch_peft import TorchPeftBackend  # noqa: E402

pytestmark = pytest.mark.ml

CORPUS = [
    "def add(a, b): return a + b",
    "the test fails because the fixture is missing",
    "good answer: use a context manager to close the file",
    "bad answer: ignore the error and retry forever",
]
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rltray.trainer import tiny

    return tiny.build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model", vocab_corpus=CORPUS)


def make_hyper(**over: Any) -> SimpleNamespace:
    """The Hyper fields the backend and objective read (duck-typed like presets.Hyper)."""
    values: dict[str, Any] = dict(
        rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear", lr=1e-2,
        warmup_steps=0, weight_decay=0.0, grad_clip=1.0, max_seq_len=64, batch_size=4,
        rho_lo=0.5, rho_hi=2.0, delta_lo=-1e9, delta_hi=1e9, beta=0.01,
    )  # fmt: skip
    values.update(over)
    return SimpleNamespace(**values)


def make_job(model: Path, **over: Any) -> SimpleNamespace:
    values: dict[str, Any] = dict(
        base_model=str(model), revision=None, parent_adapter=None, seed=0,
        trust_remote_code=False, device="cpu",
    )  # fmt: skip
    values.update(over)
    return SimpleNamespace(**values)


def loaded(model: Path, job: dict[str, Any] | None = None, **hyper: Any) -> TorchPeftBackend:
    backend = TorchPeftBackend(make_job(model, **(job or {})), make_hyper(**hyper))
    backend.load()
    return backend


def make_batch(tokenizer: Any, texts: list[str]) -> SimpleNamespace:
    """A right-padded batch; the second half of each text counts as the response."""
    rows = [list(tokenizer(t)["input_ids"]) for t in texts]
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), tokenizer.pad_token_id, dtype=np.int64)
    attn = np.zeros((len(rows), width), dtype=np.int64)
    resp = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        attn[i, : len(r)] = 1
        resp[i, len(r) // 2 : len(r)] = 1.0
    pos = np.where(attn > 0, np.cumsum(attn, axis=1) - 1, 0)
    return SimpleNamespace(
        input_ids=ids,
        attention_mask=attn,
        response_mask=resp,
        position_ids=pos,
        example_idx=list(range(len(rows))),
    )


def train_steps(backend: TorchPeftBackend, batch: Any, steps: int, adv: float = 1.0) -> None:
    b = batch.input_ids.shape[0]
    old = backend.logprobs(batch, adapter=True)
    base = backend.logprobs(batch, adapter=False)
    for _ in range(steps):
        backend.accumulate(
            batch, old, base, np.full(b, adv, np.float32), np.full(b, 1.0 / b, np.float32)
        )
        backend.step()


def test_lora_on_every_block_linear_only(tiny_model: Path) -> None:
    backend = loaded(tiny_model)
    threads = torch.get_num_threads()
    assert backend.device_name == f"cpu float32, {threads} thread" + ("s" if threads > 1 else "")
    paths = sorted(backend.lora_paths)
    assert paths == sorted(f"model.layers.{i}.{m}" for i in range(2) for m in _full(TARGETS))
    trainable = {n: p.numel() for n, p in backend.model.named_parameters() if p.requires_grad}
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # hidden 64, inter 128, heads 4 (head_dim 16), kv 2 -> q/o 64x64, k/v 32x64, mlp 128x64
    per_layer = 4 * ((64 + 64) * 2 + (64 + 32) * 2 + (64 + 128) * 3)
    assert sum(trainable.values()) == 2 * per_layer
    state = backend.lora_state()
    assert set(state) == {adapters.peft_name(p, w) for p in backend.lora_paths for w in ("A", "B")}
    assert state[adapters.peft_name("model.layers.0.mlp.down_proj", "A")].shape == (4, 128)
    assert state[adapters.peft_name("model.layers.0.mlp.down_proj", "B")].shape == (64, 4)


def _full(leaves: tuple[str, ...]) -> list[str]:
    return [("self_attn." if m.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp.") + m
            for m in leaves]  # fmt: skip


def test_logprobs_shape_padding_and_adapter_switch(tiny_model: Path) -> None:
    backend = loaded(tiny_model)
    batch = make_batch(backend.tokenizer, CORPUS[:3])
    lp = backend.logprobs(batch, adapter=True)
    assert lp.shape == (3, batch.input_ids.shape[1] - 1) and lp.dtype == np.float32
    assert np.all(lp <= 0) and np.all(np.isfinite(lp))
    # A fresh LoRA (B = 0) is the base model exactly.
    np.testing.assert_array_equal(lp, backend.logprobs(batch, adapter=False))
    # Right padding + attention mask + position ids: each row equals that text alone.
    for i, text in enumerate(CORPUS[:3]):
        alone = backend.logprobs(make_batch(backend.tokenizer, [text]), adapter=True)[0]
        n = int(batch.attention_mask[i].sum()) - 1
        np.testing.assert_allclose(lp[i, :n], alone[:n], atol=1e-5)


def test_training_moves_policy_not_base_and_kl_grows(tiny_model: Path) -> None:
    backend = loaded(tiny_model)
    batch = make_batch(backend.tokenizer, CORPUS[:2])
    base_before = backend.logprobs(batch, adapter=False)
    assert backend.kl_to_base(CORPUS) == pytest.approx(0.0, abs=1e-7)
    train_steps(backend, batch, 3, adv=1.0)
    mask = batch.response_mask[:, 1:] > 0
    after = backend.logprobs(batch, adapter=True)
    np.testing.assert_array_equal(base_before, backend.logprobs(batch, adapter=False))
    assert (after - base_before)[mask].mean() > 0.01  # good answers became more likely
    assert backend.kl_to_base(CORPUS) > 1e-5
    assert backend.steps_done == 3


def test_micro_batches_add_up_to_one_batch(tiny_model: Path) -> None:
    """Weights normalised over the step: 2 micro-batches give the 1-batch gradient."""
    backend = loaded(tiny_model)
    whole = make_batch(backend.tokenizer, CORPUS[:2])
    old = backend.logprobs(whole, adapter=True)
    adv = np.array([1.0, -1.0], np.float32)
    w = np.array([0.25, 0.75], np.float32)
    backend.accumulate(whole, old, old, adv, w)
    g_whole = backend.lora_gradients()
    backend.zero_grad()
    for i in range(2):
        part = make_batch(backend.tokenizer, CORPUS[i : i + 1])
        t = part.input_ids.shape[1] - 1
        backend.accumulate(
            part, old[i : i + 1, :t], old[i : i + 1, :t], adv[i : i + 1], w[i : i + 1]
        )
    g_parts = backend.lora_gradients()
    assert g_whole.keys() == g_parts.keys() and g_whole
    for k in g_whole:
        np.testing.assert_allclose(g_parts[k], g_whole[k], rtol=1e-4, atol=1e-7)


def test_warmup_then_constant_lr(tiny_model: Path) -> None:
    backend = loaded(tiny_model, warmup_steps=2, lr=1e-3)
    batch = make_batch(backend.tokenizer, CORPUS[:1])
    lrs = []
    old = backend.logprobs(batch, adapter=True)
    for _ in range(4):
        backend.accumulate(batch, old, old, np.ones(1, np.float32), np.ones(1, np.float32))
        lrs.append(backend.step()["lr"])
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3])


def test_checkpoint_resume_is_bit_identical(tiny_model: Path, tmp_path: Path) -> None:
    batch_texts = CORPUS[:2]
    straight = loaded(tiny_model)
    batch = make_batch(straight.tokenizer, batch_texts)
    train_steps(straight, batch, 2)
    straight.save_checkpoint(tmp_path / "ck")
    train_steps(straight, batch, 2)

    resumed = loaded(tiny_model)
    resumed.load_checkpoint(tmp_path / "ck")
    assert resumed.steps_done == 2
    train_steps(resumed, batch, 2)
    a, b = straight.lora_state(), resumed.lora_state()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_checkpoint_of_other_tensors_is_refused_whole(tiny_model: Path, tmp_path: Path) -> None:
    """A checkpoint of another rank or other layers names every tensor that does not fit
    and leaves the loaded LoRA as it was (never half applied)."""
    from rltray.trainer.backends.base import checkpoint_mismatch
    from rltray.trainer.errors import JobError

    loaded(tiny_model, rank=2).save_checkpoint(tmp_path / "ck")
    other = loaded(tiny_model, rank=4)
    before = other.lora_state()
    with pytest.raises(JobError, match=r"does not match this model: .*has shape \(2, "):
        other.load_checkpoint(tmp_path / "ck")
    after = other.lora_state()
    assert all(np.array_equal(before[k], after[k]) for k in before) and other.steps_done == 0
    assert checkpoint_mismatch({"a": (2, 3), "gone": (1,)}, {"a": (4, 3), "new": (1,)}) == [
        "new is missing", "gone is not in this model", "a has shape (2, 3), the model has (4, 3)"]
    assert checkpoint_mismatch({"a": (2, 3)}, {"a": (2, 3)}) == []


def test_written_adapter_loads_in_peft_and_as_parent(tiny_model: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    backend = loaded(tiny_model)
    batch = make_batch(backend.tokenizer, CORPUS[:3])
    train_steps(backend, batch, 2)
    out = adapters.write_adapter(
        tmp_path / "v1", backend.lora_state(), rank=4, alpha=8.0, base_model=str(tiny_model)
    )
    assert adapters.validate_adapter(out, base_shapes=backend.base_shapes) == []
    want = backend.logprobs(batch, adapter=True)

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(model, str(out)).eval()
    with torch.no_grad():
        logits = peft_model(
            input_ids=torch.from_numpy(batch.input_ids),
            attention_mask=torch.from_numpy(batch.attention_mask),
            position_ids=torch.from_numpy(batch.position_ids),
        ).logits
    got = TorchPeftBackend._token_logprobs(logits, torch.from_numpy(batch.input_ids)).numpy()
    real = batch.attention_mask[:, 1:] > 0  # padding's values are meaningless (base.py)
    np.testing.assert_allclose(got[real], want[real], atol=1e-5)

    child = loaded(tiny_model, job={"parent_adapter": str(out)}, rank=8, alpha=1.0)
    assert (child.rank, child.alpha) == (4, 8.0)  # the parent's scale wins
    np.testing.assert_allclose(child.logprobs(batch, adapter=True), want, atol=1e-6)


def test_bf16_autocast_follows_the_cpu_by_default_and_stays_close_to_fp32(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from rltray.trainer.backends.torch_setup import cpu_autocast

    cpu = torch.device("cpu")
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    monkeypatch.delenv("RLTRAY_TRAINER_BF16", raising=False)
    assert cpu_autocast(cpu, torch.float32) is native  # default: where the CPU has it
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "auto")
    assert cpu_autocast(cpu, torch.float32) is native
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "0")
    assert cpu_autocast(cpu, torch.float32) is False
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "1")
    assert cpu_autocast(cpu, torch.float32) is True
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", " On ")
    assert cpu_autocast(cpu, torch.float32) is True
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "perhaps")  # not a switch word: the CPU decides
    assert cpu_autocast(cpu, torch.float32) is native
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "1")
    assert cpu_autocast(cpu, torch.bfloat16) is False  # a bf16 model needs no autocast
    fast = loaded(tiny_model)
    assert fast.autocast and fast.device_name.startswith("cpu float32 + bf16 autocast, ")
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "0")
    exact = loaded(tiny_model)
    batch = make_batch(exact.tokenizer, CORPUS)
    mask = batch.response_mask[:, 1:] > 0
    a, b = fast.logprobs(batch, adapter=True), exact.logprobs(batch, adapter=True)
    assert np.abs(a - b)[mask].max() < 0.1  # bf16 rounding, not a different model
    train_steps(fast, batch, 2)  # trains: LoRA weights stay fp32 and finite
    assert all(np.isfinite(v).all() and v.dtype == np.float32
               for v in fast.lora_state().values())


@pytest.fixture(scope="module")
def tied_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama with its output head tied to the input embeddings (SmolLM2, Qwen2.5
    and Llama-3.2 are so)."""
    import shutil

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    folder = tmp_path_factory.mktemp("tied") / "model"
    model.save_pretrained(folder)
    for f in tiny_model.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, folder / f.name)
    return folder


@pytest.mark.parametrize("tied", [False, True], ids=["untied head", "tied head"])
def test_under_bf16_autocast_the_base_matmuls_read_bf16_weights_and_no_number_changes(
    tiny_model: Path, tied_model: Path, tied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Autocast casts every frozen fp32 weight to bf16 at each matmul. The blocks' linear
    weights and an untied head are kept in bf16 from the load, a tied head's matmuls read
    a bf16 copy made once for a pass or a greedy answer (its lookup keeps fp32): the base
    holds fewer bytes, and every log-prob, drift and greedy answer is the number autocast
    computed from the fp32 weights. The gradients match too; with an untied head, but for
    the head's target row, now the bf16 row autocast's own backward of the logits would
    use (the head's gradient is computed in the forward, ``HeadLogprob``)."""
    import contextlib

    import torch
    from rltray.trainer.backends import torch_load

    model = tied_model if tied else tiny_model
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "1")
    kept = loaded(model)
    monkeypatch.setattr(torch_load, "matmul_weights", lambda model: set())
    cast = loaded(model)
    cast._head_reads = contextlib.nullcontext  # autocast casts the fp32 head at every call
    base = kept.model.get_base_model()
    low = [m.base_layer.weight for m in base.model.layers.modules() if hasattr(m, "base_layer")]
    assert low and all(w.dtype == torch.bfloat16 for w in low)
    assert all(p.dtype == torch.float32 for p in kept.params)  # LoRA and AdamW: fp32
    embed, head = base.get_input_embeddings().weight, base.get_output_embeddings().weight
    assert embed.dtype == torch.float32  # the residual stream
    assert (head is embed) is tied and head.dtype == (torch.float32 if tied else torch.bfloat16)

    def held(backend: TorchPeftBackend) -> int:
        return sum(p.numel() * p.element_size() for p in backend.model.parameters())

    assert held(kept) < 0.8 * held(cast)
    rng = np.random.default_rng(0)
    state = {k: rng.normal(0, 0.05, v.shape).astype(np.float32)
             for k, v in cast.lora_state().items()}
    for backend in (kept, cast):
        backend.set_lora_state(state)
    batch = make_batch(kept.tokenizer, CORPUS)
    for adapter in (False, True):
        np.testing.assert_array_equal(kept.logprobs(batch, adapter=adapter),
                                      cast.logprobs(batch, adapter=adapter))
    drift_kept, drift_cast = kept.drift_sums(batch, None), cast.drift_sums(batch, None)
    assert drift_kept["resp_total"] == drift_cast["resp_total"] > 0
    prompts = [list(r[:4]) for r in batch.input_ids]
    assert kept.greedy(prompts, 6, set()) == cast.greedy(prompts, 6, set())
    assert base.get_output_embeddings().weight is head  # greedy gave the head its own back
    old = cast.logprobs(batch, adapter=True)
    adv = np.array([1.0, -1.0, 0.5, -0.5], np.float32)
    w = np.full(4, 0.25, np.float32)
    assert kept.accumulate(batch, old, old - 0.05, adv, w) == cast.accumulate(
        batch, old, old - 0.05, adv, w)
    g_kept, g_cast = kept.lora_gradients(), cast.lora_gradients()
    assert g_kept.keys() == g_cast.keys() and g_kept
    a = np.concatenate([g_kept[k].ravel() for k in sorted(g_kept)])
    b = np.concatenate([g_cast[k].ravel() for k in sorted(g_kept)])
    if tied:
        np.testing.assert_array_equal(a, b)
    else:
        assert np.linalg.norm(a - b) < 0.01 * np.linalg.norm(b)


def test_logits_only_where_a_trained_token_is_predicted_change_nothing(tiny_model: Path) -> None:
    """A training step's head runs only where a token is trained, a few positions at a
    time with its own gradient (``HeadLogprob``); loss, stats and gradients equal the
    whole model's logits, over every column (no ``logits_to_keep``) and from the first
    trained column on."""
    from rltray.trainer.backends import torch_peft

    backend = loaded(tiny_model)
    assert backend._keeps_logits() and backend._body_head() is not None
    batch = make_batch(backend.tokenizer, CORPUS)
    assert batch.response_mask[:, 1].sum() == 0  # the first columns are prompt in every row
    old = backend.logprobs(batch, adapter=True)
    base = old - 0.05  # a drift, so the KL term has something to push against
    adv = np.array([1.0, -1.0, 0.5, -0.5], np.float32)
    w = np.full(4, 0.25, np.float32)
    calls: list[Any] = []
    forward = backend._forward_logits

    def spy(inputs: Any, keep: Any = None) -> Any:
        calls.append(keep)
        return forward(inputs, keep)

    backend._forward_logits = spy  # type: ignore[method-assign]
    split = backend._split
    torch_peft.HEAD_CHUNK_BYTES, chunk = 4 * 7 * backend.vocab_size, torch_peft.HEAD_CHUNK_BYTES
    try:
        runs = []
        for whole, keeps in ((False, True), (True, True), (True, False)):
            backend._split = None if whole else split
            backend._logits_to_keep = keeps
            runs.append((backend.accumulate(batch, old, base, adv, w), backend.lora_gradients()))
            backend.zero_grad()
    finally:
        torch_peft.HEAD_CHUNK_BYTES, backend._split = chunk, split
    assert len(calls) == 2  # the head-only step asks the whole model for no logits
    assert calls[0] is not None and int(calls[0][0]) > 0 and calls[1] is None
    (head, g_head), *others = runs
    for stats, grads in others:
        assert head == pytest.approx(stats, rel=1e-5, abs=1e-7)
        assert g_head.keys() == grads.keys() and grads
        for k in grads:
            np.testing.assert_allclose(g_head[k], grads[k], rtol=1e-4, atol=1e-7)


def test_under_bf16_autocast_the_head_runs_every_matmul_in_bf16(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head's own gradient (``HeadLogprob``) is a softmax x W product as large as the
    head itself; under autocast it runs in bf16 as autograd's backward of bf16 logits
    would (in fp32 it ran at half the bf16 speed), and the gradients stay those of the
    whole model's logits up to bf16 rounding."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "1")
    backend = loaded(tiny_model)
    assert backend.autocast and backend._body_head() is not None
    vocab = backend.vocab_size
    batch = make_batch(backend.tokenizer, CORPUS)
    old = backend.logprobs(batch, adapter=True)
    adv = np.array([1.0, -1.0, 0.5, -0.5], np.float32)
    w = np.full(4, 0.25, np.float32)
    head_mm: list[Any] = []

    class HeadMatmuls(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func.__name__.startswith(("mm", "addmm", "bmm")) and any(
                isinstance(a, torch.Tensor) and vocab in a.shape for a in args
            ):
                head_mm.append(tuple(a.dtype for a in args if isinstance(a, torch.Tensor)))
            return func(*args, **(kwargs or {}))

    with HeadMatmuls():
        backend.accumulate(batch, old, old - 0.05, adv, w)
    g_head = backend.lora_gradients()
    backend.zero_grad()
    assert head_mm and all(d == torch.bfloat16 for dtypes in head_mm for d in dtypes), head_mm
    split, backend._split = backend._split, None  # the whole model's logits, autograd's head
    try:
        backend.accumulate(batch, old, old - 0.05, adv, w)
    finally:
        backend._split = split
    g_whole = backend.lora_gradients()
    a = np.concatenate([g_head[k].ravel() for k in sorted(g_head)])
    b = np.concatenate([g_whole[k].ravel() for k in sorted(g_head)])
    assert np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.999
    assert np.linalg.norm(a - b) < 0.05 * np.linalg.norm(b)


def test_log_probs_in_row_groups_equal_the_whole_batch(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large vocabulary splits the log-prob pass into groups of rows (the head into
    chunks of positions); same numbers, same grads."""
    from rltray.trainer.backends import torch_peft

    backend = loaded(tiny_model)
    batch = make_batch(backend.tokenizer, CORPUS)
    old = backend.logprobs(batch, adapter=True)
    adv = np.array([1.0, -1.0, 0.5, -0.5], np.float32)
    w = np.full(4, 0.25, np.float32)
    whole = backend.accumulate(batch, old, old - 0.05, adv, w)
    g_whole = backend.lora_gradients()
    backend.zero_grad()
    monkeypatch.setattr(torch_peft, "LOGPROB_CHUNK_BYTES", 1)  # one row per group
    monkeypatch.setattr(torch_peft, "HEAD_CHUNK_BYTES", 1)  # one position per head call
    np.testing.assert_allclose(backend.logprobs(batch, adapter=True), old, rtol=0, atol=1e-6)
    rows = backend.accumulate(batch, old, old - 0.05, adv, w)
    assert rows == pytest.approx(whole, rel=1e-6, abs=1e-7)  # fp32 sums of other sizes
    for k, g in backend.lora_gradients().items():
        np.testing.assert_allclose(g, g_whole[k], rtol=1e-5, atol=1e-8)
