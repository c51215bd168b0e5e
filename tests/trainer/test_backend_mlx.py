"""MLX backend: LoRA placement, base/policy log-probs, bias-corrected AdamW, checkpoints,
PEFT interchange, and the whole trainer run with ``"backend": "mlx"``.

Runs on mlx[cpu] with a tiny llama built in process (no network, no downloads).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'rltray[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'rltray[mlx]')")

from rltray.trainer import adapters  # noqa: E402
from rltray.trainer.backends.mlx import MlxBackend, lr_at  # noqa: E402
from rltray.trainer.job import JobError  # noqa: E402

pytestmark = pytest.mark.ml

CORPUS = [
    "def add(a, b): return a + b",
    "the test fails because the fixture is missing",
    "good answer: use a context manager to close the file",
    "bad answer: ignore the error and retry forever",
]
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture
def tiny_model(tiny_model_dir: Path) -> Path:
    """The session's tiny Llama (tests/trainer/conftest.py); read-only."""
    return tiny_model_dir


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
        trust_remote_code=False,
    )  # fmt: skip
    values.update(over)
    return SimpleNamespace(**values)


def loaded(model: Path, job: dict[str, Any] | None = None, **hyper: Any) -> MlxBackend:
    backend = MlxBackend(make_job(model, **(job or {})), make_hyper(**hyper))
    backend.load()
    return backend


