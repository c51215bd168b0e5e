"""Where a newly active adapter goes after training: the Publisher interface.

Why an interface with a do-nothing default: the training runner decides *which*
version is active (store, folders); making that version usable somewhere
(Ollama tags, a merged model, a notification) is a separate concern with its
own failures and its own pace. The runner calls these hooks after the store
already says what is active, so a failing publisher never undoes a version.

Threads: ``published`` is called on the runner's reader thread when a round is
accepted; ``rolled_back`` on the thread that asked for the rollback;
``serve_active`` by `rltray publish` and the running rltray's retry
(app/autopublish.py). All may take long (an Ollama export does). Each returns
one line saying what Ollama serves now, and an exception is logged as an event by
the runner, which turns it into a line with :func:`failure_line`: the command that
made the version active prints that line, because a failure seen only in the activity log let
`rltray rollback 6` say "Active now: v6" while the agents kept the old model.

:class:`OllamaPublisher` is the real one when ``ollama.model`` is set: it runs
``python -m rltray.trainer.export`` in the trainer's environment (gguf, numpy and
the Ollama client never load in the tray process) and stores what it reports
(tag, path taken, quantization, size, the blob that makes the tag ours) with the
adapter. It serializes with every other publish of the data folder and points
``latest`` only at the store's active version (app/training/served.py says why), or at
the plain base when that version was trained on another base than the model set up now
(``served.servable``): a version is never registered on a model it was not judged on.
Each export works in a folder of its own under ``publish/`` and exits if this process
dies; whatever a killed one left there is swept at the start of the next publish, under
the lock. A prune of old tags that fails is a warning in the line, never a failed publish.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app.errors import UserError
from rltray.app.training import jobbuild, served

if TYPE_CHECKING:
    from rltray.app.config import Config
    from rltray.app.paths import Paths
    from rltray.app.store import Store
    from rltray.app.store.adapters import Adapter

PUBLISH_TIMEOUT_S = 4 * 3600  # merging + uploading a 30B model on a slow disk
PROBE_TIMEOUT_S = 3.0  # "is Ollama there at all", before an export process is started
RETRY = "rltray publish"  # the command that sends the active version to Ollama again
ROLLBACK_WAIT_S = 5.0  # a rollback waits this long for a publish in flight, then leaves it to it
SETTLE_ROUNDS = 3  # re-reads of the active version while pointing `latest`
EXPORT_PENDING = "its export to Ollama has not finished (rltray sends it when Ollama answers)"
BUSY = "another publish is running; Ollama's latest will serve {here} when it ends"
NOT_SERVED = "is active here but not served"  # the active version is of another base model
_PENDING = ("pending",)
WORKDIRS = "publish"  # the data folder's export working folders, one per export
PARENT_PID_ENV = "RLTRAY_TRAINER_PARENT_PID"  # trainer/priority.py: the pid the export watches
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

    def serve_active(self, version: int | None) -> str | None:
        """Make Ollama serve the active version (``version``) again: `rltray publish` and
        the running rltray's retry once Ollama answers; may wait for a publish in flight."""
        return self.rolled_back(version)


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


def said_failure(line: str) -> bool:
    """Whether a publisher line says Ollama does not serve the active version."""
    return RETRY in line or NOT_SERVED in line


