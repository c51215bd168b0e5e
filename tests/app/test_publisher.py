"""OllamaPublisher: the runner's publish step, as a real export process against the fake Ollama."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.paths import Paths
from rltray.app.service import Service
from rltray.app.training.publisher import OllamaPublisher, PublishError

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
pytest.importorskip("ollama", reason="needs the ollama client (pip install -e '.[export]')")

from tests.support.fake_ollama import FakeOllama, serving_tiny
from tests.support.tinygguf import build_tiny_adapter


@pytest.fixture
def fake(tmp_path: Path):
    server = serving_tiny(tmp_path)
    yield server
    server.stop()


def _service_with_versions(fake: FakeOllama, versions: int, model: str = "tiny:1m") -> Service:
    paths = Paths.from_env()
    service = Service(paths)
    if model:
        config.set_value(paths, "ollama.model", model)
        config.set_value(paths, "ollama.host", fake.url)
    for v in range(1, versions + 1):
        folder = build_tiny_adapter(paths.adapters / f"v{v:04d}", seed=v)
        service.store.add_adapter("tiny", folder, parent_version=v - 1 or None)
        service.store.set_adapter_status(v, "active")
    return service


def test_no_ollama_model_publishes_nothing_until_one_is_set(fake: FakeOllama) -> None:
    calls: list[list[str]] = []

    def never(*args, **kwargs):
        calls.append(args[0])
        raise AssertionError("no export process without ollama.model")

    with _service_with_versions(fake, 1, model="") as service:
        publisher = service.runner().publisher
        assert isinstance(publisher, OllamaPublisher)
        publisher._run = never
        publisher.published(1)
        publisher.rolled_back(None)
        assert calls == [] and service.versions()[0]["published"] is None
        # set later (the settings window) while the same runner lives: it publishes
        config.set_value(service.paths, "ollama.model", "tiny:1m")
        config.set_value(service.paths, "ollama.host", fake.url)
        publisher._run = subprocess.run
        publisher.published(1)
        assert service.versions()[0]["ollama_tag"] == "tiny-1m-rltray:v1"


def test_accepted_versions_are_published_and_shown(fake: FakeOllama) -> None:
    with _service_with_versions(fake, 2) as service:
        publisher = service.runner().publisher
        assert isinstance(publisher, OllamaPublisher)
        publisher.published(1)
        line = publisher.published(2)
        rows = {v["version"]: v for v in service.versions()}
        workdirs = list((service.paths.home / "publish").glob("*"))
    assert rows[2]["ollama_tag"] == "tiny-1m-rltray:v2"
    pub = rows[2]["metrics"]["publication"]
    assert pub["path"] == "merged" and pub["server_version"] == "0.35.0" and pub["size"] > 0
    # the tiny base is Q8_0: merged layers go F16, never back onto its grid (issue 20)
    assert rows[2]["published"].startswith("tiny-1m-rltray:v2 (merged, F16 merged layers")
    assert "delivers 100% of the adapter (min 100%)" in rows[2]["published"]
    assert fake.models["tiny-1m-rltray:v2"].parameters["num_ctx"] == 65536
    latest = fake.models["tiny-1m-rltray:latest"].model_digest
    assert latest == fake.models["tiny-1m-rltray:v2"].model_digest
    assert workdirs == []  # the merged GGUF is not kept twice: Ollama has its copy
    assert line == "published as tiny-1m-rltray:v2; tiny-1m-rltray:latest serves it"


def test_rollback_from_the_cli_repoints_latest(fake: FakeOllama) -> None:
    from rltray.app.cli import main

    with _service_with_versions(fake, 2) as service:
        service.runner().publisher.published(1)
        service.runner().publisher.published(2)
    assert main(["rollback", "v1"]) == 0
    assert fake.models["tiny-1m-rltray:latest"].model_digest == (
        fake.models["tiny-1m-rltray:v1"].model_digest
    )
    assert main(["rollback", "0"]) == 0  # the plain base model
    assert fake.models["tiny-1m-rltray:latest"].model_digest == (
        fake.models["tiny:1m"].model_digest
    )


def test_rollback_says_what_ollama_serves_now(fake: FakeOllama) -> None:
    """Issue 22: every command that publishes says what happened to Ollama."""
    from tests.app.test_cli import cli

    with _service_with_versions(fake, 2) as service:
        service.runner().publisher.published(1)
        service.runner().publisher.published(2)
    code, out, err = cli("rollback", "v1")
    assert code == 0, err
    assert out.splitlines() == [
        "Active now: v1", "Ollama: tiny-1m-rltray:latest now serves tiny-1m-rltray:v1"
    ]


def test_a_rollback_with_ollama_down_says_so_and_publish_sends_it_later(
    fake: FakeOllama,
) -> None:
    """Regression (issue 22): with Ollama down, `rltray rollback 6` printed only
    "Active now: v6"; the failure went to the activity log alone."""
    from tests.app.test_cli import cli

    down = "http://127.0.0.1:9"  # nothing listens on the discard port
    with _service_with_versions(fake, 2) as service:
        service.runner().publisher.published(1)
        service.runner().publisher.published(2)
        config.set_value(service.paths, "ollama.host", down)
    code, out, err = cli("rollback", "v1")
    assert code == 0, err  # the rollback itself happened
    assert out.splitlines() == [
        "Active now: v1",
        f"Ollama: not reachable at {down} — v1 is active here but not in Ollama; start "
        "Ollama, then run `rltray publish`",
    ]
    assert fake.models["tiny-1m-rltray:latest"].model_digest == (
        fake.models["tiny-1m-rltray:v2"].model_digest
    )  # unchanged: the agents still get v2
    code, out, _ = cli("publish")
    assert code == 4 and f"not reachable at {down}" in out  # ExitCode.NOT_AVAILABLE
    config.set_value(Paths.from_env(), "ollama.host", fake.url)
    code, out, err = cli("publish")
    assert code == 0, err
    assert out.splitlines() == [
        "Active here: v1", "Ollama: tiny-1m-rltray:latest now serves tiny-1m-rltray:v1"
    ]
    assert fake.models["tiny-1m-rltray:latest"].model_digest == (
        fake.models["tiny-1m-rltray:v1"].model_digest
    )


def test_publish_sends_a_version_whose_own_publish_failed(fake: FakeOllama) -> None:
    from tests.app.test_cli import cli

    with _service_with_versions(fake, 1) as service:
        config.set_value(service.paths, "ollama.host", "http://127.0.0.1:9")
        line = service.runner()._publish("published", 1)  # as an accepted round does
        config.set_value(service.paths, "ollama.host", fake.url)
    assert line is not None and line.startswith("not reachable at http://127.0.0.1:9 — v1")
    assert "tiny-1m-rltray:v1" not in fake.models
    code, out, err = cli("publish")
    assert code == 0, err
    assert "Ollama: published as tiny-1m-rltray:v1; tiny-1m-rltray:latest serves it" in out
    assert "tiny-1m-rltray:v1" in fake.models


def test_a_pruned_version_is_republished_on_rollback(fake: FakeOllama) -> None:
    paths = Paths.from_env()
    with _service_with_versions(fake, 3) as service:
        config.set_value(paths, "ollama.keep_versions", 1)
        for v in (1, 2, 3):
            service.runner().publisher.published(v)
        assert not any(n.endswith(":v1") for n in fake.models)
        service.rollback(1)
    assert "tiny-1m-rltray:v1" in fake.models
    assert fake.models["tiny-1m-rltray:latest"].model_digest == (
        fake.models["tiny-1m-rltray:v1"].model_digest
    )


def test_a_failure_is_one_sentence_and_stored_with_the_version(fake: FakeOllama) -> None:
    with _service_with_versions(fake, 1) as service:
        url = fake.url
        fake.stop()
        with pytest.raises(PublishError) as err:
            service.runner().publisher.published(1)
        row = service.versions()[0]
    assert str(err.value).startswith(f"Ollama is not running at {url}: start it")
    assert row["ollama_tag"] is None
    assert row["published"] == f"not published: {err.value}"


def test_versions_table_shows_tag_and_path(fake: FakeOllama, capsys) -> None:
    from rltray.app.cli import main

    with _service_with_versions(fake, 1) as service:
        service.runner().publisher.published(1)
    assert main(["versions", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["published"].startswith("tiny-1m-rltray:v1 (merged")
    shutil.rmtree(Paths.from_env().home / "publish", ignore_errors=True)


def test_the_version_line_says_how_much_of_the_adapter_is_served() -> None:
    """Issue 20: the merge's delivered share and llama.cpp's check, with each version."""
    from rltray.app.training.publisher import describe

    pub = {"tag": "m-rltray:v1", "path": "merged", "quantization": "F16 merged layers",
           "size": 2e8, "base_size": 1e8, "delivered": {"min": 0.97, "mean": 0.994},
           "served": {"share": 0.981, "cosine": 0.9, "reference_norm": 3.0, "skipped": None}}
    assert describe(pub) == ("m-rltray:v1 (merged, F16 merged layers, 200 MB vs base 100 MB, "
                             "delivers 99% of the adapter (min 97%), llama.cpp carries 98%)")
    pub["served"] = {"share": None, "skipped": "llama-cpp-python is not installed"}
    assert describe(pub).endswith("(min 97%), not checked in llama.cpp)")


def test_the_running_rltray_publishes_by_itself_once_ollama_is_back(fake: FakeOllama) -> None:
    """An accepted round while Ollama was down stayed out of Ollama until the user ran
    `rltray publish`; the running rltray now sends it when Ollama answers again."""
    from rltray.app.autopublish import CHECK_EVERY_S, OllamaReturn

    now = [1000.0]
    with _service_with_versions(fake, 2) as service:
        service.store.set_adapter_status(1, "active")  # v1 published while it was active,
        service.runner().publisher.published(1)  # (a publish points latest at the active one)
        service.store.set_adapter_status(2, "active")  # then v2 accepted
        config.set_value(service.paths, "ollama.host", "http://127.0.0.1:9")  # Ollama down
        service.runner()._publish("published", 2)  # as an accepted round does
        watch = OllamaReturn(service, clock=lambda: now[0])
        assert watch.poll() is False  # still down: nothing started
        config.set_value(service.paths, "ollama.host", fake.url)  # Ollama is back
        assert watch.poll() is False  # not due yet: one probe a minute
        now[0] += CHECK_EVERY_S
        assert watch.poll() is True
        assert watch.thread is not None
        watch.thread.join(120)
        assert fake.models["tiny-1m-rltray:latest"].model_digest == (
            fake.models["tiny-1m-rltray:v2"].model_digest
        )
        assert service.versions()[0]["ollama_tag"] == "tiny-1m-rltray:v2"
        events = [e["message"] for e in service.store.events(limit=5)]
        assert any(m.startswith("Ollama answered again; v2: published as tiny-1m-rltray:v2")
                   for m in events), events  # fmt: skip
        now[0] += CHECK_EVERY_S
        assert watch.poll() is False  # published: nothing waits any more


def test_only_an_unreachable_ollama_is_retried_by_itself(fake: FakeOllama) -> None:
    from rltray.app.training.served import needs_settling

    with _service_with_versions(fake, 1) as service:
        store, paths = service.store, service.paths
        store.set_adapter_publication(1, None, {"error": "the Ollama export failed: x"})
        assert not needs_settling(store, paths, "tiny:1m")  # it would fail the same way again
        store.set_adapter_publication(
            1, None, {"error": "Ollama is not running", "waiting_for_ollama": True})
        assert needs_settling(store, paths, "tiny:1m")
        assert not needs_settling(store, paths, "")  # nothing is published at all


# -- review 3 ----------------------------------------------------------------------------


@pytest.fixture
def gated(tmp_path: Path):
    from tests.app.gatedollama import serving_tiny_gated

    server = serving_tiny_gated(tmp_path)
    yield server
    server.release()
    server.stop()


def test_a_prune_that_fails_half_way_is_a_warning_not_a_failed_publish(gated) -> None:
    """Regression (review 3 r4): Ollama refused to delete one old tag after another was
    deleted; the publish failed as a whole, so the new version (which Ollama had) was said
    "not published", and the deleted tag stayed in the store."""
    with _service_with_versions(gated, 2) as service:
        publisher = service.runner().publisher
        publisher.published(1)
        publisher.published(2)
        config.set_value(service.paths, "ollama.keep_versions", 1)
        gated.fail("DELETE", "/api/delete", "rltray:v2")  # v1's delete works, v2's does not
        folder = build_tiny_adapter(service.paths.adapters / "v0003", seed=3)
        service.store.add_adapter("tiny", folder, parent_version=2)
        service.store.set_adapter_status(3, "active")
        line = service.runner()._publish("published", 3)
        assert line.startswith(
            "published as tiny-1m-rltray:v3; tiny-1m-rltray:latest serves it; 1 older tag could "
            "not be removed from Ollama (tiny-1m-rltray:v2: "
        ) and line.endswith("); the next version's publish tries again")
        rows = {v["version"]: v for v in service.versions()}
        assert rows[3]["ollama_tag"] == "tiny-1m-rltray:v3"
        assert rows[3]["published"].startswith("tiny-1m-rltray:v3 (merged")
        assert rows[1]["ollama_tag"] is None and rows[1]["published"].startswith(
            "not in Ollama any more: tiny-1m-rltray:v1 was removed")
        assert rows[2]["ollama_tag"] == "tiny-1m-rltray:v2"  # still there, still named
        assert sorted(n for n in gated.models if "rltray:v" in n) == [
            "tiny-1m-rltray:v2", "tiny-1m-rltray:v3"]
        events = [e["kind"] for e in service.store.events(limit=10)]
        assert "prune-failed" in events


EXPORTING_TRAY = """
from rltray.app.paths import Paths
from rltray.app.service import Service
with Service(Paths.from_env()) as service:
    print(service.runner()._publish("published", 1), flush=True)
