"""End to end in a real browser: Debian's chromium driven by Playwright against the real server.

Runs the whole wizard against a temporary HOME with real agent config files, a
tiny local model folder and an Ollama HTTP server; rates, tags, comments and
deletes turns; rolls back a version; and saves one screenshot per screen, at
800x600, under tests/web/screenshots/ (README "Settings window").
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rltray.app import config
from rltray.web.server import WebServer

from tests.web.test_adapters_page import make_versions

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parent / "screenshots"
ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _missing() -> str | None:
    parts = []
    if not os.path.exists(CHROMIUM):
        parts.append(f"{CHROMIUM} (apt-get install chromium; `make test` does it as root)")
    if importlib.util.find_spec("playwright") is None:
        parts.append("the playwright package (pip install 'rltray[test]')")
    return " and ".join(parts) or None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=f"needs {_missing()}")


@pytest.fixture
def server(runtime, ollama, tmp_path) -> Iterator[WebServer]:
    web = WebServer(
        runtime, options={"ollama_host": ollama, "model_roots": [str(tmp_path / "models")]}
    ).start()
    yield web
    web.stop()


@pytest.fixture
def page(server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(exist_ok=True)
    # chromium's singleton socket lives in TMPDIR and must fit a Unix socket path (108 bytes);
    # the per-test TMPDIR is too deep, so chromium gets a short private one
    short = tempfile.mkdtemp(prefix="rltray-chromium-", dir="/tmp")
    env = {**os.environ, "TMPDIR": short}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=ARGS, env=env
        )
        context = browser.new_context(viewport={"width": 800, "height": 600})
        tab = context.new_page()
        tab.set_default_timeout(20_000)
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("dialog", lambda dialog: dialog.accept())
        yield tab
        browser.close()
        shutil.rmtree(short, ignore_errors=True)
        assert errors == [], f"JavaScript errors: {errors}"


def shot(page: Any, name: str, title: str) -> None:
    """Check the page's title and width at 800x600, then save its screenshot."""
    assert page.title() == f"{title} · rltray"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 800, f"{name}: the page is {width}px wide at an 800px window"
    page.screenshot(path=str(SHOTS / f"{name}.png"))


@pytest.mark.slow
def test_the_whole_wizard(page, server, service, tmp_path) -> None:
    home = Path.home()
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"theme": "dark"}, indent=2))
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "gpt-5-codex"\n')
    pytest.importorskip("transformers", reason="needs transformers to build the tiny model")
    from rltray.trainer.tiny import build_tiny_llama

    model = build_tiny_llama(tmp_path / "models" / "tiny-llama")  # a real, loadable model folder

    page.goto(server.launch_url("setup"))
    page.wait_for_selector(".agent[data-name='claude-code'] button")
    shot(page, "wizard-1-agents-before", "Setup")
    page.click(".agent[data-name='claude-code'] button[data-action='install']")
    page.wait_for_selector(".agent[data-name='claude-code'] .waiting")
    page.click(".agent[data-name='codex'] button[data-action='install']")
    page.wait_for_selector(".agent[data-name='codex'] .waiting")
    assert "/hooks" in page.inner_text(".agent[data-name='codex']")
    shot(page, "wizard-1-agents-waiting", "Setup")
    service.store.add_turn({"agent": "claude-code", "session": "s", "turn": "1",
                            "prompt": "hi", "response": "hello"})  # fmt: skip
    page.wait_for_selector(".agent[data-name='claude-code'] .ok")  # the live poll saw it

    page.click("#next")
    page.check(f"input[name='model-pick'][value='{model}']")
    page.select_option("#ollama-pick", "tiny:latest")
    page.click("#model-save")
    page.wait_for_selector("#model-result >> text=The two models match.")
    shot(page, "wizard-2-model", "Setup")

    page.click("#next")
    page.wait_for_selector("#backend-info >> text=Trainer interpreter")
    page.wait_for_selector("#env-create")
    shot(page, "wizard-3-backend", "Setup")

    page.click("#next")
    page.check("input[name='training.preset'][value='careful']")
    shot(page, "wizard-4-preset", "Setup")
    page.click("#next")
    page.fill("#w-idle", "5")
    page.uncheck("input[name='training.require_ac_power']")
    page.fill("#w-quiet", "late")
    page.fill("#w-min", "8")
    page.click("#next")
    page.wait_for_selector("#schedule .error")  # a bad value stops the step, beside its field
    assert "notify.quiet_hours must be" in page.inner_text("#schedule")
    shot(page, "wizard-5-schedule-error", "Setup")
    page.fill("#w-quiet", "23:00-07:00")
    page.click("#next")
    page.wait_for_selector("#notify:not([hidden])")
    assert page.input_value("#w-quiet2") == "23:00-07:00"
    shot(page, "wizard-6-notifications", "Setup")
    page.select_option("#w-ask", "nth")
    page.fill("#w-nth", "4")
    page.click("#next")
    page.wait_for_url(server.base_url + "/")

    current = config.load_config(service.paths)
    assert current.training.preset == "careful"
    assert current.training.require_idle_minutes == 5 and not current.training.require_ac_power
    assert current.notify.quiet_hours == "23:00-07:00" and current.training.min_ratings == 8
    assert current.notify.ask == "nth" and current.notify.every_nth == 4
    assert current.training.base_model == str(model) and current.ollama.model == "tiny:latest"
    claude = json.loads((home / ".claude" / "settings.json").read_text())
    assert claude["theme"] == "dark" and "Stop" in claude["hooks"]
    assert "notify" in (home / ".codex" / "config.toml").read_text()
    assert (service.paths.home / "setup-done").exists()


