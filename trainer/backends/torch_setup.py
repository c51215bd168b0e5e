"""Where and how the torch backend runs: device + dtype, CPU threads, LoRA targets.

Split out of :mod:`.torch_peft` so the backend file holds the training door only;
these are plain functions tests can call without loading a model.
"""

from __future__ import annotations

import os
from typing import Any

from rltray.trainer.backends.base import job_error as _job_error
from rltray.trainer.backends.switches import env_switch

#: Module-path fragments that mark parts of a model LoRA must never touch: the token
#: embeddings, the output head, and non-text towers of multimodal models.
_EXCLUDED_FRAGMENTS = (
    "lm_head",
    "embed",
    "vision",
    "visual",
    "audio",
    "multi_modal_projector",
    "mm_projector",
    "image",
)


def first_sentence(exc: BaseException) -> str:
    """The first sentence of an exception's message: errors we print are one sentence."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    cut = text.find(". ")
    return text[: cut + 1] if cut > 0 else text


#: Set by the tray's runner for a round the scheduler started: such rounds start
#: only while the user is idle and are paused when they come back.
USER_AWAY_ENV = "RLTRAY_TRAINER_USER_AWAY"


def choose_threads(cores: int | None = None, load: float | None = None) -> int:
    """Torch CPU threads: ``RLTRAY_TRAINER_THREADS``, else the cores other work leaves idle.

    Physical, not logical, cores: hyper-threads add contention, not speed, for
    matmuls. ``cores`` and ``load`` default to this machine's physical cores and
    1-minute load average (:func:`machine_load`); see :func:`threads_for` for the rule.
    """
    env = os.environ.get("RLTRAY_TRAINER_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    if cores is None:
        cores = physical_cores()
    if load is None:
        load = machine_load()
    return threads_for(cores, load, os.environ.get(USER_AWAY_ENV) == "1")


def threads_for(cores: int, load: float, user_away: bool) -> int:
    """Threads for a round on ``cores`` physical cores while ``load`` of them are busy.

    Only idle cores get a thread: an OpenMP pool that wants a core something else
    is running on stalls at every barrier (measured on a busy 2-core box: a round
    took 75 s on 2 threads, 1 s on 1), so busy cores (the load average, rounded)
    are left out. A scheduled round (``RLTRAY_TRAINER_USER_AWAY=1``) runs only while
    the user is idle and is paused when they return, so it may take every idle core;
    any other round (*Train now*, a resume, the command line) runs while the user
    works and leaves one core free for them. Always at least one thread.
    """
    cores = max(1, int(cores))
    idle = cores - int(max(0.0, load) + 0.5)
    cap = cores if user_away else cores - 1
    return max(1, min(cap, idle))


def physical_cores() -> int:
    """Physical cores (psutil), else logical ones (``os.cpu_count``), else 1."""
    try:
        import psutil

        cores = psutil.cpu_count(logical=False)
    except Exception:
        cores = None
    return cores or os.cpu_count() or 1


def machine_load() -> float:
    """Runnable processes averaged over the last minute (0.0 where the OS cannot say).

    psutil's ``getloadavg`` also works on Windows (it samples the run queue from
    its first call, so there it reads 0.0 at first: every core counts as idle).
    """
    try:
        import psutil

        return float(psutil.getloadavg()[0])
    except Exception:
        try:
            return float(os.getloadavg()[0])
        except (AttributeError, OSError):
            return 0.0


def cpu_autocast(device: Any, dtype: Any) -> bool:
    """bf16 autocast for an fp32 model on a CPU with native bf16 matmuls (AVX512-BF16, AMX).

    LoRA's weights and AdamW's state stay fp32, and so do the embeddings and norms; the
    blocks' frozen linear weights and an untied output head are kept in bf16, the dtype
    every matmul reads them in (``torch_load.load_causal_lm``, ``torch_head``). The
    matmuls run in bf16, which such CPUs do at ~2.4x their fp32 rate (measured here: 204
    vs 85 GFLOP/s at one thread); a round trains 1.3x (60M) to 1.8x (a 0.5B shape)
    faster. The default (``RLTRAY_TRAINER_BF16`` unset or ``auto``) uses it where the
    CPU has native bf16: on SmolLM2 it learned as fp32 did on two seeds (preferred rate
    0.94 vs 0.86 and 0.92 vs 0.88; reference NLL +11.8 vs +10.4% and +5.0 vs +3.7%),
    though its log-probs carry ~0.01-0.05 nats of rounding. ``0`` keeps fp32, ``1``
    forces bf16 (slower on CPUs that emulate it); ``weights`` is :func:`cpu_dtype`'s.
    """
    import torch

    forced = env_switch("RLTRAY_TRAINER_BF16")
    if forced is False or device.type != "cpu" or dtype != torch.float32:
        return False
    if forced:
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def choose_device(requested: str) -> tuple[Any, Any]:
    """``(torch.device, dtype)``: cuda bf16 (fp32 if no bf16) > mps > cpu (:func:`cpu_dtype`)."""
    import torch

    requested = (requested or "auto").lower()
    if requested not in ("auto", "cpu", "cuda", "mps"):
        raise _job_error(f"device must be auto, cpu, cuda or mps, got {requested!r}")
    cuda = torch.cuda.is_available()
    mps = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    if requested == "cuda" and not cuda:
        raise _job_error("the job asks for device cuda but no CUDA GPU is available")
    if requested == "mps" and not mps:
        raise _job_error("the job asks for device mps but Apple MPS is not available")
    if requested == "cuda" or (requested == "auto" and cuda):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        return torch.device("cuda"), dtype
    if requested == "mps" or (requested == "auto" and mps):
        return torch.device("mps"), _mps_dtype()
    return torch.device("cpu"), cpu_dtype()


#: ``RLTRAY_TRAINER_BF16`` value that stores the frozen base in bf16 on a CPU.
BF16_WEIGHTS = "weights"


def cpu_dtype() -> Any:
    """The CPU base's dtype: fp32, or bf16 under ``RLTRAY_TRAINER_BF16=weights``.

    Why the option: the whole base in bf16, embeddings, norms and output head too (the
    default autocast round already keeps the blocks' linear weights in bf16), with no
    autocast: the residual stream and the norms then run in bf16 as well. The LoRA
    weights and AdamW stay fp32 (PEFT's adapter autocast, as on CUDA). Opt-in: on a
    16-core Xeon with AMX a SmolLM2-135M step took 0.85 s in bf16 weights against
    autocast's 0.65 s at 8 threads (bench/README.md, "bf16 steps on a CPU with native
    bf16"), so it buys memory, not speed; and a float16 GGUF base loses precision in
    bf16 (``gguf_base``'s docstring).
    """
    import torch

    env = os.environ.get("RLTRAY_TRAINER_BF16", "auto").strip().lower()
    return torch.bfloat16 if env == BF16_WEIGHTS else torch.float32


def _mps_dtype() -> Any:
    """bf16 on MPS when this macOS/torch supports it, else fp32."""
    import torch

    try:
        torch.ones(1, dtype=torch.bfloat16, device="mps").sum().item()
        return torch.bfloat16
    except Exception:
        return torch.float32


def block_linear_modules(model: Any, target: Any) -> dict[str, tuple[int, int]]:
    """Module path -> (out, in) of the linear layers LoRA trains.

    ``target`` ``"all-linear"``: every ``nn.Linear`` inside the transformer blocks
    (a path with a numeric block index), never embeddings, ``lm_head`` or
    vision/audio towers. A list of leaf names (``["q_proj", "v_proj"]``) narrows it.
    """
    import torch

    names = None if target in (None, "all-linear") else set(target)
    shapes: dict[str, tuple[int, int]] = {}
    for path, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        parts = path.split(".")
        lowered = path.lower()
        if not any(p.isdigit() for p in parts):
            continue  # not inside a block list (e.g. lm_head, a projector)
        if any(frag in lowered for frag in _EXCLUDED_FRAGMENTS):
            continue
        if names is not None and parts[-1] not in names:
            continue
        shapes[path] = (int(module.out_features), int(module.in_features))
    return shapes
