"""Train on the very GGUF that Ollama serves: materialize it once into a cached HF folder.

Why: the user already has the model as a quantized GGUF (an Ollama blob or any
``.gguf``). Downloading the matching Hugging Face weights again costs gigabytes
and may not even match. Transformers' GGUF loader dequantizes the file (and
undoes llama.cpp's q/k permutation); we save the result once as a plain HF
folder — safetensors, config, tokenizer and the chat template from the GGUF —
that both backends load like any other model folder.

The folder is keyed by the file's sha256, so the same blob is never converted
twice and a changed file never reuses a stale folder. An Ollama blob is named
``sha256-<hex>`` by its content already, so its name is the key; any other file
is hashed once and the hash remembered by (path, size, mtime).

Weights are stored as float16 (bfloat16 when the GGUF itself holds bf16
tensors, or for a tensor beyond float16's range): it halves the disk cost against
float32 and keeps 8x more precision than bfloat16, which the torch backend on a CPU
(fp32 compute) sees: on SmolLM2 Q4_1 the weights' relative RMS error to the exact
dequantization is 1.9e-4 (bf16: 1.35e-3) and the logits' KL 2e-6 nats per token
(bf16: 4.7e-5); disk, memory and torch speed are the same (``bench/gguf_dtype.py``).
MLX never computes in float16 (activations of the Gemma family pass its 65504): it
casts such weights to bfloat16 at load (``backends.mlx_setup.no_float16``), where
both stored types give the same KL to exact, 1.1e-3 (bf16 compute rounding).

Cost, once per GGUF (``estimate``): about 2 bytes per parameter on disk (7B:
~15 GB); memory while converting is the GGUF's metadata plus one 1 GB shard,
because tensors are dequantized and written one at a time (measured 1.4-1.6 GB
private on a 0.63B model; about 3 GB estimated for a 7B, see bench/export_gguf.py).
Architectures whose Transformers processor rewrites tensors across each other
(MoE experts, …) take Transformers' whole-model load instead, which holds the
16-bit model (~2 bytes per parameter).

Which converter: Transformers' (torch) where torch and Transformers import, as it
covers more architectures; else :mod:`.gguf_numpy` (gguf + numpy, the llama family),
which the MLX environment on Apple Silicon uses: it has no torch. Both write the
same folder, so the cache holds one whatever made it.

Also here: the pairing check between a Hugging Face folder the user chose and
the Ollama model adapters will be published on (architecture, layers, hidden
size, vocabulary, chat template), reported all at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

CACHE_ENV = "RLTRAY_GGUF_CACHE"
MARKER = "rltray-gguf.json"
_OLLAMA_BLOB = re.compile(r"^sha256-([0-9a-f]{64})$")


class GGUFBaseError(ValueError):
    """The GGUF cannot become a training base; the message is one sentence."""


def cache_root() -> Path:
    """``$RLTRAY_GGUF_CACHE`` or :func:`default_cache_root` for this OS."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:  # a trainer environment built before the export extra carried it
        raise GGUFBaseError(
            "The trainer environment lacks platformdirs, which finds the folder a GGUF base "
            "is converted into: rebuild it with `rltray trainer-env create` (or set "
            f"{CACHE_ENV} to a folder)."
        ) from None
    return default_cache_root(platformdirs.PlatformDirs("rltray", appauthor=False))


def default_cache_root(dirs: Any) -> Path:
    """``gguf-bases`` in the per-user cache folder of ``dirs`` (a platformdirs object),
    never inside the data folder.

    Why: on Windows platformdirs nests the cache in the app's folder
    (``%LOCALAPPDATA%\\rltray\\rltray\\Cache`` without ``appauthor=False``, and still
    ``%LOCALAPPDATA%\\rltray\\Cache`` with it), and ``%LOCALAPPDATA%\\rltray`` is the data
    folder (``app/paths.py``): gigabytes of re-creatable weights would sit among the
    user's ratings (in their backups, in the data folder's size). There the cache
    becomes the data folder's sibling ``rltray-cache``; macOS and Linux keep their own
    cache folders (``~/Library/Caches/rltray``, ``~/.cache/rltray``).
    ``app/cli/doctor`` finds the same folder the same way (a test ties the two).
    """
    return user_cache_folder(dirs) / "gguf-bases"


