"""The wizard's bigger-machine part (issue 26) against a real sshd and a real Ray head.

In Chromium, as a user does it: the host's fields, the SSH key from a file and the Ray
token into the keyring, a check refused for the host key not yet accepted, the host's
fingerprint shown and accepted, and then every step of the check passing. The routes'
refusals go through the real Flask app.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app import secrets as keyring_secrets
from rltray.web.app import create_app
from rltray.web.security import Guard
from rltray.web.server import WebServer

from tests.web.webtesting import chromium_page, missing_chromium, post_json, signed_in

SHOTS = Path(__file__).resolve().parents[1] / "web" / "screenshots"


@pytest.fixture
def client(runtime: Any) -> Any:
    guard = Guard()
    app = create_app(runtime, guard=guard)
    app.config["TESTING"] = True
    return signed_in(app, guard)


@pytest.fixture
def server(runtime: Any) -> Iterator[WebServer]:
    web = WebServer(runtime).start()
    yield web
    web.stop()


def settings(client: Any, **values: Any) -> None:
    got = post_json(client, "/api/settings", {f"training.{k}": v for k, v in values.items()})
    assert got.status_code == 200, got.get_json()


def test_the_routes_refuse_with_one_sentence_and_never_echo_a_secret(
    client, sshd, tmp_path
) -> None:
    said = post_json(client, "/api/setup/remote/host-key").get_json()
    assert said["error"]["message"] == "Name the remote host first."
    settings(client, remote_host="127.0.0.1", remote_port=sshd.port, remote_user=sshd.user)
    shown = post_json(client, "/api/setup/remote/host-key").get_json()
    assert shown == {"host": "127.0.0.1", "port": sshd.port, "fingerprint": sshd.host_key,
                     "pinned": "", "matches": False}  # fmt: skip
    stale = post_json(client, "/api/setup/remote/accept-host-key",
                      {"fingerprint": "SHA256:" + "A" * 43})  # fmt: skip
    assert stale.status_code == 400
    assert stale.get_json()["error"]["message"] == (
        f"The host now shows {sshd.host_key}, not the key you accepted; compare again.")
    public = tmp_path / "id.pub"
    public.write_text("ssh-ed25519 AAAA test\n")
    for path, message in [
        ("", "Name the private key file, e.g. ~/.ssh/id_ed25519."),
        (str(public), f"{public} is not a private key (it has no PRIVATE KEY block)."),
        (str(tmp_path / "none"), f"Cannot read the key file {tmp_path / 'none'}: "
                                 "No such file or directory."),
    ]:
        got = post_json(client, "/api/setup/remote/key", {"path": path}).get_json()
        assert got["error"]["message"] == message
    assert keyring_secrets.get_secret("remote-ssh-key") is None
    (tmp_path / "id").write_text(sshd.client_key)
    kept = post_json(client, "/api/setup/remote/key", {"path": str(tmp_path / "id")}).get_json()
    assert kept["has_key"] is True and kept["has_token"] is False
    assert keyring_secrets.get_secret("remote-ssh-key") == sshd.client_key
    got = post_json(client, "/api/setup/remote/token", {"token": "  "}).get_json()
    assert got["error"]["message"].startswith("Paste the Ray token")
    kept = post_json(client, "/api/setup/remote/token", {"token": "tok-123"})
    assert kept.get_json()["has_token"] is True and b"tok-123" not in kept.data
    assert sshd.client_key.encode() not in kept.data
    accepted = post_json(client, "/api/setup/remote/accept-host-key",
                         {"fingerprint": sshd.host_key}).get_json()  # fmt: skip
    assert accepted["host_key"] == sshd.host_key
    assert post_json(client, "/api/setup/remote/host-key").get_json()["matches"] is True


@pytest.mark.slow
def test_the_wizard_sets_up_a_remote_machine_and_every_check_step_passes(
    server, service, sshd, ray_head, tmp_path
) -> None:
    missing = missing_chromium()
    if missing:
        pytest.skip(f"needs {missing}")
    SHOTS.mkdir(exist_ok=True)
    key_file = tmp_path / "id_test"
    key_file.write_text(sshd.client_key)
    # the dashboard's port is a Settings field (8265 almost everywhere); the test head's is free
    from rltray.app import config

    config.set_value(service.paths, "training.remote_dashboard_port", str(ray_head.dashboard_port))
    with chromium_page((800, 900)) as (page, problems):
        page.goto(server.launch_url("setup"))
        page.goto(server.base_url + "/setup?backend#backend")
        page.click("#remote-box summary")
        page.fill("#w-rhost", "127.0.0.1")
        page.fill("#w-rport", str(sshd.port))
        page.fill("#w-ruser", sshd.user)
        page.fill("#w-rpython", sys.executable)
        page.fill("#w-rkey", str(key_file))
        page.click("#remote-key")
        page.wait_for_selector("#remote-key-state >> text=The SSH key is in the keyring.")
        page.fill("#w-rtoken", ray_head.token)
        page.click("#remote-token")
        page.wait_for_selector("#remote-token-state >> text=The Ray token is in the keyring.")
        assert page.input_value("#w-rtoken") == "" and ray_head.token not in page.content()
        assert keyring_secrets.get_secret("ray-token") == ray_head.token
        # not accepted yet: the check stops at SSH and says why, with the fingerprint
        page.click("#remote-check")
        page.wait_for_selector("#remote-result.error")
        rows = page.inner_text("#remote-rows")
        assert rows.startswith("failed ssh:") and sshd.host_key in rows, rows
        page.click("#remote-hostkey-look")
        page.wait_for_selector("#remote-hostkey-accept:not([hidden])")
        assert sshd.host_key in page.inner_text("#remote-hostkey")
        page.screenshot(path=str(SHOTS / "wizard-3-remote-host-key.png"), full_page=True)
        page.click("#remote-hostkey-accept")
        page.wait_for_selector("#remote-hostkey >> text=Accepted:")
        assert service.settings().training.remote_host_key == sshd.host_key
        page.click("#remote-check")
        page.wait_for_selector("#remote-result.ok, #remote-result.error", timeout=180_000)
        rows = page.inner_text("#remote-rows").splitlines()
        assert page.get_attribute("#remote-result", "class") == "ok", (
            rows, page.inner_text("#remote-result"))
        assert [r.split(":")[0] for r in rows] == [
            "ok ssh", "ok ray", "ok gpu", "ok trainer", "ok step"], rows
        page.screenshot(path=str(SHOTS / "wizard-3-remote-checked.png"), full_page=True)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 800, width
        assert problems.items == [], problems.items
    t = service.settings().training
    assert (t.remote_host, t.remote_port, t.remote_user) == ("127.0.0.1", sshd.port, sshd.user)
