"""Publishing to Ollama, both eras, against the fake server that enforces Ollama's rules."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import httpx
import pytest
from rltray.trainer.export.ollama_client import Ollama, sha256_file
from rltray.trainer.export.ollama_errors import AdapterRefused, DiskFull, ModelMissing, OllamaError
from rltray.trainer.export.ollama_model import blob_from_manifests
from rltray.trainer.export.ollama_names import adapter_era, latest_tag, version_tag
from rltray.trainer.export.ollama_publish import Publication, point_latest, publish, serve

from tests.support.exportkit import BASE, BASE_PARAMS, start_fake
from tests.support.fake_ollama import ADAPTERS_REFUSED, FakeOllama
from tests.support.tinygguf import GO_TEMPLATE, build_tiny_adapter

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
pytest.importorskip("ollama", reason="needs the ollama client (pip install -e '.[export]')")


def _client(fake: FakeOllama) -> Ollama:
    return Ollama(fake.url, timeout=30)


def _publish(fake: FakeOllama, adapter: Path, version: int, tmp: Path, **kw) -> Publication:
    with _client(fake) as client:
        return publish(client, BASE, adapter, version, workdir=tmp / f"w{version}", **kw)


def _gguf_type(fake: FakeOllama, digest: str) -> str:
    import gguf

    return str(gguf.GGUFReader(fake.blob_path(digest)).fields["general.type"].contents())


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "tag"),
    [
        ("smollm2:135m", "smollm2-135m-rltray:v1"),
        ("smollm2", "smollm2-rltray:v1"),
        ("smollm2:latest", "smollm2-rltray:v1"),
        ("qwen2.5-coder:7b", "qwen2.5-coder-7b-rltray:v1"),
        ("hf.co/org/Model-GGUF:Q4_K_M", "hf.co/org/model-gguf-q4_k_m-rltray:v1"),
    ],
)
def test_tags_keep_the_size_so_two_sizes_never_collide(base: str, tag: str) -> None:
    assert version_tag(base, 1) == tag
    assert latest_tag(base) == tag.replace(":v1", ":latest")


def test_era_boundary() -> None:
    assert adapter_era("0.33.0") and adapter_era("0.5.4")
    assert not adapter_era("0.34.1") and not adapter_era("0.35.2-rc1")


def test_show_reads_template_parameters_and_the_blob_path(new_ollama: FakeOllama) -> None:
    with _client(new_ollama) as client:
        info = client.show(BASE)
    assert info.architecture == "llama"
    assert info.key("block_count") == 2 and info.key("embedding_length") == 64
    assert info.template == GO_TEMPLATE and info.system == "Be brief."
    assert info.parameters == BASE_PARAMS
    assert info.quantization == "Q8_0"
    assert info.blob_path is not None and info.blob_path.is_file()


# -- the two eras ------------------------------------------------------------------------


def test_new_ollama_gets_a_merged_gguf_with_the_base_template_and_num_ctx(
    new_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path
) -> None:
    pub = _publish(new_ollama, tiny_adapter, 1, tmp_path, num_ctx=65536)
    assert pub.path == "merged" and pub.tag == "tiny-1m-rltray:v1" and pub.latest
    assert pub.server_version == "0.35.0" and pub.fallback is None
    assert "Q8_0" in pub.quantization and pub.size > 0 and pub.base_size
    model = new_ollama.models["tiny-1m-rltray:v1"]
    assert model.adapter_digests == []
    assert _gguf_type(new_ollama, model.model_digest) == "model"
    assert model.model_digest != new_ollama.models["tiny:1m"].model_digest
    assert model.template == GO_TEMPLATE and model.system == "Be brief."
    assert model.parameters == {**BASE_PARAMS, "num_ctx": 65536}
    latest = new_ollama.models["tiny-1m-rltray:latest"]
    assert latest.model_digest == model.model_digest
    with _client(new_ollama) as client:  # /api/show of the new tag reads back the same
        shown = client.show("tiny-1m-rltray:v1")
    assert shown.parameters["num_ctx"] == 65536 and shown.parameters["stop"] == ["<|im_end|>"]


def test_old_ollama_gets_base_plus_gguf_adapter(
    old_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path
) -> None:
    pub = _publish(old_ollama, tiny_adapter, 1, tmp_path)
    assert pub.path == "adapter" and pub.server_version == "0.33.0"
    model = old_ollama.models["tiny-1m-rltray:v1"]
    base = old_ollama.models["tiny:1m"]
    assert model.model_digest == base.model_digest  # the base blob, untouched
    assert len(model.adapter_digests) == 1
    assert _gguf_type(old_ollama, model.adapter_digests[0]) == "adapter"
    assert model.parameters["num_ctx"] == 65536
    with _client(old_ollama) as client:
        assert client.show("tiny-1m-rltray:latest").has_adapter


def test_old_ollama_refusing_the_adapter_falls_back_to_the_merged_path(
    tmp_path: Path, tiny_gguf: Path, tiny_adapter: Path
) -> None:
    """A base that already carries an adapter: old Ollama takes one adapter per model."""
    fake = start_fake(tmp_path / "o", "0.33.0", tiny_gguf)
    try:
        first = _publish(fake, tiny_adapter, 1, tmp_path)
        assert first.path == "adapter"
        with _client(fake) as client:
            client.copy("tiny-1m-rltray:v1", "tiny:1m")  # now the base has an adapter
        pub = _publish(fake, tiny_adapter, 2, tmp_path)
    finally:
        fake.stop()
    assert pub.path == "merged"
    assert pub.fallback and "adapter" in pub.fallback
    assert fake.models["tiny-1m-rltray:v2"].adapter_digests == []


def test_new_ollama_refuses_adapters_and_gguf_quantize_like_the_real_one(
    new_ollama: FakeOllama, tiny_gguf: Path, tiny_adapter: Path, tmp_path: Path
) -> None:
    from rltray.trainer.export import gguf_adapter

    with _client(new_ollama) as client:
        info = client.show(BASE)
        out = gguf_adapter.export(
            tiny_adapter, tmp_path / "a.gguf", arch_info=gguf_adapter.ArchInfo.from_ollama(info)
        )
        digest, _ = client.push_blob(out)
        with pytest.raises(AdapterRefused, match=ADAPTERS_REFUSED):
            client.create("x:1", from_=BASE, adapters={"a.gguf": digest})
        with pytest.raises(AdapterRefused, match="is a LoRA adapter"):
            client.create("x:1", files={"a.gguf": digest})
        base_digest, uploaded = client.push_blob(tiny_gguf)
        assert not uploaded  # the base blob is already there: HEAD said so
        with pytest.raises(OllamaError, match="quantization is only supported"):
            client.create("x:1", files={"m.gguf": base_digest}, quantize="q4_K_M")
        with pytest.raises(OllamaError, match="quantization is only supported"):
            client.create("x:1", from_=BASE, quantize="q4_K_M")


def test_a_blob_already_on_the_server_is_not_uploaded_again(
    new_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path
) -> None:
    _publish(new_ollama, tiny_adapter, 1, tmp_path)
    uploads = new_ollama.uploads()
    assert uploads == 1
    _publish(new_ollama, tiny_adapter, 2, tmp_path)  # same merged bytes, new tag
    assert new_ollama.uploads() == uploads
    assert ("HEAD", f"/api/blobs/{new_ollama.models['tiny-1m-rltray:v2'].model_digest}") in (
        new_ollama.requests
    )


def test_the_server_checks_the_blob_digest(new_ollama: FakeOllama) -> None:
    wrong = "sha256:" + "0" * 64
    r = httpx.post(f"{new_ollama.url}/api/blobs/{wrong}", content=b"not those bytes")
    assert r.status_code == 400 and "digest mismatch" in r.json()["error"]


# -- latest, rollback, pruning -----------------------------------------------------------


def test_prune_keeps_the_last_k_and_never_the_active_one(
    new_ollama: FakeOllama, tmp_path: Path
) -> None:
    adapters = [build_tiny_adapter(tmp_path / f"a{i}", seed=i) for i in range(1, 6)]
    for version, folder in enumerate(adapters[:4], start=1):
        pub = _publish(new_ollama, folder, version, tmp_path, keep=2)
    assert pub.pruned == ["tiny-1m-rltray:v2"]
    assert {n for n in new_ollama.models if "rltray:v" in n} == {
        "tiny-1m-rltray:v3", "tiny-1m-rltray:v4",
    }
    # v5 published while v3 is still the active version (make_latest off): v3 stays
    pub = _publish(new_ollama, adapters[4], 5, tmp_path, keep=1, active=3, make_latest=False)
    assert pub.pruned == ["tiny-1m-rltray:v4"]
    assert {n for n in new_ollama.models if "rltray:v" in n} == {
        "tiny-1m-rltray:v3", "tiny-1m-rltray:v5",
    }


def test_a_prune_that_fails_half_way_still_publishes_and_names_what_it_removed(
    new_ollama: FakeOllama, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3 r4): one failed delete raised after the others had succeeded;
    the new version (already created) was reported "not published" and the caller never
    learnt which tags were gone. Each tag is its own attempt now."""
    adapters = [build_tiny_adapter(tmp_path / f"a{i}", seed=i) for i in range(1, 4)]
    for version, folder in enumerate(adapters[:2], start=1):
        _publish(new_ollama, folder, version, tmp_path, keep=3)
    route = new_ollama.route

    def failing(method: str, path: str, body: bytes):  # Ollama refuses to delete v2, once
        if method == "DELETE" and b"rltray:v2" in body:
            return 500, {"error": "database is locked"}
        return route(method, path, body)

    monkeypatch.setattr(new_ollama, "route", failing)
    pub = _publish(new_ollama, adapters[2], 3, tmp_path, keep=1)
    assert pub.tag == "tiny-1m-rltray:v3" and pub.latest
    assert pub.pruned == ["tiny-1m-rltray:v1"]
    assert len(pub.prune_errors) == 1 and pub.prune_errors[0].startswith("tiny-1m-rltray:v2: ")
    assert "database is locked" in pub.prune_errors[0]
    assert {n for n in new_ollama.models if "rltray:v" in n} == {
        "tiny-1m-rltray:v2", "tiny-1m-rltray:v3",
    }


