"""Ratings browser: search and filter captured turns, read them, rate, comment, tag, delete, export.

Filters are query parameters (a filtered view is a link); the list is drawn by
the server, and static/ratings.js adds the keyboard (j/k move, g/b rate), the
detail pane and the actions, each a JSON call below. Deleting is for real
(store.delete_turns): the turn is gone from the database and from every later
export and training job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request
from rltray.app.errors import UserError
from rltray.app.store import TurnFilter
from rltray.web.state import state

bp = Blueprint("ratings", __name__)
PAGE_SIZE = 50
RATINGS = ("good", "bad", "unrated", "rated")
BULK_ACTIONS = ("good", "bad", "unrate", "tag", "untag", "delete")


def _local_day_start(text: str, field: str) -> str:
    from rltray.app.store import utc_iso

    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise UserError(f"The {field} date must look like 2025-03-01, not {text!r}.") from None
    return utc_iso(datetime.combine(day, time()).astimezone())


def current_filter(args: Any = None) -> TurnFilter:
    """The filter the query string asks for; a bad value is one sentence, not a 500."""
    args = request.args if args is None else args
    rating = args.get("rating") or None
    if rating is not None and rating not in RATINGS:
        raise UserError(f"Rating filter must be one of {', '.join(RATINGS)}, not {rating!r}.")
    until = args.get("until") or None
    if until:
        start = _local_day_start(until, "until")
        until = (datetime.fromisoformat(start) + timedelta(days=1)).isoformat()
    return TurnFilter(
        text=args.get("q", ""),
        agent=args.get("agent") or None,
        project=args.get("project") or None,
        rating=rating,
        since=_local_day_start(args["since"], "since") if args.get("since") else None,
        until=until,
        tags=tuple(t for t in args.getlist("tag") if t),
    )


def turn_json(turn: Any, tags: list[str] | None = None) -> dict[str, Any]:
    rating = turn.rating
    return {
        "id": turn.id,
        "agent": turn.agent,
        "project": turn.cwd,
        "captured_at": turn.captured_at,
        "prompt": turn.prompt,
        "response": turn.response,
        "rating": None
        if rating is None
        else {"value": rating.value, "comment": rating.comment, "rated_at": rating.rated_at},
        "tags": tags or [],
    }


def _int(name: str, default: int) -> int:
    try:
        return max(0, int(request.args.get(name, default)))
    except ValueError:
        raise UserError(f"{name} must be a whole number.") from None


@bp.get("/ratings")
def page() -> Any:
    store = state().service.store
    where = current_filter()
    page_no = _int("page", 1) or 1
    total = store.count_turns(where)
    turns = store.search_turns(where, limit=PAGE_SIZE, offset=(page_no - 1) * PAGE_SIZE)
    tags = store.tags_of(t.id for t in turns)
    args = request.args.to_dict(flat=False)
    return render_template(
        "ratings.html",
        turns=turns,
        tags=tags,
        total=total,
        page=page_no,
        pages=max(1, -(-total // PAGE_SIZE)),
        f=request.args,
        filter_tags=where.tags,
        args={k: v for k, v in args.items() if k != "page"},
        agents=store.agents(),
        projects=store.projects(),
        all_tags=store.list_tags(),
        ratings=RATINGS,
    )


@bp.get("/ratings/turn/<int:turn_id>")
def detail(turn_id: int) -> Any:
    """The detail pane's HTML for one turn (prompt, context, answer rendered)."""
    store = state().service.store
    turn = store.get_turn(turn_id)
    if turn is None:
        raise UserError(f"There is no turn {turn_id}; it may have been deleted.")
    return render_template(
        "turn_detail.html",
        turn=turn,
        tags=store.tags_of([turn_id]).get(turn_id, []),
        all_tags=store.list_tags(),
        history=store.rating_history(turn_id),
    )


@bp.get("/ratings/export.jsonl")
def export() -> Any:
    """The filtered turns (or the ``ids`` given) as JSON lines, oldest first, as a download."""
    store = state().service.store
    raw_ids = request.args.getlist("id")
    ids = _ids(raw_ids) if raw_ids else []
    where = current_filter()

    def lines() -> Iterator[str]:
        wanted = set(ids)
        matching = None if ids else {t.id for t in store.search_turns(where, limit=10**9)}
        for row in store.iter_export():
            if (ids and row["id"] in wanted) or (matching is not None and row["id"] in matching):
                row["tags"] = store.tags_of([row["id"]]).get(row["id"], [])
                yield json.dumps(row, ensure_ascii=False) + "\n"

    return Response(
        lines(),
        mimetype="application/x-ndjson",
        headers={"Content-Disposition": 'attachment; filename="rltray-ratings.jsonl"'},
    )


