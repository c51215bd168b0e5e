"""Settings page: every declared setting documented and on the page; validated saves; the token
kept in the keyring and never shown back in full."""

from __future__ import annotations

from markupsafe import escape
from rltray.app import config

from tests.web.webtesting import post_json


def test_every_declared_setting_is_documented_and_on_the_page(client) -> None:
    page = client.get("/settings")
    assert page.status_code == 200 and b"<title>Settings \xc2\xb7 rltray</title>" in page.data
    text = page.data.decode()
    settings = config.describe()
    assert len(settings) >= 15
    for s in settings:
        assert s.help.strip().endswith((".", ")")), f"{s.key} has no help sentence"
        assert f'name="{s.key}"' in text, f"{s.key} is not on the settings page"
        assert str(escape(s.help)) in text, f"{s.key}'s help is not on the settings page"
    listed = {item["key"] for item in client.get("/api/settings").get_json()["settings"]}
    assert listed == {s.key for s in settings}


def _form(client, **changes: str) -> dict[str, object]:
    """The page's form as a browser would send it, with ``changes`` applied."""
    current = config.load_config(client.application.extensions["rltray"].service.paths)
    data: dict[str, object] = {"csrf_token": client.csrf}
    for s in config.describe():
        value = changes.get(s.key.replace(".", "__"), current.get(s.key))
        if s.type == "bool":
            data[s.key] = ["false", "true"] if str(value).lower() == "true" else "false"
        else:
            data[s.key] = str(value)
    return data


def test_the_form_saves_valid_values_and_keeps_comments(client, service) -> None:
    service.paths.config.write_text('# mine\n[training]\npreset = "balanced"  # keep me\n')
    response = client.post(
        "/settings",
        data=_form(client, training__preset="careful", notify__every_nth="5",
                   agents__codex="false", notify__quiet_hours="22:00-07:00"),
    )  # fmt: skip
    assert response.status_code == 303 and "saved=4" in response.headers["Location"]
    current = config.load_config(service.paths)
    assert current.training.preset == "careful" and current.notify.every_nth == 5
    assert current.agents.codex is False and current.notify.quiet_hours == "22:00-07:00"
    text = service.paths.config.read_text()
    assert "# mine" in text and "# keep me" in text
    assert b"Saved." in client.get(response.headers["Location"]).data
    unchanged = client.post("/settings", data=_form(client))
    assert "saved=0" in unchanged.headers["Location"]


def test_a_bad_value_is_shown_beside_its_field_and_the_rest_is_saved(client, service) -> None:
    response = client.post(
        "/settings",
        data=_form(client, training__min_ratings="2", notify__quiet_hours="late",
                   training__preset="aggressive"),
    )  # fmt: skip
    assert response.status_code == 400
    text = response.data.decode()
    assert "training.min_ratings must be a whole number from 4 to 10000" in text
    assert "notify.quiet_hours must be empty or a time range" in text
    assert 'value="late"' in text  # what the user typed stays in the field
    current = config.load_config(service.paths)
    assert current.training.preset == "aggressive" and current.training.min_ratings == 32


def test_json_settings_api(client, service) -> None:
    ok = post_json(client, "/api/settings", {"training.require_idle_minutes": 5,
                                             "notify.ask": "long"})  # fmt: skip
    assert ok.status_code == 200 and sorted(ok.get_json()["changed"]) == [
        "notify.ask", "training.require_idle_minutes"]  # fmt: skip
    bad = post_json(client, "/api/settings", {"notify.ask": "sometimes", "nope.x": 1})
    body = bad.get_json()
    assert bad.status_code == 400 and body["error"]["code"] == "invalid_setting"
    assert set(body["error"]["fields"]) == {"notify.ask", "nope.x"}
    assert config.load_config(service.paths).notify.ask == "long"


def test_the_token_goes_to_the_keyring_and_is_never_shown_in_full(client, memory_keyring):
    token = "hf_" + "abcdefghijklmnopqrstuvwxyz0123456789"
    form = {"csrf_token": client.csrf, "hf_token": token, "action": "save"}
    saved = client.post("/settings/secret", data=form)
    assert saved.status_code == 303
    assert memory_keyring.items[("rltray", "hf-token")] == token
    for url in ("/settings", "/api/settings", "/", "/setup"):
        body = client.get(url).data.decode()
        assert token not in body and token[3:-4] not in body, url
    page = client.get("/settings").data.decode()
    assert "…6789" in page and "set</strong>" in page
    empty = client.post("/settings/secret", data={"csrf_token": client.csrf, "hf_token": " "})
    assert empty.status_code == 400 and b"Paste a token first" in empty.data
    removed = client.post("/settings/secret", data={"csrf_token": client.csrf, "action": "remove"})
    assert removed.status_code == 303 and ("rltray", "hf-token") not in memory_keyring.items


def test_the_page_refuses_a_base_model_the_trainer_cannot_load(client, service, tmp_path) -> None:
    """Issue 22: the page saves through the same check as `rltray config set` (one home,
    ``config.refusal_on_set``), so a missing model is refused here too."""
    bad = post_json(client, "/api/settings", {"training.base_model": "/nonexistent/model"})
    assert bad.status_code == 400
    said = bad.get_json()["error"]["fields"]["training.base_model"]
    assert said.startswith("training.base_model: there is no folder or file /nonexistent/model")
    response = client.post("/settings", data=_form(client, training__base_model="qwen2.5:7b"))
    assert response.status_code == 400
    assert "looks like an Ollama model name" in response.data.decode()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    ok = post_json(client, "/api/settings", {"training.base_model": str(folder)})
    assert ok.status_code == 200 and ok.get_json()["changed"] == ["training.base_model"]
    assert config.load_config(service.paths).training.base_model == str(folder)


def test_each_setting_is_labelled_in_words_with_its_key_as_a_hint(client) -> None:
    """Issue 22 item 10: the page labelled every field with its raw key (training.base_model)."""
    from rltray.web.settings import label

    text = client.get("/settings").data.decode()
    labels = {s.key: label(s) for s in config.describe()}
    assert len(set(labels.values())) == len(labels)  # no two fields read the same
    for key, words in labels.items():
        assert "_" not in words and "." not in words and words[0].isupper(), key
        hint = f'<code class="key">{key}</code>'
        assert f"{escape(words)} {hint}" in text or f"{escape(words)}</label> {hint}" in text, key
    assert labels["training.base_model"] == "Base model"
    assert labels["training.require_ac_power"] == "Require AC power"


def test_saving_the_page_leaves_what_changed_elsewhere_since_it_was_shown(
    client, service
) -> None:
    """Regression: the form sent every field as the page had shown it, so a pause from the
    tray or a hand edit of config.toml made while the page was open was put back on Save,
    while the page said "Saved."."""
    import html
    import re

    shown = client.get("/settings").get_data(as_text=True)
    was = {html.unescape(k): html.unescape(v) for k, v in
           re.findall(r'name="(was\.[^"]+)" value="([^"]*)"', shown)}  # fmt: skip
    assert was["was.training.automatic"] == "true" and "was.notify.every_nth" in was
    page = _form(client)  # the fields as the page showed them ...
    service.set_setting("training.automatic", False)  # ... then the tray pauses training
    service.set_setting("training.min_ratings", 100)  # ... and config.toml is edited by hand
    response = client.post("/settings", data={**page, **was, "notify.every_nth": "5"})
    assert response.status_code == 303 and "saved=1" in response.headers["Location"]
    now = config.load_config(service.paths)
    assert (now.notify.every_nth, now.training.automatic, now.training.min_ratings) == (
        5, False, 100)  # fmt: skip
