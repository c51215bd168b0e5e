"""Settings screen: every setting of config.py's single declaration, validated, with its help.

The page is drawn from ``config.describe()``, so a new setting appears here
without touching this file (a test checks each one does). Values are saved
one key at a time through ``config.set_value`` (the same validation and
comment-keeping write as `rltray config set`); a bad value keeps the others
and shows its one sentence beside the field. The Hugging Face token goes to
the keyring and is shown back only as its last four characters.
"""

from __future__ import annotations

from typing import Annotated, Any

from flask import Blueprint, jsonify, redirect, render_template, request, url_for
from pydantic import ConfigDict, Field, RootModel
from rltray.app.api.input import Name, SettingValue, takes
from rltray.web.state import state

bp = Blueprint("settings", __name__)
SECRET = "hf-token"
MAX_SETTINGS = 100  # keys one request may set (there are about twenty)


class SettingsBody(RootModel[Annotated[dict[Name, SettingValue], Field(max_length=MAX_SETTINGS)]]):
    """Settings by key, like ``{"training.preset": "careful"}``; all are saved or none."""

    model_config = ConfigDict(strict=True, frozen=True)


SECTION_TITLES = {
    "agents": "Agents",
    "notify": "Notifications",
    "training": "Training",
    "ollama": "Ollama",
}


# A person reads a label, not a key; the key stays beside it, small, since it is what
# `rltray config set` and config.toml take.
def label(setting: Any) -> str:
    """What the settings page calls ``setting`` (declared with it in app/config.py; its key
    is shown too, as a hint)."""
    return str(setting.label)


#: Prefix of the hidden fields holding each setting's value as the page showed it.
WAS = "was."


def _as_text(value: Any) -> str:
    """A setting's value as its form field sends it back unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _form_value(setting: Any, form: Any) -> Any:
    """A form's text for one setting; a checkbox's absence means false (hidden field first)."""
    values = form.getlist(setting.key)
    if setting.type == "bool":
        return "true" if "true" in values else "false"
    return values[-1] if values else None


def save_values(
    values: dict[str, Any], *, all_or_nothing: bool = False
) -> tuple[dict[str, str], list[str]]:
    """Set each given key through the service; returns (errors by key, keys changed).

    The settings page keeps the valid keys of a form with a bad one (the user
    sees the rest saved); ``all_or_nothing`` (the JSON API) puts the old values
    back when any key is refused, so a refused request changes nothing. A
    program path may not be set from a web page (``program_setting_refusal``).
    """
    from rltray.web.security import program_setting_refusal

    service = state().service
    return service.save_settings(
        values,
        all_or_nothing=all_or_nothing,
        refuse=lambda key, value: program_setting_refusal(service.paths.home, key, value),
    )


def masked_secret() -> dict[str, Any]:
    """Whether the token is set, its last four characters, and why the keyring cannot be used."""
    from rltray.app.secrets import SecretsUnavailable

    secrets = state().secrets
    try:
        value = secrets.get(SECRET)
    except SecretsUnavailable as exc:  # pragma: no cover - Secrets falls back itself
        return {"set": False, "hint": "", "problem": str(exc)}
    problem = str(secrets.unavailable) if secrets.unavailable is not None else ""
    return {"set": bool(value), "hint": ("…" + value[-4:]) if value else "", "problem": problem}


def _page(errors: dict[str, str] | None = None, form: Any = None, status: int = 200) -> Any:
    from rltray.app import config

    settings = config.describe()
    service = state().service
    current = service.settings()  # the last valid copy while the file is broken
    problem = service.settings_problem()
    load_error = (
        f"{problem} Until it is fixed, rltray uses the values shown here (the last valid "
        "ones) and trains nothing on its own; saving is refused."
        if problem
        else ""
    )
    sections: dict[str, list[dict[str, Any]]] = {}
    for s in settings:
        value = current.get(s.key)
        was = _as_text(value)
        if form is not None and s.key in (errors or {}):
            value = _form_value(s, form)
            was = form.get(WAS + s.key, was)
        sections.setdefault(s.section, []).append(
            {"s": s, "value": value, "label": label(s), "was": was}
        )
    html = render_template(
        "settings.html",
        sections=sections,
        titles=SECTION_TITLES,
        errors=errors or {},
        load_error=load_error,
        saved=request.args.get("saved"),
        secret=masked_secret(),
        config_path=str(state().service.paths.config),
    )
    return html, status


@bp.get("/settings")
def page() -> Any:
    return _page()


@bp.post("/settings")
def save() -> Any:
    from rltray.app import config

    values = {}
    current = state().service.settings()
    for s in config.describe():
        text = _form_value(s, request.form)
        if text is None:
            continue
        if text == request.form.get(WAS + s.key):
            # not changed on this page: what is in effect now stays (a pause from the tray
            # or a hand edit made while the page was open must not be put back)
            continue
        if s.type != "str" and str(text).strip().lower() == str(current.get(s.key)).lower():
            continue
        if s.type == "str" and text == current.get(s.key):
            continue
        values[s.key] = text
    errors, changed = save_values(values)
    if errors:
        return _page(errors, request.form, 400)
    return redirect(url_for("settings.page", saved=len(changed)), code=303)


@bp.post("/settings/secret")
def save_secret() -> Any:
    secrets = state().secrets
    if request.form.get("action") == "remove":
        secrets.delete(SECRET)
        state().service.note("settings", "removed the Hugging Face token")
        return redirect(url_for("settings.page", saved="token-removed"), code=303)
    token = "".join((request.form.get("hf_token") or "").split())
    if not token:
        return _page({"hf_token": "Paste a token first (it starts with hf_)."}, request.form, 400)
    secrets.set(SECRET, token)
    state().service.note("settings", "saved a Hugging Face token")
    return redirect(url_for("settings.page", saved="token"), code=303)


# -- JSON ------------------------------------------------------------------------


@bp.get("/api/settings")
def api_list() -> Any:
    """Every setting with its value, default, type, help and range."""
    from rltray.app import config

    current = state().service.settings()
    return jsonify(
        {
            "settings": [
                {
                    "key": s.key,
                    "value": current.get(s.key),
                    "default": s.default,
                    "type": s.type,
                    "help": s.help,
                    "choices": list(s.choices) if s.choices else None,
                    "minimum": s.minimum,
                    "maximum": s.maximum,
                }
                for s in config.describe()
            ],
            "hf_token": masked_secret(),
        }
    )


@bp.post("/api/settings")
@takes(body=SettingsBody)
def api_save(body: SettingsBody) -> Any:
    """Save settings by key; a refused value saves none and names each bad key."""
    errors, changed = save_values(body.root, all_or_nothing=True)
    if errors:
        from rltray.web.errors import error_body

        first = next(iter(errors.values()))
        payload = error_body("invalid_setting", first)
        payload["error"]["fields"] = errors
        response = jsonify(payload)
        response.status_code = 400
        return response
    return jsonify({"changed": changed})