"""


def test_an_export_dies_with_its_tray_and_the_next_publish_sweeps_its_folder(gated) -> None:
    """Regression (review 3 r6): a tray killed mid-export left the export process running
    on alone, and ``publish/v0001-*/merged.gguf`` (the size of the model) for good."""
    import os
    import signal
    import sys

    import psutil

    with _service_with_versions(gated, 1) as service:
        paths = service.paths
    gated.hold("POST", "/api/create")  # merged and uploaded; Ollama is creating the model
    tray = subprocess.Popen([sys.executable, "-c", EXPORTING_TRAY], env=dict(os.environ))
    try:
        assert gated.held.wait(120), "the export never reached /api/create"
        exports = [p for p in psutil.Process(tray.pid).children(recursive=True)
                   if "rltray.trainer.export" in " ".join(p.cmdline())]  # fmt: skip
        assert len(exports) == 1
        left = list((paths.home / "publish").iterdir())
        assert [p.name[:6] for p in left] == ["v0001-"] and (left[0] / "merged.gguf").is_file()
        tray.send_signal(signal.SIGKILL)  # logout, a crash, the OOM killer
        tray.wait(30)
        _, alive = psutil.wait_procs(exports, timeout=15)
        assert alive == [], "the export ran on without its tray"
    finally:
        if tray.poll() is None:
            tray.kill()
        gated.release()
    with Service(paths) as service:
        assert list((paths.home / "publish").iterdir()) == left  # nothing removed it yet
        service.runner().publisher.serve_active(1)  # the next publish, under the lock
        assert list((paths.home / "publish").iterdir()) == []
        assert service.versions()[0]["ollama_tag"] == "tiny-1m-rltray:v1"
