"""What stays on the training machine: the newest few adapters, and every one in use.

Each round leaves its adapter in ``<dir>/adapters/<hash>`` so the next round's parent
(usually that very adapter) need not go up again (``standin.StandIn._parent_on_remote``).
Kept for ever, a user who trains daily would fill the remote disk with adapters no round
will ask for again (a 7B rank-16 adapter is ~40 MB; a 70B one ~200 MB). So after each
round the folder keeps the adapters that round used and made, plus the
:data:`KEEP_NEWEST` most recent; an older parent that a rollback brings back is simply
uploaded again, by the same hash check.
"""

from __future__ import annotations

import posixpath
from typing import Any

#: Adapters kept beyond the ones in use: a rollback or two finds its parent still there.
KEEP_NEWEST = 3


def prune_adapters(conn: Any, folder: str, in_use: set[str], keep: int = KEEP_NEWEST
                   ) -> list[str]:
    """Remove adapters in ``folder`` but those named in ``in_use`` and the ``keep`` newest;
    the names removed. Half-uploaded ``.part`` folders are left to the upload that owns them."""
    entries = [(name, mtime) for name, mtime in conn.listdir(folder)
               if not name.endswith(".part")]  # fmt: skip
    newest = {name for name, _ in sorted(entries, key=lambda e: e[1], reverse=True)[:keep]}
    gone = [name for name, _ in entries if name not in newest and name not in in_use]
    for name in gone:
        conn.rmtree(posixpath.join(folder, name))
    return gone
