"""The CLI's side of the local API: find the running service and call it (stdlib only).

The CLI works alone when no service runs; when one does, commands that change
what the service owns (train, pause, rollback) go through it so there is one
trainer and one scheduler. A stale ``endpoint.json`` (the service was killed)
is recognised by the lock being free, and ignored.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rltray.app import instance
from rltray.app.errors import ExitCode, NothingToDo, UserError

if TYPE_CHECKING:
    from rltray.app.paths import Paths

TIMEOUT_S = 30.0


#: The error codes (the exception's class name, ``web/app.py``) of a NothingToDo: the
#: service did not refuse anything, there was just nothing to do, so the CLI says the
#: sentence as it is, with NothingToDo's exit code. Tied to the classes by a test.
NOTHING_TO_DO_CODES = frozenset({"NothingToDo", "NotEnoughRatings", "AlreadyRated"})

#: The error codes of a refusal because a round already runs (``TrainingBusy``): the CLI
#: exits with ``ALREADY_RUNNING`` as it does when it refuses alone, not with ``USAGE``
#: (review 3 r10: `rltray train` beside a round exited 2 through the tray, 5 without one).
#: Tied to the classes by a test.
ALREADY_RUNNING_CODES = frozenset({"TrainingBusy"})


class ServiceError(UserError):
    """The running service refused or failed a request; its one-sentence message."""


@dataclass(frozen=True)
class ApiClient:
    port: int
    token: str

    @classmethod
    def find(cls, paths: Paths) -> ApiClient | None:
        """The running service's client, or None when no service runs for this data folder."""
        if not instance.service_running(paths):
            return None
        try:
            endpoint = json.loads(paths.endpoint.read_text("utf-8"))
            port = int(endpoint["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        token = endpoint.get("token")
        if not isinstance(token, str):
            from rltray.app.secrets import SecretsUnavailable, get_secret

            try:
                token = get_secret("api-token")
            except SecretsUnavailable:
                token = None
        if not token:
            raise UserError(
                "rltray is running, but its API token cannot be read from the keyring; "
                "unlock the keyring or stop the running rltray.",
                ExitCode.NOT_AVAILABLE,
            )
        return cls(port, token)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())["error"]
                message, code = str(error["message"]), error.get("code")
            except (ValueError, KeyError, TypeError):
                message, code = f"HTTP {exc.code}", None
            if code in NOTHING_TO_DO_CODES:  # "refused: v6 is already active" read as a fault
                raise NothingToDo(message) from None
            if code in ALREADY_RUNNING_CODES:
                raise ServiceError(
                    f"The running rltray refused: {message}", ExitCode.ALREADY_RUNNING
                ) from None
            raise ServiceError(f"The running rltray refused: {message}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(
                f"The running rltray did not answer ({exc}); try again, or restart it."
            ) from None