def user_cache_folder(dirs: Any) -> Path:
    """rltray's per-user cache folder for ``dirs``, never the data folder or inside it
    (see :func:`default_cache_root`); the base models' greedy answers live there too."""
    cache, data = Path(dirs.user_cache_dir), Path(dirs.user_data_dir)
    if cache == data or data in cache.parents:
        cache = data.with_name(f"{data.name}-cache")
    return cache


def is_gguf(path: Path | str) -> bool:
    """A regular file that starts with the GGUF magic (Ollama blobs have no extension)."""
    p = Path(path).expanduser()
    try:
        with open(p, "rb") as fh:
            return p.is_file() and fh.read(4) == b"GGUF"
    except OSError:
        return False


def file_sha256(path: Path, root: Path | None = None) -> str:
    """The file's sha256 (an Ollama blob's name; else remembered by path, size and mtime)."""
    match = _OLLAMA_BLOB.match(path.name)
    if match:
        return match.group(1)
    root = root or cache_root()
    index_file = root / "hashes.json"
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        index = {}
    if key in index:
        return str(index[key])
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    index[key] = digest.hexdigest()
    private_folder(root)
    write_private(index_file, json.dumps(index, indent=1).encode("utf-8"))
    return str(index[key])


def private_folder(folder: Path) -> None:
    """Make ``folder`` 0700 and its missing parents at most 0755 (less the umask); an
    existing folder is left as it is.

    Why not ``mkdir(parents=True)``: it makes every folder 0777 less the umask, so
    under umask 000 others could swap what the cache holds, and under 022 read which
    models the user trains (the paths in hashes.json). The trainer imports nothing of
    the app, so this is its own small copy of ``app/paths.make_folders``.
    """
    missing: list[Path] = []
    step = folder
    while not os.path.lexists(step) and step != step.parent:
        missing.append(step)
        step = step.parent
    made = False
    for step in reversed(missing):
        try:
            os.mkdir(step, 0o700 if step == folder else 0o755)
            made = step == folder
        except FileExistsError:  # made meanwhile by another process: fine if a folder
            if not step.is_dir():
                raise
    if made and os.name == "posix":
        os.chmod(folder, 0o700)


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, 0600, through a temp file no one could have planted
    (``mkstemp``: a fresh random name, created exclusively, never through a link)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_header(path: Path) -> dict[str, Any]:
    """Architecture, parameter count and tensor types of a GGUF (header only, no weights)."""
    import gguf

    reader = gguf.GGUFReader(path)
    fld = reader.fields.get("general.architecture")
    arch = str(fld.contents()) if fld is not None else "unknown"
    types = sorted({t.tensor_type.name for t in reader.tensors})
    return {
        "architecture": arch,
        "parameters": int(sum(int(t.n_elements) for t in reader.tensors)),
        "tensor_types": types,
        "file_bytes": path.stat().st_size,
    }


def estimate(path: Path) -> dict[str, Any]:
    """What materializing costs, for the wizard and `rltray doctor` (bytes)."""
    head = read_header(path)
    params = head["parameters"]
    arch = head["architecture"]
    streamed = arch in _numpy_architectures() or _plain_processor(arch)  # both converters
    return {
        **head,
        "disk_bytes": params * 2,  # fp16/bf16 safetensors
        # metadata + parsing (~1.5 GB measured with a 49k vocabulary) + one shard, or the
        # whole 16-bit model for architectures converted in one piece
        "peak_memory_bytes": int(1.5e9 + (min(2 * params, SHARD_BYTES) if streamed
                                          else 2 * params)),
        "streamed": streamed,
    }


def _plain_processor(arch: str) -> bool:
    """True when Transformers converts this architecture's tensors one by one."""
    try:
        from transformers import modeling_gguf_pytorch_utils as g
    except ImportError:
        return False
    return arch not in g.TENSOR_PROCESSORS


def converter() -> str:
    """``torch`` where torch and Transformers can be imported, else ``numpy``.

    Decided by what is installed, not by the backend: the torch path covers more
    architectures, and an environment without torch (MLX on a Mac) still converts
    the llama family with :mod:`.gguf_numpy`.
    """
    found = all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))
    return "torch" if found else "numpy"


def _numpy_architectures() -> set[str]:
    from rltray.trainer.gguf_numpy import ARCHITECTURES

    return set(ARCHITECTURES)


