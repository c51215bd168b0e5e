"""Where a newly active adapter goes after training: the Publisher interface.

Why an interface with a do-nothing default: the training runner decides *which*
version is active (store, folders); making that version usable somewhere
(Ollama tags, a merged model, a notification) is a separate concern with its
own failures and its own pace. The runner calls these hooks after the store
already says what is active, so a failing publisher never undoes a version.

Threads: ``published`` is called on the runner's reader thread when a round is
accepted; ``rolled_back`` on the thread that asked for the rollback. Both may
take long (an Ollama export does). Each returns one line saying what Ollama
serves now, and an exception is logged as an event by the runner, which turns
it into a line with :func:`failure_line`: the command that made the version
active prints that line, because a failure seen only in the activity log let
`rltray rollback 6` say "Active now: v6" while the agents kept the old model.

:class:`OllamaPublisher` is the real one when ``ollama.model`` is set: it runs
``python -m rltray.trainer.export`` in the trainer's environment (gguf, numpy and
the Ollama client never load in the tray process) and stores what it reports
(tag, path taken, quantization, size) with the adapter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import UserError

if TYPE_CHECKING:
    from rltray.app.config import Config
    from rltray.app.paths import Paths
    from rltray.app.store import Store
    from rltray.app.store.adapters import Adapter

PUBLISH_TIMEOUT_S = 4 * 3600  # merging + uploading a 30B model on a slow disk
PROBE_TIMEOUT_S = 3.0  # "is Ollama there at all", before an export process is started
RETRY = "rltray publish"  # the command that sends the active version to Ollama again
NOT_USED = (
    "not used (ollama.model is empty); `rltray config set ollama.model MODEL` publishes "
    "each version there"
)


class Publisher:
    """No-op publisher; subclass and override what you need.

    Each hook returns one line for the user (what Ollama serves now, shown after
    "Ollama: "), or None when there is nothing to say.
    """

    def published(self, version: int) -> str | None:
        """Adapter ``version`` (``adapters/vNNNN``) was accepted and is now active."""
        return None

    def rolled_back(self, version: int | None) -> str | None:
        """Version ``version`` is active again; ``None`` means the plain base model."""
        return None


class PublishError(UserError):
    """The export process failed; the message is its one sentence."""


class OllamaUnreachable(PublishError):
    """Nothing answers at ``host``: the usual case (Ollama not started), said as such."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"Ollama is not running at {host}: start it (`ollama serve` or the Ollama app) "
            "or fix ollama.host."
        )
        self.host = host


def failure_line(exc: Exception, version: int | None) -> str:
    """The line after "Ollama: " when publishing ``version`` failed: the version is active
    here all the same, and `rltray publish` sends it once Ollama is back."""
    here = "the base model" if version is None else f"v{version}"
    if isinstance(exc, OllamaUnreachable):
        return (
            f"not reachable at {exc.host} — {here} is active here but not in Ollama; "
            f"start Ollama, then run `{RETRY}`"
        )
    return f"not published ({exc}) — {here} is active here; `{RETRY}` tries again"


def waiting_for_ollama(store: Store) -> Adapter | None:
    """The active version when its publish failed only because Ollama was not running:
    the one the running rltray sends once Ollama answers again (and only that: an export
    that failed for another reason would fail the same way every minute)."""
    active = store.active_adapter()
    if active is None or active.ollama_tag:
        return None
    publication = active.metrics.get("publication") or {}
    return active if publication.get("waiting_for_ollama") else None


def answers(host: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether anything answers HTTP at ``host`` (an error status still is an answer)."""
    try:
        with urllib.request.urlopen(f"{host.rstrip('/')}/api/version", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


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
        if not answers(config.ollama.host):  # one clear sentence, and no process to start
            raise OllamaUnreachable(config.ollama.host)
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

    def published(self, version: int) -> str | None:
        config = self.load_config()
        if not config.ollama.model.strip():
            return NOT_USED
        adapter = self.store.get_adapter(version)
        if adapter is None:
            return None
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
            failed: dict[str, Any] = {"error": str(exc)}
            if isinstance(exc, OllamaUnreachable):
                failed["waiting_for_ollama"] = True  # the running rltray retries when it is back
            self.store.set_adapter_publication(version, None, failed)
            raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # Ollama keeps its own copy
        publication = {k: v for k, v in result.items() if k != "ok"}
        self.store.set_adapter_publication(version, result["tag"], publication)
        self.store.log_event("published", f"v{version}: {describe(publication)}")
        tag = str(result["tag"])
        latest = f"; {tag.rsplit(':', 1)[0]}:latest serves it" if result.get("latest") else ""
        return f"published as {tag}{latest}"

    def rolled_back(self, version: int | None) -> str | None:
        config = self.load_config()
        if not config.ollama.model.strip():
            return NOT_USED
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
        line = f"{result['latest']} now serves {result['source']}"
        self.store.log_event("published", line)
        return line