def test_rollback_repoints_latest(new_ollama: FakeOllama, tmp_path: Path) -> None:
    a1 = build_tiny_adapter(tmp_path / "a1", seed=11)
    a2 = build_tiny_adapter(tmp_path / "a2", seed=12)
    _publish(new_ollama, a1, 1, tmp_path)
    _publish(new_ollama, a2, 2, tmp_path)
    models = new_ollama.models
    assert models["tiny-1m-rltray:latest"].model_digest == models["tiny-1m-rltray:v2"].model_digest
    with _client(new_ollama) as client:
        assert point_latest(client, BASE, 1) == "tiny-1m-rltray:v1"
        assert models["tiny-1m-rltray:latest"].model_digest == (
            models["tiny-1m-rltray:v1"].model_digest
        )
        point_latest(client, BASE, None)  # back to the plain base model
        assert models["tiny-1m-rltray:latest"].model_digest == models["tiny:1m"].model_digest
        with pytest.raises(ModelMissing, match="not installed"):
            point_latest(client, BASE, 9)


def test_serve_trusts_a_version_tag_only_when_it_carries_the_recorded_blob(
    new_ollama: FakeOllama, tmp_path: Path
) -> None:
    """Regression (review r5): a reset data folder's v1 is not the `:v1` on the server."""
    ours_v1 = build_tiny_adapter(tmp_path / "ours", seed=1)
    theirs = _publish(new_ollama, build_tiny_adapter(tmp_path / "theirs", seed=11), 1, tmp_path)
    assert theirs.blob and theirs.blob == new_ollama.models["tiny-1m-rltray:v1"].model_digest
    with _client(new_ollama) as client:
        kept = serve(client, BASE, 1, blob=theirs.blob, adapter_dir=ours_v1, workdir=tmp_path / "k")
        assert kept["republished"] is None and kept["blob"] == theirs.blob
        assert serve(client, BASE, 1, blob="*", adapter_dir=None, workdir=None)["blob"] == (
            theirs.blob)  # a record from before blobs: the tag as it is
        fresh = serve(client, BASE, 1, blob=None, adapter_dir=ours_v1, workdir=tmp_path / "f")
    assert fresh["republished"]["tag"] == "tiny-1m-rltray:v1"
    assert fresh["blob"] != theirs.blob
    models = new_ollama.models
    assert models["tiny-1m-rltray:latest"].model_digest == fresh["blob"]