def supported_architectures() -> set[str]:
    """GGUF architectures this environment's :func:`converter` can turn into an HF folder."""
    if converter() == "numpy":
        return _numpy_architectures()
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return {a.replace("_", "") for a in GGUF_SUPPORTED_ARCHITECTURES} - {"general", "tokenizer"}


def materialize(path: Path | str, cache: Path | None = None) -> Path:
    """The cached HF folder for GGUF ``path``, converting it on first use."""
    path = Path(path).expanduser()
    if not is_gguf(path):
        raise GGUFBaseError(f"{path} is not a GGUF file.")
    root = Path(cache) if cache is not None else cache_root()
    sha = file_sha256(path, root)
    folder = root / sha
    if (folder / MARKER).is_file():
        return folder
    head = read_header(path)
    arch = head["architecture"]
    if arch.replace("_", "") not in supported_architectures():
        raise _unsupported(arch)
    private_folder(root)
    free = shutil.disk_usage(root).free
    if free < head["parameters"] * 2.2:
        raise GGUFBaseError(
            f"Converting {path.name} for training needs about "
            f"{head['parameters'] * 2 / 1e9:.1f} GB in {root} and only {free / 1e9:.1f} GB is "
            "free: free some space or set RLTRAY_GGUF_CACHE to a bigger disk."
        )
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=root))
    try:
        _convert(path, tmp, head)
        (tmp / MARKER).write_text(
            json.dumps(
                {"source": str(path), "sha256": sha, "created": time.time(),
                 "converter": converter(), **head}, indent=2
            ),
            encoding="utf-8",
        )
        try:
            tmp.replace(folder)
        except OSError:
            if not (folder / MARKER).is_file():  # another process won the race: use theirs
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _unsupported(arch: str) -> GGUFBaseError:
    if converter() == "torch":
        cannot = f"Transformers cannot dequantize GGUF models of architecture {arch!r}"
    else:
        family = ", ".join(sorted(_numpy_architectures()))
        cannot = f"Without torch, rltray converts GGUF models of {family}, not {arch!r}"
    return GGUFBaseError(
        f"{cannot}: set training.base_model to the matching Hugging Face weights "
        "(a folder or hub id) instead."
    )


SHARD_BYTES = 1024**3  # safetensors shard size of the streamed conversion
SHARD_ENV = "RLTRAY_GGUF_SHARD_MB"  # smaller shards (benchmarks, tests): less memory, more files


def _shard_limit() -> int:
    return int(os.environ.get(SHARD_ENV) or 0) * 1024**2 or SHARD_BYTES


def _convert(path: Path, out: Path, head: dict[str, Any]) -> None:
    """Tokenizer, config and weights of ``path`` into ``out`` (streamed where we can)."""
    if converter() == "numpy":
        from rltray.trainer import gguf_numpy

        dtype_name = "bfloat16" if "BF16" in head["tensor_types"] else "float16"
        try:
            gguf_numpy.convert(path, out, dtype_name, _shard_limit())
        except gguf_numpy.ConversionError as exc:
            raise GGUFBaseError(f"{path.name} cannot become a training base: {exc}.") from exc
        return
    import torch
    from transformers import AutoTokenizer

    dtype = torch.bfloat16 if "BF16" in head["tensor_types"] else torch.float16
    with tempfile.TemporaryDirectory(dir=out) as link_dir:
        # Transformers wants a folder + file name; an Ollama blob has no .gguf suffix.
        link = gguf_file_in(path, Path(link_dir))
        try:  # weights first, tokenizer after: their metadata never sit in memory together
            if not _convert_streamed(link, out, dtype):
                _convert_whole(link, out, dtype)
            tokenizer = AutoTokenizer.from_pretrained(link_dir, gguf_file=link.name)
        except (ValueError, KeyError, NotImplementedError) as exc:
            if "not supported" in str(exc) or "architecture" in str(exc).lower():
                raise _unsupported(head["architecture"]) from exc
            raise GGUFBaseError(
                f"Transformers could not read {path.name}: {str(exc).splitlines()[0]}"
            ) from exc
    tokenizer.save_pretrained(out)