def make_batch(tokenizer: Any, texts: list[str] = CORPUS[:3]) -> SimpleNamespace:
    """A right-padded batch; the second half of each text counts as the response."""
    rows = [list(tokenizer(t)["input_ids"]) for t in texts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    attn = np.zeros((len(rows), width), dtype=np.int64)
    resp = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        attn[i, : len(r)] = 1
        resp[i, len(r) // 2 : len(r)] = 1.0
    pos = np.tile(np.arange(width, dtype=np.int64), (len(rows), 1))
    return SimpleNamespace(
        input_ids=ids, attention_mask=attn, response_mask=resp, position_ids=pos,
        example_idx=list(range(len(rows))),
    )  # fmt: skip


def randomise_b(backend: MlxBackend, seed: int = 1, std: float = 0.05) -> None:
    """Give every lora_b a nonzero value so the adapter changes the model."""
    rng = np.random.default_rng(seed)
    for layer in backend.lora.values():
        layer.lora_b = mx.array(rng.normal(0, std, size=layer.lora_b.shape).astype(np.float32))
    mx.eval(backend.model.parameters())


def train_steps(backend: MlxBackend, batch: Any, steps: int) -> list[float]:
    """``steps`` optimizer steps on one batch with o = f = the start-of-test policy."""
    f = backend.logprobs(batch, adapter=False)
    o = backend.logprobs(batch, adapter=True)
    b = batch.input_ids.shape[0]
    adv = np.where(np.arange(b) % 2 == 0, 1.0, -1.0).astype(np.float32)
    weight = np.full(b, 1.0 / b, dtype=np.float32)
    losses = []
    for _ in range(steps):
        losses.append(backend.accumulate(batch, o, f, adv, weight)["loss"])
        backend.step()
    return losses


# ---- LoRA placement -----------------------------------------------------------------


def test_only_lora_on_block_linears_is_trainable(tiny_model: Path) -> None:
    from mlx.utils import tree_flatten

    backend = loaded(tiny_model)
    trainable = dict(tree_flatten(backend.model.trainable_parameters()))
    layers = backend.config["num_hidden_layers"]
    assert len(backend.lora) == 7 * layers
    assert {p.rsplit(".", 1)[-1] for p in backend.lora} == set(TARGETS)
    assert all(k.endswith((".lora_a", ".lora_b")) for k in trainable)
    assert not any("embed" in k or "lm_head" in k for k in trainable)
    # exact LoRA parameter count: r * (in + out) per wrapped layer
    expected = sum(4 * (m.in_dims + m.out_dims) for m in backend.lora.values())
    assert sum(v.size for v in trainable.values()) == expected
    # B starts at zero (PEFT init), A does not
    assert all(float(mx.abs(m.lora_b).max()) == 0.0 for m in backend.lora.values())
    assert all(float(mx.abs(m.lora_a).max()) > 0.0 for m in backend.lora.values())


def test_target_modules_list_limits_the_wrapped_layers(tiny_model: Path) -> None:
    backend = loaded(tiny_model, target_modules=["q_proj", "v_proj"])
    assert {p.rsplit(".", 1)[-1] for p in backend.lora} == {"q_proj", "v_proj"}


def test_tokenizer_is_the_hugging_face_tokenizer(tiny_model: Path) -> None:
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    backend = loaded(tiny_model)
    assert isinstance(backend.tokenizer, PreTrainedTokenizerBase)
    hf = AutoTokenizer.from_pretrained(tiny_model)
    assert backend.tokenizer(CORPUS[0])["input_ids"] == hf(CORPUS[0])["input_ids"]


# ---- log-probs ----------------------------------------------------------------------


def test_fresh_lora_leaves_the_model_unchanged_and_disable_gives_the_base(
    tiny_model: Path,
) -> None:
    backend = loaded(tiny_model)
    batch = make_batch(backend.tokenizer)
    base = backend.logprobs(batch, adapter=False)
    assert base.shape == (3, batch.input_ids.shape[1] - 1) and base.dtype == np.float32
    valid = batch.attention_mask[:, 1:] > 0
    assert np.all(base[valid] <= 0) and np.all(np.isfinite(base))
    np.testing.assert_array_equal(backend.logprobs(batch, adapter=True), base)  # B = 0

    randomise_b(backend)
    policy = backend.logprobs(batch, adapter=True)
    assert np.abs(policy - base)[valid].max() > 1e-4
    np.testing.assert_array_equal(backend.logprobs(batch, adapter=False), base)


def test_padding_does_not_change_real_token_logprobs(tiny_model: Path) -> None:
    """Right padding + causal attention: a row's log-probs do not depend on its batch."""
    backend = loaded(tiny_model)
    randomise_b(backend)
    batch = make_batch(backend.tokenizer)
    together = backend.logprobs(batch, adapter=True)
    for i in range(3):
        n = int(batch.attention_mask[i].sum())
        alone = make_batch(backend.tokenizer, [CORPUS[i]])
        single = backend.logprobs(alone, adapter=True)
        np.testing.assert_allclose(together[i, : n - 1], single[0, : n - 1], atol=1e-5)


def test_left_padded_or_packed_batches_are_refused(tiny_model: Path) -> None:
    backend = loaded(tiny_model)
    batch = make_batch(backend.tokenizer)
    batch.attention_mask = batch.attention_mask[:, ::-1].copy()
    with pytest.raises(ValueError, match="right-padded"):
        backend.logprobs(batch, adapter=False)


# ---- optimisation -------------------------------------------------------------------


@pytest.mark.parametrize("grad_scale", [1.0, 1e-3])
def test_first_adamw_step_is_lr_sized_whatever_the_gradient_scale(
    tiny_model: Path, grad_scale: float
) -> None:
    """Regression for ReinforceClaw's MLX bug: ``optim.Adam`` without bias correction.

    With bias correction the first update of every weight is ``lr · g/(|g| + eps)``,
    i.e. ``±lr`` where |g| ≫ eps; without it it is ``lr · 0.1 / sqrt(0.001) ≈ 3.16 · lr``.
    The gradient scale must not matter, so the weights are scaled by ``grad_scale``
    (grad_clip is off so clipping cannot hide a wrong step).
    """
    lr = 1e-3
    backend = loaded(tiny_model, lr=lr, grad_clip=1e9)
    randomise_b(backend)
    batch = make_batch(backend.tokenizer)
    before = backend.lora_state()
    f = backend.logprobs(batch, adapter=False)
    o = backend.logprobs(batch, adapter=True)
    adv = np.array([1.0, -1.0, 1.0], dtype=np.float32)
    weight = np.full(3, grad_scale / 3, dtype=np.float32)
    backend.accumulate(batch, o, f, adv, weight)
    grads = backend.lora_gradients()
    out = backend.step()
    assert out["lr"] == pytest.approx(lr)
    after = backend.lora_state()
    moved = []
    for name, g in grads.items():
        big = np.abs(g) > 2e-6  # eps = 1e-8 changes these steps by < 0.5 %
        moved.append(np.abs(after[name] - before[name])[big])
    moved_all = np.concatenate(moved)
    assert moved_all.size > 100
    np.testing.assert_allclose(moved_all, lr, rtol=1e-2)


def test_grad_clip_reports_the_norm_before_clipping(tiny_model: Path) -> None:
    backend = loaded(tiny_model, grad_clip=1e-6)
    randomise_b(backend)
    batch = make_batch(backend.tokenizer)
    f = backend.logprobs(batch, adapter=False)
    backend.accumulate(batch, f, f, np.ones(3, np.float32), np.full(3, 1 / 3, np.float32))
    grads = backend.lora_gradients()
    expected = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())))
    out = backend.step()
    assert out["grad_norm"] == pytest.approx(expected, rel=1e-4)
    assert out["grad_norm"] > 1e-6


