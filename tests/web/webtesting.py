"""Helpers the web tests share (a module of its own: every test folder has a conftest.py)."""

from __future__ import annotations

from typing import Any


def post_json(client: Any, url: str, body: Any = None, **kw: Any) -> Any:
    headers = {"X-CSRF-Token": client.csrf, **kw.pop("headers", {})}
    return client.post(url, json=body, headers=headers, **kw)


LLAMA_SHOW = {
    "details": {"family": "llama", "parameter_size": "0.1M", "quantization_level": "F16"},
    "model_info": {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.embedding_length": 64,
        "llama.vocab_size": 512,
    },
}


def write_model_folder(folder: Any, layers: int = 2, hidden: int = 64, vocab: int = 512) -> Any:
    """A model folder as the trainer reads it (config.json + a weights file of the right size)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "num_hidden_layers": layers, "hidden_size": hidden, "vocab_size": vocab}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    return folder
