"""Where a newly active adapter goes after training: the Publisher interface.

Why an interface with a do-nothing default: the training runner decides *which*
version is active (store, folders); making that version usable somewhere
(Ollama tags, a merged model, a notification) is a separate concern with its
own failures and its own pace. The runner calls these hooks after the store
already says what is active, so a failing publisher never undoes a version.

Threads: ``published`` is called on the runner's reader thread when a round is
accepted; ``rolled_back`` on the thread that asked for the rollback. Both may
take long (an Ollama export does); an exception is logged as an event by the
runner and otherwise ignored.

:class:`OllamaPublisher` is the real one when ``ollama.model`` is set: it runs
``python -m rltray.trainer.export`` in the trainer's environment (gguf, numpy and
the Ollama client never load in the tray process) and stores what it reports
(tag, path taken, quantization, size) with the adapter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import UserError

if TYPE_CHECKING:
    from rltray.app.config import Config
    from rltray.app.paths import Paths
    from rltray.app.store import Store

PUBLISH_TIMEOUT_S = 4 * 3600  # merging + uploading a 30B model on a slow disk


class Publisher:
    """No-op publisher; subclass and override what you need."""

    def published(self, version: int) -> None:
        """Adapter ``version`` (``adapters/vNNNN``) was accepted and is now active."""

    def rolled_back(self, version: int | None) -> None:
        """Version ``version`` is active again; ``None`` means the plain base model."""


class PublishError(UserError):
    """The export process failed; the message is its one sentence."""


def describe(publication: dict[str, Any] | None) -> str | None:
    """One line for `rltray versions` and the tray: tag, path taken, quantization, size."""
    if not publication:
        return None
    if publication.get("error"):
        return f"not published: {publication['error']}"
    size, base = publication.get("size"), publication.get("base_size")
    mb = f", {size / 1e6:.0f} MB" if isinstance(size, (int, float)) else ""
    if mb and isinstance(base, (int, float)) and publication.get("path") == "merged":
        mb += f" vs base {base / 1e6:.0f} MB"
    how = publication.get("path", "?")
    quant = publication.get("quantization")
    quant = ", " + quant if quant else ""
    return f"{publication.get('tag')} ({how}{quant}{mb}{_fidelity(publication)})"


def _fidelity(publication: dict[str, Any]) -> str:
    """How much of the adapter the published model carries (issue 20): the merge's
    delivered share (mean and smallest tensor) and llama.cpp's check of the file."""
    text = ""
    delivered = publication.get("delivered")
    if isinstance(delivered, dict) and isinstance(delivered.get("mean"), (int, float)):
        text += f", delivers {delivered['mean']:.0%} of the adapter (min {delivered['min']:.0%})"
    served = publication.get("served")
    if isinstance(served, dict) and isinstance(served.get("share"), (int, float)):
        text += f", llama.cpp carries {served['share']:.0%}"
    elif isinstance(served, dict) and served.get("skipped"):
        text += ", not checked in llama.cpp"
    return text


class OllamaPublisher(Publisher):
    """Registers each accepted version with Ollama through the trainer-side export process."""

    def __init__(
        self,
        store: Store,
        paths: Paths,
        load_config: Callable[[], Config],
        run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    ) -> None:
        self.store = store
        self.paths = paths
        self.load_config = load_config
        self._run = run

    def _export(self, args: list[str]) -> dict[str, Any]:
        from rltray.app.training import jobbuild

        config = self.load_config()
        python = jobbuild.training_python(config.training)
        command = [python, "-m", "rltray.trainer.export", *args]
        try:
            proc = self._run(
                command, capture_output=True, text=True, timeout=PUBLISH_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PublishError(f"the Ollama export did not run ({exc}).") from exc
        lines = [ln for ln in (proc.stdout or "").splitlines() if ln.startswith("{")]
        try:
            result = json.loads(lines[-1])
        except (IndexError, ValueError):
            tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            raise PublishError(f"the Ollama export failed: {tail[0]}") from None
        if not result.get("ok"):
            raise PublishError(str(result.get("error") or "the Ollama export failed"))
        return result

    def _common(self, config: Config) -> list[str]:
        return ["--host", config.ollama.host, "--model", config.ollama.model]

    def _workdir(self, version: int) -> Any:
        return self.paths.home / "publish" / f"v{version:04d}"

    def published(self, version: int) -> None:
        config = self.load_config()
        if not config.ollama.model.strip():
            return
        adapter = self.store.get_adapter(version)
        if adapter is None:
            return
        workdir = self._workdir(version)
        args = [
            "publish",
            *self._common(config),
            "--adapter", adapter.path,
            "--version", str(version),
            "--workdir", str(workdir),
            "--keep", str(config.ollama.keep_versions),
            "--num-ctx", str(config.ollama.num_ctx),
            "--merged-type", config.ollama.merged_type,
        ]  # fmt: skip
        try:
            result = self._export(args)
        except PublishError as exc:
            self.store.set_adapter_publication(version, None, {"error": str(exc)})
            raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # Ollama keeps its own copy
        publication = {k: v for k, v in result.items() if k != "ok"}
        self.store.set_adapter_publication(version, result["tag"], publication)
        self.store.log_event("published", f"v{version}: {describe(publication)}")

    def rolled_back(self, version: int | None) -> None:
        config = self.load_config()
        if not config.ollama.model.strip():
            return
        args = ["latest", *self._common(config), "--num-ctx", str(config.ollama.num_ctx),
                "--keep", str(config.ollama.keep_versions)]
        adapter = self.store.get_adapter(version) if version is not None else None
        workdir = self._workdir(version or 0)
        if adapter is not None:
            args += ["--version", str(version), "--adapter", adapter.path,
                     "--workdir", str(workdir)]
        try:
            result = self._export(args)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if adapter is not None and result.get("republished"):
            publication = dict(result["republished"])
            self.store.set_adapter_publication(adapter.version, publication["tag"], publication)
        self.store.log_event("published", f"{result['latest']} now serves {result['source']}")
