"""Send the active version to Ollama by itself once Ollama answers again.

Why: a round accepted while Ollama was not running stays active here but not in
Ollama; the user was told to start Ollama and run `rltray publish`, and until
they did, their agents kept the old model although the tray said the new one was
active. The running rltray now looks about once a minute, and only while the
active version's publish failed for that one reason (publisher.waiting_for_ollama):
one HTTP probe with a short timeout, then the publish on a thread of its own (an
export can take minutes), never two at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rltray.app.training import publisher

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
        """Start the publish when it is due, waiting and Ollama answers; whether it did."""
        now = self.clock()
        if now < self._next_check or self._busy.locked():
            return False
        self._next_check = now + CHECK_EVERY_S
        settings = self.service.settings()
        if not settings.ollama.model.strip():
            return False
        waiting = publisher.waiting_for_ollama(self.service.store)
        if waiting is None or not publisher.answers(settings.ollama.host, PROBE_TIMEOUT_S):
            return False
        self._busy.acquire()
        self.thread = threading.Thread(
            target=self._publish, args=(waiting.version,), name="rltray-republish", daemon=True
        )
        self.thread.start()
        return True

    def _publish(self, version: int) -> None:
        try:
            line = self.service.publish().get("ollama")
            self.service.note("published", f"Ollama answered again; v{version}: {line}")
            self.service.changed()
        except Exception as exc:  # a background retry must never take the worker down
            log.warning("publishing v%s after Ollama came back failed: %s", version, exc)
        finally:
            self._busy.release()
