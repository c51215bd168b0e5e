"""MLX backend: mlx-lm base model + our LoRA layers + bias-corrected AdamW.

Runs on Apple Silicon (Metal) and, with ``mlx[cpu]``, on Linux CPU (how the
tests exercise it). It computes the same numbers as the torch backend on the
same weights and batch (``tests/trainer/test_parity.py`` pins the tolerance).

Choices that differ from mlx-lm's own tuner, and why:

* **Scale = alpha / rank** (PEFT's convention), never mlx-lm's bare ``scale``
  default; adapters go out in PEFT layout via :mod:`rltray.trainer.adapters`.
* **AdamW with bias correction** (``bias_correction=True``): MLX's ``Adam`` /
  ``AdamW`` default to none, which makes the first steps several times larger
  than torch's (ReinforceClaw's MLX bug). Weight decay from the preset (0).
* **The learning rate is set per step in Python** (linear warm-up, then
  constant) rather than by an MLX schedule, so both backends share one formula,
  :func:`lr_at`, and a resumed run continues at the right rate.
* **A training pass keeps no logits for the backward** (the frozen head's gradient is
  taken a chunk of positions at a time in the forward) and, where one sequence would not
  leave the machine room, recomputes its decoder blocks (:mod:`.mlx_pass_memory`, the
  twin of torch's; :mod:`.lean` decides for both).
* **Local files only.** The folder comes from ``base.resolve_model_folder`` (a
  folder, or the local HF cache); mlx-lm's own ``load`` would download a missing
  model, so only its ``load_model`` / ``load_tokenizer`` are called, on a folder.

Batches are right-padded (``data.collate``). mlx-lm models apply a causal mask
and RoPE positions ``0..L-1``; with right padding every real token sits before
every pad, so no real token can attend to a pad (causality) and the positions of
real tokens equal ``batch.position_ids``. Pad positions produce meaningless
log-probs that the masks drop. Packed or left-padded batches are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..rounddata import pad_id
from . import mlx_checkpoint
from .base import Backend, first_trained_column, read_parent_adapter
from .lean import LeanChoice, activation_bytes
from .mlx_pass_memory import head_logprob, head_weight, recompute_blocks
from .mlx_setup import (
    body_and_head,
    check_right_padded,
    gather_logprobs,
    in_dims,
    lr_at,
    mix_seed,
    no_float16,
    paths_key,
)

#: Largest fp32 logits one output-head call makes outside training (positions go in
#: chunks): the round start and drift never hold a whole batch's B x L x V logits.
HEAD_CHUNK_BYTES = 32 * 2**20


class MlxBackend(Backend):
    """Backend on mlx / mlx-lm; see the module docstring for the choices made."""

    name = "mlx"

    def __init__(self, job: Any, hyper: Any) -> None:
        super().__init__(job, hyper)
        self.model: Any = None
        self.config: dict[str, Any] = {}
        self.model_path: Path | None = None
        self.lora: dict[str, Any] = {}  # module path -> LoRALinear
        self.rank = int(hyper.rank)
        self.alpha = float(hyper.alpha)
        self.optimizer: Any = None
        self.steps_done = 0
        self.micro_steps = 0  # accumulate() calls; seeds dropout deterministically
        self._grads: Any = None
        self._split: tuple[Any, Any] | None = None
        self._head_weight: Any = None  # a plain head's (V, d) weight: head_logprob
        self._lean = LeanChoice()  # reads the machine's memory at the first pass

    # ---- loading -------------------------------------------------------------------

    def load(self) -> None:
        import mlx.core as mx
        import mlx.optimizers as optim
        from mlx_lm.utils import load_model, load_tokenizer

        from .. import adapters
        from ..errors import JobError
        from .mlx_lora import apply_lora, block_linear_paths

        path = self.model_folder()  # local folder or HF cache only, never the network
        trust = bool(getattr(self.job, "trust_remote_code", False))
        try:
            model, config = load_model(path, trust_remote_code=trust)
            wrapper = load_tokenizer(
                path,
                {"trust_remote_code": True} if trust else None,
                eos_token_ids=config.get("eos_token_id"),
            )
        except (ValueError, FileNotFoundError, OSError, KeyError) as exc:
            raise JobError(f"mlx-lm cannot load the base model at {path}: {exc}") from exc
        no_float16(model)  # float16 overflows where activations pass 65504 (Gemma): NaN
        self.model_path, self.config, self.model = path, config, model
        # data.py works on the Hugging Face tokenizer itself, as on the torch backend.
        self.tokenizer = getattr(wrapper, "_tokenizer", wrapper)

        targets = self.hyper.target_modules
        modules = dict(model.named_modules())
        self.base_shapes = {
            p: (int(modules[p].weight.shape[0]), in_dims(modules[p]))
            for p in block_linear_paths(model, "all-linear")
        }
        paths = block_linear_paths(model, targets)
        parent = getattr(self.job, "parent_adapter", None)
        parent_tensors: dict[str, np.ndarray] = {}
        if parent:
            self.rank, self.alpha, parent_tensors = read_parent_adapter(
                Path(parent), self.base_shapes)
            parent_paths = {adapters.parse_peft_name(k)[0] for k in parent_tensors}
            paths = sorted(set(paths) | parent_paths, key=paths_key)
        if not paths:
            raise JobError(f"no linear layers match target_modules={targets!r} in this model")

        seed = int(getattr(self.job, "seed", 0) or 0)
        scale = adapters.scale_from_alpha(self.alpha, self.rank)
        self.lora = apply_lora(
            model,
            paths,
            rank=self.rank,
            scale=scale,
            dropout=float(self.hyper.dropout),
            seed=seed,
        )
        if parent_tensors:
            self._set_lora(adapters.peft_to_mlx(parent_tensors))
        model.eval()
        self.optimizer = optim.AdamW(
            learning_rate=lr_at(0, self.hyper.lr, self.hyper.warmup_steps),
            betas=[0.9, 0.999],
            eps=1e-8,
            weight_decay=float(self.hyper.weight_decay),
            bias_correction=True,
        )
        self.steps_done = 0
        self.micro_steps = 0
        self._grads = None
        self._split = body_and_head(model, int(config.get("vocab_size") or 2))
        self._head_weight = head_weight(self._split[1]) if self._split else None
        mx.random.seed(seed)

    def _set_lora(self, mlx_tensors: dict[str, np.ndarray]) -> None:
        import mlx.core as mx

        from .. import adapters

        for name, value in mlx_tensors.items():
            path, which = adapters.parse_mlx_name(name)
            layer = self.lora[path]
            current = layer.lora_a if which == "A" else layer.lora_b
            if tuple(value.shape) != tuple(current.shape):
                raise ValueError(f"{name}: shape {value.shape} does not match {current.shape}")
            arr = mx.array(np.asarray(value, dtype=np.float32))
            if which == "A":
                layer.lora_a = arr
            else:
                layer.lora_b = arr
        mx.eval(self.model.parameters())

    # ---- forward helpers -----------------------------------------------------------

    def _token_logprobs(self, input_ids: Any, first: int = 0) -> Any:
        """(B, L-1-first) fp32 log p(x_j | x_<j), j > first, from the model as it is now.

        With ``first`` > 0 (and a model whose logits are ``head(body(ids))``) the
        output head and the log-softmax run only from column ``first`` on: the
        prompt before the first trained token gets no logits.
        """
        if first > 0 and self._split is not None:
            body, head = self._split
            hidden = body(input_ids)[:, first:-1, :]
            return gather_logprobs(head(hidden), input_ids[:, first:], shifted=True)
        return gather_logprobs(self.model(input_ids), input_ids)[:, first:]

    def _trained_logprobs(self, input_ids: Any, first: int, trained: np.ndarray) -> Any:
        """(B, L-1-first) fp32 log-probs where ``trained`` (same shape) is set, 0 elsewhere.

        With a plain head (:func:`.mlx_pass_memory.head_weight`) only the trained
        positions get logits, a chunk at a time, and none is kept for the backward
        (:func:`.mlx_pass_memory.head_logprob`); else the whole-model path."""
        import mlx.core as mx

        if self._split is None or self._head_weight is None:
            return self._token_logprobs(input_ids, first)
        hidden = self._split[0](input_ids)[:, first:-1, :]
        at = mx.array(np.flatnonzero(trained.reshape(-1)).astype(np.int32))
        targets = input_ids[:, first + 1 :].reshape(-1)
        picked = head_logprob(self._head_weight, self._head_chunk())(
            mx.take(hidden.reshape(-1, hidden.shape[-1]), at, axis=0), mx.take(targets, at))
        flat = mx.zeros((trained.size,), dtype=mx.float32).at[at].add(picked)
        return flat.reshape(trained.shape)

    def _ids(self, batch: Any) -> Any:
        import mlx.core as mx

        check_right_padded(batch)
        return mx.array(np.asarray(batch.input_ids, dtype=np.int32))

    @property
    def vocab_size(self) -> int | None:
        """Width of the logits (the config's vocabulary); None before load."""
        return int(self.config["vocab_size"]) if self.config.get("vocab_size") else None

    @property
    def reference_width(self) -> int | None:
        """Values a position of :meth:`_hidden` holds: the hidden size when the logits
        are ``head(body(ids))``, else the vocabulary (the store keeps logits then)."""
        if self.model is None:
            return None
        if self._split is None:
            return self.vocab_size
        return int(self._split[0](mx_ids([[1, 2]])).shape[-1])

    def _hidden(self, ids: Any) -> Any:
        """(B, L, X) states whose :meth:`_head` is the logits: the body's output, or (no
        split) the logits themselves. Why: the reference states kept for drift are then
        the hidden size wide, and no forward outside training holds a batch's logits."""
        return self.model(ids) if self._split is None else self._split[0](ids)

    def _head(self, states: Any) -> Any:
        """fp32 logits of (N, X) states (the output head, as the whole model applies it)."""
        import mlx.core as mx

        out = states if self._split is None else self._split[1](states)
        return out.astype(mx.float32)

    def _head_chunk(self) -> int:
        """Positions per head call: fp32 logits under :data:`HEAD_CHUNK_BYTES`."""
        return max(1, HEAD_CHUNK_BYTES // (4 * max(int(self.vocab_size or 1), 1)))

    def _real_chunks(self, batch: Any, positions: np.ndarray | None = None
                     ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The (B, W-1) mask of positions that predict a real token (and are in
        ``positions``, when given), and their flat indices in head-sized chunks."""
        real = np.asarray(batch.attention_mask)[:, 1:] > 0
        if positions is not None:
            real = real & np.asarray(positions, dtype=bool)
        at = np.flatnonzero(real.reshape(-1))
        return real, [at[i : i + self._head_chunk()] for i in range(0, at.size, self._head_chunk())]

    def _adapter_context(self, adapter: bool) -> Any:
        from contextlib import nullcontext

        from .mlx_lora import lora_disabled

        return nullcontext() if adapter else lora_disabled(self.lora.values())

    def logprobs(self, batch: Any, *, adapter: bool) -> np.ndarray:
        import mlx.core as mx

        ids = self._ids(batch)
        self.model.eval()
        with self._adapter_context(adapter):
            hidden = self._hidden(ids)[:, :-1, :]
            mx.eval(hidden)
            # the drift set's turns: their reference states serve every drift measurement
            self.reference.keep("parent" if adapter else "base", batch, hidden, _take_row)
        real, chunks = self._real_chunks(batch)
        flat = hidden.reshape(-1, hidden.shape[-1])
        targets = np.asarray(batch.input_ids)[:, 1:].reshape(-1)
        lp = np.zeros(real.size, dtype=np.float32)
        for pos in chunks:
            z = self._head(mx.take(flat, mx.array(pos), axis=0))
            got = _pick(z, mx.array(targets[pos].astype(np.int32)))
            mx.eval(got)
            lp[pos] = np.array(got, dtype=np.float32)
        return lp.reshape(real.shape)

    def _reference_states(self, kind: str, batch: Any, compute: Any) -> Any:
        """The base's or parent's (B, W-1, X) states: kept rows, else ``compute()``."""
        import mlx.core as mx

        rows = self.reference.lookup(kind, batch)
        if rows is None:
            states = compute()[:, :-1, :]
            mx.eval(states)
            self.reference.keep(kind, batch, states, _take_row, parent_loaded=True)
            return states
        width = int(np.asarray(batch.input_ids).shape[1]) - 1
        return mx.stack([mx.pad(r, [(0, width - r.shape[0]), (0, 0)]) for r in rows])

    # ---- training ------------------------------------------------------------------

    def accumulate(
        self,
        batch: Any,
        old: np.ndarray,
        base: np.ndarray,
        adv: np.ndarray,
        weight: np.ndarray,
    ) -> dict[str, float]:
        import mlx.core as mx
        import mlx.nn as nn
        from mlx.utils import tree_map

        from ..objective import STAT_KEYS, mispo_loss_mlx

        ids = self._ids(batch)
        mask = np.asarray(batch.response_mask, dtype=np.float32)[:, 1:]
        hyper = self.hyper
        # Only the columns from the first trained token on carry loss (same maths).
        first = first_trained_column(mask)
        old_t = np.asarray(old, dtype=np.float32)[:, first:]
        base_t = np.asarray(base, dtype=np.float32)[:, first:]
        mask_t = mask[:, first:]

        def loss_fn(model: Any) -> Any:
            n = self._trained_logprobs(ids, first, mask_t > 0)
            loss, stats = mispo_loss_mlx(
                n, old_t, base_t, mask_t, adv, weight, hyper, float_stats=False
            )
            return loss, stats

        if float(hyper.dropout) > 0:
            # Dropout draws from the global RNG; reseeding from (seed, micro-step)
            # makes a resumed run draw the same masks as an uninterrupted one.
            mx.random.seed(mix_seed(int(getattr(self.job, "seed", 0) or 0), self.micro_steps))
            self.model.train()
        try:
            # the backward's graph (recomputation included) is traced inside the call
            with recompute_blocks(self._blocks(), self.recomputes(ids.shape[1])):
                (_, stats), grads = nn.value_and_grad(self.model, loss_fn)(self.model)
        finally:
            self.model.eval()
        if self._grads is None:
            self._grads = grads
        else:
            self._grads = tree_map(lambda a, b: a + b, self._grads, grads)
        mx.eval(self._grads, stats)
        self.micro_steps += 1
        return {k: float(stats[k].item()) for k in STAT_KEYS}

    def sequences_per_pass(self, width: int, wanted: int) -> int:
        """``wanted``; the round's plan, from its widest sequence, also decides whether the
        whole round runs lean (:meth:`recomputes`), which the round tells the user."""
        self.tight = self.recomputes(width)
        return max(1, int(wanted))

    def recomputes(self, width: int) -> bool:
        """Whether a training pass over ``width``-token sequences recomputes each decoder
        block in the backward: when one sequence would not leave room (:mod:`.lean`; on
        Apple silicon the GPU's memory is the machine's)."""
        hidden = int(self.config.get("hidden_size") or 0)
        layers = int(self.config.get("num_hidden_layers") or 0)
        return self._lean(activation_bytes(width, hidden, layers))  # 0 where unknown

    def _blocks(self) -> list[Any]:
        """The decoder blocks mlx-lm's model runs in order (its ``layers``)."""
        return list(getattr(self.model, "layers", None) or [])

    def step(self) -> dict[str, float]:
        import mlx.core as mx
        import mlx.optimizers as optim

        if self._grads is None:
            raise RuntimeError("step() called without accumulate(): no gradients to apply")
        grads, norm = optim.clip_grad_norm(self._grads, float(self.hyper.grad_clip))
        grad_norm = float(norm.item())
        if not np.isfinite(grad_norm):
            self._grads = None
            raise FloatingPointError(
                "the gradient became NaN or infinite; lower the learning rate and retry"
            )
        lr = lr_at(self.steps_done, self.hyper.lr, self.hyper.warmup_steps)
        self.optimizer.learning_rate = lr
        self.optimizer.update(self.model, grads)
        mx.eval(self.model.parameters(), self.optimizer.state)
        self._grads = None
        self.steps_done += 1
        return {"grad_norm": grad_norm, "lr": lr}

    def zero_grad(self) -> None:
        """Drop accumulated gradients without stepping (a skipped step)."""
        self._grads = None

    # ---- evaluation ----------------------------------------------------------------

    def greedy(self, prompts: list[list[int]], max_new_tokens: int, stop: set[int],
               adapter: bool = False) -> list[list[int]]:
        """Greedy answers to all prompts at once, through mlx-lm's ``BatchGenerator``
        (left-padded prefill, one decoding step for every row at a time). On a CPU a
        decoding step of a small model costs about as much for 8 rows as for 1, so the
        gate's 16 answers cost about two answers' time instead of sixteen."""
        from mlx_lm.generate import BatchGenerator

        if not prompts or int(max_new_tokens) < 1:
            return [[] for _ in prompts]
        self.model.eval()
        rows = len(prompts)
        with self._adapter_context(adapter):
            gen = BatchGenerator(self.model, max_tokens=int(max_new_tokens),
                                 stop_tokens=[[t] for t in sorted(stop)] or None,
                                 completion_batch_size=rows, prefill_batch_size=rows)
            try:
                uids = gen.insert([list(p) for p in prompts], [int(max_new_tokens)] * rows)
                answers: dict[int, list[int]] = {uid: [] for uid in uids}
                while responses := gen.next_generated():
                    for r in responses:  # a stop token ends its row and is kept, as on torch
                        answers[r.uid].append(int(r.token))
            finally:
                gen.close()
        return [answers[uid] for uid in uids]

    def kl_to_base(self, texts: list[str]) -> float:
        import mlx.core as mx

        from ..evaluate import kl_sum_mlx

        max_len = int(self.hyper.max_seq_len)
        seqs = []
        for text in texts:
            ids = list(self.tokenizer(text)["input_ids"])[:max_len]
            if len(ids) >= 2:
                seqs.append(ids)
        total, count = 0.0, 0.0
        size = max(1, int(self.hyper.batch_size))
        pad = pad_id(self.tokenizer)
        self.model.eval()
        for start in range(0, len(seqs), size):
            chunk = seqs[start : start + size]
            width = max(len(s) for s in chunk)
            ids = np.full((len(chunk), width), pad, dtype=np.int32)
            attn = np.zeros((len(chunk), width), dtype=np.float32)
            for i, s in enumerate(chunk):
                ids[i, : len(s)] = s
                attn[i, : len(s)] = 1.0
            x = mx.array(ids)
            policy = self.model(x)[:, :-1, :]
            with self._adapter_context(False):
                base = self.model(x)[:, :-1, :]
            mx.eval(policy, base)
            s, c = kl_sum_mlx(policy, base, attn[:, 1:])
            total += s
            count += c
        return total / count if count else 0.0

    def lora_state(self) -> dict[str, np.ndarray]:
        from .. import adapters

        return adapters.mlx_to_peft(self._mlx_lora_numpy())

    def _mlx_lora_numpy(self) -> dict[str, np.ndarray]:
        from .. import adapters

        out: dict[str, np.ndarray] = {}
        for path, layer in self.lora.items():
            out[adapters.mlx_name(path, "A")] = np.array(layer.lora_a, dtype=np.float32)
            out[adapters.mlx_name(path, "B")] = np.array(layer.lora_b, dtype=np.float32)
        return out

    def set_lora_state(self, state: dict[str, np.ndarray]) -> None:
        from .. import adapters

        given = adapters.peft_to_mlx({k: np.asarray(v, dtype=np.float32) for k, v in state.items()})
        full = {}
        for name, value in self._mlx_lora_numpy().items():
            if name in given:
                full[name] = given[name]
            elif adapters.parse_mlx_name(name)[1] == "B":
                full[name] = np.zeros_like(value)
        unknown = sorted(set(given) - set(full))
        if unknown:
            raise ValueError(f"LoRA tensor {unknown[0]} is not in this model")
        self._set_lora(full)

    def drift_sums(self, batch: Any, parent: dict[str, np.ndarray] | None, *,
                   logprobs: bool = False, positions: np.ndarray | None = None
                   ) -> dict[str, Any]:
        import mlx.core as mx

        from ..evaluate import kl_positions_mlx, masked_sum_numpy

        ids = self._ids(batch)
        self.model.eval()
        resp = np.asarray(batch.response_mask, dtype=np.float32)[:, 1:]
        prompt = np.asarray(batch.attention_mask, dtype=np.float32)[:, 1:] - resp
        new = self._hidden(ids)[:, :-1, :]

        def base_forward() -> Any:
            with self._adapter_context(False):
                out = self._hidden(ids)
                mx.eval(out)  # inside the context: MLX builds the graph lazily
                return out

        def parent_forward() -> Any:
            current = self.lora_state()
            self.set_lora_state(parent)
            try:
                out = self._hidden(ids)
                mx.eval(out)
                return out
            finally:
                self.set_lora_state(current)

        base = self._reference_states("base", batch, base_forward)
        par = None if parent is None else self._reference_states("parent", batch, parent_forward)
        mx.eval(new, base, *([] if par is None else [par]))
        # KL once per real position, the logits rebuilt a few positions at a time
        # (exact: the same head on the same states); then summed under each mask.
        # With no parent the round's KL *is* the total's (the parent is the base).
        real, chunks = self._real_chunks(batch, positions)
        flat = [None if x is None else x.reshape(-1, x.shape[-1]) for x in (new, base, par)]
        targets = np.asarray(batch.input_ids)[:, 1:].reshape(-1)
        to_base = np.zeros(real.size, dtype=np.float64)
        to_par = to_base if parent is None else np.zeros_like(to_base)
        lp = np.zeros(real.size, dtype=np.float32)
        for pos in chunks:
            at = mx.array(pos)
            z = self._head(mx.take(flat[0], at, axis=0))
            if logprobs:
                got = _pick(z, mx.array(targets[pos].astype(np.int32)))
                mx.eval(got)
                lp[pos] = np.array(got, dtype=np.float32)
            ref = self._head(mx.take(flat[1], at, axis=0))
            to_base[pos] = kl_positions_mlx(z[None], ref[None])[0]
            if par is not None:
                to_par[pos] = kl_positions_mlx(
                    z[None], self._head(mx.take(flat[2], at, axis=0))[None])[0]
        to_base, to_par = to_base.reshape(real.shape), to_par.reshape(real.shape)
        out: dict[str, Any] = {}
        if logprobs:
            out["logprobs"] = lp.reshape(real.shape)
        if positions is not None:
            resp, prompt = resp * real, prompt * real
        for where, mask in (("resp", resp), ("prompt", prompt)):
            out[f"{where}_round"], out[f"{where}_count"] = masked_sum_numpy(to_par, mask)
            out[f"{where}_total"] = masked_sum_numpy(to_base, mask)[0]
        if positions is not None:  # the sample's spread: DriftSet.estimate
            out["round_pos"], out["total_pos"] = to_par, to_base
        return out

    def lora_gradients(self) -> dict[str, np.ndarray]:
        """Accumulated gradients under PEFT names and layouts (tests, parity checks)."""
        from mlx.utils import tree_flatten

        from .. import adapters

        if self._grads is None:
            return {}
        flat = {k: np.array(v, dtype=np.float32) for k, v in tree_flatten(self._grads)}
        return adapters.mlx_to_peft(flat)

    # ---- checkpoints ---------------------------------------------------------------

    def save_checkpoint(self, folder: Path) -> None:
        mlx_checkpoint.save(Path(folder), self._mlx_lora_numpy(), self.optimizer.state, {
            "steps_done": str(self.steps_done),
            "micro_steps": str(self.micro_steps),
            "rank": str(self.rank),
            "alpha": repr(self.alpha),
        })

    def load_checkpoint(self, folder: Path) -> None:
        import mlx.core as mx

        lora, self.optimizer.state, meta = mlx_checkpoint.load(
            Path(folder), self._mlx_lora_numpy(), self.rank)
        self._set_lora(lora)
        self.steps_done = int(meta["steps_done"])
        self.micro_steps = int(meta["micro_steps"])
        self._grads = None
        mx.eval(self.optimizer.state)

    @property
    def device_name(self) -> str:
        import mlx.core as mx

        dtype = "fp32"
        if self.model is not None:
            for m in self.lora.values():
                dtype = str(m.linear.weight.dtype).replace("mlx.core.", "")
                break
        return f"mlx {mx.default_device()} {dtype}"


def _take_row(logits: Any, row: int, n: int) -> Any:
    """A copy of one row's first ``n`` positions: a slice shares (and keeps alive) the
    whole batch's buffer; ``mx.array`` of it allocates its own (any dtype, bf16 too)."""
    import mlx.core as mx

    out = mx.array(logits[row, :n])
    mx.eval(out)
    return out


def mx_ids(rows: list[list[int]]) -> Any:
    """An int32 MLX array of token ids (a probe of the body's width)."""
    import mlx.core as mx

    return mx.array(rows, dtype=mx.int32)


def _pick(z: Any, targets: Any) -> Any:
    """(N,) log-softmax of fp32 logits ``z`` (N, V) at ``targets`` (N,)."""
    import mlx.core as mx

    picked = mx.take_along_axis(z, targets[:, None], axis=-1).squeeze(-1)
    return picked - mx.logsumexp(z, axis=-1)
