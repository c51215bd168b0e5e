"""Adapters screen: versions with lineage and gate verdicts; activate, roll back, delete."""

from __future__ import annotations

import pytest
from rltray.app.training.versions import next_version
from rltray.web.server import WebServer

from tests.app.adapterfiles import write_lora
from tests.web.webtesting import chromium_page, missing_chromium, post_json


def make_versions(service) -> None:
    """v1 (accepted, parent of v2), v2 active, v3 rejected by the gate — real folders."""
    adapters = service.paths.adapters
    for v, parent, accepted in ((1, None, True), (2, 1, True), (3, 2, False)):
        folder = write_lora(adapters / f"v{v:04d}")  # activating one checks its files
        service.store.add_adapter(
            "/models/tiny", folder, parent_version=parent, version=v,
            status="candidate" if accepted else "rejected",
            metrics={"accepted": accepted, "reasons": [] if accepted else ["KL 0.4 > cap 0.2"],
                     "auroc_new": 0.6 + v / 10, "kl_to_base": 0.01 * v, "fresh": 16, "heldout": 4},
        )  # fmt: skip
    service.store.set_adapter_status(1, "active")
    service.store.set_adapter_status(2, "active")
    service.store.set_adapter_ollama_tag(2, "qwen2.5-coder:rltray-v2")


def test_the_page_shows_lineage_metrics_and_verdicts(client, service) -> None:
    make_versions(service)
    page = client.get("/adapters")
    text = page.data.decode()
    assert page.status_code == 200 and "<title>Adapters · rltray</title>" in text
    assert 'id="active-version">v2<' in text and "qwen2.5-coder:rltray-v2" in text
    assert "KL 0.4 &gt; cap 0.2" in text and "rejected" in text
    rows = {r["version"]: r for r in client.get("/api/versions").get_json()}
    assert rows[2]["parent"] == 1 and rows[2]["ratings"] == 20 and rows[2]["active"]
    assert rows[3]["verdict"] == "rejected" and rows[1]["verdict"] == "accepted"


def test_roll_back_activate_and_base_model(client, service) -> None:
    make_versions(service)
    rolled = post_json(client, "/api/rollback", {"version": 1}).get_json()
    assert rolled["active"] == 1 and rolled["ollama"].startswith("not used (ollama.model is")
    assert service.store.active_adapter().version == 1
    assert service.store.get_adapter(2).status == "rolled-back"
    refused = post_json(client, "/api/rollback", {"version": 3})
    assert refused.status_code == 400 and "no usable adapter version 3" in refused.text
    # review 3 r7: a version whose weights are gone is refused in one sentence, nothing moved
    weights = service.paths.adapters / "v0002" / "adapter_model.safetensors"
    kept = weights.read_bytes()
    weights.unlink()
    refused = post_json(client, "/api/rollback", {"version": 2})
    message = refused.get_json()["error"]["message"]
    assert refused.status_code == 400 and message.startswith(
        "v2 cannot be made active: adapter_model.safetensors cannot be read (FileNotFoundError)"
    )
    assert service.store.active_adapter().version == 1
    weights.write_bytes(kept)
    assert post_json(client, "/api/rollback", {"version": "v2"}).get_json()["active"] == 2
    assert post_json(client, "/api/rollback", {"version": 0}).get_json()["active"] is None
    assert service.store.active_adapter() is None


def test_delete_old_versions_never_the_active_one(client, service) -> None:
    make_versions(service)
    refused = post_json(client, "/api/adapters/delete", {"version": 2})
    assert refused.status_code == 400 and "in use" in refused.get_json()["error"]["message"]
    assert (service.paths.adapters / "v0002").is_dir()
    assert post_json(client, "/api/adapters/delete", {"version": 1}).get_json() == {"deleted": 1}
    assert [p.name for p in (service.paths.adapters / "v0001").iterdir()] == ["DELETED.txt"]
    assert service.store.get_adapter(1) is None
    assert service.store.get_adapter(2).parent_version is None
    assert post_json(client, "/api/adapters/delete", {"version": True}).status_code == 400
    assert post_json(client, "/api/adapters/delete", {"version": 3}).status_code == 200
    assert next_version(service.store, service.paths.adapters) == 4  # 3 is never reused


def test_no_versions_yet(client) -> None:
    assert b"No trained versions yet" in client.get("/adapters").data


ROW_AND_ACTIONS = """() => [...document.querySelectorAll("#versions tbody tr")].map((row) => {
    const r = row.getBoundingClientRect();
    const c = row.querySelector("td.actions").getBoundingClientRect();
    return [row.dataset.version, r.top, r.bottom, c.top, c.bottom]; })"""


@pytest.mark.skipif(missing_chromium() is not None, reason=f"needs {missing_chromium()}")
def test_the_buttons_sit_in_their_rows(runtime, service) -> None:
    """Issue 22 item 10: the actions column was offset from its rows (the cell had become a
    flex box, no longer a table cell), so a button sat beside another version's row."""
    make_versions(service)
    server = WebServer(runtime).start()
    try:
        with chromium_page() as (page, problems):
            page.goto(server.launch_url("adapters"))
            page.wait_for_selector("#versions")
            boxes = page.evaluate(ROW_AND_ACTIONS)
            assert problems.items == []
    finally:
        server.stop()
    assert len(boxes) == 3
    for version, row_top, row_bottom, cell_top, cell_bottom in boxes:
        assert (cell_top, cell_bottom) == (row_top, row_bottom), f"v{version}"