def not_served_line(active: Adapter, base_model: str) -> str:
    """Why the active version is not in Ollama: it was trained on another base model."""
    return (
        f"v{active.version} {NOT_SERVED}: it was trained on {active.base_model}, and the model "
        f"set up now is {base_model.strip()}. Set training.base_model back to "
        f"{active.base_model}, or make a version of {base_model.strip()} active "
        "(`rltray rollback 0`: its plain base model)"
    )


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
    if publication.get("pending"):
        return f"not published yet: {publication['pending']}"
    if publication.get("removed"):  # not "pruned": an export's own list of the tags it pruned
        return f"not in Ollama any more: {publication['removed']}"
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
    """Registers each accepted version with Ollama through the trainer-side export process.

    Every publish and rollback holds the data folder's publish lock (app/training/served)
    and ends by pointing ``latest`` at the version the store says is active at that
    moment, so the last one to finish leaves Ollama serving what the store says.
    """

    rollback_wait_s = ROLLBACK_WAIT_S

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

    # -- the export process -----------------------------------------------------

    def _export(self, args: list[str]) -> dict[str, Any]:
        from rltray.app import childpython
        from rltray.app.training import jobbuild

        config = self.load_config()
        if not answers(config.ollama.host):  # one clear sentence, and no process to start
            raise OllamaUnreachable(config.ollama.host)
        python = jobbuild.training_python(config.training)
        command = [python, "-m", "rltray.trainer.export", *args]
        try:
            proc = self._run(  # a private cwd, the current folder off sys.path
                command, capture_output=True, text=True, timeout=PUBLISH_TIMEOUT_S,
                # the export exits when this process dies (trainer/export/__main__.py)
                **childpython.options({**os.environ, PARENT_PID_ENV: str(os.getpid())}),
            )  # fmt: skip
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
        return ["--host", config.ollama.host, "--model", config.ollama.model,
                "--num-ctx", str(config.ollama.num_ctx),
                "--keep", str(config.ollama.keep_versions),
                "--merged-type", config.ollama.merged_type]  # fmt: skip

    def _workdir(self, version: int) -> Path:
        """A fresh working folder per export: two exports of one version never share files."""
        root = self.paths.home / WORKDIRS
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"v{version:04d}-", dir=root))

    def _sweep(self) -> None:
        """Remove what exports of a killed process left in ``publish/``; call under the lock.

        Every export works in its own folder there, made and removed under the publish
        lock, so while this process holds the lock anything there is a leftover. Review 3
        r6: a tray killed mid-export left ``publish/v000N-*/merged.gguf`` (as big as the
        model) for good.
        """
        with contextlib.suppress(OSError):
            for left in (self.paths.home / WORKDIRS).iterdir():
                if left.is_dir() and not left.is_symlink():
                    shutil.rmtree(left, ignore_errors=True)
                else:
                    left.unlink()

    # -- the hooks --------------------------------------------------------------

    def published(self, version: int) -> str | None:
        config = self.load_config()
        if not config.ollama.model.strip():
            return NOT_USED
        adapter = self.store.get_adapter(version)
        if adapter is None:
            return None
        if jobbuild.other_base(adapter, config.training.base_model):
            # review r1: never registered on a model it was not judged on; `latest` serves
            # what the rule says (the plain base while it is active), and the line says why
            with served.publish_lock(self.paths):
                self._sweep()
                return self._settle(config)[1]
        self._record(adapter, {**_identity(adapter), "pending": EXPORT_PENDING})
        with served.publish_lock(self.paths):
            self._sweep()
            try:
                tag, warning = self._register(config, adapter)
            except PublishError as exc:
                if _version_of(self.store.active_adapter()) == version:
                    raise  # `latest` keeps what it served; `rltray publish` tries again
                # review r5: a rollback made meanwhile was told `latest` follows it when
                # this publish ends, failed or not
                line = self._settle(config)[1]
                return f"v{version} was not published ({exc}); it is no longer active: {line}"
            settled, line = self._settle(config)
        warned = f"; {warning}" if warning else ""
        if settled == version:
            return f"published as {tag}; {tag.rsplit(':', 1)[0]}:latest serves it{warned}"
        return f"published as {tag}, no longer the active version; {line}{warned}"

    def rolled_back(self, version: int | None) -> str | None:
        """Point ``latest`` at the active version; a publish in flight does it when it ends
        (waiting for it could take as long as its export)."""
        from filelock import Timeout

        config = self.load_config()
        if not config.ollama.model.strip():
            return NOT_USED
        lock = served.publish_lock(self.paths)
        try:
            lock.acquire(timeout=self.rollback_wait_s)
        except Timeout:
            return BUSY.format(here=_here(version))
        try:
            self._sweep()
            return self._settle(config)[1]
        finally:
            lock.release()

    def serve_active(self, version: int | None) -> str | None:
        config = self.load_config()
        if not config.ollama.model.strip():
            return NOT_USED
        with served.publish_lock(self.paths):
            self._sweep()
            return self._settle(config)[1]

    # -- under the lock ---------------------------------------------------------

    def _register(self, config: Config, adapter: Adapter) -> tuple[str, str | None]:
        """Export ``adapter`` as its ``:vN`` tag (``latest`` untouched); returns the tag, and
        a warning when pruning older tags failed (``_pruned``)."""
        active = self.store.active_adapter()  # prune never deletes the active version's tag
        workdir = self._workdir(adapter.version)
        args = ["publish", *self._common(config), "--no-latest",
                "--adapter", adapter.path, "--version", str(adapter.version),
                "--active", str(active.version if active else adapter.version),
                "--workdir", str(workdir)]  # fmt: skip
        try:
            result = self._export(args)
        except PublishError as exc:
            failed: dict[str, Any] = {**_identity(adapter), "error": str(exc)}
            if isinstance(exc, OllamaUnreachable):
                failed["waiting_for_ollama"] = True  # the running rltray retries when it is back
            self._record(adapter, failed)
            raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # Ollama keeps its own copy
        publication = {k: v for k, v in result.items() if k != "ok"}
        self.store.set_adapter_publication(adapter.version, result["tag"], publication)
        self.store.log_event("published", f"v{adapter.version}: {describe(publication)}")
        return str(result["tag"]), self._pruned(config, publication)

    def _pruned(self, config: Config, publication: dict[str, Any]) -> str | None:
        """Record what an export's prune removed (``_forget_pruned``); a warning when it could
        not remove some tags (``prune_errors``). Review 3 r4: a prune that failed half-way
        failed the whole publish, so a version Ollama had was said "not published" and the
        tags already deleted stayed in the store; now each tag is its own attempt, and a
        failure is a warning that the next version's publish (it prunes again) resolves."""
        self._forget_pruned(config, publication.get("pruned"))
        errors = [str(e) for e in publication.get("prune_errors") or []]
        if not errors:
            return None
        tags = "1 older tag" if len(errors) == 1 else f"{len(errors)} older tags"
        warning = (f"{tags} could not be removed from Ollama ({errors[0]}); the next "
                   "version's publish tries again")  # fmt: skip
        self.store.log_event("prune-failed", "; ".join(errors))
        return warning

    def _forget_pruned(self, config: Config, tags: Any) -> None:
        """Versions whose tag the export's prune deleted lose it here too (review r6: the
        store still named them, and `rltray use codex 1` wrote a profile for a model
        Ollama no longer had); a rollback to one publishes it again."""
        gone = {str(t) for t in tags or []}
        for adapter in self.store.list_adapters() if gone else []:
            if adapter.ollama_tag in gone:
                keep = config.ollama.keep_versions
                why = (f"{adapter.ollama_tag} was removed to keep the newest {keep} versions "
                       "(ollama.keep_versions)")  # fmt: skip
                self._record(adapter, {"removed": why})
                self.store.set_adapter_ollama_tag(adapter.version, None)

    def _settle(self, config: Config) -> tuple[int | None, str]:
        """Point ``latest`` at the active version (``served.servable``), re-read until the
        store holds still (a rollback in another process may land meanwhile); (version
        served, line)."""
        for _ in range(SETTLE_ROUNDS):
            active = self.store.active_adapter()
            line, version = self._point(config, active)
            if _version_of(self.store.active_adapter()) == _version_of(active):
                break
        return version, line

    def _point(self, config: Config, active: Adapter | None) -> tuple[str, int | None]:
        """One ``latest`` export of what serves while ``active`` is active: republishes it
        unless its tag is provably ours; (line, version served)."""
        serve = served.servable(active, config.training.base_model)
        version = _version_of(serve)
        args = ["latest", *self._common(config)]
        workdir = None
        if serve is not None:
            workdir = self._workdir(serve.version)
            args += ["--version", str(version), "--adapter", serve.path,
                     "--workdir", str(workdir)]  # fmt: skip
            blob = trusted_blob(serve)
            args += ["--blob", blob] if blob else []
        try:
            result = self._export(args)
        except PublishError as exc:
            self._latest_failed(config, serve, exc)
            raise
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
        if serve is not None:
            fresh = result.get("republished")
            known = {k: v for k, v in _identity(serve, full=True).items() if k not in _PENDING}
            publication = dict(fresh) if fresh else {**known, "blob": result.get("blob")}
            self.store.set_adapter_publication(version, publication.get("tag"), publication)
            self._pruned(config, fresh or {})
        served.write_served(self.paths, config.ollama.model, version, result.get("latest"))
        line = f"{result['latest']} now serves {result['source']}"
        self.store.log_event("published", line)
        if active is not None and serve is None:
            line += "; " + not_served_line(active, config.training.base_model)
        return line, version

    def _latest_failed(self, config: Config, active: Adapter | None, exc: PublishError) -> None:
        """Keep the failure where the watcher and the tray see it (the version stays active)."""
        down = isinstance(exc, OllamaUnreachable)
        version = active.version if active is not None else None
        served.write_failure(self.paths, config.ollama.model, version, str(exc), retry=down)
        if active is not None:
            reason = f"Ollama's latest does not serve it yet ({exc})"
            self._record(active, {**_identity(active, full=True), "pending": reason})

    def _record(self, adapter: Adapter, publication: dict[str, Any]) -> None:
        self.store.set_adapter_publication(adapter.version, None, publication)


