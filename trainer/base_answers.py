"""The base model's greedy answers, kept between rounds for the capability check.

Why: every round starts with the base model answering the capability check's prompts
greedily (:func:`capability.round_start`), and decoding is token after token, each step
reading every weight. On the versus bench's 60M model that is 11 s of a 51 s round, more
than the round's reference pass (bench/README.md, "Where a bf16 round's wall time goes").
Yet the answers rarely change: the everyday prompts are fixed, the round's own prompts are
the shortest held-out turns of a standing held-out set, and the base model does not train.
So the answers of one round serve the next, and only a set of prompts never answered
before is decoded.

What decides a greedy answer is the key, and anything that changes is a miss, decoded as
before: the model's files (name, size and modification time of each file in its folder:
a re-downloaded or re-converted model is a new one), the backend and its numerics (bf16
autocast and fp32 answers part after a few dozen tokens; the thread count is left out,
since it only reorders sums), the answer length, the stop tokens and the prompts' token
ids (so the chat template too). A file that cannot be read, or holds other prompts, is a
miss. The cache never fails a round: what cannot be written is not kept.

The answers are still the base's own: the gate compares the new adapter's NLL on them
with the base's and the parent's, which the round computes afresh every time.
``RLTRAY_ANSWER_CACHE`` moves the folder (``off`` turns the cache off, as the benches do
for a cold round).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rltray.trainer.gguf_base import private_folder, user_cache_folder

ENV = "RLTRAY_ANSWER_CACHE"

#: Answer sets kept; the least recently used go first. One set is a few kB of token ids.
MAX_FILES = 256

#: File format version: a file of another version is a miss. 2: the prompts are kept as
#: their hash only (the answers are the base's; the user's prompts stay in the data folder).
VERSION = 2


def root() -> Path | None:
    """The cache folder: ``$RLTRAY_ANSWER_CACHE``, else ``base-answers`` beside the GGUF
    bases in the per-user cache folder; None when the variable says ``off``."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in ("off", "0", "no", "false"):
        return None
    if env:
        return Path(env).expanduser()
    import platformdirs

    return user_cache_folder(platformdirs.PlatformDirs("rltray", appauthor=False)) / "base-answers"


def model_fingerprint(folder: Path) -> str:
    """sha256 of the name, size and modification time of every file in ``folder``."""
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file():  # follows the HF cache's links to its blobs
            st = p.stat()
            h.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


class AnswerCache:
    """Greedy answers by prompt set, for one model, backend, numerics, length and stop set."""

    def __init__(self, folder: Path, scope: str) -> None:
        self.folder = folder
        self.scope = scope

    def _file(self, prompts: Sequence[Sequence[int]]) -> Path:
        key = json.dumps([self.scope, [list(map(int, p)) for p in prompts]])
        return self.folder / (hashlib.sha256(key.encode()).hexdigest() + ".json")

    @staticmethod
    def _prompts_hash(prompts: Sequence[Sequence[int]]) -> str:
        """What a file keeps of its prompts: a hash (their token ids decode to the text)."""
        ids = json.dumps([[int(t) for t in p] for p in prompts])
        return hashlib.sha256(ids.encode()).hexdigest()

    def get(self, prompts: Sequence[Sequence[int]]) -> list[list[int]] | None:
        """The answers kept for exactly these prompts, in their order, else None."""
        path = self._file(prompts)
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            if kept.get("v") != VERSION or kept.get("scope") != self.scope:
                return None
            if kept.get("prompts_sha256") != self._prompts_hash(prompts):
                return None
            answers = kept["answers"]
            if len(answers) != len(prompts) or not all(
                isinstance(a, list) and all(isinstance(t, int) for t in a) for a in answers
            ):
                return None
            os.utime(path)  # recently used: pruned last
            return [list(a) for a in answers]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]) -> None:
        """Keep ``answers`` (one per prompt); a folder that cannot be written keeps nothing."""
        body = {
            "v": VERSION, "scope": self.scope,
            "prompts_sha256": self._prompts_hash(prompts),
            "answers": [[int(t) for t in a] for a in answers],
        }  # fmt: skip
        try:
            private_folder(self.folder)  # the folder 0700, its parents never open to writes
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=self.folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(body, fh)
                os.replace(tmp, self._file(prompts))
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            self._prune()
        except OSError:
            return

    def _prune(self) -> None:
        files = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in files[: max(0, len(files) - MAX_FILES)]:
            old.unlink(missing_ok=True)


def for_round(backend: Any, tokens: int, stop: set[int]) -> AnswerCache | None:
    """The cache for this round's base model and greedy settings (None: no cache here)."""
    try:
        folder = root()
        if folder is None:
            return None
        model = model_fingerprint(Path(backend.model_folder()))
    except Exception:  # no folder (an environment without platformdirs, a backend without
        return None  # a model folder, an unreadable one): decode as before
    scope = json.dumps({
        "model": model, "backend": str(getattr(backend, "name", "")),
        "numerics": str(getattr(backend, "numerics", "")), "tokens": int(tokens),
        "stop": sorted(int(s) for s in stop),
    }, sort_keys=True)  # fmt: skip
    return AnswerCache(folder, scope)
