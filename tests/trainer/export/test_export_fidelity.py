"""The publish step's llama.cpp check: a merged file without the adapter's shift is refused.

Issue 20 item 3. A trained-size adapter (median |delta| 1e-4, every 3rd block) on
SmolLM2 with those blocks re-written as Q8_0: merged the way it was before the fix
(re-quantized onto the base's own Q8_0 grid) the file behaves like the base; merged
now it carries the adapter.
llama.cpp (llama-cpp-python) scores the held-out chats of
``rltray.trainer.export.fidelity`` with each file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.exportkit import merge_as_before, rewrite_base, trained_size_adapter

pytestmark = pytest.mark.slow

llama_cpp = pytest.importorskip(
    "llama_cpp",
    reason="needs llama-cpp-python (built from source by `make test`; "
    "pip install llama-cpp-python==0.3.36)",
)


@pytest.fixture(scope="module")
def q8_case(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("fidelity")
    base = rewrite_base(smollm2_gguf, work / "q8_0.gguf", "Q8_0", every=3)
    adapter = trained_size_adapter(base, work / "v0001", 1e-4, every=3)
    return work, base, adapter


def test_the_check_tells_a_rounded_away_merge_from_a_faithful_one(q8_case) -> None:
    from rltray.trainer.export import fidelity, merge

    work, base, adapter = q8_case
    with merge_as_before():
        old = merge.merge(base, adapter, work / "old.gguf", out_type="q8_0")
    new = merge.merge(base, adapter, work / "new.gguf", out_type="q8_0")
    rounded = fidelity.check_served(base, adapter, old.out, old, work)
    faithful = fidelity.check_served(base, adapter, new.out, new, work)
    assert rounded.skipped is None and faithful.skipped is None
    assert not rounded.ok and rounded.delivered_min is not None and rounded.delivered_min < 0.3
    assert "keeps only" in rounded.reason()
    assert faithful.ok, faithful
    assert faithful.share is not None and faithful.share > 0.8
    assert faithful.amplification is not None and faithful.amplification > 10


def test_the_check_sees_a_merge_that_puts_the_delta_on_other_tensors(
    q8_case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge-only fault (here: the delta's rows in reverse order) is caught in
    llama.cpp even though the weight-space figures look perfect."""
    from rltray.trainer.export import fidelity, merge

    work, base, adapter = q8_case
    right = merge._base_and_delta

    def wrong(t, pair, scale):
        weights, delta = right(t, pair, scale)
        return weights, np.ascontiguousarray(delta[::-1])

    monkeypatch.setattr(merge, "_base_and_delta", wrong)
    report = merge.merge(base, adapter, work / "wrong.gguf", out_type="q8_0")
    check = fidelity.check_served(base, adapter, report.out, report, work)
    assert not check.ok, check


def test_publish_refuses_a_merged_model_llamacpp_finds_without_the_adapter(
    q8_case, tmp_path: Path
) -> None:
    from rltray.trainer.export.ollama_client import Ollama
    from rltray.trainer.export.ollama_errors import NotServedFaithfully
    from rltray.trainer.export.ollama_publish import publish

    from tests.support.exportkit import BASE, start_fake

    _, base, adapter = q8_case
    fake = start_fake(tmp_path / "ollama", "0.35.0", base)
    try:
        with Ollama(fake.url, timeout=60) as client:
            with merge_as_before(), pytest.raises(NotServedFaithfully, match="keeps only"):
                publish(client, BASE, adapter, 1, workdir=tmp_path / "w1")
            assert "tiny-1m-rltray:v1" not in fake.models
            pub = publish(client, BASE, adapter, 2, workdir=tmp_path / "w2")
    finally:
        fake.stop()
    assert pub.served is not None and pub.served["share"] > 0.8
    assert pub.delivered is not None and pub.delivered["min"] >= 0.8