def test_warmup_then_constant_learning_rate() -> None:
    assert [lr_at(k, 1.0, 4) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_at(0, 2e-4, 0) == 2e-4


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny_model: Path) -> None:
    backend = loaded(tiny_model)
    randomise_b(backend)
    batch = make_batch(backend.tokenizer)
    f = backend.logprobs(batch, adapter=False)
    o = backend.logprobs(batch, adapter=True) - 0.1
    adv = np.array([1.0, -1.0, 0.5], dtype=np.float32)
    weight = np.array([0.5, 0.3, 0.2], dtype=np.float32)
    backend.accumulate(batch, o, f, adv, weight)
    whole = backend.lora_gradients()
    backend.zero_grad()
    for i in range(3):
        part = make_batch(backend.tokenizer, [CORPUS[i]])
        n = part.input_ids.shape[1]
        part.response_mask = batch.response_mask[i : i + 1, :n]
        backend.accumulate(
            part, o[i : i + 1, : n - 1], f[i : i + 1, : n - 1], adv[i : i + 1], weight[i : i + 1]
        )
    summed = backend.lora_gradients()
    for name, g in whole.items():
        np.testing.assert_allclose(summed[name], g, rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_few_steps_lower_the_loss(tiny_model: Path) -> None:
    backend = loaded(tiny_model, lr=1e-2)
    batch = make_batch(backend.tokenizer)
    losses = train_steps(backend, batch, 6)
    # first step: ρ = 1 and n = f everywhere, so L_i = -A_i: loss = -(1/3)(1 - 1 + 1)
    assert losses[0] == pytest.approx(-1 / 3, abs=1e-6)
    assert losses[-1] < losses[0] - 0.05, losses
    assert backend.kl_to_base(CORPUS) > 0.0


def test_kl_to_base_is_zero_for_a_fresh_adapter(tiny_model: Path) -> None:
    backend = loaded(tiny_model)
    assert backend.kl_to_base(CORPUS) == pytest.approx(0.0, abs=1e-7)
    randomise_b(backend, std=0.2)
    assert backend.kl_to_base(CORPUS) > 1e-5


# ---- checkpoints and adapters -------------------------------------------------------


def test_checkpoint_round_trip_continues_identically(tiny_model: Path, tmp_path: Path) -> None:
    first = loaded(tiny_model)
    batch = make_batch(first.tokenizer)
    train_steps(first, batch, 2)
    first.save_checkpoint(tmp_path / "ck")
    train_steps(first, batch, 1)

    second = loaded(tiny_model, job={"seed": 7})  # different init: the checkpoint must win
    second.load_checkpoint(tmp_path / "ck")
    assert second.steps_done == 2
    train_steps(second, batch, 1)
    a, b = first.lora_state(), second.lora_state()
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-7, err_msg=name)