@pytest.mark.slow
def test_the_model_step_says_when_a_model_fits_only_in_a_lean_round(
        page, server, tmp_path, monkeypatch) -> None:
    """Llama-3.2-3B's shape on a 20 GB machine: the default round's estimate does not fit,
    the lean round the trainer runs there does, and the model step says which."""
    from rltray.web import wizard

    monkeypatch.setattr(wizard, "_memory", lambda: 20 * 2**30)
    folder = tmp_path / "models" / "llama-3.2-3b-shape"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 3072,
        "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
        "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True}))
    page.goto(server.launch_url("setup"))
    page.wait_for_selector(".agent[data-name='claude-code'] button")
    page.click("#next")
    row = page.wait_for_selector(f"label.choice:has(input[value='{folder}'])")
    text = row.inner_text()
    assert "so it fits in a lean round." in text and "about 1.6x slower" in text
    assert not row.query_selector(".warn")  # a fit, not a warning
    shot(page, "wizard-2-model-lean", "Setup")


@pytest.mark.slow
def test_rate_tag_comment_and_delete_in_the_browser(page, server, service, add_turns) -> None:
    ids = add_turns(4)  # newest first on the page: ids[3], ids[2], ids[1], ids[0]
    service.store.add_tag("ignored instructions")
    page.goto(server.launch_url("ratings"))
    page.wait_for_selector("#turns")
    shot(page, "ratings", "Ratings")
    page.keyboard.press("j")
    page.keyboard.press("g")
    page.wait_for_selector(f"tr[data-id='{ids[3]}'] .badge.good")
    page.keyboard.press("j")
    page.keyboard.press("b")
    page.wait_for_selector(f"tr[data-id='{ids[2]}'] .badge.bad")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#detail .detail-body[data-id='{ids[2]}']")
    page.fill("#detail textarea", "ignored the failing test")
    page.click("#detail form.comment button")
    page.wait_for_selector(f"tr[data-id='{ids[2]}'] .rating .muted")
    page.check("#detail .tagpick input[value='ignored instructions']")
    page.wait_for_selector(f"tr[data-id='{ids[2]}'] .tag >> text=ignored instructions")
    page.fill("#detail .new-tag", "too long")
    page.click("#detail [data-add-tag]")
    page.wait_for_selector(f"tr[data-id='{ids[2]}'] .tag >> text=too long")
    page.wait_for_selector("#detail .tagpick input[value='too long']")
    shot(page, "ratings-detail", "Ratings")
    page.click("#detail [data-close]")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#detail .detail-body[data-id='{ids[1]}']")
    page.click("#detail [data-delete]")  # the confirm() dialog is accepted
    page.wait_for_selector(f"tr[data-id='{ids[1]}']", state="detached")
    page.check(f"tr[data-id='{ids[0]}'] .pick")
    page.click("[data-bulk='good']")
    page.wait_for_selector(f"tr[data-id='{ids[0]}'] .badge.good")

    store = service.store
    assert store.get_turn(ids[3]).rating.value == 1
    bad = store.get_turn(ids[2]).rating
    assert bad.value == -1 and bad.comment == "ignored the failing test" and bad.source == "web"
    assert store.tags_of([ids[2]]) == {ids[2]: ["ignored instructions", "too long"]}
    assert store.get_turn(ids[1]) is None
    assert ids[1] not in {e["turn_id"] for e in store.training_examples()}
    assert store.get_turn(ids[0]).rating.value == 1


