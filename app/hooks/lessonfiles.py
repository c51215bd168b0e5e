"""The lesson files: what an agent is told at session start; the service writes, the hook reads.

Why files: the hook program runs inside the agent's turn with a 30 ms budget and
imports nothing beyond the standard library, so it cannot group ratings or ask the
database. The service does that whenever ratings or lessons change and leaves the
final text here, one file per agent and project folder; the hook only reads one
small file. This module is that contract, so both sides agree on names and caps
(stdlib only, like the rest of the hook program; nothing at import beyond ``os``).

Layout under rltray's data folder::

    lessons/<agent>/<key>.md    the exact text for sessions started in that folder
    lessons/<agent>/global.md   the text for any other folder
    (no lessons/<agent>/ folder: lessons are off for that agent)

``key`` is the first 16 hex digits of the SHA-256 of the folder's absolute,
case-normalised path. Every file is written whole (temp + rename, 0600); the hook
cuts whatever it reads to ``MAX_CHARS``, so a file written by hand cannot flood the
agent's context.
"""

import os

FOLDER = "lessons"
GLOBAL = "global"
MAX_CHARS = 4000  # the hard cap the hook applies; the service aims at BUDGET_CHARS
BUDGET_CHARS = 2000


def key(cwd):
    """The file name (without ``.md``) for sessions in folder ``cwd``."""
    try:
        from _sha256 import sha256  # the C module directly: hashlib costs an import chain
    except ImportError:
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256
    norm = os.path.normcase(os.path.abspath(cwd))
    return sha256(norm.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def agent_folder(home, agent):
    return os.path.join(home, FOLDER, agent)


def read(home, agent, cwd):
    """The lessons text for a session of ``agent`` in ``cwd`` (None: off, or nothing to say).

    The project's own file first, else the global one; never raises (a lesson is
    never worth failing the agent's session start).
    """
    folder = agent_folder(home, agent)
    names = ([key(cwd) + ".md"] if cwd else []) + [GLOBAL + ".md"]
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as fh:
                text = fh.read(MAX_CHARS * 4).decode("utf-8", "replace").strip()
        except OSError:
            continue
        return text[:MAX_CHARS] or None
    return None


def write_all(home, agent, texts):
    """Make ``lessons/<agent>/`` hold exactly ``texts`` ({key or GLOBAL: text}).

    Each file is replaced whole; files of keys no longer given are removed, so a
    project whose lessons were all muted stops getting them.
    """
    folder = agent_folder(home, agent)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    wanted = {f"{k}.md": t for k, t in texts.items() if t and t.strip()}
    for name, text in wanted.items():
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text.strip()[:MAX_CHARS] + "\n")
        os.replace(tmp, os.path.join(folder, name))
    for name in os.listdir(folder):
        if name.endswith(".md") and name not in wanted:
            os.unlink(os.path.join(folder, name))


def clear(home, agent):
    """Lessons off for ``agent``: its folder goes, so the hook finds nothing to inject."""
    folder = agent_folder(home, agent)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)
