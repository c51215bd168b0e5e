"""Ollama's `latest` serves the store's active version: the publish lock, races, retries, trust.

Each test pins a bug a review reproduced (/tmp/review-publish r1, r3, r5, r6) or the
working-folder clash it found by reading publisher.py; all run the real export process
against the fake Ollama.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.errors import ExitCode
from rltray.app.paths import Paths
from rltray.app.service import Service
from rltray.app.training import served
from rltray.app.training.publisher import OllamaPublisher

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
pytest.importorskip("ollama", reason="needs the ollama client (pip install -e '.[export]')")

from tests.support.fake_ollama import FakeOllama, serving_tiny
from tests.support.tinygguf import build_tiny_adapter

DOWN = "http://127.0.0.1:9"  # nothing listens on the discard port
LATEST = "tiny-1m-rltray:latest"


@pytest.fixture
def fake(tmp_path: Path):
    server = serving_tiny(tmp_path)
    yield server
    server.stop()


def _service(fake: FakeOllama) -> Service:
    paths = Paths.from_env()
    config.set_value(paths, "ollama.model", "tiny:1m")
    config.set_value(paths, "ollama.host", fake.url)
    return Service(paths)


def _accept(service: Service, version: int, *, seed: int | None = None) -> None:
    """Register ``adapters/vNNNN`` and make it active, as an accepted round does."""
    folder = build_tiny_adapter(
        service.paths.adapters / f"v{version:04d}", seed=version if seed is None else seed
    )
    service.store.add_adapter("tiny", folder, parent_version=version - 1 or None)
    service.store.set_adapter_status(version, "active")


def _publisher(service: Service) -> OllamaPublisher:
    publisher = service.runner().publisher
    assert isinstance(publisher, OllamaPublisher)
    return publisher


def _serves(fake: FakeOllama, name: str) -> bool:
    return fake.models[LATEST].model_digest == fake.models[name].model_digest


def _host(service: Service, host: str) -> None:
    config.set_value(service.paths, "ollama.host", host)


def _poll_and_wait(service: Service, now: float) -> bool:
    from rltray.app.autopublish import OllamaReturn

    watch = OllamaReturn(service, clock=lambda: now)
    started = watch.poll()
    if watch.thread is not None:
        watch.thread.join(120)
    return started


def test_a_publish_that_ends_after_a_rollback_does_not_take_latest_back(fake: FakeOllama) -> None:
    """Regression (review r1): the auto-publish of v2 raced a rollback to v1; its export
    ended last and copied v2 to `latest` for good while the store said v1."""
    with _service(fake) as service:
        _accept(service, 1)
        _publisher(service).published(1)
        _accept(service, 2)
        _host(service, DOWN)
        service.runner()._publish("published", 2)  # accepted while Ollama was down
        _host(service, fake.url)
        publisher = _publisher(service)
        publisher.rollback_wait_s = 0.2
        exporting, go = threading.Event(), threading.Event()

        def slow(cmd: list[str], **kw):  # the v2 export takes a while
            if "publish" in cmd and cmd[cmd.index("--version") + 1] == "2":
                exporting.set()
                go.wait(60)
            return subprocess.run(cmd, **kw)

        publisher._run = slow
        background = threading.Thread(target=service.publish)  # the tray's retry, or the CLI
        background.start()
        assert exporting.wait(60)
        result = service.rollback(1)
        go.set()
        background.join(120)
        assert service.store.active_adapter().version == 1
        assert _serves(fake, "tiny-1m-rltray:v1")
        assert result == {"active": 1, "ollama": (
            "another publish is running; Ollama's latest will serve v1 when it ends")}
        assert "tiny-1m-rltray:v2" in fake.models  # its tag is registered all the same
        assert service.store.get_adapter(2).ollama_tag == "tiny-1m-rltray:v2"
        assert not served.needs_settling(service.store, service.paths, "tiny:1m")
        # the name the export gave latest is kept: the app bundle has no naming rule
        assert served.read_served(service.paths) == {
            "model": "tiny:1m", "version": 1, "tag": "tiny-1m-rltray:latest"}


def test_prune_never_deletes_the_active_versions_tag(fake: FakeOllama) -> None:
    """A version published while an older one is active (after a rollback) pruned with
    itself as "the active one": keep_versions 1 deleted the tag `latest` came from."""
    with _service(fake) as service:
        config.set_value(service.paths, "ollama.keep_versions", 1)
        _accept(service, 1)
        _publisher(service).published(1)
        _accept(service, 2)
        service.store.set_adapter_status(1, "active")  # v2 kept aside, v1 stays active
        line = _publisher(service).published(2)
        assert "tiny-1m-rltray:v1" in fake.models and "tiny-1m-rltray:v2" in fake.models
        assert _serves(fake, "tiny-1m-rltray:v1")
        assert line == (
            "published as tiny-1m-rltray:v2, no longer the active version; "
            f"{LATEST} now serves tiny-1m-rltray:v1"
        )


def test_a_rollback_made_while_ollama_was_down_is_applied_once_it_answers(
    fake: FakeOllama,
) -> None:
    """Regression (review r3): nothing re-pointed `latest` after Ollama came back."""
    with _service(fake) as service:
        for v in (1, 2):
            _accept(service, v)
            _publisher(service).published(v)
        _host(service, DOWN)
        assert "not reachable" in service.rollback(1)["ollama"]
        row = next(r for r in service.versions() if r["version"] == 1)
        assert row["published"].startswith("not published yet: Ollama's latest does not")
        assert _poll_and_wait(service, 1e9) is False  # still down
        _host(service, fake.url)
        assert _poll_and_wait(service, 2e9) is True
        assert _serves(fake, "tiny-1m-rltray:v1")
        row = next(r for r in service.versions() if r["version"] == 1)
        assert row["published"].startswith("tiny-1m-rltray:v1 (merged")
        assert _poll_and_wait(service, 3e9) is False  # settled: no probe, no export


def test_an_export_cut_short_is_shown_and_published_when_ollama_answers(
    fake: FakeOllama,
) -> None:
    """Regression (review r6): a tray stopped during v2's export left it active, with no
    publication record; nothing retried it and nothing warned."""
    with _service(fake) as service:
        _accept(service, 1)
        _publisher(service).published(1)
        _accept(service, 2)  # committed active; the tray stopped before it published
        _host(service, DOWN)
        assert _poll_and_wait(service, 1e9) is False
        row = next(r for r in service.versions() if r["version"] == 2)
        assert row["published"] == (
            f"not published yet: Ollama is not running at {DOWN}; rltray sends it when "
            "Ollama answers"
        )
        _host(service, fake.url)
        assert _poll_and_wait(service, 2e9) is True
        assert _serves(fake, "tiny-1m-rltray:v2")
        assert service.store.get_adapter(2).ollama_tag == "tiny-1m-rltray:v2"


def test_a_hard_failure_is_not_retried_every_minute(fake: FakeOllama) -> None:
    calls: list[list[str]] = []

    with _service(fake) as service:
        _accept(service, 1)

        def refused(cmd: list[str], **kw):
            calls.append(cmd)
            return subprocess.CompletedProcess(cmd, 1, '{"ok": false, "error": "no."}', "")

        _publisher(service)._run = refused
        service.runner()._publish("published", 1)
        assert len(calls) == 1
        assert _poll_and_wait(service, 1e9) is False and len(calls) == 1


def test_nothing_is_settled_before_anything_was_published() -> None:
    """A folder that never published stays out of Ollama (no `latest` copy of the base)."""
    with Service(Paths.from_env()) as service:
        assert not served.needs_settling(service.store, service.paths, "tiny:1m")
        served.write_served(service.paths, "tiny:1m", 1)  # it once served v1, base now
        assert served.needs_settling(service.store, service.paths, "tiny:1m")


def test_rollback_does_not_trust_a_tag_another_data_folder_wrote(
    fake: FakeOllama, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review r5): a reset data folder numbers from v1 again; rollback found
    the old folder's `:v1` and pointed `latest` at an unrelated adapter."""
    monkeypatch.setenv("RLTRAY_HOME", str(tmp_path / "old-home"))
    with _service(fake) as old:
        _accept(old, 1, seed=11)
        _publisher(old).published(1)
    old_v1 = fake.models["tiny-1m-rltray:v1"].model_digest
    monkeypatch.setenv("RLTRAY_HOME", str(tmp_path / "new-home"))
    with _service(fake) as new:
        _accept(new, 1)
        new.store.set_adapter_status(1, "candidate")  # kept, never published
        _accept(new, 2)
        _publisher(new).published(2)
        new.rollback(1)
        ours = new.store.get_adapter(1)
    assert fake.models[LATEST].model_digest != old_v1
    assert _serves(fake, "tiny-1m-rltray:v1")  # republished from this folder's v1
    assert ours.ollama_tag == "tiny-1m-rltray:v1"
    assert fake.models["tiny-1m-rltray:v1"].model_digest == ours.metrics["publication"]["blob"]


