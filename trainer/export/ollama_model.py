"""What Ollama says about a model: ``/api/show`` as :class:`ModelInfo`, and its GGUF on disk.

Publishing copies the base's template, system prompt and parameters from
``/api/show`` and trains or merges against its GGUF; when the server is not
running, :func:`blob_from_manifests` still finds that GGUF through Ollama's own
manifest files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ollama_names import split_name


def parse_parameters(text: str) -> dict[str, Any]:
    """``/api/show``'s ``parameters`` text -> the ``parameters`` object ``/api/create`` takes.

    Lines are ``key value``; string values are JSON-quoted; a key given several
    times (``stop``) becomes a list.
    """
    out: dict[str, Any] = {}
    for line in (text or "").splitlines():
        key, _, raw = line.strip().partition(" ")
        raw = raw.strip()
        if not key or not raw:
            continue
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        if key == "stop" or key in out:
            prior = out.get(key, [])
            out[key] = [*(prior if isinstance(prior, list) else [prior]), value]
        else:
            out[key] = value
    return out


# -- what /api/show says about a model --------------------------------------------------

# a blob file as ``/api/show``'s modelfile names it: ``…/blobs/sha256-<hex>``
_BLOB_NAME = re.compile(r"sha256[-:]([0-9a-f]{64})$")


@dataclass
class ModelInfo:
    """The parts of ``/api/show`` that publishing and training need."""

    name: str
    architecture: str
    model_info: dict[str, Any]
    template: str
    system: str
    parameters: dict[str, Any]
    quantization: str
    blob_path: Path | None  # the model GGUF on disk (``FROM`` line), when it is a local path
    has_adapter: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    blobs: frozenset[str] = frozenset()  # ``sha256:…`` of the FROM and ADAPTER blobs

    def key(self, suffix: str) -> Any:
        """``model_info["<arch>.<suffix>"]`` (``block_count``, ``embedding_length``, …)."""
        return self.model_info.get(f"{self.architecture}.{suffix}")

    @classmethod
    def from_show(cls, name: str, data: dict[str, Any]) -> ModelInfo:
        info = dict(data.get("model_info") or {})
        details = data.get("details") or {}
        blob = None
        has_adapter = False
        blobs = set()
        for line in (data.get("modelfile") or "").splitlines():
            word, _, rest = line.partition(" ")
            if word == "FROM" and blob is None and rest.strip().startswith("/"):
                blob = Path(rest.strip())
            has_adapter = has_adapter or word == "ADAPTER"
            named = _BLOB_NAME.search(rest.strip()) if word in ("FROM", "ADAPTER") else None
            if named:
                blobs.add("sha256:" + named.group(1))
        return cls(
            name=name,
            architecture=str(info.get("general.architecture") or details.get("family") or ""),
            model_info=info,
            template=data.get("template") or "",
            system=data.get("system") or "",
            parameters=parse_parameters(data.get("parameters") or ""),
            quantization=str(details.get("quantization_level") or "unknown"),
            blob_path=blob,
            has_adapter=has_adapter,
            raw=data,
            blobs=frozenset(blobs),
        )


def models_dir() -> Path:
    """Where Ollama keeps models on this machine: ``$OLLAMA_MODELS`` or ``~/.ollama/models``."""
    import os

    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


def blob_from_manifests(name: str, root: Path | None = None) -> Path | None:
    """The model GGUF of ``name`` found through Ollama's manifest files (no server needed).

    Manifests live at ``manifests/<host>/<namespace>/<model>/<tag>`` (default host
    ``registry.ollama.ai``, namespace ``library``); the layer with media type
    ``application/vnd.ollama.image.model`` names the blob ``blobs/sha256-<hex>``.
    """
    root = root or models_dir()
    model, tag = split_name(name)
    parts = model.split("/")
    if len(parts) == 1:
        parts = ["registry.ollama.ai", "library", *parts]
    elif len(parts) == 2:
        parts = ["registry.ollama.ai", *parts]
    manifest = root / "manifests" / Path(*parts) / tag
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
    except (OSError, ValueError):
        return None
    for layer in layers:
        if layer.get("mediaType") == "application/vnd.ollama.image.model":
            blob = root / "blobs" / str(layer.get("digest", "")).replace(":", "-", 1)
            return blob if blob.is_file() else None
    return None