@pytest.mark.slow
def test_what_is_typed_in_the_drawer_survives_its_redraw(page, server, service,
                                                         add_turns) -> None:
    """The drawer is redrawn from the server after each change: a half-typed tag name and an
    unsaved comment must not vanish under the user's fingers when they rate meanwhile."""
    (turn,) = add_turns(1)
    page.goto(server.launch_url("ratings"))
    page.click(f"tr[data-id='{turn}'] td.when")
    page.wait_for_selector(f"#detail .detail-body[data-id='{turn}']")
    page.fill("#detail .new-tag", "half typ")
    page.click("#detail [data-rate='1']")
    page.wait_for_selector("#detail [data-rate='1'].on")
    assert page.input_value("#detail .new-tag") == "half typ"
    page.fill("#detail textarea", "not saved yet")
    page.click("#detail [data-rate='-1']")
    page.wait_for_selector("#detail [data-rate='-1'].on")
    assert page.input_value("#detail textarea") == "not saved yet"
    assert page.input_value("#detail .new-tag") == "half typ"
    rating = service.store.get_turn(turn).rating
    assert rating.value == -1 and not rating.comment  # typed, never saved: nothing sent


@pytest.mark.slow
def test_a_scrubbed_comment_shows_as_stored_and_saves_again(page, server, service,
                                                           add_turns) -> None:
    """Regression (review 4, item 8): a comment with a credential in it was saved scrubbed,
    but the drawer's redraw took the words in the box (unscrubbed) for unsaved ones and put
    them back, with the comment they started from: the token stayed on screen, and the next
    save was refused as "changed in another window"."""
    (turn,) = add_turns(1)
    service.rate(turn, -1, source="cli")
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    page.goto(server.launch_url("ratings"))
    page.click(f"tr[data-id='{turn}'] td.when")
    page.wait_for_selector(f"#detail .detail-body[data-id='{turn}']")
    page.fill("#detail textarea", f"  use my token {secret} instead of asking  ")
    page.click("#detail form.comment button")
    page.wait_for_selector(f"tr[data-id='{turn}'] .rating .muted")
    stored = service.store.active_rating(turn).comment
    assert stored is not None and secret not in stored and stored.startswith("use my token")
    page.wait_for_function(  # the drawer's redraw after the save has come and gone
        "([id, text]) => { const box = document.querySelector('#detail textarea');"
        " return document.querySelector(`#detail .detail-body[data-id='${id}']`) && box"
        " && box.value === text && box.defaultValue === text; }", arg=[turn, stored])
    assert secret not in page.input_value("#detail textarea")
    shot(page, "ratings-comment-scrubbed", "Ratings")
    page.fill("#detail textarea", "asked for the token instead of reading the env")
    page.click("#detail form.comment button")
    page.wait_for_function(
        "text => document.querySelector('#detail textarea').defaultValue === text",
        arg="asked for the token instead of reading the env")
    assert page.query_selector("#detail .comment-changed") is None  # no 409
    assert service.store.active_rating(turn).comment == (
        "asked for the token instead of reading the env")