def _version_of(adapter: Adapter | None) -> int | None:
    return adapter.version if adapter is not None else None


def _here(version: int | None) -> str:
    return "the base model" if version is None else f"v{version}"


def _identity(adapter: Adapter, full: bool = False) -> dict[str, Any]:
    """What an earlier successful publish recorded (``tag``, ``blob``): kept through a later
    failed or pending attempt, so the tag is still recognised as this folder's.
    ``full``: the whole record (path taken, sizes) minus any error."""
    publication = adapter.metrics.get("publication") or {}
    if publication.get("error") and not publication.get("tag"):
        return {}
    if full:
        return {k: v for k, v in publication.items() if k not in ("error", "waiting_for_ollama")}
    return {k: publication[k] for k in ("tag", "blob") if publication.get(k)}


def trusted_blob(adapter: Adapter) -> str | None:
    """The blob this folder's record says ``adapter``'s tag carries; ``*`` for a record
    from before blobs were recorded (the tag is taken as it is once, and its blob recorded);
    None when this folder never published it (its ``:vN`` tag may be another folder's)."""
    publication = adapter.metrics.get("publication") or {}
    if publication.get("blob"):
        return str(publication["blob"])
    if publication.get("tag") and adapter.ollama_tag:
        return "*"
    return None


def note_unpublished(store: Store, host: str, base_model: str = "") -> Adapter | None:
    """Give an active version with no publication record (a tray stopped during its export)
    one that says so, so the tray and `rltray versions` show it as not yet published (not
    one of another base model: it is not sent at all, ``served.servable``)."""
    active = served.servable(store.active_adapter(), base_model)
    if active is None or active.metrics.get("publication"):
        return None
    reason = f"Ollama is not running at {host}; rltray sends it when Ollama answers"
    return store.set_adapter_publication(active.version, None, {"pending": reason})