def test_a_version_of_the_model_set_up_before_is_never_published_on_the_new_one(
    fake: FakeOllama, tmp_path: Path
) -> None:
    """Regression (review r1): after training.base_model and ollama.model changed, one
    poll of the running rltray's retry (and `rltray publish`) merged v1, trained and judged
    on model A, onto the new Ollama model, while a rollback to v1 was refused for exactly
    that reason. `latest` of the new model serves its plain base instead, and says why."""
    from tests.app.test_cli import cli
    from tests.support.tinygguf import GO_TEMPLATE, build_tiny_gguf

    fake.install("other:1m", build_tiny_gguf(tmp_path / "other.gguf", seed=7),
                 template=GO_TEMPLATE)  # fmt: skip
    a, b = tmp_path / "modelA", tmp_path / "modelB"
    with _service(fake) as service:
        config.set_value(service.paths, "training.base_model", str(a))
        folder = build_tiny_adapter(service.paths.adapters / "v0001", seed=1)
        service.store.add_adapter(str(a), folder)
        service.store.set_adapter_status(1, "active")
        _publisher(service).published(1)
        # the user moves to another model (same shapes: a sibling fine-tune, say)
        config.set_value(service.paths, "training.base_model", str(b))
        config.set_value(service.paths, "ollama.model", "other:1m")
        assert _poll_and_wait(service, 1e9) is True
        other_latest = fake.models["other-1m-rltray:latest"].model_digest
        assert "other-1m-rltray:v1" not in fake.models
        assert other_latest == fake.models["other:1m"].model_digest
        said = service.store.events(limit=1)[0]["message"]
        assert "other-1m-rltray:latest now serves other:1m; v1 is active here but not " in said
        assert f"it was trained on {a}, and the model set up now is {b}" in said
        assert _poll_and_wait(service, 2e9) is False  # settled: nothing more to send
        assert _publisher(service).published(1).startswith(  # an untagged v1: the same
            "other-1m-rltray:latest now serves other:1m; v1 is active here but not served"
        )
    code, out, err = cli("publish")
    assert code == ExitCode.NOT_AVAILABLE, err
    assert "Active here: v1\nOllama: other-1m-rltray:latest now serves other:1m; v1 is " in out
    assert "other-1m-rltray:v1" not in fake.models


