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


def url_in_redirect_page(uri: str) -> str:
    """The launch URL inside the redirect page a browser fallback opened (``file://…``).

    Checks what makes it safe: the page and its folder are the user's alone.
    """
    import html
    import os
    import re
    import stat
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    assert uri.startswith("file://"), f"the browser was given {uri!r}, not a redirect page"
    page = Path(unquote(urlparse(uri).path))
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    assert page.stat().st_uid == os.getuid()
    found = re.search(r'content="0;url=([^"]+)"', page.read_text())
    assert found, page.read_text()
    return html.unescape(found.group(1))
