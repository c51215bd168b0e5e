"""What ``training.base_model`` may name, checked offline, before any round starts.

Why here and not in the trainer: the trainer finds out only when a round starts
(``trainer/backends/base.py`` ``resolve_model_folder``), minutes or days after the
user typed a wrong path, and `rltray doctor` used to call any text a fine model.
This module says the same rules in the app, with the standard library only, so
`rltray config set`, the settings page (both save through ``Settings.save_many``)
and doctor refuse or flag the value the moment it is given. The trainer's rules
stay the reference: a folder with ``config.json``; a GGUF file; otherwise a
Hugging Face id (``org/name``) that must already be in the local cache, because
the trainer never downloads. An Ollama name (``qwen2.5:7b``) is none of those:
it belongs in ``ollama.model``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from rltray.app import modelfiles
from rltray.app.errors import UserError
from rltray.app.userpath import user_path

KEY = "training.base_model"
KINDS = "a model folder (with config.json), a .gguf file, or a Hugging Face id in the local cache"
WHERE_TO_CHOOSE = (
    "choose one in the setup wizard (`rltray setup`) or the settings page (`rltray settings`), "
    f"or run `rltray config set {KEY} PATH`"
)
NOT_CHOSEN = f"No model to train is chosen yet ({KEY} is empty): {WHERE_TO_CHOOSE}."


def hf_cache(env: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub finds it."""
    env = os.environ if env is None else env
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return Path(env[name]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    home = Path(env.get("HOME") or Path.home())
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "huggingface" / "hub"


def looks_like_path(text: str) -> bool:
    """The trainer's rule: absolute, ``.``/``~`` first, or more than one ``/`` is a path."""
    return Path(text).expanduser().is_absolute() or text.startswith((".", "~")) or (
        text.count("/") > 1
    )


def in_hf_cache(repo_id: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether a snapshot of ``repo_id`` with a config.json is in the local cache."""
    repo = hf_cache(env) / ("models--" + repo_id.replace("/", "--"))
    return any((snap / "config.json").is_file() for snap in repo.glob("snapshots/*"))




def problem(value: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``value`` cannot be trained (one sentence naming it), or None when it can.

    Empty is not a problem here (it means "not chosen yet"); callers that need a
    model say :data:`NOT_CHOSEN`.
    """
    text = value.strip()
    if not text:
        return None
    try:
        path = user_path(text)
    except UserError as exc:
        return f"{KEY}: {exc}"
    if path.is_dir():
        if (path / "config.json").is_file():
            return None
        return (
            f"{KEY}: the folder {text} has no config.json; choose the model's own folder "
            f"(the one with config.json and the weights), or {KINDS}."
        )
    if path.is_file():
        if modelfiles.is_gguf(path):
            return None
        return f"{KEY}: {text} is a file but not a GGUF model; give {KINDS}."
    if looks_like_path(text):
        return f"{KEY}: there is no folder or file {text}; give {KINDS}."
    if ":" in text:
        return (
            f"{KEY}: {text} looks like an Ollama model name; put it in ollama.model (where "
            f"versions are published), and give here the weights to train: {KINDS}."
        )
    if in_hf_cache(text, env):
        return None
    return (
        f"{KEY}: {text} is not in the local Hugging Face cache ({hf_cache(env)}) and is not "
        f"a folder here; download it first (`hf download {text}`) or give {KINDS}."
    )


def describe(value: str) -> str:
    """What a valid ``value`` is, for doctor's detail column."""
    path = Path(value.strip()).expanduser()
    if path.is_dir():
        return f"the folder {value.strip()}"
    if path.is_file():
        return f"the GGUF file {value.strip()}"
    return f"{value.strip()} from the local Hugging Face cache"