def test_a_failed_publish_still_points_latest_where_a_rollback_said(fake: FakeOllama) -> None:
    """Regression (review r5): a rollback made while v2's publish ran was told "latest will
    serve the base model when it ends"; v2's export failed, and nothing re-pointed `latest`
    (it kept serving v1), while the failure line said v2 was active."""
    with _service(fake) as service:
        _accept(service, 1)
        _publisher(service).published(1)
        # v2 accepted; its export fails (it does not fit the base's shapes; a full disk or
        # an Ollama error end the same way)
        folder = build_tiny_adapter(service.paths.adapters / "v0002", hidden=32, ffn=48)
        service.store.add_adapter("tiny", folder, parent_version=1)
        service.store.set_adapter_status(2, "active")
        said: list[str | None] = []
        publish = threading.Thread(
            target=lambda: said.append(service.runner()._publish("published", 2))
        )
        publish.start()
        deadline = time.monotonic() + 30
        while not served.publishing(service.paths):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        _publisher(service).rollback_wait_s = 0.2
        line = service.rollback(0)["ollama"]  # the user goes back to the base model
        assert line == "another publish is running; Ollama's latest will serve the base model " \
            "when it ends"
        publish.join(120)
        assert _serves(fake, "tiny:1m")
        assert served.serves(service.paths, "tiny:1m", None)
        assert said[0].startswith("v2 was not published (The adapter was trained on weights")
        assert said[0].endswith(f"it is no longer active: {LATEST} now serves tiny:1m")


def test_two_publishes_of_one_version_get_their_own_working_folders(fake: FakeOllama) -> None:
    """Two exports of v1 shared publish/v0001 and could write one GGUF at once."""
    with _service(fake) as service:
        publisher = _publisher(service)
        first, second = publisher._workdir(1), publisher._workdir(1)
    assert first != second and first.parent == second.parent == service.paths.home / "publish"


