"""Lessons screen: what the agents are told from your ratings' comments, and you decide it.

The list is drawn by the server (``/lessons``, and ``/lessons/list`` redraws it
after a change: one change can move others, a resolved contradiction frees its
twin); static/lessons.js adds the keyboard (j/k move, e or Enter edit, m mute,
p pin), inline editing, the turns behind a lesson, the preview and its budget
bar. Every change is one JSON call below and one service intent
(``service.lessons``), the same the CLI's `rltray lessons` makes; nothing here
writes the store. "Suggest wording" asks the user's local model (through Ollama) for one
sentence and only shows it: Accept saves it through the same words route as an edit.
The per-agent switches are shared with the wizard's opt-in
(``templates/lesson_switches.html``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template
from rltray.app.api.input import NoBody, takes
from rltray.web import lessons_view as view
from rltray.web.lessons_input import (
    KEY_PATH,
    AddLessonBody,
    FlagBody,
    PreviewQuery,
    ResolveBody,
    ScopeBody,
    SuggestBody,
    SwitchBody,
    WordsBody,
)
from rltray.web.state import state

bp = Blueprint("lessons", __name__)


def _listed() -> dict[str, Any]:
    """What the list's template needs, on the page and in its redraw."""
    from rltray.app.lessons.book import RETIRE_DAYS

    return {"lessons": view.rows(), "retire_days": RETIRE_DAYS}


@bp.get("/lessons")
def page() -> Any:
    from rltray.app.hooks import lessonfiles, registry

    listed = _listed()
    switches = view.agent_rows()
    return render_template(
        "lessons.html",
        **listed,
        lesson_agents=switches,
        agents=registry.display_names(),
        folders=view.folders(),
        preview=view.preview_choice(listed["lessons"], switches),
        budget=lessonfiles.BUDGET_CHARS,
        cap=lessonfiles.MAX_CHARS,
    )


@bp.get("/lessons/list")
def list_fragment() -> Any:
    """The list's HTML alone, for the page to redraw after a change."""
    return render_template("lessons_list.html", **_listed())


# -- JSON ---------------------------------------------------------------------------


@bp.get("/api/lessons")
def api_list() -> Any:
    """Every lesson (counts, scope, status, still happening) and each agent's switch."""
    return jsonify({"lessons": view.rows(), "agents": view.agent_rows()})


@bp.post("/api/lessons")
@takes(body=AddLessonBody)
def api_add(body: AddLessonBody) -> Any:
    """Add a lesson in your words, for one project folder or (folder null) every project."""
    key = state().service.lessons.add(body.text, body.folder or None, body.kind)
    return jsonify(view.row(key))


@bp.get(f"/api/lessons/<{KEY_PATH}:key>/turns")
def api_turns(key: str) -> Any:
    """The rated turns behind a lesson, newest rating first."""
    return jsonify(view.turns_behind(key))


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/words")
@takes(body=WordsBody)
def api_words(key: str, body: WordsBody) -> Any:
    """Reword a lesson; empty goes back to your own comment's words."""
    state().service.lessons.edit(key, body.text)
    return jsonify(view.row(key))


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/suggest")
@takes(body=SuggestBody)
def api_suggest(key: str, body: SuggestBody) -> Any:
    """A wording for the lesson by your local model (Ollama), from its comments alone.

    Saves nothing: the page shows it with Accept (the words route) and Discard.
    """
    got = state().service.lessons.suggest(key, body.model)
    return jsonify({"id": got.key, "text": got.text, "model": got.model})


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/mute")
@takes(body=FlagBody)
def api_mute(key: str, body: FlagBody) -> Any:
    """Stop (or start again) telling a lesson; it stays listed."""
    state().service.lessons.mute(key, body.on)
    return jsonify(view.row(key))


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/pin")
@takes(body=FlagBody)
def api_pin(key: str, body: FlagBody) -> Any:
    """A pinned lesson comes first within the budget and never retires."""
    state().service.lessons.pin(key, body.on)
    return jsonify(view.row(key))


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/resolve")
@takes(body=ResolveBody)
def api_resolve(key: str, body: ResolveBody) -> Any:
    """Settle a contradiction: which way the lesson goes."""
    state().service.lessons.resolve(key, body.kind)
    return jsonify(view.row(key))


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/scope")
@takes(body=ScopeBody)
def api_scope(key: str, body: ScopeBody) -> Any:
    """Tell a lesson in its own project only, or in every project (accept a suggestion)."""
    state().service.lessons.set_scope(key, body.scope)
    return jsonify(view.row(key))


@bp.post(f"/api/lessons/<{KEY_PATH}:key>/delete")
@takes(body=NoBody)
def api_delete(key: str, body: NoBody) -> Any:
    """Never list or tell a lesson again (its ratings stay)."""
    state().service.lessons.delete(key)
    return jsonify({"deleted": key})


@bp.get("/api/lessons/preview")
@takes(query=PreviewQuery)
def api_preview(query: PreviewQuery) -> Any:
    """Exactly what a session of an agent in a folder would be told, with its size."""
    return jsonify(view.preview(query.folder, query.agent))


@bp.get("/api/lessons/agents")
def api_agents() -> Any:
    """Each agent's lessons switch, with what it sends and where."""
    return jsonify(view.agent_rows())


@bp.post("/api/lessons/agents/<name>")
@takes(body=SwitchBody)
def api_switch(name: str, body: SwitchBody) -> Any:
    """Turn an agent's lessons on or off (the ``lessons.<agent>`` setting)."""
    state().service.lessons.switch(name, body.on)
    return jsonify(view.agent_row(name))
