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

Notes after a rating: a bad rating with a comment leaves one line for the session's
next prompt (``note_after_rating``; the hook's ``/rl bad …`` writes it, the service calls
it for a Bad click with a comment). The prompt hook takes it (``take_note``: read, then
deleted, so it is said once) and hands it to the agent. Notes live beside the hook's
per-session state, ``spool/sessions/<agent>-<16 hex of the session's SHA-256>.note``.
A note's first line names the turn it is about (``turn:<16 hex of the turn key's SHA-256>``,
never said to the agent): withdrawing, flipping or deleting that turn's rating takes its
note back even after the session captured a later turn, and a rating of another, older
turn leaves a note about the newest one alone (``drop_note``).
"""

import os

FOLDER = "lessons"
GLOBAL = "global"
MAX_CHARS = 4000  # the hard cap the hook applies; the service aims at BUDGET_CHARS
BUDGET_CHARS = 2000


NOTE_CHARS = 500  # a note is one line: the comment is cut here
#: The longest lesson in the user's words (the store refuses more, the text tells it whole;
#: the hook says so to a `/rl lesson` that is longer instead of "saved")
MAX_LESSON_CHARS = 500
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _sha16(text):
    try:
        from _sha256 import sha256  # the C module directly: hashlib costs an import chain
    except ImportError:
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def key(cwd):
    """The file name (without ``.md``) for sessions in folder ``cwd``."""
    return _sha16(os.path.normcase(os.path.abspath(cwd)))


def agent_folder(home, agent):
    return os.path.join(home, FOLDER, agent)


def is_on(home, agent):
    """Whether lessons are on for ``agent`` (the service keeps its folder only then)."""
    return os.path.isdir(agent_folder(home, agent))


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


# -- the note after a bad rating ----------------------------------------------------------


def note_path(home, agent, session):
    return os.path.join(home, "spool", "sessions", f"{agent}-{_sha16(session)}.note")


def rating_note(comment, score=None):
    """The line the agent gets: that the user rated its previous answer bad, and why."""
    said = "bad" if score is None else f"{score} out of 5 (bad)"
    why = " ".join(comment.split())
    if len(why) > NOTE_CHARS:
        why = why[: NOTE_CHARS - 1] + "…"
    return f"The user rated your previous answer {said} in rltray and said why: {why}"


def note_after_rating(home, agent, session, comment, score=None, turn=None):
    """Leave ``rating_note`` for the next prompt of ``agent``'s ``session`` (replacing any
    waiting one), naming ``turn`` (the rated turn's key in its session) on its first line;
    nothing when there is no comment. Written whole (temp + rename, 0600)."""
    if not comment or not comment.strip():
        return
    path = note_path(home, agent, session)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW, 0o600)
    try:
        head = f"{_TURN}{_sha16(turn)}\n" if turn is not None else ""
        os.write(fd, (head + rating_note(comment, score)).encode("utf-8", "replace"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def note_names(home, agent, session, turn):
    """Whether the waiting note of ``session`` names ``turn`` as the one it is about (False
    when no note waits, and for a note an older rltray wrote, which names none)."""
    data = _read_note(note_path(home, agent, session))
    return data is not None and _named(data) == _sha16(turn)


def drop_note(home, agent, session, turn=None):
    """The user took the bad rating back (undo, rated the answer good, deleted it): no note.

    ``turn``: only a note about that turn is dropped (or one an older rltray wrote, which
    names none and so may be about it), so taking back the rating of an older answer
    leaves the note about the newest one; None: any note (a judgement on the session's
    newest answer supersedes whatever note waits)."""
    path = note_path(home, agent, session)
    if turn is not None:
        data = _read_note(path)
        if data is None or _named(data) not in (None, _sha16(turn)):
            return
    try:  # noqa: SIM105 (contextlib costs import time in the hook)
        os.unlink(path)
    except OSError:
        pass


_TURN = "turn:"  # a note's first line: the turn it is about (``note_after_rating``)


def _named(data):
    """The 16 hex digits of the turn a note's bytes name, or None (an older note)."""
    if not data.startswith(_TURN.encode("ascii")):
        return None
    return data.split(b"\n", 1)[0][len(_TURN):].decode("ascii", "replace")


def _read_note(path):
    """A note's bytes (never through a link, never more than a note's size), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, NOTE_CHARS * 4 + 200)
    finally:
        os.close(fd)


def take_note(home, agent, session):
    """The note waiting for this session, deleted as it is read (said once); None if none.

    Never through a link, never more than a note's size; a note two prompts raced for
    goes to the one whose delete succeeded. The line naming its turn is not said.
    """
    path = note_path(home, agent, session)
    data = _read_note(path)
    if data is None:
        return None
    try:
        os.unlink(path)
    except OSError:
        return None
    if _named(data) is not None:
        data = data.partition(b"\n")[2]
    return " ".join(data.decode("utf-8", "replace").split()) or None
