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
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request
from rltray.app.api.input import ID_PATH, SMALL_BODY, takes
from rltray.app.errors import UserError
from rltray.app.store import TurnFilter
from rltray.web.ratings_input import (
    PAGE_SIZE,
    RATINGS,
    BulkBody,
    CommentBody,
    ExportQuery,
    RateTurnBody,
    RatingsPageQuery,
    TagNameBody,
    TagsBody,
    TurnListQuery,
    TurnQuery,
)
from rltray.web.state import rating_source, state

bp = Blueprint("ratings", __name__)


def _local_day_start(text: str, field: str) -> str:
    from rltray.app.store import utc_iso

    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise UserError(f"The {field} date must look like 2025-03-01, not {text!r}.") from None
    try:  # the first and last days a date can name have no local start in UTC, or no next day
        start = datetime.combine(day, time()).astimezone()
        (start + timedelta(days=1)).astimezone(timezone.utc)
        return utc_iso(start)
    except (ValueError, OverflowError):
        raise UserError(f"The {field} date {text} is out of range; give a date "
                        "between the years 1 and 9999.") from None


def current_filter(query: TurnQuery) -> TurnFilter:
    """The store's filter for the query string's filters (local days become UTC bounds)."""
    until = None
    if query.until:
        start = _local_day_start(query.until, "until")
        until = (datetime.fromisoformat(start) + timedelta(days=1)).isoformat()
    return TurnFilter(
        text=query.q,
        agent=query.agent,
        project=query.project,
        rating=query.rating,
        since=_local_day_start(query.since, "since") if query.since else None,
        until=until,
        tags=tuple(query.tag),
        turn=query.turn,
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
        else {"value": rating.value, "score": rating.score, "comment": rating.comment,
              "rated_at": rating.rated_at},
        "tags": tags or [],
    }


@bp.get("/ratings")
@takes(query=RatingsPageQuery)
def page(query: RatingsPageQuery) -> Any:
    store = state().service.store
    where = current_filter(query)
    page_no = query.page
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
        open_turn=query.turn if any(t.id == query.turn for t in turns) else None,
    )


@bp.get(f"/ratings/turn/<{ID_PATH}:turn_id>")
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
@takes(query=ExportQuery)
def export(query: ExportQuery) -> Any:
    """The filtered turns (or the ``id``s given) as JSON lines, oldest first, as a download."""
    store = state().service.store
    ids = query.id
    where = current_filter(query)

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


def _one(turn_id: int) -> Any:
    store = state().service.store
    turn = store.get_turn(turn_id)
    if turn is None:
        raise UserError(f"There is no turn {turn_id}; it may have been deleted.")
    return jsonify(turn_json(turn, store.tags_of([turn_id]).get(turn_id, [])))


@bp.get("/api/turns")
@takes(query=TurnListQuery)
def api_list(query: TurnListQuery) -> Any:
    """The turns matching the filters, newest first, with how many match in all."""
    store = state().service.store
    where = current_filter(query)
    turns = store.search_turns(where, limit=query.limit, offset=query.offset)
    tags = store.tags_of(t.id for t in turns)
    return jsonify(
        {
            "total": store.count_turns(where),
            "turns": [turn_json(t, tags.get(t.id)) for t in turns],
        }
    )


@bp.get(f"/api/turns/<{ID_PATH}:turn_id>")
def api_get(turn_id: int) -> Any:
    """One turn: prompt, answer, rating and tags."""
    return _one(turn_id)


@bp.post(f"/api/turns/<{ID_PATH}:turn_id>/rating")
@takes(body=RateTurnBody, max_bytes=SMALL_BODY)
def api_rate(turn_id: int, body: RateTurnBody) -> Any:
    """Rate a turn (1 good, -1 bad, or a 1-5 score) or withdraw its rating (0); the history
    keeps every one.

    The same rules as every other way to rate (app/rating.py): the same rating
    again changes nothing, another one keeps the comment unless a new one is given.
    """
    from rltray.app import rating

    service = state().service
    if body.value is None and body.score is None:
        raise UserError("Give a rating: value (1 good, -1 bad, 0 withdraws) or score (1-5).")
    value = body.value if body.score is None else rating.from_score(body.score)
    if body.value is not None and body.value != value:
        kind = rating.label(value, None)
        raise UserError(f"A score of {body.score} is {kind}, not {body.value}.")
    if value == 0:
        if body.comment:  # it would be dropped without a word: a withdrawal keeps no comment
            raise UserError("A withdrawn rating keeps no comment; rate the turn to say why.")
        service.unrate(turn_id, rating_source())
    else:
        service.rate(
            turn_id, value, comment=body.comment, source=rating_source(), score=body.score
        )
    return _one(turn_id)


@bp.post(f"/api/turns/<{ID_PATH}:turn_id>/comment")
@takes(body=CommentBody)
def api_comment(turn_id: int, body: CommentBody) -> Any:
    """Change the comment of a turn's active rating."""
    state().service.comment(turn_id, body.comment)
    return _one(turn_id)


@bp.post(f"/api/turns/<{ID_PATH}:turn_id>/tags")
@takes(body=TagsBody)
def api_tags(turn_id: int, body: TagsBody) -> Any:
    """Make a turn carry exactly these tags."""
    state().service.set_tags(turn_id, body.tags)
    return _one(turn_id)


BULK_VALUES = {"good": 1, "bad": -1, "unrate": 0}


@bp.post("/api/turns/bulk")
@takes(body=BulkBody)
def api_bulk(body: BulkBody) -> Any:
    """One action on a selection: good, bad, unrate, tag / untag (with ``tag``), delete."""
    ids, action = body.ids, body.action
    service = state().service
    if action == "delete":
        changed = service.delete_turns(ids, "the ratings browser")
    elif action in ("tag", "untag"):
        if body.tag is None:
            raise UserError("Name the tag to add or remove.")
        changed = service.tag_turns(ids, body.tag, on=action == "tag")
    else:
        changed = service.rate_many(ids, BULK_VALUES[action], rating_source())
    return jsonify({"action": action, "changed": changed})


@bp.get("/api/tags")
def api_tag_list() -> Any:
    """Every tag with how many turns carry it."""
    return jsonify(state().service.store.list_tags())


@bp.post("/api/tags")
@takes(body=TagNameBody)
def api_tag_add(body: TagNameBody) -> Any:
    """Add a tag to the list."""
    return jsonify({"name": state().service.add_tag(body.name)})


@bp.post("/api/tags/delete")
@takes(body=TagNameBody)
def api_tag_delete(body: TagNameBody) -> Any:
    """Remove a tag from the list and from every turn."""
    state().service.remove_tag(body.name)
    return jsonify({"removed": body.name})
