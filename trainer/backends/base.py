"""The one interface every training backend implements (torch + PEFT, MLX).

Why an ABC: :func:`rltray.trainer.train.train` is written once, against these
methods only, so the round loop (encoding, advantages, epochs, checkpoints, the
publish gate) cannot drift apart between backends. A backend owns exactly three
things: the model weights, the tensor library, and the optimizer.

Conventions shared by every method (see brief "Trainer contracts"):

* **Thread.** Every method is called from the single trainer thread that called
  ``load()``; backends need no locking. The only other thread in the trainer
  process is the parent-death watchdog, which never touches the backend.
* **Batches** are :class:`rltray.trainer.data.Batch` objects holding numpy arrays:
  ``input_ids`` int64 (B, L), ``attention_mask`` int64 (B, L), ``response_mask``
  float32 (B, L), ``position_ids`` int64 (B, L), ``example_idx`` list[int]; right
  padding. Backends convert them to their own tensors.
* **Token log-probs** are (B, L-1) float32 numpy arrays in natural-log units (nats):
  ``lp[b, j-1] = log p(input_ids[b, j] | input_ids[b, :j])``. The matching mask is
  ``response_mask[:, 1:]``; values outside it (prompt, padding) are finite but
  meaningless and must be ignored by callers.
* **LoRA tensor names** are PEFT names
  (``base_model.model.<module path>.lora_A.weight`` (r, in) and ``.lora_B.weight``
  (out, r)), fp32 numpy, whatever the backend stores internally; see
  :mod:`rltray.trainer.adapters`. The scale the model applies is ``alpha / rank``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from .reference_logits import ReferenceLogits


class Backend(ABC):
    """A base model + trainable LoRA + optimizer, behind a numpy-in / numpy-out door.

    Lifecycle: ``Backend(job, hyper)`` (cheap: no heavy imports, no model) ->
    ``load()`` -> any number of ``logprobs`` / ``accumulate`` / ``step`` /
    ``kl_to_base`` / ``lora_state`` / checkpoint calls, in one thread.
    """

    #: Short backend name as written in a job file ("torch", "mlx").
    name: str = ""

    #: Module path -> (out_features, in_features) of every linear layer LoRA may target
    #: (the base model's transformer-block linears), filled by :meth:`load`. The round
    #: loop passes it to ``adapters.validate_adapter`` for the shape sanity check.
    base_shapes: dict[str, tuple[int, int]] | None = None

    #: A Hugging Face tokenizer (``transformers.PreTrainedTokenizerBase``) — the same
    #: object type on both backends, so ``data.encode`` tokenises identically.
    #: ``None`` until :meth:`load` ran.
    tokenizer: Any = None

    #: The round's memory is tight and it runs lean (slower, in less memory), as
    #: :meth:`sequences_per_pass` decided from the round's widest sequence; the round
    #: tells the user so, since it explains a slower round.
    tight: bool = False

    def __init__(self, job: Any, hyper: Any) -> None:
        """Keep the job (``job.TrainJob``) and resolved ``presets.Hyper``; load nothing.

        Construction must stay cheap and import no tensor library, so that a bad
        job is reported before seconds of torch/MLX import time.
        """
        self.job = job
        self.hyper = hyper
        #: Reference states of the drift set's turns (see :mod:`.reference_logits`).
        self.reference = ReferenceLogits()

    @abstractmethod
    def load(self) -> None:
        """Load the tokenizer, the base model and a fresh LoRA; only LoRA is trainable.

        Rank, alpha, dropout and target modules come from ``self.hyper``; targets
        ``"all-linear"`` mean every linear layer of the transformer blocks
        (attention and MLP), never embeddings or ``lm_head``. When
        ``job.parent_adapter`` is set, that PEFT folder is validated and its
        weights are copied into the LoRA (training continues from the parent).
        The base model is loaded from a local folder or the local Hugging Face
        cache only (never the network); remote code runs only if
        ``job.trust_remote_code``. Creates a zero-state optimizer and seeds the
        backend's RNG from ``job.seed``.

        Raises ``job.JobError`` (one sentence) for a model or adapter the user must
        fix: unknown architecture, unloadable folder, mismatched or non-finite parent.
        """

    @abstractmethod
    def logprobs(self, batch: Any, *, adapter: bool) -> np.ndarray:
        """Per-token log-probs of ``batch.input_ids`` without gradient.

        Returns a (B, L-1) float32 numpy array in nats (see module docstring for the
        shift convention). ``adapter=False`` gives the base model ``f`` (LoRA
        disabled); ``adapter=True`` gives the current policy (base + LoRA as it is
        now). Dropout is off (eval mode) in both cases, so repeated calls agree.
        """

    @abstractmethod
    def accumulate(
        self,
        batch: Any,
        old: np.ndarray,
        base: np.ndarray,
        adv: np.ndarray,
        weight: np.ndarray,
    ) -> dict[str, float]:
        """Forward + backward of the MIS-PO loss for one micro-batch; gradients add up.

        ``old`` (o) and ``base`` (f) are (B, L-1) float32 log-probs from the start of
        the round; ``adv`` and ``weight`` are (B,) float32. ``weight`` is already
        normalised over the whole optimizer step (sums to 1 over the step, not the
        micro-batch), so summed micro-batch gradients equal the step's gradient.
        The loss mask is ``batch.response_mask[:, 1:]``. Calls
        ``objective.mispo_loss_<library>`` and returns its stats dict (python floats:
        loss, masked_tokens, gated_examples, drift, kl, adv_mean, tokens, examples).
        Does not step the optimizer.
        """

    @abstractmethod
    def step(self) -> dict[str, float]:
        """Apply the accumulated gradients once, then zero them.

        Clips the global gradient norm to ``hyper.grad_clip``; AdamW with bias
        correction, ``hyper.weight_decay`` (0 by default); learning rate linear
        warm-up over ``hyper.warmup_steps`` optimizer steps, then constant
        ``hyper.lr``. Returns ``{"grad_norm": norm before clipping, "lr": lr used}``.
        """

    @abstractmethod
    def kl_to_base(self, texts: list[str]) -> float:
        """Mean per-token KL(policy ‖ base) in nats, exact over the full vocabulary.

        Each text is tokenised plainly (no chat template), truncated to
        ``hyper.max_seq_len``; the mean is over every predicted position of every
        text. No gradient. Used by the publish gate's drift check.
        """

    @abstractmethod
    def lora_state(self) -> dict[str, np.ndarray]:
        """The current LoRA weights: PEFT tensor name -> fp32 numpy copy.

        ``lora_A`` is (r, in), ``lora_B`` (out, r); the dict is what
        ``adapters.write_adapter`` saves, so the written folder loads in PEFT.
        """

    @abstractmethod
    def save_checkpoint(self, folder: Path) -> None:
        """Save everything needed to continue bit-identically into ``folder``.

        LoRA weights, optimizer state (moments and step count), the backend's
        optimizer-step counter and its RNG state. The folder is created if
        missing; files are replaced atomically so a crash leaves the previous
        checkpoint readable. The round loop stores its own position separately.
        """

    @abstractmethod
    def load_checkpoint(self, folder: Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote, after :meth:`load`.

        Raises ``job.JobError`` when the checkpoint does not match the loaded
        model (different rank, targets or shapes).
        """

    @abstractmethod
    def set_lora_state(self, state: dict[str, np.ndarray]) -> None:
        """Load LoRA weights given under PEFT names (a :meth:`lora_state` dict).

        Modules missing from ``state`` get ``lora_B = 0`` (they add nothing), so a
        parent adapter that targeted fewer layers is reproduced exactly.
        """

    @abstractmethod
    def drift_sums(self, batch: Any, parent: dict[str, np.ndarray] | None, *,
                   logprobs: bool = False, positions: np.ndarray | None = None
                   ) -> dict[str, Any]:
        """Exact KL sums of the current policy against the parent and the base, no gradient.

        ``parent`` is the parent's LoRA state (``None``: the parent is the base).
        Returns ``resp_round``, ``resp_total`` (Σ over response positions of
        KL(policy ‖ parent) and KL(policy ‖ base)), ``resp_count``, and the same at
        prompt positions (``prompt_round``, ``prompt_total``, ``prompt_count``). The
        policy's own weights are unchanged afterwards. ``logprobs``: also
        ``"logprobs"``, what ``logprobs(batch, adapter=True)`` gives, from the same
        forward (the gate's held-out scores need it on the same turns).
        ``positions``: a (B, L-1) bool mask; the KL is taken (and counted) there only
        (a sample of positions: :meth:`.drift.DriftSet.estimate`), and the result also
        holds ``round_pos`` and ``total_pos``, the (B, L-1) float64 per-position KL (0
        where not taken), from which the sample's error is estimated.
        """

    def greedy(self, prompts: list[list[int]], max_new_tokens: int, stop: set[int],
               adapter: bool = False) -> list[list[int]]:
        """Greedy answers (no gradient), one per prompt: the base model's (LoRA off), or
        with ``adapter`` the adapter's (the gate's degenerate-answer check).

        At most ``max_new_tokens`` new token ids each, ending with the first one in
        ``stop`` when the model writes it. The capability check
        (:mod:`rltray.trainer.capability`) scores these answers at round start and
        end. Decoding one token costs about as much for a batch as for one prompt
        (it reads every weight once), so backends that can batch should.
        """
        raise NotImplementedError(f"the {self.name} backend cannot generate")

    # ---- optional helpers with a shared default -------------------------------------

    def model_folder(self) -> Path:
        """The local folder holding the base model (see :func:`resolve_model_folder`)."""
        return resolve_model_folder(self.job.base_model, getattr(self.job, "revision", None))

    @property
    def vocab_size(self) -> int | None:
        """Width of the logits once loaded (None: unknown, nothing is kept)."""
        return None

    @property
    def reference_width(self) -> int | None:
        """Values per position of the reference states :attr:`reference` keeps: the
        hidden size where the backend rebuilds logits from them with its output head,
        else the vocabulary (it keeps logits). None: nothing is kept."""
        return self.vocab_size

    @property
    def numerics(self) -> str:
        """What decides this backend's numbers besides the weights and the input: device
        and precision, not the thread count (kept greedy answers are keyed on it,
        :mod:`rltray.trainer.base_answers`)."""
        return self.device_name

    @property
    def device_name(self) -> str:
        """Where the model runs, in words (``"cuda bf16"``, ``"cpu fp32"``), for logs."""
        return self.name

    def sequences_per_pass(self, width: int, wanted: int) -> int:
        """How many sequences of up to ``width`` tokens one training forward pass takes:
        ``wanted`` (``hyper.batch_size``) unless the backend knows it would not fit."""
        return max(1, int(wanted))