def gguf_file_in(path: Path, folder: Path) -> Path:
    """``folder/model.gguf`` with the bytes of ``path``: a hard link, else a symlink, else a copy.

    Why: Transformers opens a GGUF as folder + file name and an Ollama blob has no
    ``.gguf`` suffix. A symlink needs admin rights or Developer Mode on Windows
    (WinError 1314), so every Windows conversion failed; a hard link needs neither
    (same volume, which the Ollama folder and the cache usually share), a symlink
    crosses volumes elsewhere, and a copy (the file's size, for the conversion's
    length) always works.
    """
    link = folder / "model.gguf"
    source = path.resolve()
    for make in (os.link, os.symlink):
        try:
            make(source, link)
            return link
        except OSError:
            continue
    shutil.copyfile(source, link)
    return link


def _convert_whole(link: Path, out: Path, dtype: Any) -> None:
    """Transformers' own GGUF load of the whole model, then ``save_pretrained``.

    Holds the dequantized model in memory (~5 bytes per parameter, measured): the
    fallback for architectures whose tensors Transformers rewrites across tensors.
    """
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        str(link.parent), gguf_file=link.name, dtype=dtype, output_loading_info=True,
        **_dense_kwargs(),
    )
    missing = sorted(info.get("missing_keys") or ())
    if missing:  # Transformers would fill them with fresh values: another model than the GGUF
        raise GGUFBaseError(
            f"Transformers found no weights in {link.resolve().name} for {len(missing)} "
            f"tensors ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); "
            "training would start from a different model. Set training.base_model to the "
            "matching Hugging Face weights (a folder or hub id) instead."
        )
    # Transformers >= 5 marks a GGUF-loaded model as quantized even when dequantized;
    # the weights are dense here, so save them as a plain model.
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    _top_level_rope(out / "config.json")


def _convert_streamed(link: Path, out: Path, dtype: Any) -> bool:
    """Transformers' GGUF name mapping and tensor processing, one tensor at a time.

    Why: loading the whole model through ``from_pretrained`` holds every tensor
    dequantized at once (~5 B per parameter: 39 GB for a 7B). Here each tensor is
    dequantized, processed exactly as Transformers' loader does (its
    ``TENSOR_PROCESSORS``, e.g. the llama q/k un-permutation) and written into
    1 GB safetensors shards, so memory stays about one shard. Only for
    architectures whose processor works tensor by tensor (the base one and
    llama's); returns False for the others, which take :func:`_convert_whole`.
    """
    import gguf
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers import modeling_gguf_pytorch_utils as g

    # only the config: the parsed tokenizer (vocabulary, merges) is not needed here
    parsed = {"config": g.load_gguf_checkpoint(str(link), return_tensors=False)["config"]}
    arch = parsed["config"].get("model_type")
    processor_class = g.TENSOR_PROCESSORS.get(arch, g.TensorProcessor)
    if processor_class not in (g.TensorProcessor, getattr(g, "LlamaTensorProcessor", None)):
        return False
    config = AutoConfig.for_model(**parsed["config"])  # what from_pretrained(gguf_file=) builds
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    processor = processor_class(config=parsed["config"])
    mapping = g.get_gguf_hf_weights_map(skeleton, processor)
    wanted = set(skeleton.state_dict())
    tied = {k for k in wanted if k.endswith("lm_head.weight")} if getattr(
        config, "tie_word_embeddings", False) else set()
    limit = _shard_limit()
    reader = gguf.GGUFReader(link)
    shard: dict[str, Any] = {}
    shard_bytes = 0
    weight_map: dict[str, str] = {}
    names: list[str] = []

    def flush() -> None:
        nonlocal shard, shard_bytes
        if shard:
            name = f"model-{len(names) + 1:05d}.safetensors"
            save_file(shard, str(out / name), metadata={"format": "pt"})
            names.append(name)
            weight_map.update({k: name for k in shard})
            shard, shard_bytes = {}, 0

    for tensor in reader.tensors:
        weights = gguf.dequantize(tensor.data, tensor.tensor_type)
        result = processor.process(
            weights=weights, name=tensor.name, tensor_key_mapping=mapping,
            parsed_parameters=parsed,
        )
        if result.name not in mapping:
            continue
        value = _stored(torch.from_numpy(np.copy(result.weights)), dtype)
        shard[mapping[result.name]] = value
        shard_bytes += value.numel() * value.element_size()
        if shard_bytes >= limit:
            flush()
    flush()
    missing = wanted - set(weight_map) - tied
    if missing:  # something this path does not know how to fill: use the whole-model load
        for name in names:
            (out / name).unlink()
        return False
    if len(names) == 1:
        (out / names[0]).rename(out / "model.safetensors")
    else:
        total = sum((out / n).stat().st_size for n in names)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config.dtype = dtype
    config.architectures = [type(skeleton).__name__]
    config.save_pretrained(out)
    _top_level_rope(out / "config.json")
    skeleton.generation_config.save_pretrained(out)
    return True


