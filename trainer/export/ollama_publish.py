"""Publishing to Ollama: register each accepted version as a tag, re-point ``latest``, prune.

Why two paths: Ollama up to 0.33 builds a model from a base plus a GGUF LoRA
adapter (``/api/create`` with ``from`` + ``adapters``); from 0.34.1 it refuses
adapters ("LoRA adapters are no longer supported") and will not quantize GGUF
input, so the only thing that always works is a complete, already-quantized GGUF
in ``files`` with the base's template, system prompt and parameters copied from
``/api/show``. We try the adapter on old servers and fall back to the merged
file on any refusal of it; new servers get the merged file directly.

Before a merged file goes to Ollama, llama.cpp loads it and its log-prob shift on
held-out chats is compared with the adapter's (:mod:`.fidelity`; skipped, and
said so, where llama-cpp-python is not installed): a file that does not carry the
adapter is not published (:class:`NotServedFaithfully`). The publication records
the merge's delivered share (``delivered``) and the check (``served``).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ollama_client import Ollama
from .ollama_errors import (
    AdapterRefused,
    DiskFull,
    ModelMissing,
    NotServedFaithfully,
    OllamaError,
)
from .ollama_model import ModelInfo
from .ollama_names import adapter_era, latest_tag, tag_stem, version_tag

DEFAULT_NUM_CTX = 65536  # agents need >= 64k tokens; Ollama defaults to 4k on small GPUs


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
    prune_errors: list[str] = field(default_factory=list)  # tags prune could not delete, why
    delivered: dict[str, float] | None = None  # merged: min and mean delivered share
    served: dict[str, Any] | None = None  # merged: llama.cpp's check (fidelity.ServedCheck)
    blob: str | None = None  # the blob we sent (merged model or adapter): the tag's identity

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

    ``make_latest=False`` leaves ``latest`` alone: the tray points it itself, under its
    publish lock, at whatever version its store says is active by then (a rollback may
    have happened while this export ran). ``active`` is the version prune never deletes.

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
    pub.pruned, pub.prune_errors = prune(
        client, base, keep, active if active is not None else version
    )
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
        blob=digest,
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
    from . import fidelity, merge

    base_size = base_gguf.stat().st_size
    free = shutil.disk_usage(workdir).free
    files = 1 if fidelity.llama_cpp_missing() else 2  # the merged model and the check's probe
    if free < base_size * 1.2 * files:
        raise DiskFull(
            f"Not enough free disk space in {workdir} to write the merged model "
            f"(needs about {base_size * 1.2 * files / 1e9:.1f} GB, {free / 1e9:.1f} GB free): "
            "free some space or lower ollama.keep_versions."
        )
    out = workdir / "merged.gguf"
    report = merge.merge(base_gguf, adapter_dir, out, out_type=merged_type)
    served = _check_served(base_gguf, adapter_dir, report, workdir, merged_type)
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
        delivered=report.delivered(),
        served=served,
        blob=digest,
    )


def _check_served(
    base_gguf: Path, adapter_dir: Path, report: Any, workdir: Path, out_type: str
) -> dict[str, Any]:
    """llama.cpp's check of the merged file (see :mod:`.fidelity`); raises when it fails."""
    from . import fidelity

    check = fidelity.check_served(base_gguf, adapter_dir, report.out, report, workdir,
                                  out_type=out_type)
    if not check.ok:
        raise NotServedFaithfully(
            f"The merged model was not published: {check.reason()}; "
            "set ollama.merged_type = \"f16\" and publish again, or report this as a bug."
        )
    return check.as_dict()


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


def prune(
    client: Ollama, base: str, keep: int, active: int | None
) -> tuple[list[str], list[str]]:
    """Delete all but the newest ``keep`` version tags, never the active one; returns the
    tags removed and one sentence per tag (or listing) that failed.

    Best effort, each tag its own attempt: the version was already created when this runs,
    so a failure here must not fail its publish. Review 3 r4: one failed delete raised
    after others had succeeded; the caller said "not published" of a version Ollama had,
    and never learnt which tags were gone. The next publish prunes again.
    """
    try:
        versions = published_versions(client, base)
    except OllamaError as exc:
        return [], [f"listing the tags failed: {exc}"]
    keep_set = set(sorted(versions, reverse=True)[: max(0, int(keep))])
    if active is not None:
        keep_set.add(int(active))
    removed, errors = [], []
    for number, name in sorted(versions.items()):
        if number in keep_set:
            continue
        try:
            client.delete(name)
        except ModelMissing:
            pass  # gone already (another folder's prune, the user): removed all the same
        except OllamaError as exc:
            errors.append(f"{name}: {exc}")
            continue
        removed.append(name)
    return removed, errors


def ours(client: Ollama, base: str, version: int, blob: str | None) -> str | None:
    """The blob ``<stem>:v<version>`` is made of when it is the one we recorded, else None.

    Why: version numbers restart in a reset data folder (or differ in a second one), so
    an existing tag may hold another folder's adapter; only a tag carrying the blob our
    publication record names is trusted. ``blob="*"`` trusts the tag as it is (records
    written before blobs were recorded) and returns what it carries, to record it now.
    """
    if blob is None or version not in published_versions(client, base):
        return None
    try:
        info = client.show(version_tag(base, version))
    except ModelMissing:
        return None
    if blob == "*":
        return _main_blob(info)
    return blob if blob in info.blobs else None


def _main_blob(info: ModelInfo) -> str | None:
    """The adapter blob when there is one (the adapter path), else the model blob."""
    lines = (info.raw.get("modelfile") or "").splitlines()
    for word in ("ADAPTER", "FROM"):
        for line in lines:
            head, _, rest = line.partition(" ")
            name = Path(rest.strip()).name.replace("-", ":", 1)
            if head == word and name in info.blobs:
                return name
    return None


def serve(
    client: Ollama,
    base: str,
    version: int | None,
    *,
    blob: str | None,
    adapter_dir: Path | None,
    workdir: Path | None,
    keep: int = 3,
    num_ctx: int = DEFAULT_NUM_CTX,
    base_gguf: Path | None = None,
    merged_type: str = "q8_0",
) -> dict[str, Any]:
    """Make ``latest`` serve ``version`` (``None``: the base): republish it first unless its
    tag is ours (:func:`ours`); returns ``latest``, ``source``, ``blob``, ``republished``."""
    republished = None
    have = ours(client, base, version, blob) if version is not None else None
    if version is not None and have is None:
        if adapter_dir is None:
            raise OllamaError(
                f"{version_tag(base, version)} is missing or is not the version this data "
                "folder published, and no adapter folder was given to publish it again."
            )
        pub = publish(
            client, base, adapter_dir, version,
            workdir=workdir or adapter_dir.parent / ".publish", make_latest=False,
            keep=keep, active=version, num_ctx=num_ctx, base_gguf=base_gguf,
            merged_type=merged_type,
        )  # fmt: skip
        republished, have = pub.as_dict(), pub.blob
    source = point_latest(client, base, version)
    return {"latest": latest_tag(base), "source": source, "blob": have,
            "republished": republished}


def point_latest(client: Ollama, base: str, version: int | None) -> str:
    """Make ``<stem>:latest`` serve ``version`` (``None``: the plain base); returns its source."""
    source = base if version is None else version_tag(base, version)
    client.show(source)  # a clear "not installed" sentence before copying
    client.copy(source, latest_tag(base))
    return source
