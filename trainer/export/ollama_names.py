"""Ollama model names and rltray's tags for them; which server era takes adapters.

Tags: an Ollama base ``name:size`` gets ``name-size-rltray:vN`` per version and
``name-size-rltray:latest`` on the active one, so versions of two sizes never collide.
Pure string functions: the client, the manifests lookup and publishing all name
models through them.
"""

from __future__ import annotations

import re

ADAPTER_ERA_BEFORE = (0, 34, 1)  # servers older than this still accept GGUF LoRA adapters
SUFFIX = "-rltray"


def split_name(base: str) -> tuple[str, str]:
    """``qwen2.5-coder:7b`` -> (``qwen2.5-coder``, ``7b``); a missing tag is ``latest``."""
    text = base.strip()
    head, sep, tag = text.rpartition(":")
    if not sep or "/" in tag:
        return text, "latest"
    return head, tag


def tag_stem(base: str) -> str:
    """The model name our tags share: ``smollm2:135m`` -> ``smollm2-135m-rltray``."""
    name, tag = split_name(base)
    stem = name if tag == "latest" else f"{name}-{tag}"
    return re.sub(r"[^A-Za-z0-9._/-]", "-", stem).lower() + SUFFIX


def version_tag(base: str, version: int) -> str:
    return f"{tag_stem(base)}:v{int(version)}"


def latest_tag(base: str) -> str:
    return f"{tag_stem(base)}:latest"


def parse_version(text: str) -> tuple[int, ...]:
    """``0.34.1`` / ``0.5.4-rc1`` -> (0, 34, 1) / (0, 5, 4)."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3]) or (0,)


def adapter_era(server_version: str) -> bool:
    """True when this server still takes GGUF LoRA adapters (< 0.34.1)."""
    return parse_version(server_version) < ADAPTER_ERA_BEFORE

