"""One Ollama server: version, ``/api/show``, blobs, create, copy, delete, list.

The official ``ollama`` client does create, copy, delete and list. Plain HTTP
(httpx, which that client is built on) does what it does not: ``/api/version``,
``/api/show`` with its ``system`` field, and a blob upload that asks with ``HEAD``
first so a 4 GB blob already on the server is never sent again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .ollama_errors import ModelMissing, OllamaError, server_error
from .ollama_model import ModelInfo


class Ollama:
    """One Ollama server; every failure becomes an :class:`OllamaError` with one sentence."""

    def __init__(self, host: str = "http://127.0.0.1:11434", timeout: float = 600.0) -> None:
        import httpx
        import ollama

        self.host = host.rstrip("/")
        self._http = httpx.Client(base_url=self.host, timeout=timeout)
        self._client = ollama.Client(host=self.host, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Ollama:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # one place that turns transport and server errors into sentences
    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        import httpx
        import ollama

        try:
            return fn()
        except (httpx.ConnectError, ConnectionError) as exc:
            raise OllamaError(
                f"Ollama is not running at {self.host}: start it (`ollama serve` or the Ollama "
                "app) or fix ollama.host."
            ) from exc
        except httpx.TimeoutException as exc:
            raise OllamaError(f"Ollama at {self.host} did not answer {what} in time.") from exc
        except ollama.ResponseError as exc:
            raise server_error(what, exc.error, exc.status_code) from exc

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        def go() -> Any:
            import ollama

            r = self._http.request(method, path, **kw)
            if r.status_code >= 400:
                raise ollama.ResponseError(r.text, r.status_code)
            return r.json() if r.content else None

        return self._call(f"{method} {path}", go)

    def version(self) -> str:
        return str(self._json("GET", "/api/version").get("version") or "0")

    def show(self, name: str) -> ModelInfo:
        try:
            data = self._json("POST", "/api/show", json={"model": name})
        except ModelMissing:
            raise ModelMissing(
                f"The Ollama model {name} is not installed: run `ollama pull {name}` or set "
                "ollama.model to one that `ollama list` shows."
            ) from None
        return ModelInfo.from_show(name, data)

    def has_blob(self, digest: str) -> bool:
        def go() -> bool:
            return self._http.head(f"/api/blobs/{digest}").status_code == 200

        return bool(self._call("checking a blob", go))

    def push_blob(self, path: Path) -> tuple[str, bool]:
        """Upload ``path`` as a blob unless the server has it; (digest, uploaded)."""
        digest = "sha256:" + sha256_file(path)
        if self.has_blob(digest):
            return digest, False
        size = path.stat().st_size

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as fh:
                yield from iter(lambda: fh.read(1 << 22), b"")

        self._json(
            "POST",
            f"/api/blobs/{digest}",
            content=chunks(),
            headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
        )
        return digest, True

    def create(self, tag: str, **fields: Any) -> None:
        self._call(f"creating {tag}", lambda: self._client.create(tag, stream=False, **fields))

    def copy(self, source: str, destination: str) -> None:
        self._call(f"copying {source}", lambda: self._client.copy(source, destination))

    def delete(self, name: str) -> None:
        self._call(f"deleting {name}", lambda: self._client.delete(name))

    def tags(self) -> list[str]:
        listing = self._call("listing models", self._client.list)
        return [str(m.model) for m in listing.models if m.model]



def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB pieces (a 4 GB model never sits in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()
