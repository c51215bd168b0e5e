"""Transformers + PEFT backend: CUDA (bf16), Apple MPS, or CPU (fp32, with bf16 autocast
where the CPU has native bf16).

Why it looks like this:

* Only LoRA weights train; they are kept in fp32 even on a bf16 base (PEFT's
  adapter autocast), so AdamW's small updates are not rounded away.
* ``f`` (base log-probs) comes from the *same* model object with the adapter
  disabled (``PeftModel.disable_adapter()``), so no second copy of the base sits
  in memory.
* No pass holds a batch's B x L x V logits: outside training the head runs on the last
  hidden state a chunk of positions at a time, and a training step takes each trained
  token's log-prob with its own gradient (``torch_pass_memory.HeadLogprob``).
* Everything random (LoRA init, dropout) is seeded from the job, and a checkpoint
  (``torch_checkpoint``) holds LoRA + optimizer + step + RNG state, so a paused round
  resumes bit-identically. Loading the base without its file's pages: ``torch_load``.
* Under CPU bf16 autocast every forward (training, scoring, greedy answers) runs in
  autocast, and the weights only matmuls read are in bf16: the blocks' linears and an
  untied head from the load (``torch_load.load_causal_lm``), a tied head's as a copy for
  one pass (``torch_head``). The numbers are those of fp32 weights cast at each matmul,
  at half the bytes and without the casts.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
from rltray.trainer import adapters
from rltray.trainer.backends import allocator, torch_checkpoint
from rltray.trainer.backends.base import (
    Backend,
    first_trained_column,
    read_base_config,
    read_parent_adapter,
)
from rltray.trainer.backends.base import job_error as _job_error
from rltray.trainer.backends.lean import LeanChoice, activation_bytes
from rltray.trainer.backends.torch_head import head_in
from rltray.trainer.backends.torch_load import load_causal_lm
from rltray.trainer.backends.torch_pass_memory import HeadLogprob, recompute_blocks
from rltray.trainer.backends.torch_setup import (
    block_linear_modules,
    choose_device,
    choose_threads,
    cpu_autocast,
    first_sentence,
)

#: Largest fp32 copy of logits one log-prob group may make (rows go in groups).
LOGPROB_CHUNK_BYTES = 256 * 2**20

#: Largest fp32 logits one output-head call makes outside training (positions go in
#: chunks): the round start and drift never hold a whole batch's B x L x V logits.
HEAD_CHUNK_BYTES = 32 * 2**20
#: The same where the round's memory is tight (:meth:`TorchPeftBackend.recomputes`): a
#: drift measurement holds ~8 such copies (logits, log-softmaxes, their difference), so
#: 32 MiB chunks took SmolLM2's drift checks 272 MiB above the round's floor, 8 MiB ~70.
#: Not the default: each chunk re-reads the whole head (544 MB on a 152k vocabulary).
HEAD_CHUNK_BYTES_TIGHT = 8 * 2**20

#: Most activations one training forward pass may keep on a CPU: one SmolLM2-135M
#: sequence of 300 tokens is ~0.66 GB, so such a model trains one sequence at a time; a
#: tiny test model (hidden 64, 2 layers) keeps its batch of 4.
CPU_ACTIVATION_BUDGET = 256 * 2**20


class TorchPeftBackend(Backend):
    """A Hugging Face causal LM with a PEFT LoRA and a torch AdamW optimizer."""

    name = "torch"

    def __init__(self, job: Any, hyper: Any) -> None:
        super().__init__(job, hyper)
        self.model: Any = None
        self.device: Any = None
        self.dtype: Any = None
        self.optimizer: Any = None
        self.params: list[Any] = []
        self.steps_done = 0
        self.rank = int(hyper.rank)  # the parent's r / alpha replace these when given
        self.alpha = float(hyper.alpha)
        self.lora_paths: list[str] = []
        self.autocast = False  # bf16 matmuls on a capable CPU (torch_setup.cpu_autocast)
        self._logits_to_keep: bool | None = None
        self._split: tuple[Any, Any] | bool | None = False  # False: not checked yet
        self._lean = LeanChoice()  # reads the machine's memory at the first pass

    # ---- loading -------------------------------------------------------------------

    @property
    def vocab_size(self) -> int | None:
        """Rows of the output head (the logits' width); None before load."""
        if getattr(self, "model", None) is None:
            return None
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def reference_width(self) -> int | None:
        """Values a position of :meth:`_hidden` holds: the hidden size when the logits
        are ``head(hidden)``, else the vocabulary (the store keeps logits then)."""
        if getattr(self, "model", None) is None:
            return None
        split = self._body_head()
        if split is None:
            return self.vocab_size
        return int(split[1].weight.shape[1])

    def sequences_per_pass(self, width: int, wanted: int) -> int:
        """On a CPU, as many sequences as keep a forward pass's activations under
        :data:`CPU_ACTIVATION_BUDGET`: a CPU's matmuls are already full with one
        sequence's tokens, so batching buys no speed there, only memory. Measured on
        SmolLM2-135M fp32 (one 16-example step, one thread): batch 4 peaked at 3.08 GB
        RSS, batch 1 at 1.45 GB, step time 40.3 vs 42.1 s. GPUs keep ``wanted``."""
        wanted = max(1, int(wanted))
        self._plan_memory(width)
        per_sequence = self._activation_bytes(width)
        if not per_sequence:
            return wanted
        return max(1, min(wanted, CPU_ACTIVATION_BUDGET // per_sequence))

    def recomputes(self, width: int) -> bool:
        """Whether a training pass over ``width``-token sequences recomputes each decoder
        block in the backward (activation checkpointing) instead of keeping its insides:
        on a CPU, when one sequence would not leave room (:mod:`.lean`). It leaves the
        numbers as they were but costs a second forward of the blocks, which in a LoRA
        step (no weight gradients) is much of the step. GPUs keep everything. A CPU
        round that recomputes also hands freed tensors back to the OS (:mod:`.allocator`):
        1,117 MiB with both against 1,330-1,370 with recomputation alone, the step ~1.6x
        as long again (bench/README.md, "A lean round")."""
        return self._lean(self._activation_bytes(width))

    def _plan_memory(self, width: int) -> None:
        """At the round's start, from its widest sequence: where one would not leave
        room (:meth:`recomputes`), the whole round runs lean from its first pass:
        freed tensors go back to the OS (:mod:`.allocator`) and the head's logits
        come in :data:`HEAD_CHUNK_BYTES_TIGHT` chunks."""
        self.tight = self.recomputes(width)
        self._hand_back_freed_memory(self.tight)

    def _hand_back_freed_memory(self, tight: bool) -> None:
        """A tight CPU round hands freed tensors back to the OS (:mod:`.allocator`);
        once asked, it stays so for the process (the trainer is one per round)."""
        if tight and self.device is not None and self.device.type == "cpu":
            allocator.return_freed_memory()

    def _activation_bytes(self, width: int) -> int:
        """One ``width``-token sequence's training activations on a CPU (0 elsewhere)."""
        config = getattr(self.model, "config", None)
        if self.device is None or self.device.type != "cpu" or config is None:
            return 0
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        return activation_bytes(width, hidden, layers)

    @property
    def numerics(self) -> str:
        if self.device is None:
            return self.name
        name = f"{self.device.type} {str(self.dtype).replace('torch.', '')}"
        return name + (" + bf16 autocast" if self.autocast else "")

    @property
    def device_name(self) -> str:
        name = self.numerics
        if self.device is not None and self.device.type == "cpu":
            import torch

            threads = torch.get_num_threads()
            name += f", {threads} thread{'s' if threads != 1 else ''}"
        return name

    def load(self) -> None:
        import torch

        torch.set_num_threads(choose_threads())
        folder = self.model_folder()
        config = read_base_config(folder)
        self.device, self.dtype = choose_device(getattr(self.job, "device", "auto") or "auto")
        self.autocast = cpu_autocast(self.device, self.dtype)
        trust = bool(getattr(self.job, "trust_remote_code", False))
        revision = (
            getattr(self.job, "revision", None) if not Path(self.job.base_model).is_dir() else None
        )
        base = self._load_base(folder, config, trust, revision)
        self.tokenizer = self._load_tokenizer(folder, trust, revision)

        self.base_shapes = block_linear_modules(base, None)
        shapes = block_linear_modules(base, self.hyper.target_modules)
        parent = getattr(self.job, "parent_adapter", None)
        parent_tensors: dict[str, np.ndarray] = {}
        if parent:
            self.rank, self.alpha, parent_tensors = read_parent_adapter(
                Path(parent), self.base_shapes)
            for name in parent_tensors:
                path = adapters.parse_peft_name(name)[0]  # type: ignore[index]
                shapes.setdefault(path, self.base_shapes[path])  # type: ignore[index]
        if not shapes:
            raise _job_error(
                f"the base model ({config.get('model_type')}) has no linear layers in its "
                f"transformer blocks matching target_modules={self.hyper.target_modules!r}"
            )
        self.lora_paths = sorted(shapes)
        self._attach_lora(base, shapes)
        if parent_tensors:
            live = self._named_lora_params()
            with torch.no_grad():
                for name, value in parent_tensors.items():
                    live[name].copy_(torch.from_numpy(value).to(live[name].dtype))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=float(self.hyper.lr),
            betas=(0.9, 0.999),
            eps=1e-8,
            weight_decay=float(self.hyper.weight_decay),
        )
        self.steps_done = 0
        self.model.eval()

    def _load_base(self, folder: Path, config: dict, trust: bool, revision: str | None) -> Any:
        import torch
        from transformers import AutoModelForCausalLM

        try:
            if self.dtype == torch.float32:  # widening is exact: load, then copy (torch_load)
                # under autocast the weights only matmuls read are kept in bf16, as
                # the matmuls read them (torch_load.load_causal_lm says why)
                low = torch.bfloat16 if self.autocast else None
                model, _ = load_causal_lm(folder, self.dtype, trust=trust, revision=revision,
                                          matmul_dtype=low)
            else:  # bf16 on a GPU: Transformers' own rounding and fp32-kept modules
                model = AutoModelForCausalLM.from_pretrained(
                    str(folder),
                    dtype=self.dtype,
                    local_files_only=True,
                    trust_remote_code=trust,
                    revision=revision,
                )
        except Exception as exc:
            arch = config.get("model_type") or config.get("architectures")
            hint = "" if trust else " (remote code is off for this job)"
            raise _job_error(
                f"cannot load the base model in {folder} (model_type {arch!r}) as a causal "
                f"language model{hint}: {first_sentence(exc)}"
            ) from exc
        for p in model.parameters():
            p.requires_grad_(False)
        return model.to(self.device)

    @staticmethod
    def _load_tokenizer(folder: Path, trust: bool, revision: str | None) -> Any:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=trust, revision=revision
            )
        except Exception as exc:
            raise _job_error(
                f"cannot load the tokenizer in {folder}: {first_sentence(exc)}"
            ) from exc
        return tok

    def _attach_lora(self, base: Any, shapes: dict[str, tuple[int, int]]) -> None:
        import torch
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=float(self.hyper.dropout),
            target_modules=sorted(shapes),  # exact module paths: never a vision tower's q_proj
            bias="none",
            task_type="CAUSAL_LM",
        )
        torch.manual_seed(int(self.job.seed))  # LoRA A init is random: make it the job's
        self.model = get_peft_model(base, cfg)

    def _named_lora_params(self) -> dict[str, Any]:
        """PEFT tensor name (as saved on disk) -> live parameter."""
        out = {}
        for name, p in self.model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                out[name.replace(".default.", ".")] = p
        return out

    # ---- log-probs ----------------------------------------------------------------

    def _inputs(self, batch: Any) -> dict[str, Any]:
        import torch

        return {
            "input_ids": torch.as_tensor(np.asarray(batch.input_ids), dtype=torch.long).to(
                self.device
            ),
            "attention_mask": torch.as_tensor(
                np.asarray(batch.attention_mask), dtype=torch.long
            ).to(self.device),
            "position_ids": torch.as_tensor(np.asarray(batch.position_ids), dtype=torch.long).to(
                self.device
            ),
        }

    @staticmethod
    def _token_logprobs(logits: Any, input_ids: Any, shifted: bool = False) -> Any:
        """(B, T) float32 log p(next token) from logits.

        Plain: (B, L, V) logits of every position and (B, L) ids give T = L - 1.
        ``shifted``: the logits were kept for the T positions that predict
        ``input_ids`` (already cut to those T targets), so they pair one to one.

        ``cross_entropy`` fuses log-softmax and pick, forward and backward (2.1x
        faster than gather + logsumexp on a 4 x 290 x 32k micro-batch); rows go in
        groups whose fp32 copy stays under :data:`LOGPROB_CHUNK_BYTES`, so a large
        vocabulary never doubles the logits' memory.
        """
        import torch
        import torch.nn.functional as F

        z_all = logits if shifted else logits[:, :-1]
        targets = input_ids if shifted else input_ids[:, 1:]
        row_bytes = max(1, z_all.shape[1] * z_all.shape[2] * 4)
        per = max(1, LOGPROB_CHUNK_BYTES // row_bytes)
        out = [
            -F.cross_entropy(z.float().flatten(0, 1), t.flatten(), reduction="none").view(t.shape)
            for z, t in zip(z_all.split(per, 0), targets.split(per, 0), strict=True)
        ]
        return torch.cat(out) if len(out) > 1 else out[0]

    def _forward_logits(self, inputs: dict[str, Any], keep: Any = None) -> Any:
        """Logits of every position, or of the hidden-state positions in ``keep`` only.

        ``keep`` (a 1-D tensor of positions) goes to the model as ``logits_to_keep``:
        the output head and the log-softmax over the vocabulary then run only where
        a trained token is predicted, not over the prompt (on SmolLM2 the head is a
        fifth of the model's matmul work and its logits the largest tensor).
        """
        kwargs = {"use_cache": False}
        if keep is not None:
            kwargs["logits_to_keep"] = keep
        if self.autocast:
            with self._autocast(), self._head_reads():
                return self.model(**inputs, **kwargs).logits.float()
        return self.model(**inputs, **kwargs).logits

    def _keeps_logits(self) -> bool:
        """Whether this model's forward takes ``logits_to_keep`` (Transformers >= 4.50)."""
        if self._logits_to_keep is None:
            import inspect

            forward = self.model.get_base_model().forward
            self._logits_to_keep = "logits_to_keep" in inspect.signature(forward).parameters
        return self._logits_to_keep

    # ---- the body and the head apart (round start and drift) ----------------------

    def _body_head(self) -> tuple[Any, Any] | None:
        """``(body, head)`` when this model's logits are exactly
        ``head(body(...).last_hidden_state)`` (checked once on a few tokens against the
        model's own output), else None. Why: the reference states kept for drift are
        then the hidden size wide, not the vocabulary, and no forward outside
        training holds a batch's whole logits (the head runs a few positions at a time).
        """
        if self._split is False:
            self._split = self._check_split()
        return self._split  # type: ignore[return-value]

    def _check_split(self) -> tuple[Any, Any] | None:
        import torch

        base = self.model.get_base_model()
        body, head = getattr(base, "model", None), base.get_output_embeddings()
        if body is None or head is None or getattr(head, "weight", None) is None:
            return None
        ids = (torch.arange(1, 9, device=self.device) % max(int(self.vocab_size or 2), 2))[None]
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                  "position_ids": torch.arange(8, device=self.device)[None]}
        training = self.model.training  # a step's dropout mode is the caller's to keep
        self.model.eval()
        try:
            with torch.no_grad(), self._autocast():
                want = self.model(**inputs, use_cache=False).logits.float()
                got = head(body(**inputs, use_cache=False).last_hidden_state).float()
        except Exception:  # any surprise: the whole-model path is always right
            return None
        finally:
            self.model.train(training)
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
            return None
        return body, head

    def _autocast(self) -> Any:
        import torch

        if self.autocast:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _head_reads(self) -> Any:
        """The output head's matmuls read a bf16 weight under autocast (:mod:`.torch_head`):
        one cast for a whole pass or greedy answer, not one per chunk or decoding step."""
        import torch

        low = torch.bfloat16 if self.autocast else None
        return head_in(self.model.get_base_model(), low)

    def _hidden(self, inputs: dict[str, Any]) -> Any:
        """(B, W, X) states whose :meth:`_head` is the logits: the last hidden state,
        or (no split) the logits themselves."""
        split = self._body_head()
        if split is None:
            return self._forward_logits(inputs)
        with self._autocast():
            return split[0](**inputs, use_cache=False).last_hidden_state

    def _head(self, states: Any) -> Any:
        """fp32 logits of (N, X) states (the output head, as the whole model applies it).
        Its callers, a pass a chunk of positions at a time, hold :meth:`_head_reads` for the
        whole pass, so the head's bf16 weight is made once, not once a chunk."""
        split = self._body_head()
        if split is None:
            return states.float()
        with self._autocast():
            return split[1](states).float()

    def _head_chunk(self) -> int:
        """Positions per head call: fp32 logits under :data:`HEAD_CHUNK_BYTES` (or
        :data:`HEAD_CHUNK_BYTES_TIGHT` in a round whose memory is tight)."""
        budget = HEAD_CHUNK_BYTES_TIGHT if self.tight else HEAD_CHUNK_BYTES
        return max(1, budget // (4 * max(int(self.vocab_size or 1), 1)))

    def logprobs(self, batch: Any, *, adapter: bool) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        self.model.eval()
        inputs = self._inputs(batch)
        ctx = contextlib.nullcontext() if adapter else self.model.disable_adapter()
        real = inputs["attention_mask"][:, 1:] > 0
        with torch.no_grad(), ctx, self._head_reads():
            hidden = self._hidden(inputs)[:, :-1]
            # the drift set's turns: their reference states serve every drift measurement
            self.reference.keep("parent" if adapter else "base", batch, hidden, _take_row)
            at = real.flatten().nonzero().squeeze(1)
            flat, targets = hidden.flatten(0, 1), inputs["input_ids"][:, 1:].flatten()
            lp = torch.zeros(real.numel(), dtype=torch.float32, device=hidden.device)
            for pos in at.split(self._head_chunk()):
                lp[pos] = -F.cross_entropy(self._head(flat[pos]), targets[pos], reduction="none")
        return lp.view(real.shape).cpu().numpy().astype(np.float32)

    def _reference_states(self, kind: str, batch: Any, like: Any, compute: Any) -> Any:
        """The base's or parent's (B, W-1, X) states: kept rows, else ``compute()``."""
        rows = self.reference.lookup(kind, batch)
        if rows is None:
            states = compute()[:, :-1]
            self.reference.keep(kind, batch, states, _take_row, parent_loaded=True)
            return states
        out = like.new_zeros(like.shape, dtype=rows[0].dtype)
        for r, row in enumerate(rows):
            out[r, : row.shape[0]] = row
        return out

    # ---- training -------------------------------------------------------------------

    def accumulate(
        self,
        batch: Any,
        old: np.ndarray,
        base: np.ndarray,
        adv: np.ndarray,
        weight: np.ndarray,
    ) -> dict[str, float]:
        if float(self.hyper.dropout) > 0:
            self.model.train()
        else:
            self.model.eval()  # no dropout: eval keeps n identical to the o computed in eval
        inputs = self._inputs(batch)
        tight = self.recomputes(inputs["input_ids"].shape[1])
        self._hand_back_freed_memory(tight)  # also where no round plan ran (benches)
        recomputed = recompute_blocks(self.model, tight)
        try:
            return self._accumulate(batch, inputs, old, base, adv, weight)
        finally:
            recomputed()

    def _accumulate(self, batch: Any, inputs: dict[str, Any], old: np.ndarray,
                    base: np.ndarray, adv: np.ndarray, weight: np.ndarray) -> dict[str, float]:
        import torch
        from rltray.trainer.objective import mispo_loss_torch

        mask = np.asarray(batch.response_mask, dtype=np.float32)[:, 1:]
        split = self._body_head()
        head_w = getattr(split[1], "weight", None) if split else None
        if split is not None and getattr(split[1], "bias", None) is None and head_w is not None:
            # The head and its log-softmax only where a token is trained, a few
            # positions at a time, never the batch's logits (HeadLogprob)
            first = first_trained_column(mask)
            hidden = self._hidden(inputs)[:, first:-1]
            trained = torch.as_tensor(mask[:, first:] > 0, device=self.device)
            at = trained.flatten().nonzero().squeeze(1)
            picked = HeadLogprob.apply(
                hidden.flatten(0, 1)[at], inputs["input_ids"][:, first + 1 :].flatten()[at],
                head_w, self._head_chunk(), torch.bfloat16 if self.autocast else None)
            n = picked.new_zeros(trained.numel()).index_copy(0, at, picked).view(trained.shape)
        else:
            # Only the columns from the first trained token on carry loss: the prompt
            # before it gets no logits (same maths: masked columns add exactly nothing).
            first = first_trained_column(mask) if self._keeps_logits() else 0
            keep = torch.arange(first, mask.shape[1], device=self.device) if first > 0 else None
            logits = self._forward_logits(inputs, keep)
            ids = inputs["input_ids"]
            n = (
                self._token_logprobs(logits, ids)
                if keep is None
                else self._token_logprobs(logits, ids[:, first + 1 :], shifted=True)
            )
        loss, stats = mispo_loss_torch(
            n,
            np.asarray(old, dtype=np.float32)[:, first:],
            np.asarray(base, dtype=np.float32)[:, first:],
            mask[:, first:],
            np.asarray(adv, dtype=np.float32),
            np.asarray(weight, dtype=np.float32),
            self.hyper,
        )
        loss.backward()
        self.model.eval()
        return stats

    def current_lr(self, step_index: int) -> float:
        """Linear warm-up over ``warmup_steps`` optimizer steps (1-based), then constant."""
        warm = int(self.hyper.warmup_steps)
        lr = float(self.hyper.lr)
        if warm > 0 and step_index <= warm:
            return lr * step_index / warm
        return lr

    def step(self) -> dict[str, float]:
        import torch

        lr = self.current_lr(self.steps_done + 1)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        norm = torch.nn.utils.clip_grad_norm_(self.params, float(self.hyper.grad_clip))
        grad_norm = float(norm)
        if not np.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(
                "the gradient became NaN or infinite; lower the learning rate and retry"
            )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        return {"grad_norm": grad_norm, "lr": lr}

    # ---- evaluation -----------------------------------------------------------------

    def greedy(self, prompts: list[list[int]], max_new_tokens: int, stop: set[int],
               adapter: bool = False) -> list[list[int]]:
        """Greedy answers to all prompts in one left-padded batch (Transformers'
        ``generate``, from a fresh config so no sampling setting of the model's
        own generation config creeps in). On a CPU one decoding step of SmolLM2
        costs about as much for 8 rows as for 1: batched, the check is ~8x cheaper."""
        import torch
        from transformers import GenerationConfig

        if not prompts:
            return []
        self.model.eval()
        pad = next((t for t in (getattr(self.tokenizer, "pad_token_id", None),
                                getattr(self.tokenizer, "eos_token_id", None))
                    if isinstance(t, int)), 0)
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[r, width - len(p):] = 1
        config = GenerationConfig(max_new_tokens=int(max_new_tokens), do_sample=False,
                                  eos_token_id=sorted(stop) or None, pad_token_id=pad)
        lora = contextlib.nullcontext() if adapter else self.model.disable_adapter()
        with torch.no_grad(), lora, self._autocast(), self._head_reads():
            out = self.model.generate(input_ids=ids.to(self.device),
                                      attention_mask=mask.to(self.device),
                                      generation_config=config)
        return [_cut_at_stop([int(t) for t in row[width:]], stop) for row in out]

    def kl_to_base(self, texts: list[str]) -> float:
        import torch
        from rltray.trainer.evaluate import kl_sum_torch

        self.model.eval()
        total, count = 0.0, 0.0
        size = max(1, int(self.hyper.batch_size))
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id or 0
        for start in range(0, len(texts), size):
            encoded = [
                self.tokenizer(t, add_special_tokens=True)["input_ids"][
                    : int(self.hyper.max_seq_len)
                ]
                for t in texts[start : start + size]
            ]
            encoded = [e for e in encoded if len(e) >= 2]
            if not encoded:
                continue
            length = max(len(e) for e in encoded)
            ids = np.full((len(encoded), length), pad, dtype=np.int64)
            am = np.zeros((len(encoded), length), dtype=np.int64)
            for i, e in enumerate(encoded):
                ids[i, : len(e)] = e
                am[i, : len(e)] = 1
            pos = np.where(am > 0, np.cumsum(am, axis=1) - 1, 0)
            inputs = {
                "input_ids": torch.from_numpy(ids).to(self.device),
                "attention_mask": torch.from_numpy(am).to(self.device),
                "position_ids": torch.from_numpy(pos).to(self.device),
            }
            with torch.no_grad():
                lp = self._forward_logits(inputs)
                with self.model.disable_adapter():
                    lq = self._forward_logits(inputs)
            s, c = kl_sum_torch(lp[:, :-1], lq[:, :-1], torch.from_numpy(am[:, 1:]))
            total += s
            count += c
        return total / count if count else 0.0

    def lora_state(self) -> dict[str, np.ndarray]:
        return {
            name: p.detach().float().cpu().numpy().copy()
            for name, p in sorted(self._named_lora_params().items())
        }

    def set_lora_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        live = self._named_lora_params()
        unknown = sorted(set(state) - set(live))
        if unknown:
            raise ValueError(f"LoRA tensor {unknown[0]} is not in this model")
        with torch.no_grad():
            for name, p in live.items():
                if name in state:
                    p.copy_(torch.from_numpy(np.asarray(state[name], dtype=np.float32)))
                elif ".lora_B." in name:
                    p.zero_()

    def drift_sums(self, batch: Any, parent: dict[str, np.ndarray] | None, *,
                   logprobs: bool = False, positions: np.ndarray | None = None
                   ) -> dict[str, Any]:
        import torch
        import torch.nn.functional as F
        from rltray.trainer.evaluate import kl_positions_torch, masked_sum_torch

        self.model.eval()
        inputs = self._inputs(batch)
        resp = np.asarray(batch.response_mask, dtype=np.float32)[:, 1:]
        prompt = np.asarray(batch.attention_mask, dtype=np.float32)[:, 1:] - resp
        out: dict[str, Any] = {}
        with torch.no_grad(), self._head_reads():
            new = self._hidden(inputs)[:, :-1]

            def base_forward() -> Any:
                with self.model.disable_adapter():
                    return self._hidden(inputs)

            def parent_forward() -> Any:
                current = self.lora_state()
                self.set_lora_state(parent)
                try:
                    return self._hidden(inputs)
                finally:
                    self.set_lora_state(current)

            base = self._reference_states("base", batch, new, base_forward)
            par = None
            if parent is not None:
                par = self._reference_states("parent", batch, new, parent_forward)
            # KL once per real position, the logits rebuilt a few positions at a time
            # (exact: the same head on the same states); then summed under each mask.
            # With no parent the round's KL *is* the total's (the parent is the base).
            real = inputs["attention_mask"][:, 1:] > 0
            if positions is not None:  # a sample of the positions (DriftSet.estimate)
                real = real & torch.as_tensor(positions, device=real.device)
            at = real.flatten().nonzero().squeeze(1)
            targets = inputs["input_ids"][:, 1:].flatten()
            flat = [x.flatten(0, 1) if x is not None else None for x in (new, base, par)]
            to_base = torch.zeros(real.numel(), dtype=torch.float64)
            to_par = to_base if parent is None else torch.zeros_like(to_base)
            lp = torch.zeros(real.numel(), dtype=torch.float32)
            for pos in at.split(self._head_chunk()):
                z, here = self._head(flat[0][pos]), pos.cpu()
                if logprobs:
                    lp[here] = -F.cross_entropy(z, targets[pos], reduction="none").cpu()
                to_base[here] = kl_positions_torch(z[None], self._head(flat[1][pos])[None])[0].cpu()
                if parent is not None:
                    to_par[here] = kl_positions_torch(z[None],
                                                      self._head(flat[2][pos])[None])[0].cpu()
            to_base, to_par = to_base.view(real.shape), to_par.view(real.shape)
            if logprobs:
                out["logprobs"] = lp.view(real.shape).numpy()
        if positions is not None:
            taken = real.cpu().numpy().astype(np.float32)
            resp, prompt = resp * taken, prompt * taken
        for where, mask in (("resp", resp), ("prompt", prompt)):
            out[f"{where}_round"], out[f"{where}_count"] = masked_sum_torch(to_par, mask)
            out[f"{where}_total"] = masked_sum_torch(to_base, mask)[0]
        if positions is not None:  # the sample's spread: DriftSet.estimate
            out["round_pos"], out["total_pos"] = to_par.numpy(), to_base.numpy()
        return out

    def lora_gradients(self) -> dict[str, np.ndarray]:
        """Accumulated gradients under PEFT names (tests, torch/MLX parity checks)."""
        return {
            name: p.grad.detach().float().cpu().numpy().copy()
            for name, p in sorted(self._named_lora_params().items())
            if p.grad is not None
        }

    def zero_grad(self) -> None:
        """Drop accumulated gradients without stepping (parity tests, aborted steps)."""
        self.optimizer.zero_grad(set_to_none=True)

    # ---- checkpoints ----------------------------------------------------------------

    def save_checkpoint(self, folder: Path) -> None:
        torch_checkpoint.save(Path(folder), self._named_lora_params(), self.optimizer,
                              self.steps_done)

    def load_checkpoint(self, folder: Path) -> None:
        self.steps_done = torch_checkpoint.load(Path(folder), self._named_lora_params(),
                                                self.optimizer)

def _cut_at_stop(tokens: list[int], stop: set[int]) -> list[int]:
    """``tokens`` up to and including the first stop token (a batch pads the rest)."""
    for j, token in enumerate(tokens):
        if token in stop:
            return tokens[: j + 1]
    return tokens


def _take_row(logits: Any, row: int, n: int) -> Any:
    """A copy of one row's first ``n`` positions (not a view that pins the batch)."""
    return logits[row, :n].clone()
