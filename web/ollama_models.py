"""The models Ollama serves on this machine, and the GGUF file behind each.

"Train on the model Ollama serves" means training on that model's own GGUF blob:
the trainer materializes it once (``trainer/gguf_base.py``) and the adapter it
learns fits the served model by construction. So each model listed here carries
the path of its blob and whether this user can read it (Linux's system service keeps
models under ``/usr/share/ollama``, which another user may not be allowed to read).

Two sources, the second when the server does not answer: ``/api/tags`` with
``/api/show`` (whose ``modelfile`` names the blob on its ``FROM`` line), or Ollama's
own manifest files (``$OLLAMA_MODELS`` or ``~/.ollama/models``), where the layer
of media type ``application/vnd.ollama.image.model`` names the blob. The shape then
comes from the blob's header (``modelfiles.gguf_header``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rltray.app import modelfiles

OLLAMA_TIMEOUT_S = 3.0
DEFAULT_REGISTRY = "registry.ollama.ai"
MODEL_LAYER = "application/vnd.ollama.image.model"
SHAPE_KEYS = ("architecture", "layers", "hidden_size", "vocab_size", "params")


def _ollama(host: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        host.rstrip("/") + path,
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=OLLAMA_TIMEOUT_S) as response:
        return json.loads(response.read() or b"null")


def models_dir(env: Mapping[str, str]) -> Path:
    """Where Ollama keeps its models for this user: ``$OLLAMA_MODELS`` or ``~/.ollama/models``."""
    if env.get("OLLAMA_MODELS"):
        return Path(env["OLLAMA_MODELS"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".ollama" / "models"


def list_models(host: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``{"running", "models": [...], "error", "source"}``: the server's list, else the files'."""
    try:
        tags = _ollama(host, "/api/tags")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        found = from_manifests(models_dir(env))
        where = f"; {len(found)} of its models found in its files" if found else ""
        return {
            "running": False,
            "models": found,
            "source": "manifests",
            "error": f"Ollama does not answer at {host} ({reason}){where}. Start it to publish.",
        }
    listed = []
    for entry in (tags or {}).get("models") or []:
        name = entry.get("name") or entry.get("model")
        if not name:
            continue
        model: dict[str, Any] = {"name": name, "size": entry.get("size")}
        try:
            model.update(from_show(_ollama(host, "/api/show", {"model": name}) or {}))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            model["error"] = f"/api/show failed: {exc}"
        listed.append(model)
    return {"running": True, "models": listed, "source": "server", "error": None}


def from_show(show: Mapping[str, Any]) -> dict[str, Any]:
    """Shape and blob from an ``/api/show`` answer (``model_info``, ``details``, ``modelfile``)."""
    info = show.get("model_info") or {}
    arch = info.get("general.architecture")
    vocab = info.get(f"{arch}.vocab_size")
    tokens = info.get("tokenizer.ggml.tokens")
    if vocab is None and isinstance(tokens, list) and tokens:
        vocab = len(tokens)
    details = show.get("details") or {}
    blob = None
    for line in str(show.get("modelfile") or "").splitlines():
        word, _, rest = line.partition(" ")
        path = rest.strip()
        if word == "FROM":  # a local path (POSIX or Windows), not another model's name
            blob = path if path.startswith(("/", "\\")) or path[1:3] == ":\\" else None
            break
    shape = {
        "architecture": arch,
        "layers": info.get(f"{arch}.block_count"),
        "hidden_size": info.get(f"{arch}.embedding_length"),
        "vocab_size": vocab,
        "params": info.get("general.parameter_count"),
        "parameter_size": details.get("parameter_size"),
        "quantization": details.get("quantization_level"),
    }
    return {**shape, **blob_state(Path(blob) if blob else None)}


def blob_state(blob: Path | None) -> dict[str, Any]:
    """The blob's path, and whether this user can train on it (``blob_problem`` says why not)."""
    if blob is None:
        return {"blob": None, "blob_problem": "Ollama did not say where this model's file is."}
    if not blob.is_file():
        return {"blob": str(blob), "blob_problem": f"{blob} is not on this machine."}
    if not os.access(blob, os.R_OK):
        return {
            "blob": str(blob),
            "blob_problem": (
                f"{blob} is not readable by this user (Ollama's system service owns it): "
                "copy the file somewhere you own, or run Ollama as yourself."
            ),
        }
    return {"blob": str(blob), "blob_problem": None}


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's own short form: ``qwen2.5:7b``, ``user/model:tag``, ``host/ns/model:tag``."""
    if host != DEFAULT_REGISTRY:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace != "library":
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def from_manifests(root: Path) -> list[dict[str, Any]]:
    """Every model in Ollama's manifest files under ``root``, with its blob's shape."""
    found = []
    for manifest in sorted((root / "manifests").glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        host, namespace, model, tag = manifest.relative_to(root / "manifests").parts
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
        except (OSError, ValueError, AttributeError):
            continue
        digest = next(
            (str(x.get("digest")) for x in layers if x.get("mediaType") == MODEL_LAYER), None
        )
        if not digest:
            continue
        blob = root / "blobs" / digest.replace(":", "-", 1)
        entry: dict[str, Any] = {"name": display_name(host, namespace, model, tag)}
        entry.update(blob_state(blob))
        if entry["blob_problem"] is None:
            try:
                head = modelfiles.gguf_header(blob)
            except modelfiles.ModelFileError as exc:
                entry["blob_problem"] = str(exc) + "."
            else:
                entry.update({k: head[k] for k in SHAPE_KEYS})
        found.append(entry)
    return found
