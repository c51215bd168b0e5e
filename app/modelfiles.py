"""What a model file says about its shape, read from its header without loading weights.

Why our own reader: the settings app runs in the tray's process, which never imports
numpy, torch or the ``gguf`` package (that reader memory-maps the whole file and
builds numpy views of every tensor). The wizard needs a handful of header keys and
the exact parameter count, which both formats keep at the front of the file:

* GGUF: magic, version, tensor and key counts, the key/value table, then one info
  record per tensor (name, dimensions, type, offset). The parameter count is the sum
  of the tensors' element counts, so a tied embedding counts once (the file holds it
  once), which a shape formula gets wrong.
* safetensors: an 8-byte length, then a JSON header with every tensor's shape.

Both readers stop at the end of the header; a 4 GB GGUF costs a few hundred
kilobytes of reading (its token list), well under a second.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import IO, Any

GGUF_MAGIC = b"GGUF"
# value types of the GGUF key/value table (llama.cpp's gguf.h, gguf_type)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9
_KEEP = ("general.architecture", "general.name", "general.file_type", "tokenizer.ggml.model")
_ARCH_KEYS = ("block_count", "embedding_length", "vocab_size", "context_length")
_MAX_HEADER = 1 << 27  # a header bigger than 128 MiB is not a model header


class ModelFileError(ValueError):
    """The file is not a readable model file; the message is one sentence."""


def is_gguf(path: Path) -> bool:
    """A regular file that starts with the GGUF magic (Ollama's blobs have no extension)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _read(fh: IO[bytes], fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = fh.read(size)
    if len(data) != size:
        raise ModelFileError("the file ends inside its header")
    return struct.unpack(fmt, data)[0]


def _string(fh: IO[bytes], keep: bool = True) -> str:
    length = _read(fh, "<Q")
    if length > _MAX_HEADER:
        raise ModelFileError("a header string is implausibly long")
    if not keep:
        fh.seek(length, 1)
        return ""
    return fh.read(length).decode("utf-8", "replace")


def _value(fh: IO[bytes], kind: int, keep: bool) -> Any:
    if kind in _SCALARS:
        return _read(fh, _SCALARS[kind])
    if kind == _STRING:
        return _string(fh, keep)
    if kind == _ARRAY:
        inner, count = _read(fh, "<I"), _read(fh, "<Q")
        if inner in _SCALARS and inner != _ARRAY:
            fh.seek(struct.calcsize(_SCALARS[inner]) * count, 1)
        else:
            for _ in range(count):
                _value(fh, inner, False)
        return count  # arrays are only ever counted here (the token list's length)
    raise ModelFileError(f"unknown GGUF value type {kind}")


def gguf_header(path: Path) -> dict[str, Any]:
    """Architecture, layers, hidden size, vocabulary and exact parameter count of a GGUF."""
    try:
        with open(path, "rb", buffering=1 << 16) as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise ModelFileError(f"{path} is not a GGUF file")
            version = _read(fh, "<I")
            count_fmt = "<I" if version == 1 else "<Q"
            n_tensors, n_kv = _read(fh, count_fmt), _read(fh, count_fmt)
            keys: dict[str, Any] = {}
            for _ in range(n_kv):
                key = _string(fh)
                kind = _read(fh, "<I")
                wanted = key in _KEEP or key.endswith(_ARCH_KEYS) or key == "tokenizer.ggml.tokens"
                keys[key] = _value(fh, kind, wanted)
            params = 0
            for _ in range(n_tensors):
                _string(fh, keep=False)
                dims = [_read(fh, "<Q") for _ in range(_read(fh, "<I"))]
                fh.seek(12, 1)  # type (uint32) and offset (uint64)
                params += math.prod(dims)
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read ({exc.strerror or exc})") from exc
    arch = str(keys.get("general.architecture") or "")
    vocab = keys.get(f"{arch}.vocab_size") or keys.get("tokenizer.ggml.tokens")
    return {
        "architecture": arch or None,
        "name": keys.get("general.name"),
        "layers": keys.get(f"{arch}.block_count"),
        "hidden_size": keys.get(f"{arch}.embedding_length"),
        "vocab_size": vocab,
        "params": params,
        "version": version,
    }


def safetensors_params(folder: Path) -> int | None:
    """The exact parameter count of a folder's ``*.safetensors`` files (None without any)."""
    total, found = 0, False
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with open(file, "rb") as fh:
                size = struct.unpack("<Q", fh.read(8))[0]
                if size > _MAX_HEADER:
                    return None
                header = json.loads(fh.read(size))
        except (OSError, ValueError, struct.error):
            return None
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict):
                total += math.prod(entry.get("shape") or [])
        found = True
    return total if found else None
