"""What could be trained here, whether it pairs with an Ollama model, and whether it fits.

Reads files only; nothing here imports torch or transformers (the service process
never does). A trainable model is either a folder with a ``config.json`` (Hugging
Face layout, as the trainer loads it: found in the Hugging Face cache, in folders
the user names, and MLX conversions, the same layout with a ``quantization``
entry) or a GGUF file, which the trainer materializes once into such a folder
(``trainer/gguf_base.py``) — the file Ollama serves is one. Ollama's own models
are listed by ``ollama_models``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rltray.app import basemodel, modelfiles

# The memory a round needs, from measured peaks of the trainer process (torch on a CPU,
# fp32 weights; bench/README.md, scale_shapes.py): a whole balanced round on SmolLM2-135M
# peaked at 1.78 GiB (one sequence a training pass), one training step of a 300-token
# answer on the Llama-3.2-3B shape at 16.0 and 17.7 GiB in two runs (its blocks
# recomputed, as the trainer does where one sequence's activations would take over a
# quarter of the free memory), the 1.5B shape's step at 8.97 GiB. A line over the fp32
# weights through SmolLM2's round and the 3B step plus the ~1 GiB a round adds to a step
# (reference states, greedy answers): 1.3 GiB + 1.45 x the weights. MLX (bf16 weights) and
# a GPU need less: on an H200 a whole balanced round of 32 x 300 tokens held 2.3, 4.6, 10.1
# and 16.1 GiB of GPU memory on the 135M, 0.5B, 1.5B and 3B shapes (bf16; bench/README.md,
# "Whole rounds on a CUDA GPU"), and the trainer process under 3 GiB of RAM. So does a CPU
# with native bf16, where the trainer keeps the base's matmul weights in bf16: a SmolLM2
# round 2.09 GiB, a 3B step 10.1 GiB (bench/README.md, "The base's matmul weights in bf16
# under autocast"). This process cannot tell which the trainer will pick without importing
# torch, so the estimate stays the fp32 one, an upper bound; a measured round replaces it.
BASE_GIB = 1.3
BYTES_PER_PARAM = 4 * 1.45
# Where that does not fit, the trainer runs the round lean on its own (trainer/backends/
# lean.py: blocks recomputed, freed memory back to the OS; its log says so), and since the
# weights load without their file beside them (trainer/backends/torch_load.py) a lean
# round's peak is its training passes': a whole SmolLM2-135M round peaked at 1.07 GiB, the
# Llama-3.2-3B shape's lean passes at 13.64 GiB (its load at 12.36), plus ~0.5 GiB for
# what a round adds to a pass: a line through both, 0.5 GiB + 1.14 x the fp32 weights
# (bench/README.md, "The load without its file").
LEAN_BASE_GIB = 0.5
LEAN_BYTES_PER_PARAM = 4 * 1.14
#: a lean round's wall time against the default's (SmolLM2: 414.6 vs 254.9 s)
LEAN_SLOWER = 1.6
#: the share of the machine's memory a round may take while the user's other work goes on
FIT_SHARE = 0.8


def describe_folder(
    folder: Path, source: str = "folder", name: str | None = None
) -> dict[str, Any]:
    """One model folder's shape from its config.json; ``error`` says why it cannot be trained."""
    info: dict[str, Any] = {"path": str(folder), "name": name or folder.name, "source": source}
    try:
        config = json.loads((folder / "config.json").read_text("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # (JSON nested 10**5 deep)
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
    info["params"] = modelfiles.safetensors_params(folder) or estimate_params(text)
    if "quantization" in config:
        info["source"] = "mlx"
    return info


def describe_gguf(path: Path, source: str = "gguf", name: str | None = None) -> dict[str, Any]:
    """One GGUF file's shape from its header; ``error`` says why it cannot be trained."""
    info: dict[str, Any] = {"path": str(path), "name": name or path.name, "source": source}
    try:  # gguf_header raises nothing else, whatever a crafted file holds (review2-sec)
        head = modelfiles.gguf_header(path)
        size = path.stat().st_size
    except modelfiles.ModelFileError as exc:
        info["error"] = str(exc).rstrip(".") + "."
        return info
    except OSError as exc:  # gone between the header and the size
        info["error"] = f"{path} cannot be read ({exc.strerror or exc})."
        return info
    info.update({k: head[k] for k in ("architecture", "layers", "hidden_size", "vocab_size")})
    info["gguf"] = True
    info["params"] = head["params"] or None
    info["weights_bytes"] = size
    return info


def describe(path: Path, source: str | None = None, name: str | None = None) -> dict[str, Any]:
    """A model folder or a GGUF file, whichever ``path`` is."""
    if path.is_file():
        return describe_gguf(path, source or "gguf", name)
    return describe_folder(path, source or "folder", name)


def trainable_problem(value: str) -> str | None:
    """Why ``value`` cannot be chosen as the model to train (None: it can); the same
    check as `rltray config set` and the settings page (app/basemodel.py)."""
    return basemodel.problem(value) if value.strip() else basemodel.NOT_CHOSEN


def estimate_params(config: Mapping[str, Any]) -> int | None:
    """A decoder's parameter count from its config.json, where no safetensors header says it.

    Attention (grouped-query aware), the gated MLP, norms, and the embedding once more
    only when the output head is not tied to it.
    """
    layers = config.get("num_hidden_layers")
    hidden = config.get("hidden_size")
    vocab = config.get("vocab_size")
    if not all(isinstance(x, int) and x > 0 for x in (layers, hidden, vocab)):
        return None
    heads = config.get("num_attention_heads") or 1
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    mlp = config.get("intermediate_size") or 4 * hidden
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    per_layer = attention + 3 * hidden * mlp + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return int(layers * per_layer + embeddings + hidden)


def _gguf_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.gguf") if p.is_file() and modelfiles.is_gguf(p))


def scan(
    env: Mapping[str, str], roots: Iterable[str | os.PathLike[str]] = ()
) -> list[dict[str, Any]]:
    """Every trainable-looking model: the Hugging Face cache, then the given places.

    A place is a model folder, a GGUF file, or a folder of either (one level down).
    """
    found: list[dict[str, Any]] = []
    cache = basemodel.hf_cache(env)
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
        if base.is_file():
            found.append(describe_gguf(base))
        elif (base / "config.json").is_file():
            found.append(describe_folder(base))
        elif base.is_dir():
            found += [describe_gguf(f) for f in _gguf_files(base)]
            for child in sorted(p for p in base.iterdir() if p.is_dir()):
                if (child / "config.json").is_file():
                    found.append(describe_folder(child))
                else:
                    found += [describe_gguf(f, name=f"{child.name}/{f.name}")
                              for f in _gguf_files(child)]  # fmt: skip
    return found


# Ollama's GGUF architecture names for Hugging Face model_type values that differ.
_ARCH_ALIASES = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gpt_oss": "gptoss"}


def pair(model: Mapping[str, Any], ollama: Mapping[str, Any]) -> list[str]:
    """Why an adapter trained on ``model`` would not fit ``ollama``; one sentence each."""
    problems = []
    if model.get("gguf"):  # the GGUF's own architecture name is Ollama's
        ours = str(model.get("architecture") or "").lower()
    else:
        ours = str(model.get("model_type") or "").lower()
        ours = _ARCH_ALIASES.get(ours, ours)
    theirs = str(ollama.get("architecture") or "").lower()
    if ours and theirs and ours != theirs:
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


def memory_need_bytes(params: int, *, lean: bool = False) -> int:
    """The peak memory of a training round on a model of ``params`` parameters, the
    default round's or a lean one's (see the top)."""
    if lean:
        return int(LEAN_BASE_GIB * 2**30 + params * LEAN_BYTES_PER_PARAM)
    return int(BASE_GIB * 2**30 + params * BYTES_PER_PARAM)


def memory_fit(
    model: Mapping[str, Any], total_bytes: int | None, measured: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Whether training ``model`` fits this machine's memory, with the figure either way.

    ``measured``: the last finished round on this same model (``{"peak_bytes", "run"}``),
    whose real peak is shown beside the estimate and replaces it in the verdict.
    """
    params = model.get("params")
    if not params:
        weights = model.get("weights_bytes") or 0
        params = int(weights / 2) if weights else None  # 16-bit weights on disk
    if not params:
        return {"fits": None, "message": "Its size is unknown, so the memory needed is too."}
    need = memory_need_bytes(int(params))
    peak = (measured or {}).get("peak_bytes")
    basis = f"training needs about {need / 2**30:.1f} GB"
    if peak:
        basis += f"; the last round on it measured {peak / 2**30:.1f} GB"
        need = int(peak)
    need_gib = need / 2**30
    if not total_bytes:
        message = f"{_count(int(params))} parameters: {basis}; this machine's memory is unknown."
        return {"fits": None, "need_gib": round(need_gib, 1), "message": message}
    have_gib = total_bytes / 2**30
    room = FIT_SHARE * total_bytes
    fits = need <= room
    lean_need = memory_need_bytes(int(params), lean=True)
    lean = not fits and not peak and lean_need <= room
    if lean:
        basis += (f" ({lean_need / 2**30:.1f} GB in a lean round, about {LEAN_SLOWER:g}x "
                  "slower, which the trainer runs on its own where memory is tight)")
        verdict = "fits in a lean round"
    else:
        verdict = "fits" if fits else "does not fit"
    return {
        "fits": fits or lean,
        "lean": lean,
        "params": int(params),
        "need_gib": round(need_gib, 1),
        "lean_gib": round(lean_need / 2**30, 1),
        "have_gib": round(have_gib, 1),
        "measured_gib": round(peak / 2**30, 1) if peak else None,
        "message": (
            f"{_count(int(params))} parameters: {basis}, and this machine has "
            f"{have_gib:.1f} GB, so it {verdict}."
        ),
    }