# -- the errors, one sentence each --------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_not_running(tiny_adapter: Path, tmp_path: Path) -> None:
    host = f"http://127.0.0.1:{_closed_port()}"
    with Ollama(host) as client, pytest.raises(OllamaError) as err:
        publish(client, BASE, tiny_adapter, 1, workdir=tmp_path)
    assert str(err.value) == (
        f"Ollama is not running at {host}: start it (`ollama serve` or the Ollama app) or fix "
        "ollama.host."
    )


def test_base_model_missing(new_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path) -> None:
    with _client(new_ollama) as client, pytest.raises(ModelMissing) as err:
        publish(client, "qwen2.5-coder:7b", tiny_adapter, 1, workdir=tmp_path)
    assert "The Ollama model qwen2.5-coder:7b is not installed: run `ollama pull" in str(err.value)


def test_weights_that_do_not_match_are_all_named(
    new_ollama: FakeOllama, tmp_path: Path
) -> None:
    import gguf
    from rltray.trainer.export import gguf_adapter

    wrong = build_tiny_adapter(tmp_path / "wide", hidden=128, ffn=96)
    with pytest.raises(OllamaError) as err:
        _publish(new_ollama, wrong, 1, tmp_path)
    text = str(err.value)
    assert text.startswith("The adapter was trained on weights that do not match the Ollama model")
    base = new_ollama.blob_path(new_ollama.models["tiny:1m"].model_digest)
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(base))
    every = gguf_adapter.fit_problems(wrong, arch, gguf_adapter.base_shapes(base))
    assert len(every) == 14
    assert "blk.0.attn_q is 64x64 in the base, 128x128 in the adapter" in every
    assert "blk.0.ffn_down is 64x96 in the base, 128x96 in the adapter" in text
    assert "; and 9 more)" in text and text.endswith("trained for.")  # 14 layers, 5 shown
    assert not any("rltray" in n for n in new_ollama.models)