def test_checkpoint_of_another_rank_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    loaded(tiny_model, rank=2).save_checkpoint(tmp_path / "ck")
    with pytest.raises(JobError, match="does not match"):
        loaded(tiny_model, rank=4).load_checkpoint(tmp_path / "ck")


def write_state(backend: MlxBackend, out: Path) -> Path:
    return adapters.write_adapter(
        out, backend.lora_state(), rank=backend.rank, alpha=backend.alpha,
        base_model=str(backend.job.base_model),
    )  # fmt: skip


def test_lora_state_loads_in_peft_with_the_same_logits(tiny_model: Path, tmp_path: Path) -> None:
    """PEFT applies lora_alpha / r; equal logits prove names, transposes and scale agree.

    Tolerance: fp32 on both sides, max |Δ logit| ≤ 1e-4 (observed ~1e-6).
    """
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    backend = loaded(tiny_model, rank=4, alpha=12.0)  # scale 3, not mlx-lm's default 20
    randomise_b(backend, std=0.1)
    folder = write_state(backend, tmp_path / "adapter")
    assert adapters.validate_adapter(folder) == []

    batch = make_batch(backend.tokenizer)
    ids = mx.array(batch.input_ids.astype(np.int32))
    mlx_logits = np.array(backend.model(ids).astype(mx.float32))

    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(batch.input_ids),
            attention_mask=torch.tensor(batch.attention_mask),
        ).logits.numpy()
    valid = batch.attention_mask > 0
    assert np.abs(out[valid] - mlx_logits[valid]).max() <= 1e-4


def test_parent_adapter_is_loaded_with_its_rank_and_alpha(tiny_model: Path, tmp_path: Path) -> None:
    parent = loaded(tiny_model, rank=2, alpha=6.0)
    randomise_b(parent)
    folder = write_state(parent, tmp_path / "v1")
    batch = make_batch(parent.tokenizer)

    child = loaded(tiny_model, job={"parent_adapter": str(folder), "seed": 5}, rank=8, alpha=16.0)
    assert (child.rank, child.alpha) == (2, 6.0)
    state, expected = child.lora_state(), parent.lora_state()
    assert state.keys() == expected.keys()
    for name in state:
        np.testing.assert_array_equal(state[name], expected[name])
    np.testing.assert_allclose(
        child.logprobs(batch, adapter=True), parent.logprobs(batch, adapter=True), atol=1e-6
    )


def test_broken_parent_adapter_is_reported_once_with_every_problem(
    tiny_model: Path, tmp_path: Path
) -> None:
    parent = loaded(tiny_model, rank=2)
    state = parent.lora_state()
    name = next(iter(state))
    state[name] = np.full_like(state[name], np.nan)
    state[adapters.peft_name("model.layers.0.mlp.nope_proj", "A")] = np.zeros((2, 4), np.float32)
    state[adapters.peft_name("model.layers.0.mlp.nope_proj", "B")] = np.zeros((4, 2), np.float32)
    folder = adapters.write_adapter(tmp_path / "bad", state, rank=2, alpha=4, base_model="x")
    with pytest.raises(JobError) as info:
        loaded(tiny_model, job={"parent_adapter": str(folder)})
    assert "non-finite" in str(info.value) and "nope_proj" in str(info.value)


def test_unknown_model_id_fails_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    backend = MlxBackend(make_job(Path("nobody/no-such-model")), make_hyper())
    with pytest.raises(JobError, match="local Hugging Face cache"):
        backend.load()


