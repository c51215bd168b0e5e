"""Adapters screen: trained versions with lineage, metrics, gate verdict and where published.

Activating or rolling back posts to the API's ``/api/rollback`` (``web/api.py``),
the route `rltray rollback` calls, so the runner's rules apply: a rejected
version or a missing folder is refused in one sentence. The page's rows are
the API's ``/api/versions``. Deleting removes an old version's files and row
(the number is never reused); the active one is never deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, jsonify, render_template
from rltray.app.api.input import Body, Version, takes
from rltray.web.state import state

bp = Blueprint("adapters", __name__)


class VersionBody(Body):
    """Which version, like ``{"version": 3}`` or ``"v3"`` (0 for the base model)."""

    version: Version


def version_rows() -> list[dict[str, Any]]:
    """``Service.versions()`` plus what the page shows: ratings used, verdict, reasons."""
    rows = []
    for v in state().service.versions():
        m = v["metrics"] if isinstance(v["metrics"], dict) else {}
        reasons = m.get("reasons") or []
        notes = m.get("notes") or []
        rows.append(
            {
                **v,
                "ratings": (m.get("fresh") or 0) + (m.get("heldout") or 0) or None,
                "auroc": m.get("auroc_new"),
                "auroc_parent": m.get("auroc_parent"),
                "kl": m.get("kl_to_base"),
                "verdict": "accepted" if m.get("accepted", True) else "rejected",
                "reasons": [*reasons, *notes],
                "folder_exists": Path(v["path"]).is_dir(),
            }
        )
    return rows


@bp.get("/adapters")
def page() -> Any:
    return render_template(
        "adapters.html",
        versions=version_rows(),
        active=state().runtime.training_status()["active_version"],
    )


@bp.post("/api/adapters/delete")
@takes(body=VersionBody)
def api_delete(body: VersionBody) -> Any:
    """Delete an old version's files and row (never the active one)."""
    state().service.delete_version(body.version)
    return jsonify({"deleted": body.version})
