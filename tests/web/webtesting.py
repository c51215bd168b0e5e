"""Helpers the web tests share (a module of its own: every test folder has a conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def signed_in(app: Any, guard: Any) -> Any:
    """A test client signed in through a launch URL, as the window is; ``client.csrf`` is
    the header :func:`post_json` sends."""
    from rltray.web.security import COOKIE

    client = app.test_client()
    assert client.get(f"/launch/{guard.launch_token('')}").status_code == 303
    client.csrf = guard.csrf_for(client.get_cookie(COOKIE).value)
    return client


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


# -- Debian's chromium through Playwright ---------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def missing_chromium() -> str | None:
    """What a browser test lacks (a sentence naming how to get it), or None."""
    import importlib.util
    import os

    parts = []
    if not os.path.exists(CHROMIUM):
        parts.append(f"{CHROMIUM} (apt-get install chromium; `make test` does it as root)")
    if importlib.util.find_spec("playwright") is None:
        parts.append("the playwright package (pip install 'rltray[test]')")
    return " and ".join(parts) or None


class Problems:
    """What a page did wrong while a test drove it: uncaught errors, console errors, and
    answers of 400 or more (a missing /favicon.ico is one) with their URLs."""

    def __init__(self, page: Any) -> None:
        self.items: list[str] = []
        page.on("pageerror", lambda exc: self.items.append(f"page error: {exc}"))
        page.on("console", self._console)
        page.on("response", self._response)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.items.append(f"console error: {message.text} at {message.location.get('url')}")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.items.append(f"HTTP {response.status}: {response.url}")


@contextmanager
def chromium_page(
    viewport: tuple[int, int] = (800, 600), init_script: str | None = None
) -> Iterator[tuple[Any, Problems]]:
    """``with chromium_page() as (page, problems)``: a fresh chromium, closed afterwards.

    ``init_script`` runs in every document before the page's own scripts (Playwright's
    ``add_init_script``): a test uses it to give the page a language chromium never reports.
    """
    import os
    import shutil
    import tempfile

    from playwright.sync_api import sync_playwright

    # chromium's singleton socket lives in TMPDIR and must fit a Unix socket path (108 bytes);
    # the per-test TMPDIR is too deep, so chromium gets a short private one
    short = tempfile.mkdtemp(prefix="rltray-chromium-", dir="/tmp")
    env = {**os.environ, "TMPDIR": short}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=env
            )
            try:
                width, height = viewport
                context = browser.new_context(viewport={"width": width, "height": height})
                if init_script is not None:
                    context.add_init_script(init_script)
                page = context.new_page()
                page.set_default_timeout(20_000)
                page.on("dialog", lambda dialog: dialog.accept())
                yield page, Problems(page)
            finally:
                browser.close()
    finally:
        shutil.rmtree(short, ignore_errors=True)