def test_dropout_is_training_only_and_seeded(tiny_model: Path) -> None:
    """Dropout changes the gradients, never the eval log-probs, and replays from the seed."""

    def grads(dropout: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        backend = loaded(tiny_model, dropout=dropout)
        randomise_b(backend)
        batch = make_batch(backend.tokenizer)
        f = backend.logprobs(batch, adapter=False)
        n = backend.logprobs(batch, adapter=True)
        np.testing.assert_array_equal(backend.logprobs(batch, adapter=True), n)
        backend.accumulate(batch, n, f, np.ones(3, np.float32), np.full(3, 1 / 3, np.float32))
        return n, backend.lora_gradients()

    n0, plain = grads(0.0)
    n1, dropped = grads(0.5)
    _, again = grads(0.5)
    np.testing.assert_array_equal(n1, n0)  # eval mode: no dropout in log-probs
    name = next(iter(plain))
    assert not np.allclose(dropped[name], plain[name])
    for key in dropped:
        np.testing.assert_array_equal(again[key], dropped[key])


# ---- the whole trainer ----------------------------------------------------------------


def _example(i: int, good: bool) -> dict[str, Any]:
    return {
        "id": f"ex{i}",
        "messages": [{"role": "system", "content": "You are a coding assistant."}],
        "prompt": f"How do I close file number {i}?",
        "response": CORPUS[2] if good else CORPUS[3],
        "rating": 1 if good else -1,
        "rated_at": f"2026-01-01T00:00:{i:02d}+00:00",
    }


@pytest.mark.slow
def test_trainer_cli_runs_a_round_on_mlx(tiny_model: Path, tmp_path: Path) -> None:
    """``python -m rltray.trainer job.json`` with ``"backend": "mlx"``, end to end."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("rltray.trainer.__main__", reason="trainer/__main__.py has not landed")
    if not hasattr(pytest.importorskip("rltray.trainer.data"), "encode"):
        pytest.skip("trainer/data.py (encode, collate) has not landed")
    folder = tmp_path / "job"
    folder.mkdir()
    examples = [_example(i, i % 2 == 0) for i in range(8)]
    heldout = [_example(10 + i, i % 2 == 0) for i in range(4)]
    (folder / "examples.jsonl").write_text("".join(json.dumps(e) + "\n" for e in examples))
    (folder / "heldout.jsonl").write_text("".join(json.dumps(e) + "\n" for e in heldout))
    job = {
        "v": 1, "id": "mlx-e2e", "base_model": str(tiny_model), "backend": "mlx",
        "preset": "balanced", "examples": "examples.jsonl", "heldout": "heldout.jsonl",
        "out": "adapter", "seed": 3,
        "hyper": {"epochs": 1, "batch_size": 4, "step_examples": 4, "max_seq_len": 96},
    }  # fmt: skip
    (folder / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "rltray.trainer", str(folder / "job.json")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    progress = [x for x in lines if x["type"] == "progress"]
    assert len(progress) == 2  # 8 examples / 4 per optimizer step
    assert all(np.isfinite(p["loss"]) and np.isfinite(p["grad_norm"]) for p in progress)
    done = lines[-1]
    assert done["type"] == "done"
    out = Path(done["adapter"])
    assert adapters.validate_adapter(out) == []
    assert adapters.read_metadata(out).get("backend") == "mlx"
    assert set(adapters.read_adapter_config(out)["target_modules"]) == set(TARGETS)


@pytest.mark.slow
def test_paused_round_resumes_bit_identical_on_mlx(tiny_model: Path, tmp_path: Path) -> None:
    """A round paused after one optimizer step and resumed ends with the same adapter.

    Exercises the MLX checkpoint (LoRA, AdamW moments and step, the micro-step counter
    that seeds dropout) inside the real round loop, in process.
    """
    import json

    from rltray.trainer import presets
    from rltray.trainer.job import load_examples, load_job

    train_mod = pytest.importorskip("rltray.trainer.train")
    if not hasattr(pytest.importorskip("rltray.trainer.data"), "encode"):
        pytest.skip("trainer/data.py (encode, collate) has not landed")

    def make(folder: Path) -> Path:
        folder.mkdir()
        examples = [_example(i, i % 3 != 0) for i in range(8)]
        (folder / "examples.jsonl").write_text("".join(json.dumps(e) + "\n" for e in examples))
        job = {
            "v": 1, "id": "mlx-resume", "base_model": str(tiny_model), "backend": "mlx",
            "preset": "balanced", "examples": "examples.jsonl", "out": "adapter", "seed": 11,
            "hyper": {"epochs": 2, "batch_size": 2, "step_examples": 4, "max_seq_len": 96,
                      "dropout": 0.1, "warmup_steps": 2},
        }  # fmt: skip
        (folder / "job.json").write_text(json.dumps(job))
        return folder / "job.json"

    def run(job_path: Path, stop_after: int | None) -> Any:
        job = load_job(job_path)
        config = json.loads((tiny_model / "config.json").read_text())
        hyper = presets.resolve(job.preset, presets.model_info(config), dict(job.hyper))
        backend = MlxBackend(job, hyper)
        backend.load()
        steps: list[dict[str, Any]] = []

        def emit(line: dict[str, Any]) -> None:
            if line.get("type") == "progress":
                steps.append(line)

        def should_stop() -> bool:
            return stop_after is not None and len(steps) >= stop_after

        return train_mod.train(
            backend, load_examples(job.examples), None, job, hyper, emit, should_stop
        )

    straight = run(make(tmp_path / "a"), None)
    assert straight.status == "done"
    job_b = make(tmp_path / "b")
    assert run(job_b, 1).status == "paused"
    resumed = run(job_b, None)
    assert resumed.status == "done"
    a = adapters.load_adapter_tensors(tmp_path / "a" / "adapter")
    b = adapters.load_adapter_tensors(tmp_path / "b" / "adapter")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)


def test_logits_only_where_a_trained_token_is_predicted_change_nothing(tiny_model: Path) -> None:
    """The prompt gets no logits in a training step; loss, stats and gradients stay the same."""
    backend = loaded(tiny_model)
    assert backend._split is not None  # a Llama's logits are head(body(ids)), checked at load
    batch = make_batch(backend.tokenizer, CORPUS)
    assert batch.response_mask[:, 1].sum() == 0  # the first columns are prompt in every row
    old = backend.logprobs(batch, adapter=True)
    base = old - 0.05
    b = batch.input_ids.shape[0]
    adv = np.linspace(-1.0, 1.0, b).astype(np.float32)
    w = np.full(b, 1.0 / b, np.float32)
    trimmed = backend.accumulate(batch, old, base, adv, w)
    g_trimmed = backend.lora_gradients()
    backend.zero_grad()
    backend._split = None  # the whole-model path a model with a custom head takes
    full = backend.accumulate(batch, old, base, adv, w)
    g_full = backend.lora_gradients()
    assert trimmed == pytest.approx(full, rel=1e-4, abs=1e-6)
    assert g_trimmed.keys() == g_full.keys() and g_full
    for k in g_full:
        np.testing.assert_allclose(g_trimmed[k], g_full[k], rtol=1e-3, atol=1e-6)


def test_a_head_that_is_not_plain_is_never_split(tiny_model: Path) -> None:
    """A model whose logits are not head(body(ids)) (softcapping, scaling) keeps the whole path."""
    from rltray.trainer.backends.mlx import body_and_head

    backend = loaded(tiny_model)
    model = backend.model
    plain = type(model).__call__

    class Capped(type(model)):  # type: ignore[misc]
        def __call__(self, *args: Any, **kw: Any) -> Any:
            return mx.tanh(plain(self, *args, **kw) / 30.0) * 30.0

    model.__class__ = Capped
    assert body_and_head(model, 64) is None
    model.__class__ = type(model).__mro__[1]
    assert body_and_head(model, 64) is not None
