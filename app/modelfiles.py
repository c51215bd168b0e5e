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
import os
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
_MAX_NESTING = 2  # arrays of arrays at most (llama.cpp's own reader takes no nesting at all)


class ModelFileError(ValueError):
    """The file is not a readable model file; the message is one sentence."""


def is_gguf(path: Path) -> bool:
    """A regular file that starts with the GGUF magic (Ollama's blobs have no extension)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


class _Header:
    """A GGUF header read front to back, never past the file's end nor nested too deep.

    Counts and lengths in a header are the file's word: one crafted file (an array of
    arrays 5000 deep, an array of 2**62 numbers) made the reader recurse past Python's
    limit or seek past 2**63 (review2-sec gguf_bomb). Each skip is checked against the
    bytes left, and arrays nest at most ``_MAX_NESTING`` deep.
    """

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.size = os.fstat(fh.fileno()).st_size

    def read(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.fh.read(size)
        if len(data) != size:
            raise ModelFileError("the file ends inside its header")
        return struct.unpack(fmt, data)[0]

    def skip(self, count: int) -> None:
        if count > self.size - self.fh.tell():
            raise ModelFileError("the file ends inside its header")
        self.fh.seek(count, 1)

    def string(self, keep: bool = True) -> str:
        length = self.read("<Q")
        if length > _MAX_HEADER:
            raise ModelFileError("a header string is implausibly long")
        if not keep:
            self.skip(length)
            return ""
        data = self.fh.read(length)
        if len(data) != length:
            raise ModelFileError("the file ends inside its header")
        return data.decode("utf-8", "replace")

    def value(self, kind: int, keep: bool, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.read(_SCALARS[kind])
        if kind == _STRING:
            return self.string(keep)
        if kind == _ARRAY:
            if depth >= _MAX_NESTING:
                raise ModelFileError("a header array nests implausibly deep")
            inner, count = self.read("<I"), self.read("<Q")
            if inner in _SCALARS:
                self.skip(struct.calcsize(_SCALARS[inner]) * count)
            else:
                for _ in range(count):  # each one reads at least 8 bytes: bounded by the file
                    self.value(inner, False, depth + 1)
            return count  # arrays are only ever counted here (the token list's length)
        raise ModelFileError(f"unknown GGUF value type {kind}")


def gguf_header(path: Path) -> dict[str, Any]:
    """Architecture, layers, hidden size, vocabulary and exact parameter count of a GGUF.

    Raises ModelFileError, one sentence, and nothing else: whatever the file holds."""
    try:
        with open(path, "rb", buffering=1 << 16) as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise ModelFileError(f"{path} is not a GGUF file")
            head = _Header(fh)
            version = head.read("<I")
            count_fmt = "<I" if version == 1 else "<Q"
            n_tensors, n_kv = head.read(count_fmt), head.read(count_fmt)
            keys: dict[str, Any] = {}
            for _ in range(n_kv):
                key = head.string()
                kind = head.read("<I")
                wanted = key in _KEEP or key.endswith(_ARCH_KEYS) or key == "tokenizer.ggml.tokens"
                keys[key] = head.value(kind, wanted)
            params = 0
            for _ in range(n_tensors):
                head.string(keep=False)
                dims = [head.read("<Q") for _ in range(head.read("<I"))]
                head.skip(12)  # type (uint32) and offset (uint64)
                params += math.prod(dims)
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read ({exc.strerror or exc})") from exc
    except ModelFileError:
        raise
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise ModelFileError(
            f"{path} is not a GGUF file rltray can read ({type(exc).__name__})"
        ) from None
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
        except (OSError, ValueError, struct.error, RecursionError):  # JSON nested 10**5 deep
            return None
        if not isinstance(header, dict):
            return None
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict):
                shape = entry.get("shape") or []
                if not isinstance(shape, list) or not all(
                    type(n) is int and n >= 0 for n in shape
                ):
                    return None
                total += math.prod(shape)
        found = True
    return total if found else None
