"""A suggested rewording of one lesson by the user's own local model, through Ollama.

Why it exists: a lesson is told in the words of one of its comments (``book``'s
centre), which can be clumsy when the user said one thing five ways. The user's
local model may offer one sentence for the whole group; it is only ever a
suggestion, shown to the user, and saved only when they accept it (through the
ordinary ``edit`` intent). So nothing here writes anything.

Why this shape: only one group's own comments (the user's words, with how often
each was rated bad and good) leave rltray, to the model the user already runs
(``ollama.model`` at ``ollama.host``, or one named for this call), through
Ollama's ``/api/generate`` with ``"stream": false`` so the answer is one JSON
object. The standard library's urllib is enough (as ``web/ollama_models.py``):
the tray process never loads the trainer's packages for it. Every way it can go
wrong (no model, Ollama down or slow, a refusal, an empty or rambling answer)
is one sentence, a ``UserError``.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from rltray.app.errors import ExitCode, UserError
from rltray.app.lessons.book import CENTRE_FROM, Lesson

#: A local model on a laptop CPU can take a while for one sentence; longer is a hang.
TIMEOUT_S = 60.0
#: A suggestion longer than this is not "one short sentence" (the store allows 500).
MAX_CHARS = 200
#: Low: the model is to reword what the user said, not to come up with something of its own.
TEMPERATURE = 0.2
#: Each comment is sent cut to this many characters: the gist, not a pasted log.
COMMENT_CHARS = 300
INSTRUCTION = (
    "Below are comments one user wrote when rating a coding assistant's answers; they all "
    "say one thing. Rewrite them into one short sentence in the user's own voice that "
    "keeps their meaning. Add no new claims, facts or advice. Answer with that sentence "
    f"alone, at most {MAX_CHARS} characters, without quotes."
)
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Suggestion:
    """What the model proposes for a lesson; the lesson is unchanged until the user accepts."""

    key: str
    text: str
    model: str


def comments(lesson: Lesson) -> list[tuple[str, int, int]]:
    """The group's distinct comments, newest last, each with (bad, good) ratings behind it.

    Only the newest ``CENTRE_FROM`` distinct ones, as ``book`` picks the words from, so
    an old group's prompt stays short.
    """
    counts: dict[str, list[int]] = {}
    for e in sorted(lesson.evidence, key=lambda e: e.rated_at):
        said = " ".join((e.comment or "").split())
        if not said:
            continue
        bad_good = counts.pop(said, [0, 0])  # re-inserted: the newest use sets the order
        bad_good[0 if e.value < 0 else 1] += 1
        counts[said] = bad_good
    return [(said, bad, good) for said, (bad, good) in list(counts.items())[-CENTRE_FROM:]]


def prompt(lesson: Lesson) -> str:
    """The instruction and the group's comments with their counts: all the model is sent."""
    said = comments(lesson)
    if not said:
        what = "your own note" if lesson.user_added else f"the tag {lesson.tag or lesson.key}"
        raise UserError(
            f"Lesson {lesson.key} is {what}, with no comments to reword; edit it yourself."
        )
    bad, good = lesson.counts()
    lines = [INSTRUCTION, "", f"Comments (rated bad {bad} times and good {good} times in all):"]
    for text, b, g in said:
        short = text if len(text) <= COMMENT_CHARS else text[: COMMENT_CHARS - 1] + "…"
        tally = ", ".join(f"{word} {n}" for word, n in (("bad", b), ("good", g)) if n)
        lines.append(f"- {json.dumps(short, ensure_ascii=False)} ({tally})")
    return "\n".join(lines)


def suggest(
    lesson: Lesson, host: str, model: str | None, timeout_s: float = TIMEOUT_S
) -> Suggestion:
    """Ask ``model`` at ``host`` for one sentence for ``lesson`` (a ``UserError`` if none)."""
    model = (model or "").strip()
    if not model:
        raise UserError(
            "No Ollama model to ask: set ollama.model (Settings, or `rltray config set "
            "ollama.model MODEL`) or name one with --model.",
            ExitCode.NOT_AVAILABLE,
        )
    sent = prompt(lesson)
    answer = _generate(host, model, sent, timeout_s)
    return Suggestion(key=lesson.key, text=clean(answer, model), model=model)


def clean(answer: str, model: str) -> str:
    """The answer as one line: no thinking block, no wrapping quotes; refused if empty or long."""
    text = " ".join(_THINKING.sub("", answer).split())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    if not text:
        raise UserError(f"{model} answered with nothing; try again, or another model.")
    if len(text) > MAX_CHARS:
        raise UserError(
            f"{model} answered with {len(text)} characters, more than the {MAX_CHARS} of one "
            "short sentence; try again, or another model."
        )
    return text


def _generate(host: str, model: str, sent: str, timeout_s: float) -> str:
    options = {"temperature": TEMPERATURE}
    body = {"model": model, "prompt": sent, "stream": False, "options": options}
    request = urllib.request.Request(
        host.rstrip("/") + "/api/generate",
        data=json.dumps(body).encode("utf-8"),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            reply: Any = json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raise UserError(_refusal(exc, host, model), ExitCode.NOT_AVAILABLE) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError):
            raise _timed_out(host, timeout_s) from None
        raise UserError(
            f"Ollama is not reachable at {host} ({reason}): start it (`ollama serve` or the "
            "Ollama app) or fix ollama.host.",
            ExitCode.NOT_AVAILABLE,
        ) from None
    except ValueError:
        raise UserError(f"Ollama at {host} answered with something that is not JSON.") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("response"), str):
        raise UserError(f"Ollama at {host} answered without a response text.")
    return str(reply["response"])


def _timed_out(host: str, timeout_s: float) -> UserError:
    """A slow model (loading, or too big for the machine) is said apart from a missing server."""
    return UserError(
        f"Ollama at {host} did not answer within {timeout_s:g} seconds; try again, or a "
        "smaller model.",
        ExitCode.NOT_AVAILABLE,
    )


def _refusal(exc: urllib.error.HTTPError, host: str, model: str) -> str:
    """Ollama's own error sentence, and what to do when it is the usual one (no such model)."""
    try:
        said = str(json.loads(exc.read() or b"{}").get("error") or "")
    except (ValueError, AttributeError, OSError):
        said = ""
    if exc.code == 404 and "not found" in said:
        return f"Ollama at {host} has no model {model!r}: `ollama pull {model}`, or name another."
    return f"Ollama at {host} refused the request (HTTP {exc.code}: {said or exc.reason})."
