"""Claude Code's hook payloads: its Stop event and the transcript it points to.

Stdlib only, like ``capture_core.py``, which loads this module by the event's
prefix (``claude-...``) and sets ``core`` to itself before calling; this module
imports nothing, so a hook run loads exactly the shared core and one agent.
A new agent is a module like this one plus its line in ``hooks/registry.py``.
"""

core = None  # capture_core, set by capture_core.agent_events() before any call

AGENT = "claude-code"  # the name the store records (hooks/registry.py)
# claude-<event>: prompt, expand and start are capture_core's (every agent's /rl handling,
# and the lessons a session starts with)
EVENTS = ("stop", "prompt", "expand", "start")
# What a bare or wrong `/rl` answers: Claude Code knows `/rl` through rltray's command file.
USAGE = (
    "rltray: usage: /rl good [comment] | /rl bad [comment] | /rl 1-5 [comment] | /rl undo | "
    "/rl status | /rl lesson <text> | /rl lessons"
)
# Shown to the user (SessionStart's systemMessage) when a session starts with lessons that
# differ from the last session's in that folder; the model gets the lessons themselves.
LESSONS_CHANGED = "rltray: this session starts with updated lessons (/rl lessons shows them)."


TAIL_BYTES = 4 * 1024 * 1024  # transcript bytes read from the end, whatever its size
TAIL_READ_FIRST = 64 * 1024  # most Stops find prompt + context in this much; then 4x each time

# Claude Code writes these as `user` records, but the user did not type them.
_WRAPPERS = (
    "<command-name>",
    "<command-message>",
    "<local-command-",
    "<command-args>",
    "<system-reminder>",
    "<user-prompt-submit-hook>",
    "[Request interrupted",
)


def _names_rl(wrapper):
    """Whether a command wrapper record names rltray's `/rl` (``<command-name>/rl</…>``)."""
    start = wrapper.find("<command-name>")
    end = wrapper.find("</command-name>", start)
    return start >= 0 and end > start and wrapper[start + 14 : end].strip().lstrip("/") == "rl"


def record_message(rec):
    """[role, text, uuid, message id] for a user-typed or assistant-text record, else None.

    Drops what is not conversation: tool calls and results, thinking, subagent
    (sidechain) records, meta records, command wrappers and `/rl` prompts; a `/rl`
    prompt, typed or as its command's wrapper, comes back with the role ``"rl"``.
    """
    if not isinstance(rec, dict) or rec.get("isSidechain") is True or rec.get("isMeta") is True:
        return None
    kind = rec.get("type")
    msg = rec.get("message")
    if kind not in ("user", "assistant") or not isinstance(msg, dict):
        return None
    if rec.get("isCompactSummary") is True or (kind == "user" and "toolUseResult" in rec):
        return None
    content = msg.get("content")
    if isinstance(content, list):
        parts = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif block.get("type") == "tool_result":
                return None
        content = "\n".join(parts)
    if not isinstance(content, str) or not content.strip():
        return None
    if kind == "user" and content.lstrip().startswith(_WRAPPERS):
        return ["rl", "", None, None] if _names_rl(content) else None
    if kind == "user" and core.rl_command(content):
        return ["rl", "", None, None]
    uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
    msg_id = msg.get("id") if kind == "assistant" and isinstance(msg.get("id"), str) else None
    return [kind, content, uuid, msg_id]


def lines_from_end(read_at, size, limit=TAIL_BYTES, first=TAIL_READ_FIRST):
    """The file's lines newest first, read backwards in chunks (``first`` bytes, then four
    times more each time) so a scan that stops early never reads, splits or copies the rest;
    at most the last ``limit`` bytes. ``read_at(start, length)`` returns the file's bytes.

    A line cut by the ``limit`` (it started before it) is not yielded: it is a fragment.
    A line still being appended after ``size`` was taken is not seen: it was not written yet.
    """
    floor = max(0, size - limit)
    end, step, carry = size, first, b""
    while end > floor:
        start = max(floor, end - step)
        buf = read_at(start, end - start) + carry
        end, step = start, step * 4
        if start == 0:
            yield from reversed(buf.split(b"\n"))
            return
        cut = buf.find(b"\n")
        if cut < 0:  # one line longer than this chunk: read on for its start
            carry = buf
            continue
        carry = buf[:cut]
        yield from reversed(buf[cut + 1 :].split(b"\n"))