@pytest.mark.slow
def test_roll_back_in_the_browser(page, server, service) -> None:
    make_versions(service)
    page.goto(server.launch_url("adapters"))
    page.wait_for_selector("#versions")
    shot(page, "adapters", "Adapters")
    page.click("tr[data-version='1'] [data-activate]")
    page.wait_for_selector("#active-version >> text=v1")
    assert service.store.active_adapter().version == 1
    assert service.store.get_adapter(2).status == "rolled-back"


@pytest.mark.slow
def test_dashboard_and_settings_screens(page, server, service, add_turns) -> None:
    now = datetime.now(timezone.utc)
    ids = add_turns(40)
    for i, turn_id in enumerate(ids[:30]):
        service.store.rate(turn_id, 1 if i % 3 else -1, "cli", at=now - timedelta(days=i % 7))
    for k in range(6):
        run = f"run-{k}"
        service.store.add_run(run, at=now - timedelta(days=6 - k, minutes=20 + 5 * k))
        service.store.finish_run(run, "done", at=now - timedelta(days=6 - k), metrics={
            "auroc_new": 0.55 + 0.05 * k, "kl_to_base": 0.01 * (k + 1), "accepted": k % 2 == 0,
            "progress": {"loss": 0.9 - 0.1 * k, "masked_tokens": 0.2 - 0.02 * k}})  # fmt: skip
    page.goto(server.launch_url(""))
    page.wait_for_selector("#chart-days .uplot")
    page.wait_for_selector("#chart-auroc .uplot")
    shot(page, "dashboard", "Dashboard")
    page.locator("#chart-kl").scroll_into_view_if_needed()
    shot(page, "dashboard-runs", "Dashboard")
    page.goto(server.base_url + "/settings")
    shot(page, "settings", "Settings")
    page.select_option("select[name='training.preset']", "aggressive")
    page.fill("input[name='notify.quiet_hours']", "nonsense")
    page.click("button:has-text('Save settings')")
    page.wait_for_selector("#field-notify\\.quiet_hours .error")
    shot(page, "settings-error", "Settings")
    assert config.load_config(service.paths).training.preset == "aggressive"
    page.fill("input[name='notify.quiet_hours']", "")
    page.fill("#hf_token", "hf_secretsecretsecret1234")
    page.click("button:has-text('Save token')")
    page.wait_for_selector("text=Token saved in the system keyring.")
    assert "hf_secretsecret" not in page.content() and "…1234" in page.content()
    page.goto(server.base_url + "/nowhere")
    shot(page, "error-404", "Not found")



def test_a_broken_config_file_is_shown_and_the_last_valid_values_stay(
    page, server, service
) -> None:
    """A typo in config.toml: the page says which line and what happens meanwhile, shows the
    values rltray still uses, and refuses to write over the broken file."""
    service.set_setting("training.min_ratings", 12)
    service.settings()  # read while valid: these are the last valid values
    service.paths.config.write_text('[training]\nmin_ratings = "lots"\n', encoding="utf-8")
    page.goto(server.launch_url("settings"))
    page.wait_for_selector("p.error")
    message = page.locator("p.error").first.inner_text()
    assert "min_ratings" in message and "last valid" in message
    assert page.input_value("input[name='training.min_ratings']") == "12"
    shot(page, "settings-broken-file", "Settings")
    page.click("button:has-text('Save settings')")
    assert 'min_ratings = "lots"' in service.paths.config.read_text()  # nothing written over it