def first_trained_column(mask: np.ndarray) -> int:
    """The first column of a (B, T) response mask that any row trains; 0 when none.

    Columns before it carry no loss in any row, so a training step may skip the
    output head and the log-softmax there (both backends do).
    """
    cols = np.flatnonzero(np.asarray(mask).any(axis=0))
    return int(cols[0]) if cols.size else 0


def resolve_model_folder(base_model: str | Path, revision: str | None = None) -> Path:
    """A local folder for ``base_model``: the folder itself, the local HF cache snapshot,
    or for a GGUF file the HF folder it is materialized into once (``gguf_base``).

    Never touches the network (``local_files_only``): the trainer runs offline and
    must not download gigabytes behind the user's back. Raises ``job.JobError``
    with one sentence when the model is neither a folder nor in the cache.
    """
    path = Path(base_model).expanduser()
    if path.is_file():  # a GGUF (e.g. the blob Ollama serves): its cached HF folder
        from rltray.trainer import gguf_base

        if not gguf_base.is_gguf(path):
            raise job_error(f"the base model {path} is a file but not a GGUF model")
        try:
            return gguf_base.materialize(path)
        except gguf_base.GGUFBaseError as exc:
            raise job_error(str(exc).rstrip(".")) from exc
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise job_error(f"the base model folder {path} has no config.json")
        return path
    if (
        path.is_absolute()
        or str(base_model).startswith((".", "~"))
        or str(base_model).count("/") > 1
    ):
        raise job_error(f"the base model folder {base_model} does not exist")
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(str(base_model), revision=revision, local_files_only=True))
    except Exception as exc:
        raise job_error(
            f"the base model {base_model} is neither a folder nor in the local Hugging Face "
            f"cache ({type(exc).__name__}); download it first"
        ) from exc
    if not (folder / "config.json").is_file():
        raise job_error(f"the cached base model {base_model} has no config.json")
    return folder


