"""A GGUF base converts where torch is absent (issue 23 item 2).

On Apple Silicon the MLX trainer environment has no torch, and Transformers' GGUF
reader refuses to run without it, so a GGUF base (the model Ollama serves) failed
every round. Here the conversion runs in a child process where torch cannot be
imported, and its folder is compared with the torch path's folder for the same
file: the same weights bit for bit, the same tokenizer, the same configuration,
and the same logits under Transformers and mlx-lm.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'rltray[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'rltray[mlx]')")
torch = pytest.importorskip("torch")

from rltray.trainer import gguf_base, gguf_numpy  # noqa: E402

from tests.support.notorch import run_without  # noqa: E402
from tests.support.tinygguf import build_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.ml

IDS = [[0, 5, 9, 13, 17, 21, 40, 77, 3, 2, 100, 64]]


def materialize_without_torch(gguf: Path, cache: Path) -> Path:
    """``gguf_base.materialize`` in a child that cannot import torch; the folder it made."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from rltray.trainer import gguf_base\n"
        f"folder = gguf_base.materialize(Path({str(gguf)!r}), cache=Path({str(cache)!r}))\n"
        "print(json.dumps({'folder': str(folder), 'converter': gguf_base.converter(),\n"
        "                  'torch_loaded': 'torch' in sys.modules}))\n"
    )
    done = run_without(code)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["converter"] == "numpy" and said["torch_loaded"] is False
    return Path(said["folder"])


def weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    out: dict[str, np.ndarray] = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def transformers_logits(folder: Path) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS)).logits.numpy()


def mlx_logits(folder: Path) -> np.ndarray:
    from mlx_lm.utils import load_model

    model, _ = load_model(folder)
    model.apply(lambda x: x.astype(mx.float32))  # compare the models, not the roundings
    return np.array(model(mx.array(IDS)))


def assert_same_folder(ours: Path, theirs: Path) -> None:
    """The torch-free folder holds what the torch path's holds."""
    a, b = weights(ours), weights(theirs)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        np.testing.assert_array_equal(a[name].view(np.uint16), b[name].view(np.uint16),
                                      err_msg=name)
    for name in ("tokenizer.json", "chat_template.jinja"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    mine = json.loads((ours / "config.json").read_text())
    ref = json.loads((theirs / "config.json").read_text())
    assert {k: ref.get(k) for k in mine} == mine


def assert_same_logits(ours: Path, theirs: Path, mlx_tol: float) -> None:
    want = transformers_logits(theirs)
    np.testing.assert_array_equal(transformers_logits(ours), want)
    got = mlx_logits(ours)
    assert np.abs(got - want).max() < mlx_tol * max(1.0, float(np.abs(want).max()))


#: Transformers' GGUF config for qwen3 leaves head_dim at Qwen3's 128 (every real Qwen3
#: has it), so the tiny Qwen3 here has heads of 128 too.
SIZES = {"llama": {}, "qwen2": {}, "qwen3": {"hidden": 256, "heads": 2, "kv_heads": 1}}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_a_tiny_gguf_converts_without_torch_to_the_torch_paths_folder(
        arch: str, tmp_path: Path) -> None:
    gguf = build_tiny_gguf(tmp_path / f"{arch}.gguf", arch=arch, hf_tokenizer=True,
                           **SIZES[arch])
    ours = materialize_without_torch(gguf, tmp_path / "numpy")
    theirs = gguf_base.materialize(gguf, cache=tmp_path / "torch")
    assert json.loads((ours / gguf_base.MARKER).read_text())["converter"] == "numpy"
    assert json.loads((theirs / gguf_base.MARKER).read_text())["converter"] == "torch"
    assert_same_folder(ours, theirs)
    assert_same_logits(ours, theirs, mlx_tol=1e-4)


@pytest.mark.slow
def test_smollm2s_gguf_converts_without_torch_to_the_torch_paths_folder(
        smollm2_gguf: Path, tmp_path: Path) -> None:
    ours = materialize_without_torch(smollm2_gguf, tmp_path / "numpy")
    theirs = gguf_base.materialize(smollm2_gguf, cache=tmp_path / "torch")
    assert_same_folder(ours, theirs)
    assert_same_logits(ours, theirs, mlx_tol=1e-3)
    from transformers import AutoTokenizer

    chat = [{"role": "user", "content": "Fix the off-by-one in `range(len(xs) + 1)`."}]
    a, b = AutoTokenizer.from_pretrained(ours), AutoTokenizer.from_pretrained(theirs)
    assert a.apply_chat_template(chat, add_generation_prompt=True) == \
        b.apply_chat_template(chat, add_generation_prompt=True)


def test_without_torch_an_architecture_outside_the_llama_family_is_one_sentence(
        tmp_path: Path) -> None:
    import gguf as gguf_lib

    path = tmp_path / "phi.gguf"
    w = gguf_lib.GGUFWriter(path, "phi3")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    code = (
        "from pathlib import Path\n"
        "from rltray.trainer import gguf_base\n"
        "try:\n"
        f"    gguf_base.materialize(Path({str(path)!r}), cache=Path({str(tmp_path / 'c')!r}))\n"
        "except gguf_base.GGUFBaseError as exc:\n"
        "    print(exc)\n"
    )
    done = run_without(code)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout.strip().splitlines()[-1]
    assert "Without torch" in said and "'phi3'" in said and "training.base_model" in said


def test_a_gguf_missing_a_weight_is_refused_not_left_at_a_fresh_value(tmp_path: Path) -> None:
    """As on the torch path (acbeb4c): a weight the file lacks would be initialised
    afresh by the loader, and training would start from another model."""
    holed = build_tiny_gguf(tmp_path / "holed.gguf", hf_tokenizer=True,
                            leave_out={"blk.1.ffn_norm.weight"})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(gguf_numpy.ConversionError, match="post_attention_layernorm"):
        gguf_numpy.convert(holed, out, "float16", 1 << 30)
    assert not list(out.glob("*.safetensors"))


def test_a_weight_beyond_float16_is_stored_in_bfloat16_rounded_as_torch_rounds() -> None:
    values = np.array([1e5, -3.0e38, 1.0 + 2**-9, 1.0 + 3 * 2**-9, 0.1], np.float32)
    code, data = gguf_numpy.stored(values, "float16")
    assert code == "BF16"
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy()
    np.testing.assert_array_equal(data.view(np.int16), want)
    code, data = gguf_numpy.stored(values[2:], "float16")
    assert code == "F16" and data.dtype == np.float16
