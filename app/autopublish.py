"""Keep Ollama's ``latest`` serving the active version, by itself, once Ollama answers.

Why: the rule is "Ollama's ``latest`` serves the store's active version (the base
model when none is active)", and three things left it broken until the user ran
`rltray publish`: a round accepted while Ollama was not running, a rollback made
while it was not running, and a tray stopped during an export (no record at all).
The running rltray looks about once a minute. The check is cheap: one store row
and one small file (``served.needs_settling``); only when ``latest`` is not known
to serve the active version does it probe Ollama (one HTTP request, short timeout)
and then publish on a thread of its own (an export can take minutes), never two at
once and never while another publish of this data folder holds the lock (that one
ends by pointing ``latest`` at the active version itself). A publish that failed
for another reason than Ollama being down is left to `rltray publish`: it would
fail the same way every minute.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rltray.app.training import publisher, served

if TYPE_CHECKING:
    from rltray.app.service import Service

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60.0
PROBE_TIMEOUT_S = 1.0  # the worker thread waits this long at most (Ollama is local)


class OllamaReturn:
    """Polled by the runtime's worker; publishes on a thread of its own."""

    def __init__(self, service: Service, clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.clock = clock
        self._next_check = 0.0
        self._busy = threading.Lock()
        self.thread: threading.Thread | None = None

    def poll(self) -> bool:
        """Start the publish when it is due, needed and Ollama answers; whether it did."""
        now = self.clock()
        if now < self._next_check or self._busy.locked():
            return False
        self._next_check = now + CHECK_EVERY_S
        settings = self.service.settings()
        ollama, base_model = settings.ollama, settings.training.base_model
        store, paths = self.service.store, self.service.paths
        if not served.needs_settling(store, paths, ollama.model, base_model) or served.publishing(
            paths
        ):
            return False
        if not publisher.answers(ollama.host, PROBE_TIMEOUT_S):
            publisher.note_unpublished(store, ollama.host, base_model)
            return False
        # what `latest` is to serve: the active version, or the plain base when it was
        # trained on another base than the model set up now (never merged onto this one)
        active = served.servable(store.active_adapter(), base_model)
        self._busy.acquire()
        self.thread = threading.Thread(
            target=self._publish,
            args=(active.version if active is not None else None,),
            name="rltray-republish",
            daemon=True,
        )
        self.thread.start()
        return True

    def _publish(self, version: int | None) -> None:
        here = "the base model" if version is None else f"v{version}"
        try:
            line = self.service.publish().get("ollama")
            self.service.note("published", f"Ollama answered again; {here}: {line}")
            self.service.changed()
        except Exception as exc:  # a background retry must never take the worker down
            log.warning("publishing %s after Ollama came back failed: %s", here, exc)
        finally:
            self._busy.release()
