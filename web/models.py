"""What could be trained, what Ollama serves, whether the two match, and whether it fits in memory.

Reads files and asks Ollama's HTTP API only; nothing here imports torch or
transformers (the service process never does). A model is a folder with a
``config.json`` (Hugging Face layout, as the trainer loads it): found in the
Hugging Face cache, in folders the user names, and MLX conversions (the same
layout with a ``quantization`` entry). Ollama is asked with ``/api/tags`` and
``/api/show`` when it runs; when it does not, the wizard says so and goes on.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

OLLAMA_TIMEOUT_S = 3.0
TRAIN_BYTES_PER_PARAM = 2.0  # bf16 weights; LoRA's own weights and optimizer are small
TRAIN_OVERHEAD = 1.3  # activations, the tokenizer, the reference model's logits
# the runtime, plus up to 0.5 GiB of the drift turns' reference logits the trainer
# keeps (trainer/backends/reference_logits.py: BUDGET_BYTES)
TRAIN_EXTRA_GIB = 1.5


def hf_cache(env: Mapping[str, str]) -> Path:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    home = Path(env.get("HOME") or Path.home())
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "huggingface" / "hub"


def describe_folder(
    folder: Path, source: str = "folder", name: str | None = None
) -> dict[str, Any]:
    """One model folder's shape from its config.json; ``error`` says why it cannot be trained."""
    info: dict[str, Any] = {"path": str(folder), "name": name or folder.name, "source": source}
    try:
        config = json.loads((folder / "config.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        info["error"] = f"{folder} has no readable config.json ({type(exc).__name__})."
        return info
    if not isinstance(config, dict):
        info["error"] = f"{folder}/config.json is not a JSON object."
        return info
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    arch = config.get("architectures") or []
    info.update(
        {
            "model_type": text.get("model_type") or config.get("model_type"),
            "architecture": arch[0] if arch else None,
            "layers": text.get("num_hidden_layers"),
            "hidden_size": text.get("hidden_size"),
            "vocab_size": text.get("vocab_size") or config.get("vocab_size"),
            "mlx": "quantization" in config or source == "mlx",
        }
    )
    weights = [p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf")]
    info["weights_bytes"] = sum(p.stat().st_size for p in weights if p.is_file())
    info["params"] = estimate_params(info)
    if "quantization" in config:
        info["source"] = "mlx"
    return info


def estimate_params(info: Mapping[str, Any]) -> int | None:
    """A transformer's parameter count from its shape (12·L·h² + vocab·h), for the memory figure."""
    layers, hidden, vocab = info.get("layers"), info.get("hidden_size"), info.get("vocab_size")
    if not all(isinstance(x, int) and x > 0 for x in (layers, hidden, vocab)):
        return None
    return int(12 * layers * hidden * hidden + 2 * vocab * hidden)  # type: ignore[operator]


def scan(
    env: Mapping[str, str], roots: Iterable[str | os.PathLike[str]] = ()
) -> list[dict[str, Any]]:
    """Every trainable-looking model: the Hugging Face cache, then the given folders."""
    found: list[dict[str, Any]] = []
    cache = hf_cache(env)
    if cache.is_dir():
        for repo in sorted(cache.glob("models--*")):
            snapshots = sorted(
                (p for p in (repo / "snapshots").glob("*") if (p / "config.json").is_file()),
                key=lambda p: p.stat().st_mtime,
            )
            if snapshots:
                name = repo.name.removeprefix("models--").replace("--", "/")
                source = "mlx" if name.lower().startswith("mlx-community/") else "huggingface"
                found.append(describe_folder(snapshots[-1], source, name))
    for root in roots:
        base = Path(root).expanduser()
        if (base / "config.json").is_file():
            found.append(describe_folder(base))
        elif base.is_dir():
            for child in sorted(base.iterdir()):
                if (child / "config.json").is_file():
                    found.append(describe_folder(child))
    return found


# -- Ollama -------------------------------------------------------------------------


def _ollama(host: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        host.rstrip("/") + path,
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=OLLAMA_TIMEOUT_S) as response:
        return json.loads(response.read() or b"null")


def ollama_models(host: str) -> dict[str, Any]:
    """``{"running", "models": [...], "error"}``; each model with its shape from /api/show."""
    try:
        tags = _ollama(host, "/api/tags")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {
            "running": False,
            "models": [],
            "error": f"Ollama does not answer at {host} ({reason}); start it to pair a model.",
        }
    models = []
    for entry in (tags or {}).get("models") or []:
        name = entry.get("name") or entry.get("model")
        if not name:
            continue
        model = {"name": name, "size": entry.get("size")}
        try:
            model.update(ollama_shape(_ollama(host, "/api/show", {"model": name}) or {}))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            model["error"] = f"/api/show failed: {exc}"
        models.append(model)
    return {"running": True, "models": models, "error": None}


def ollama_shape(show: Mapping[str, Any]) -> dict[str, Any]:
    """Architecture, layers, hidden size and vocabulary from an /api/show answer's model_info."""
    info = show.get("model_info") or {}
    arch = info.get("general.architecture")
    vocab = info.get(f"{arch}.vocab_size")
    tokens = info.get("tokenizer.ggml.tokens")
    if vocab is None and isinstance(tokens, list) and tokens:
        vocab = len(tokens)
    details = show.get("details") or {}
    return {
        "architecture": arch,
        "layers": info.get(f"{arch}.block_count"),
        "hidden_size": info.get(f"{arch}.embedding_length"),
        "vocab_size": vocab,
        "parameter_size": details.get("parameter_size"),
        "quantization": details.get("quantization_level"),
    }


# Ollama's GGUF architecture names for Hugging Face model_type values that differ.
_ARCH_ALIASES = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gpt_oss": "gptoss"}


def pair(model: Mapping[str, Any], ollama: Mapping[str, Any]) -> list[str]:
    """Why an adapter trained on ``model`` would not fit ``ollama``; one sentence each."""
    problems = []
    ours = str(model.get("model_type") or "").lower()
    theirs = str(ollama.get("architecture") or "").lower()
    if ours and theirs and _ARCH_ALIASES.get(ours, ours) != theirs:
        problems.append(
            f"Architecture differs: the trainable model is {ours}, Ollama's is {theirs}."
        )
    for key, what in (
        ("layers", "layers"),
        ("hidden_size", "hidden size"),
        ("vocab_size", "vocabulary"),
    ):
        a, b = model.get(key), ollama.get(key)
        if a is not None and b is not None and int(a) != int(b):
            problems.append(f"The {what} differs: {a} in the trainable model, {b} in Ollama's.")
    return problems


def _count(params: int) -> str:
    if params >= 1e9:
        return f"{params / 1e9:.3g} billion"
    if params >= 1e6:
        return f"{params / 1e6:.3g} million"
    return f"{params:,}"


def memory_fit(model: Mapping[str, Any], total_bytes: int | None) -> dict[str, Any]:
    """Whether training ``model`` fits this machine's memory, with the figure either way."""
    params = model.get("params")
    if not params:
        weights = model.get("weights_bytes") or 0
        params = int(weights / TRAIN_BYTES_PER_PARAM) if weights else None
    if not params:
        return {"fits": None, "message": "Its size is unknown, so the memory needed is too."}
    need = params * TRAIN_BYTES_PER_PARAM * TRAIN_OVERHEAD + TRAIN_EXTRA_GIB * 2**30
    need_gib = need / 2**30
    have_gib = (total_bytes or 0) / 2**30
    if not total_bytes:
        message = f"Training needs about {need_gib:.1f} GB; this machine's memory is unknown."
        return {"fits": None, "need_gib": need_gib, "message": message}
    fits = need <= 0.8 * total_bytes
    verdict = "fits" if fits else "does not fit"
    return {
        "fits": fits,
        "need_gib": round(need_gib, 1),
        "have_gib": round(have_gib, 1),
        "message": (
            f"{_count(params)} parameters: training needs about {need_gib:.1f} GB and this "
            f"machine has {have_gib:.1f} GB, so it {verdict}."
        ),
    }
