"""Ollama: find the base model, register each accepted version as a tag, re-point ``latest``.

Why two paths: Ollama up to 0.33 builds a model from a base plus a GGUF LoRA
adapter (``/api/create`` with ``from`` + ``adapters``); from 0.34.1 it refuses
adapters ("LoRA adapters are no longer supported") and will not quantize GGUF
input, so the only thing that always works is a complete, already-quantized GGUF
in ``files`` with the base's template, system prompt and parameters copied from
``/api/show``. We try the adapter on old servers and fall back to the merged
file on any refusal of it; new servers get the merged file directly.

The official ``ollama`` client does create, copy, delete and list. Plain HTTP
(httpx, which that client is built on) does what it does not: ``/api/version``,
``/api/show`` with its ``system`` field, and a blob upload that asks with ``HEAD``
first so a 4 GB blob already on the server is never sent again.

Tags: an Ollama base ``name:size`` gets ``name-size-rltray:vN`` per version and
``name-size-rltray:latest`` on the active one, so versions of two sizes never collide.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADAPTER_ERA_BEFORE = (0, 34, 1)  # servers older than this still accept GGUF LoRA adapters
DEFAULT_NUM_CTX = 65536  # agents need >= 64k tokens; Ollama defaults to 4k on small GPUs
SUFFIX = "-rltray"


class OllamaError(RuntimeError):
    """Publishing failed; the message is one sentence saying what to do."""


# -- names -----------------------------------------------------------------------------


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

    def key(self, suffix: str) -> Any:
        """``model_info["<arch>.<suffix>"]`` (``block_count``, ``embedding_length``, …)."""
        return self.model_info.get(f"{self.architecture}.{suffix}")

    @classmethod
    def from_show(cls, name: str, data: dict[str, Any]) -> ModelInfo:
        info = dict(data.get("model_info") or {})
        details = data.get("details") or {}
        blob = None
        has_adapter = False
        for line in (data.get("modelfile") or "").splitlines():
            word, _, rest = line.partition(" ")
            if word == "FROM" and blob is None and rest.strip().startswith("/"):
                blob = Path(rest.strip())
            has_adapter = has_adapter or word == "ADAPTER"
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


# -- the client ----------------------------------------------------------------------------


def _first_sentence(text: str) -> str:
    text = " ".join(str(text).split())
    return text if text.endswith(".") else text + "."


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


class ModelMissing(OllamaError):
    """The server has no model of that name."""


class AdapterRefused(OllamaError):
    """The server will not build a model from a LoRA adapter."""


class DiskFull(OllamaError):
    """A disk (ours or the server's) has no room for the file."""


def server_error(what: str, message: str, status: int) -> OllamaError:
    """An error the server answered with, as the right subclass and one sentence."""
    text = str(message)
    lowered = text.lower()
    if "no space left" in lowered or "disk full" in lowered:
        return DiskFull(
            f"Ollama's disk is full while {what}: free space where Ollama keeps its models "
            "(OLLAMA_MODELS) or lower ollama.keep_versions."
        )
    if "adapter" in lowered:
        return AdapterRefused(
            f"Ollama refused the LoRA adapter while {what}: {_first_sentence(text)}"
        )
    if status == 404 or "not found" in lowered:
        return ModelMissing(f"Ollama says {_first_sentence(text)}")
    return OllamaError(f"Ollama refused {what}: {_first_sentence(text)}")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB pieces (a 4 GB model never sits in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- publishing ----------------------------------------------------------------------------


@dataclass
class Publication:
    """What was registered for one version (stored with the adapter, shown by `versions`)."""

    tag: str
    path: str  # "adapter" | "merged"
    quantization: str
    size: int  # bytes of the file Ollama got (adapter or merged model)
    base_size: int | None
    server_version: str
    latest: bool
    fallback: str | None = None  # why the adapter path was not taken on an old server
    pruned: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _parameters(info: ModelInfo, num_ctx: int) -> dict[str, Any]:
    params = dict(info.parameters)
    params["num_ctx"] = int(num_ctx)
    return params


def publish(
    client: Ollama,
    base: str,
    adapter_dir: Path,
    version: int,
    *,
    workdir: Path,
    make_latest: bool = True,
    keep: int = 3,
    active: int | None = None,
    num_ctx: int = DEFAULT_NUM_CTX,
    base_gguf: Path | None = None,
    merged_type: str = "q8_0",
) -> Publication:
    """Register ``adapter_dir`` as ``<base>-rltray:v<version>``; point ``latest`` at it.

    Raises :class:`OllamaError` (one sentence) when the server is down, the base is
    missing, the adapter does not fit the base's weights, or a disk is full.
    """
    from . import gguf_adapter

    server_version = client.version()
    info = client.show(base)
    tag = version_tag(base, version)
    workdir.mkdir(parents=True, exist_ok=True)
    gguf_path = _base_gguf(info, base_gguf)
    shape_source = gguf_path if gguf_path is not None else None
    gguf_adapter.check_fits(adapter_dir, info, shape_source)  # raises OllamaError on mismatch

    fallback: str | None = None
    if adapter_era(server_version):
        try:
            pub = _publish_adapter(client, info, adapter_dir, tag, workdir, num_ctx, gguf_path)
            pub.server_version = server_version
        except AdapterRefused as exc:
            fallback = str(exc)
            pub = None
    else:
        pub = None
    if pub is None:
        if gguf_path is None:
            raise OllamaError(
                f"Ollama {server_version} needs a merged model, but the GGUF of {base} is not "
                "readable here: run rltray on the machine where Ollama keeps its models."
            )
        pub = _publish_merged(
            client, info, adapter_dir, tag, workdir, num_ctx, gguf_path, merged_type
        )
        pub.server_version = server_version
        pub.fallback = fallback
    if make_latest:
        client.copy(tag, latest_tag(base))
        pub.latest = True
    pub.pruned = prune(client, base, keep, active if active is not None else version)
    return pub


def _base_gguf(info: ModelInfo, given: Path | None) -> Path | None:
    for candidate in (given, info.blob_path):
        if candidate is not None and Path(candidate).is_file():
            return Path(candidate)
    return None


def _publish_adapter(
    client: Ollama,
    info: ModelInfo,
    adapter_dir: Path,
    tag: str,
    workdir: Path,
    num_ctx: int,
    base_gguf: Path | None,
) -> Publication:
    from . import gguf_adapter

    out = workdir / "adapter.gguf"
    gguf_adapter.export(adapter_dir, out, arch_info=gguf_adapter.ArchInfo.from_ollama(info))
    digest, _ = client.push_blob(out)
    client.create(
        tag,
        from_=info.name,
        adapters={"adapter.gguf": digest},
        parameters=_parameters(info, num_ctx),
    )
    return Publication(
        tag=tag,
        path="adapter",
        quantization="F32 adapter on " + info.quantization,
        size=out.stat().st_size,
        base_size=base_gguf.stat().st_size if base_gguf else None,
        server_version="",
        latest=False,
    )


def _publish_merged(
    client: Ollama,
    info: ModelInfo,
    adapter_dir: Path,
    tag: str,
    workdir: Path,
    num_ctx: int,
    base_gguf: Path,
    merged_type: str,
) -> Publication:
    from . import merge

    base_size = base_gguf.stat().st_size
    free = shutil.disk_usage(workdir).free
    if free < base_size * 1.2:
        raise DiskFull(
            f"Not enough free disk space in {workdir} to write the merged model "
            f"(needs about {base_size * 1.2 / 1e9:.1f} GB, {free / 1e9:.1f} GB free): free some "
            "space or lower ollama.keep_versions."
        )
    out = workdir / "merged.gguf"
    report = merge.merge(base_gguf, adapter_dir, out, out_type=merged_type)
    digest, _ = client.push_blob(out)
    fields: dict[str, Any] = {
        "files": {"model.gguf": digest},
        "parameters": _parameters(info, num_ctx),
    }
    if info.template:
        fields["template"] = info.template
    if info.system:
        fields["system"] = info.system
    client.create(tag, **fields)
    return Publication(
        tag=tag,
        path="merged",
        quantization=report.describe(),
        size=report.size,
        base_size=base_size,
        server_version="",
        latest=False,
    )


_VERSION_TAG = re.compile(r":v(\d+)$")


def published_versions(client: Ollama, base: str) -> dict[int, str]:
    """version -> tag for every ``<stem>:vN`` on the server."""
    stem = tag_stem(base)
    out: dict[int, str] = {}
    for name in client.tags():
        head, _, _ = name.rpartition(":")
        match = _VERSION_TAG.search(name)
        if head == stem and match:
            out[int(match.group(1))] = name
    return out


def prune(client: Ollama, base: str, keep: int, active: int | None) -> list[str]:
    """Delete all but the newest ``keep`` version tags; never the active one."""
    versions = published_versions(client, base)
    keep_set = set(sorted(versions, reverse=True)[: max(0, int(keep))])
    if active is not None:
        keep_set.add(int(active))
    removed = []
    for number, name in sorted(versions.items()):
        if number not in keep_set:
            client.delete(name)
            removed.append(name)
    return removed


def point_latest(client: Ollama, base: str, version: int | None) -> str:
    """Make ``<stem>:latest`` serve ``version`` (``None``: the plain base); returns its source."""
    source = base if version is None else version_tag(base, version)
    client.show(source)  # a clear "not installed" sentence before copying
    client.copy(source, latest_tag(base))
    return source
