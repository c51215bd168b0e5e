"""Ollama's models and their GGUF files: from the server's answers, or from Ollama's own
manifest files when the server is down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rltray.web import ollama_models

pytest.importorskip("gguf", reason="needs the gguf package (test extras) to write GGUFs")

from tests.support.tinygguf import build_tiny_gguf


def write_ollama_model(root: Path, name: str, tag: str = "latest", *, namespace: str = "library",
                       host: str = "registry.ollama.ai", seed: int = 0) -> Path:  # fmt: skip
    """A model as `ollama pull` leaves it: a blob named by its digest and a manifest."""
    import hashlib

    (root / "blobs").mkdir(parents=True, exist_ok=True)
    tmp = build_tiny_gguf(root / "tmp.gguf", seed=seed)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    blob = root / "blobs" / f"sha256-{digest}"
    tmp.replace(blob)
    manifest = root / "manifests" / host / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blob


def test_models_from_the_manifests_when_ollama_is_down(tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    blob = write_ollama_model(root, "tiny")
    write_ollama_model(root, "mine", "v2", namespace="me", seed=1)
    listed = ollama_models.list_models("http://127.0.0.1:9", {"OLLAMA_MODELS": str(root)})
    assert listed["running"] is False and listed["source"] == "manifests"
    assert "2 of its models found in its files" in listed["error"]
    by_name = {m["name"]: m for m in listed["models"]}
    assert set(by_name) == {"tiny:latest", "me/mine:v2"}
    tiny = by_name["tiny:latest"]
    assert tiny["blob"] == str(blob) and tiny["blob_problem"] is None
    assert (tiny["architecture"], tiny["layers"], tiny["hidden_size"]) == ("llama", 2, 64)


def test_a_manifest_whose_blob_is_gone_says_so(tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    write_ollama_model(root, "tiny").unlink()
    (only,) = ollama_models.from_manifests(root)
    assert only["blob_problem"].endswith("is not on this machine.")


def test_the_blob_from_the_servers_modelfile() -> None:
    show = {
        "model_info": {"general.architecture": "qwen2", "qwen2.block_count": 24},
        "modelfile": "# Modelfile\nFROM /nowhere/blobs/sha256-abc\nTEMPLATE x\n",
    }
    got = ollama_models.from_show(show)
    assert got["blob"] == "/nowhere/blobs/sha256-abc" and got["layers"] == 24
    assert "not on this machine" in got["blob_problem"]
    named = ollama_models.from_show({"modelfile": "FROM qwen2.5:7b\n"})
    assert named["blob"] is None and "did not say where" in named["blob_problem"]


def test_names_as_ollama_prints_them() -> None:
    name = ollama_models.display_name
    assert name("registry.ollama.ai", "library", "qwen2.5", "7b") == "qwen2.5:7b"
    assert ollama_models.display_name("registry.ollama.ai", "me", "m", "t") == "me/m:t"
    assert ollama_models.display_name("hf.co", "org", "m", "t") == "hf.co/org/m:t"
