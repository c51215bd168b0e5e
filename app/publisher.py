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
"""

from __future__ import annotations


class Publisher:
    """No-op publisher; subclass and override what you need."""

    def published(self, version: int) -> None:
        """Adapter ``version`` (``adapters/vNNNN``) was accepted and is now active."""

    def rolled_back(self, version: int | None) -> None:
        """Version ``version`` is active again; ``None`` means the plain base model."""