def test_a_late_reply_about_an_earlier_build_does_not_stop_following_the_next(
    page, server
) -> None:
    """Polls overlap when the server is slow. A reply about build A that arrives after
    build B started is dropped: B keeps being followed to its end and A's state is not
    painted over it. The two builds' job replies are the browser's own fakes (the race
    needs a reply held back on purpose); the page and its code are the real ones."""
    jobs = {"A": [], "B": []}
    held: list[Any] = []

    def job(status: str, step: str, error: str | None = None) -> str:
        return json.dumps({"status": status, "step": step, "percent": 10, "error": error,
                           "log": [step]})

    def start(route: Any) -> None:
        name = "A" if not jobs["A"] else "B"
        jobs[name].append("started")
        route.fulfill(status=200, content_type="application/json",
                      body=json.dumps({"id": name, "status": "running"}))

    def poll(route: Any) -> None:
        name = route.request.url.rsplit("/", 1)[-1]
        jobs[name].append("poll")
        if name == "A" and len(jobs["A"]) == 2:
            held.append(route)  # A's first poll: answered only once B is under way
            return
        polls = len(jobs[name]) - 1
        body = (job("failed", "A", "A failed") if name == "A" else
                job("running", "building B") if polls < 4 else job("failed", "B", "B failed"))
        route.fulfill(status=200, content_type="application/json", body=body)

    page.goto(server.launch_url("setup"))
    page.wait_for_selector("#steps")
    page.goto(f"{server.base_url}/setup#backend")
    page.reload()
    page.wait_for_selector("#backend-info >> text=Trainer interpreter")
    page.route("**/api/setup/trainer-env", start)
    page.route("**/api/jobs/*", poll)
    page.click("#env-create")
    page.wait_for_selector("#env-step >> text=A failed")  # A's second poll
    page.click("#env-create")
    page.wait_for_selector("#env-step >> text=building B")
    assert held, "A's first poll was not held back"
    held[0].fulfill(status=200, content_type="application/json",
                    body=job("failed", "A", "A failed"))  # the late reply
    page.wait_for_selector("#env-step >> text=B failed", timeout=10_000)
    assert page.inner_text("#env-log") == "B"


def test_the_backend_step_follows_an_environment_build_to_its_end(page, server) -> None:
    """*Create trainer environment* starts the build as a job and the step follows it once
    a second until it stops: here a build that fails at once (no such Python) ends with its
    reason beside the bar, its log shown, and the button usable again."""
    options = server.app.extensions["rltray"].options
    options.update(env_cli_args=["--python", "/nonexistent/python3"])
    page.goto(server.launch_url("setup"))
    page.wait_for_selector("#steps")
    page.goto(f"{server.base_url}/setup#backend")
    page.reload()  # the step in the address is the one shown on load
    page.wait_for_selector("#backend-info >> text=Trainer interpreter")
    page.click("#env-create")
    page.wait_for_selector("#env-step >> text=failed (exit code")
    assert page.is_enabled("#env-create")
    assert "/nonexistent/python3" in page.inner_text("#env-log")
    assert page.is_visible("#env-progress") and page.is_visible("#env-log")
    assert "failed" in (page.get_attribute("#env-progress", "class") or "")  # a red bar
    shot(page, "wizard-3-backend-env-failed", "Setup")


def test_a_bundles_backend_step_before_its_trainer_environment(
    page, server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3, finding 4): a bundle's step 3 showed an argparse error and the
    probe's source; now one sentence and the Create button (screenshot for a person)."""
    import sys

    from rltray.web import machine

    monkeypatch.setattr(sys, "frozen", True, raising=False)  # the server runs in this process
    page.goto(server.launch_url("setup"))
    page.wait_for_selector("#steps")
    page.goto(f"{server.base_url}/setup#backend")
    page.reload()
    page.wait_for_selector("#backend-info >> text=Trainer interpreter")
    text = page.inner_text("#backend-info")
    assert machine.NO_TRAINER in text and "usage:" not in text, text
    assert page.is_visible("#env-create")
    shot(page, "wizard-3-backend-bundle-no-env", "Setup")