# -- JSON actions ---------------------------------------------------------------------


def _body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise UserError("Send a JSON object.")
    return body


def _ids(raw: Any) -> list[int]:
    if not isinstance(raw, list) or not raw:
        raise UserError("Select at least one turn.")
    try:
        return [int(i) for i in raw]
    except (TypeError, ValueError):
        raise UserError("Turn ids are whole numbers.") from None


def _one(turn_id: int) -> Any:
    store = state().service.store
    turn = store.get_turn(turn_id)
    if turn is None:
        raise UserError(f"There is no turn {turn_id}; it may have been deleted.")
    return jsonify(turn_json(turn, store.tags_of([turn_id]).get(turn_id, [])))


@bp.get("/api/turns")
def api_list() -> Any:
    store = state().service.store
    where = current_filter()
    turns = store.search_turns(where, limit=_int("limit", PAGE_SIZE), offset=_int("offset", 0))
    tags = store.tags_of(t.id for t in turns)
    return jsonify(
        {
            "total": store.count_turns(where),
            "turns": [turn_json(t, tags.get(t.id)) for t in turns],
        }
    )


@bp.get("/api/turns/<int:turn_id>")
def api_get(turn_id: int) -> Any:
    return _one(turn_id)


@bp.post("/api/turns/<int:turn_id>/rating")
def api_rate(turn_id: int) -> Any:
    """``{"value": 1 | -1 | 0, "comment"?}``; 0 withdraws the rating (history keeps it)."""
    body = _body()
    value = body.get("value")
    service = state().service
    if value == 0:
        service.store.undo("web", turn_id=turn_id)
    elif value in (1, -1):
        comment = body.get("comment")
        if comment is None and (current := service.store.active_rating(turn_id)) is not None:
            comment = current.comment  # re-rating keeps what the user wrote
        service.rate_turn(turn_id, int(value), comment=comment, source="web")
    else:
        raise UserError("value is 1 (good), -1 (bad) or 0 (withdraw the rating).")
    return _one(turn_id)


@bp.post("/api/turns/<int:turn_id>/comment")
def api_comment(turn_id: int) -> Any:
    comment = _body().get("comment")
    if comment is not None and not isinstance(comment, str):
        raise UserError("comment is text.")
    state().service.store.set_comment(turn_id, comment)
    return _one(turn_id)


@bp.post("/api/turns/<int:turn_id>/tags")
def api_tags(turn_id: int) -> Any:
    tags = _body().get("tags")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UserError('tags is a list of names, like ["wrong", "verbose"].')
    state().service.store.set_turn_tags(turn_id, tags)
    return _one(turn_id)


@bp.post("/api/turns/bulk")
def api_bulk() -> Any:
    """One action on a selection: good, bad, unrate, tag / untag (with ``tag``), delete."""
    body = _body()
    ids = _ids(body.get("ids"))
    action = body.get("action")
    service = state().service
    store = service.store
    if action not in BULK_ACTIONS:
        raise UserError(f"action is one of {', '.join(BULK_ACTIONS)}.")
    if action == "delete":
        count = store.delete_turns(ids)
        store.log_event("ratings", f"deleted {count} turns in the ratings browser")
        return jsonify({"action": action, "changed": count})
    if action in ("tag", "untag"):
        tag = body.get("tag")
        if not isinstance(tag, str):
            raise UserError("Name the tag to add or remove.")
        changed = store.tag_turns(ids, tag, on=action == "tag")
        return jsonify({"action": action, "changed": changed})
    changed = 0
    with store.batch():
        for turn_id in ids:
            if store.get_turn(turn_id) is None:
                continue
            if action == "unrate":
                changed += store.undo("web", turn_id=turn_id) is not None
            else:
                value = 1 if action == "good" else -1
                current = store.active_rating(turn_id)
                if current is not None and current.value == value:
                    continue
                store.rate(turn_id, value, "web", comment=current.comment if current else None)
                changed += 1
    return jsonify({"action": action, "changed": changed})


@bp.get("/api/tags")
def api_tag_list() -> Any:
    return jsonify(state().service.store.list_tags())


@bp.post("/api/tags")
def api_tag_add() -> Any:
    name = _body().get("name")
    if not isinstance(name, str):
        raise UserError("name is the tag's text.")
    return jsonify({"name": state().service.store.add_tag(name)})


@bp.post("/api/tags/delete")
def api_tag_delete() -> Any:
    name = _body().get("name")
    if not isinstance(name, str):
        raise UserError("name is the tag's text.")
    if not state().service.store.remove_tag(name):
        raise UserError(f"There is no tag {name!r}.")
    return jsonify({"removed": name})