def read_base_config(folder: Path) -> dict[str, Any]:
    """The base model's ``config.json`` as a dict (``job.JobError`` if unreadable)."""
    import json

    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise job_error(f"the base model's config.json in {folder} is unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise job_error(f"the base model's config.json in {folder} is not a JSON object")
    return data


def job_error(message: str) -> Exception:
    """A ``job.JobError`` (imported lazily: backends load before the job module is needed)."""
    from rltray.trainer.errors import JobError

    return JobError(message)


def read_parent_adapter(
    folder: Path, base_shapes: dict[str, tuple[int, int]]
) -> tuple[int, float, dict[str, np.ndarray]]:
    """The parent adapter a round continues: its ``r``, ``lora_alpha`` and tensors,
    checked against the base's linear layers first.

    The parent's own ``r`` and ``lora_alpha`` win over the preset's on every backend:
    the round continues the parent's function, so its scale must stay what it was.
    Every problem is reported in one JobError.
    """
    from .. import adapters

    folder = Path(folder)
    if not folder.is_dir():
        raise job_error(f"the parent adapter folder {folder} does not exist")
    problems = adapters.validate_adapter(folder, base_shapes=base_shapes, require_metadata=False)
    if problems:
        raise job_error(f"the parent adapter {folder} cannot be used: " + "; ".join(problems))
    cfg = adapters.read_adapter_config(folder)
    return int(cfg["r"]), float(cfg["lora_alpha"]), adapters.load_adapter_tensors(folder)


def checkpoint_mismatch(
    saved: dict[str, tuple[int, ...]], live: dict[str, tuple[int, ...]]
) -> list[str]:
    """Why a checkpoint's LoRA tensors (name -> shape) cannot go into the loaded model's,
    one phrase per tensor; empty when they fit. A resumed round must train the very
    tensors it paused, so nothing is skipped or reshaped."""
    problems = [f"{k} is missing" for k in sorted(set(live) - set(saved))]
    problems += [f"{k} is not in this model" for k in sorted(set(saved) - set(live))]
    problems += [
        f"{k} has shape {tuple(saved[k])}, the model has {tuple(live[k])}"
        for k in sorted(set(live) & set(saved))
        if tuple(saved[k]) != tuple(live[k])
    ]
    return problems
