"""Ratings browser: search and filter captured turns, read them, rate, comment, tag, delete, export.

Filters are query parameters (a filtered view is a link); the list is drawn by
the server, and static/ratings.js adds the keyboard (j/k move, g/b rate), the
detail pane and the actions, each a JSON call below. Deleting is for real
(store.delete_turns): the turn is gone from the database and from every later
export and training job.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request, url_for
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
    TagBody,
    TagNameBody,
    TagsBody,
    TurnListQuery,
    TurnQuery,
    cursor,
)
from rltray.web.security import Refused
from rltray.web.state import rating_source, state

bp = Blueprint("ratings", __name__)


def _local_day_start(text: str, field: str, days: int = 0) -> str:
    """The UTC time the local day ``text`` (plus ``days`` days) starts at.

    A day is not always 24 hours: the start of the next local day, not this day's
    start plus 24 hours, ends it (on the days clocks change the hour would be lost
    or doubled).
    """
    from rltray.app.store import utc_iso

    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise UserError(f"The {field} date must look like 2025-03-01, not {text!r}.") from None
    try:  # the first and last days a date can name have no local start in UTC, or no next day
        start = datetime.combine(day + timedelta(days=days), time()).astimezone()
        (start + timedelta(days=1)).astimezone(timezone.utc)
        return utc_iso(start)
    except (ValueError, OverflowError):
        raise UserError(f"The {field} date {text} is out of range; give a date "
                        "between the years 1 and 9999.") from None


def current_filter(query: TurnQuery) -> TurnFilter:
    """The store's filter for the query string's filters (local days become UTC bounds)."""
    until = _local_day_start(query.until, "until", days=1) if query.until else None
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
    """The list, a page at a time, newest first.

    The pager's links name the row a page continues from (``before`` / ``after``, its
    ``captured_at,id``), not a page number: rating turns out of a filtered list
    ("unrated") shrinks it, and "page 2" of the shorter list would skip a page of them.
    """
    store = state().service.store
    where = current_filter(query)
    if query.before and query.after:
        raise UserError("Give before or after (where the page starts), not both.")
    if (query.before or query.after) and query.page != 1:
        raise UserError("Give page or before / after (where the page starts), not both.")
    total = store.count_turns(where)
    if query.before or query.after:
        turns = store.search_turns(dataclasses.replace(
            where,
            before=cursor(query.before) if query.before else None,
            after=cursor(query.after) if query.after else None,
        ), limit=PAGE_SIZE)
        if query.after and len(turns) < PAGE_SIZE:  # newer than it: the newest page, full
            turns = store.search_turns(where, limit=PAGE_SIZE)
    else:  # the first page, or an old link's page number
        turns = store.search_turns(where, limit=PAGE_SIZE, offset=(query.page - 1) * PAGE_SIZE)
    newer = 0
    older = False
    if turns:
        first, last = turns[0], turns[-1]
        newer = store.count_turns(dataclasses.replace(where, after=(first.captured_at, first.id)))
        older = bool(store.search_turns(
            dataclasses.replace(where, before=(last.captured_at, last.id)), limit=1))
    tags = store.tags_of(t.id for t in turns)
    args = {k: v for k, v in request.args.to_dict(flat=False).items()
            if k not in ("page", "before", "after")}
    return render_template(
        "ratings.html",
        turns=turns,
        tags=tags,
        total=total,
        first=newer + 1,  # the place of the page's first turn among all that match
        newer_link=url_for("ratings.page", after=_place(turns[0]), **args) if newer else None,
        older_link=url_for("ratings.page", before=_place(turns[-1]), **args) if older else None,
        newest_link=url_for("ratings.page", **args)
        if query.before or query.after or query.page != 1 else None,
        f=request.args,
        filter_tags=where.tags,
        args=args,
        agents=store.agents(),
        projects=store.projects(),
        all_tags=store.list_tags(),
        ratings=RATINGS,
        open_turn=query.turn if any(t.id == query.turn for t in turns) else None,
    )


def _place(turn: Any) -> str:
    """A row's place in the list, as the pager's links carry it."""
    return f"{turn.captured_at},{turn.id}"


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
    """Change the comment of a turn's active rating; with ``was``, only if it still is that
    (409 otherwise: another window changed it meanwhile, and its words are kept)."""
    from rltray.app.store.turns import CommentChanged

    was = body.was if "was" in body.model_fields_set else ...
    try:
        state().service.comment(turn_id, body.comment, was=was)
    except CommentChanged as exc:
        raise Refused(409, "comment_changed", str(exc)) from None
    return _one(turn_id)


@bp.post(f"/api/turns/<{ID_PATH}:turn_id>/tags")
@takes(body=TagsBody)
def api_tags(turn_id: int, body: TagsBody) -> Any:
    """Make a turn carry exactly these tags (a tag another window added meanwhile is
    dropped: the page adds and removes one tag at a time, through ``/tag``)."""
    state().service.set_tags(turn_id, body.tags)
    return _one(turn_id)


@bp.post(f"/api/turns/<{ID_PATH}:turn_id>/tag")
@takes(body=TagBody)
def api_tag(turn_id: int, body: TagBody) -> Any:
    """Add one tag to a turn (``on`` true) or remove it; its other tags stay as they are."""
    state().service.tag_turn(turn_id, body.name, on=body.on)
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