def test_the_publish_lock_excludes_threads_and_processes_alike(tmp_path: Path) -> None:
    from filelock import Timeout

    paths = Paths(tmp_path)
    with served.publish_lock(paths):
        assert served.publishing(paths)
        outcome: list[str] = []

        def other() -> None:
            try:
                served.publish_lock(paths).acquire(timeout=0.1)
                outcome.append("acquired")
            except Timeout:
                outcome.append("waited")

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert outcome == ["waited"]
    assert not served.publishing(paths)


# -- review 3 ----------------------------------------------------------------------------


def test_a_rollback_during_the_export_of_a_finished_round_goes_ahead(
    fake_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3 r5): the running rltray refused `rltray rollback` for the whole
    export of a round it had already recorded (merge and upload: tens of minutes). The
    rollback goes ahead; the publish ends by pointing `latest` at what is active then."""
    import sys

    from tests.app.gatedollama import serving_tiny_gated
    from tests.app.test_trainingcli import model_folder, rate

    monkeypatch.setenv("FAKE_MODE", "done")
    paths = Paths.from_env()
    config.set_value(paths, "training.base_model", model_folder("a"))
    gated = serving_tiny_gated(tmp_path)
    gated.hold("POST", "/api/show")  # the export's first question about the base
    wrapper = tmp_path / "dispatch-python"  # the export in this venv, the round in the fake
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = "rltray.trainer.export" ]; then exec {sys.executable} "$@"; fi\n'
        f'exec {fake_python} "$@"\n'
    )
    wrapper.chmod(0o755)
    config.set_value(paths, "training.python", str(wrapper))
    monkeypatch.setenv("FAKE_ADAPTER", str(build_tiny_adapter(tmp_path / "trained", seed=3)))
    rate(paths, 8, 0)
    try:
        with _service(gated) as service:
            runner = service.runner()
            _publisher(service).rollback_wait_s = 0.2
            run_id = runner.start()
            try:
                assert gated.held.wait(60), "the export never asked Ollama"
                assert runner.running() and service.store.active_adapter().version == 1
                result = service.rollback(0)
            finally:
                gated.release()
            assert result == {"active": None, "ollama": "another publish is running; Ollama's "
                              "latest will serve the base model when it ends"}  # fmt: skip
            assert runner.wait(120)
            run = service.store.get_run(run_id)
            assert run.metrics["ollama"] == (
                f"published as tiny-1m-rltray:v1, no longer the active version; {LATEST} now "
                "serves tiny:1m"
            )
            assert _serves(gated, "tiny:1m") and "tiny-1m-rltray:v1" in gated.models
            assert service.store.active_adapter() is None
            assert service.store.get_adapter(1).ollama_tag == "tiny-1m-rltray:v1"
    finally:
        gated.stop()


def test_a_version_whose_files_changed_is_refused_before_anything_is_published(
    fake: FakeOllama,
) -> None:
    """Regression (review 3 r7): rollback to a version whose weights were replaced (or
    deleted) since it was trained was made active, and its pruned tag published again from
    the files as they were now. Refused in one sentence; the store and Ollama keep v2."""
    import shutil

    from rltray.app.training import versions

    from tests.app.test_cli import cli

    with _service(fake) as service:
        config.set_value(service.paths, "ollama.keep_versions", 1)  # v1's tag will be pruned
        for v in (1, 2):
            folder = build_tiny_adapter(service.paths.adapters / f"v{v:04d}", seed=v)
            service.store.add_adapter("tiny", folder, parent_version=v - 1 or None,
                                      files=versions.file_digests(folder))  # fmt: skip
            service.store.set_adapter_status(v, "active")
            _publisher(service).published(v)
        assert "tiny-1m-rltray:v1" not in fake.models
        other = build_tiny_adapter(service.paths.home.parent / "someone-else", seed=99)
        shutil.copy(other / "adapter_model.safetensors", service.paths.adapters / "v0001")
    requests = len(fake.requests)
    code, out, err = cli("rollback", "1")
    assert code == ExitCode.USAGE and out == ""
    assert err.startswith(
        "rltray: v1 cannot be made active: adapter_model.safetensors in its folder "
    ) and "was replaced since it was trained" in err
    assert fake.requests[requests:] == []  # no export ran
    assert _serves(fake, "tiny-1m-rltray:v2") and "tiny-1m-rltray:v1" not in fake.models
    (service.paths.adapters / "v0002" / "adapter_model.safetensors").unlink()
    code, _, err = cli("rollback", "2")
    assert code == ExitCode.NOTHING_TO_DO  # v2 is active: nothing is checked or moved
    with Service(Paths.from_env()) as service:
        assert service.store.active_adapter().version == 2