def test_ollama_disk_full(tmp_path: Path, tiny_gguf: Path, tiny_adapter: Path) -> None:
    fake = start_fake(tmp_path / "o", "0.35.0", tiny_gguf, free_bytes=1000)
    try:
        with pytest.raises(DiskFull, match="Ollama's disk is full"):
            _publish(fake, tiny_adapter, 1, tmp_path)
    finally:
        fake.stop()
    assert "tiny-1m-rltray:v1" not in fake.models


def test_our_disk_full_before_merging(
    new_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 0))
    with pytest.raises(DiskFull, match="Not enough free disk space"):
        _publish(new_ollama, tiny_adapter, 1, tmp_path)


def test_new_ollama_without_a_readable_base_gguf_says_where_to_run(
    new_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path
) -> None:
    new_ollama.shown_blobs = Path("/root/.ollama/models/blobs")  # Ollama in a container
    with pytest.raises(OllamaError, match="needs a merged model"):
        _publish(new_ollama, tiny_adapter, 1, tmp_path)


# -- the process the tray runs -------------------------------------------------------------


def test_the_export_process_publishes_and_rolls_back(
    new_ollama: FakeOllama, tiny_adapter: Path, tmp_path: Path
) -> None:
    import subprocess
    import sys

    def run(*args: str) -> tuple[int, dict]:
        proc = subprocess.run(
            [sys.executable, "-m", "rltray.trainer.export", *args],
            capture_output=True, text=True, timeout=120,
        )
        return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])

    code, out = run("publish", "--host", new_ollama.url, "--model", BASE, "--adapter",
                    str(tiny_adapter), "--version", "1", "--workdir", str(tmp_path / "w"),
                    "--keep", "0")
    assert code == 0 and out["ok"] and out["tag"] == "tiny-1m-rltray:v1" and out["path"] == "merged"
    # keep 0 still never deletes the active version
    assert "tiny-1m-rltray:v1" in new_ollama.models
    new_ollama.models.pop("tiny-1m-rltray:v1")  # as if pruned: rollback republishes it
    code, out = run("latest", "--host", new_ollama.url, "--model", BASE, "--version", "1",
                    "--adapter", str(tiny_adapter), "--workdir", str(tmp_path / "w2"))
    assert code == 0 and out["republished"]["tag"] == "tiny-1m-rltray:v1"
    code, out = run("publish", "--host", new_ollama.url, "--model", "nope:1b", "--adapter",
                    str(tiny_adapter), "--version", "2", "--workdir", str(tmp_path / "w"))
    assert code == 1 and out == {
        "ok": False,
        "error": "The Ollama model nope:1b is not installed: run `ollama pull nope:1b` or set "
        "ollama.model to one that `ollama list` shows.",
    }


def test_the_blob_is_found_through_the_manifests_without_a_server(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ollama's own layout on disk: manifests/<host>/<namespace>/<model>/<tag> -> blobs/."""
    import subprocess
    import sys

    root = tmp_path / "models"
    digest = "sha256:" + sha256_file(tiny_gguf)
    (root / "blobs").mkdir(parents=True)
    shutil.copyfile(tiny_gguf, root / "blobs" / digest.replace(":", "-"))
    for parts, name in ((("registry.ollama.ai", "library", "tiny"), "tiny:1m"),
                        (("hf.co", "org", "tiny-gguf"), "hf.co/org/tiny-gguf:1m")):
        folder = root / "manifests" / Path(*parts)
        folder.mkdir(parents=True)
        (folder / "1m").write_text(json.dumps({"schemaVersion": 2, "layers": [
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64},
            {"mediaType": "application/vnd.ollama.image.model", "digest": digest},
        ]}))
        assert blob_from_manifests(name, root) == root / "blobs" / digest.replace(":", "-")
    assert blob_from_manifests("tiny:2m", root) is None
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    proc = subprocess.run(
        [sys.executable, "-m", "rltray.trainer.export", "locate", "--host",
         f"http://127.0.0.1:{_closed_port()}", "--model", "tiny:1m"],
        capture_output=True, text=True, timeout=60,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["via"] == "manifests" and out["gguf"].endswith(digest[7:])