def _top_level_rope(path: Path) -> None:
    """Write the RoPE base (and scaling) at the config's top level as well.

    Why: Transformers >= 5 saves them only inside ``rope_parameters``; mlx-lm reads
    ``rope_theta`` / ``rope_scaling`` and otherwise uses base 10000. SmolLM2's GGUF
    says 100000, so MLX trained another model than torch and Ollama run (KL 0.065
    nats per token to torch on the same fp32 weights, ``bench/gguf_dtype.py``).
    Transformers reads the pair back as the same ``rope_parameters``.
    """
    config = json.loads(path.read_text(encoding="utf-8"))
    params = config.get("rope_parameters")
    if not isinstance(params, dict) or "rope_theta" not in params:
        return  # none, or per attention type (Gemma 3): left to the model's own keys
    config.setdefault("rope_theta", params["rope_theta"])
    if params.get("rope_type", "default") != "default":
        config.setdefault("rope_scaling", {k: v for k, v in params.items() if k != "rope_theta"})
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _stored(value: Any, dtype: Any) -> Any:
    """``value`` in ``dtype``, or in bfloat16 where float16 would turn it into inf."""
    import torch

    out = value.to(dtype)
    if dtype == torch.float16 and not bool(torch.isfinite(out).all()):
        return value.to(torch.bfloat16)
    return out


def _dense_kwargs() -> dict[str, Any]:
    """Ask for dense weights: Transformers >= 5 keeps GGUF blocks packed unless told not to."""
    try:
        from transformers import GgufConfig
    except ImportError:  # 4.x always dequantizes
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


# -- pairing: an HF folder against the Ollama model adapters are published on ------------

_ARCH_ALIASES = {"mistral": "llama", "qwen2moe": "qwen2moe", "qwen3moe": "qwen3moe"}


def _norm_arch(name: str) -> str:
    key = str(name).lower().replace("_", "")
    return _ARCH_ALIASES.get(key, key)


def _norm_template(text: str | None) -> str:
    return " ".join(str(text or "").split())


def pairing_problems(
    hf_folder: Path, model_info: dict[str, Any], gguf_template: str | None = None
) -> list[str]:
    """Every difference that makes ``hf_folder`` the wrong weights for the Ollama model.

    ``model_info`` is ``/api/show``'s ``model_info``; ``gguf_template`` the Jinja chat
    template in the model's GGUF (``tokenizer.chat_template``), when readable.
    """
    config = json.loads((Path(hf_folder) / "config.json").read_text(encoding="utf-8"))
    arch = str(model_info.get("general.architecture") or "")
    problems = []
    if _norm_arch(config.get("model_type", "")) != _norm_arch(arch):
        problems.append(f"architecture {config.get('model_type')!r} vs Ollama's {arch!r}")
    for ours, theirs, label in (
        ("num_hidden_layers", "block_count", "layers"),
        ("hidden_size", "embedding_length", "hidden size"),
        ("vocab_size", "vocab_size", "vocabulary"),
    ):
        want = model_info.get(f"{arch}.{theirs}")
        got = config.get(ours)
        if want is not None and got is not None and int(want) != int(got):
            problems.append(f"{label} {got} vs Ollama's {want}")
    template = gguf_template or model_info.get("tokenizer.chat_template")
    if template:
        ours_t = _hf_chat_template(Path(hf_folder))
        if ours_t is not None and _norm_template(ours_t) != _norm_template(template):
            problems.append("the chat template differs")
    return problems


def _hf_chat_template(folder: Path) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        value = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
        return value if isinstance(value, str) else None
    return None


def gguf_chat_template(path: Path) -> str | None:
    import gguf

    fld = gguf.GGUFReader(path).fields.get("tokenizer.chat_template")
    return str(fld.contents()) if fld is not None else None