def scan_transcript(lines, is_prompt, have_response, commands=None):
    """Conversation messages newest first and the prompt record's index (or None), from
    ``lines`` newest first (``lines_from_end``). ``commands``, a list, gets for each `/rl`
    record seen before the prompt record (newer than it) how many messages are newer.

    Stops 20 messages past the prompt, so a long session costs about as much as a short
    one. The prompt is the user record for which ``is_prompt(text)`` holds when the prompt
    hook recorded one, else the newest typed user message (older than the newest answer
    when the answer itself must come from here). A tool's result, most of a transcript's
    bytes, is skipped unparsed: a line holding the ``"toolUseResult"`` key and no
    ``"assistant"`` token is a user record that ``record_message`` drops (in JSON text a
    quote inside a string is escaped, so both tokens are keys or whole values, never
    words in a message).
    """
    msgs, anchor, seen_answer = [], None, have_response
    for raw in lines:
        if b'"assistant"' not in raw and (b'"user"' not in raw or b'"toolUseResult"' in raw):
            continue
        try:
            m = record_message(core.loads(raw.decode("utf-8", "replace")))
        except ValueError:
            continue
        if m is None:
            continue
        if m[0] == "rl":
            if anchor is None and commands is not None:
                commands.append(len(msgs))
            continue
        last = msgs[-1] if msgs else None
        if m[3] and last is not None and last[0] == "assistant" and last[3] == m[3]:
            last[1] = m[1] + "\n" + last[1]  # one API message split over several records
            continue
        msgs.append(m)
        if anchor is not None:
            if len(msgs) - anchor > core.MAX_CONTEXT + 1:
                break
        elif m[0] == "assistant":
            seen_answer = True
        elif is_prompt(m[1]) if is_prompt is not None else seen_answer:
            anchor = len(msgs) - 1
    return msgs, anchor


def read_transcript(hook, path, is_prompt, have_response, commands=None):
    """Scan the transcript from its end, reading only as much of it (up to TAIL_BYTES) as
    the scan asks for."""
    try:
        fd, size = core.open_regular(lambda flags: core.open_path(path, flags))
    except OSError as exc:
        hook.log(f"transcript not read ({exc.strerror or exc}); recording without it")
        return [], None
    try:
        lines = lines_from_end(lambda start, length: core.read_at(fd, start, length, size), size)
        return scan_transcript(lines, is_prompt, have_response, commands)
    except OSError as exc:
        hook.log(f"transcript not read ({exc.strerror or exc}); recording without it")
        return [], None
    finally:
        core.close(fd)


def stop(hook, payload):
    session = core.session_of(payload, "session_id")
    if session is None:
        hook.log("Stop payload without session_id; nothing recorded")
        return
    state, folder = hook.load_state(session)
    response = core.text_or_none(payload.get("last_assistant_message"))
    prompt = core.pending_prompt(state, continuing=payload.get("stop_hook_active") is True)
    msgs, anchor, commands = [], None, []
    path = core.text_or_none(payload.get("transcript_path"))
    if path:
        is_prompt = core.prompt_matcher(hook, state, prompt)
        msgs, anchor = read_transcript(hook, path, is_prompt, response is not None, commands)
    newest = next((i for i, m in enumerate(msgs) if m[0] == "assistant"), None)
    from_state = prompt is not None
    said = None
    if anchor is not None and commands:
        # `/rl` came after the prompt and reached the model (the prompt hook did not block
        # it): this answer is the model's reply to a rating, no turn.
        said = "the newest prompt in the transcript is an rltray command"
    elif response is None and anchor is None and from_state and newest is not None:
        # No answer in the payload (Claude Code before 2.1.47) and the prompt not yet in the
        # transcript (it lags): its newest answer is the previous turn's.
        said = "Stop without last_assistant_message and the transcript lags the prompt"
    elif response is None and newest is not None and (anchor is None or newest < anchor):
        response = msgs[newest][1]
    if said is None and not response:
        said = "Stop without an assistant answer (payload and transcript)"
    if said is not None:
        hook.log(said + "; nothing recorded")
        if folder is not None:
            folder.close()
        return
    if prompt is None:  # else the transcript's; else the last one recorded, even if used before
        prompt = (
            msgs[anchor][1] if anchor is not None else core.text_or_none(state.get("prompt")) or ""
        )
    if anchor is not None:
        older = msgs[anchor + 1 : anchor + 1 + core.MAX_CONTEXT]
    else:  # the transcript lags the prompt: all of it is earlier conversation
        older = [
            m for m in msgs if not (m[0] == "assistant" and core.norm(m[1]) == core.norm(response))
        ]
        older = older[: core.MAX_CONTEXT]
    # The newest answer record names this turn only if it is newer than the prompt (or
    # there is no prompt record to compare with); a lagging file holds the previous turn.
    turn = None
    if (
        newest is not None
        and (newest < anchor if anchor is not None else not from_state)
        and msgs[newest][2]
        and core.norm(msgs[newest][1]) == core.norm(response)
    ):
        turn = msgs[newest][2][:200]
    context = [
        {"role": m[0], "content": core.cap(m[1], core.MAX_CONTEXT_CHARS)} for m in reversed(older)
    ]
    fields = core.turn_fields(
        session, turn, prompt, response, payload, context=context, event="stop", transcript=path
    )
    core.record_turn(hook, session, state, folder, fields)
