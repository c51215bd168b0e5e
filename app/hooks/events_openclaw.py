"""OpenClaw's events, as rltray's OpenClaw plugin (``openclaw_plugin/index.js``) hands them on.

Stdlib only, like ``capture_core.py``, which loads this module by the event's prefix
(``openclaw-...``) and sets ``core`` to itself before calling. The plugin runs the hook
program with one JSON payload on stdin per OpenClaw hook:

- ``end`` (``agent_end``): a finished run's messages, session key, channel and model; a
  successful user-triggered run becomes one turn, its id the run id; a failed one leaves
  the session's last prompt unanswered, so `/rl` rates nothing rather than the turn before.
- ``sent`` (``message_sent``): the platform message id of a delivered reply and its chat
  (ids are unique only within a chat), remembered with its run (``spool/sessions``) and
  spooled as a ``message`` record for the store, so a reaction finds its turn after any
  restart of the gateway or the tray.
- ``react`` (``before_agent_run``): OpenClaw fires nothing when a reaction arrives; it puts
  ``Telegram reaction added: 👍 by … on msg N`` into the sender's next run, read here, so
  such a rating lands when the sender next writes.
- ``loaded`` (the plugin's registration in a gateway): when and by which OpenClaw release,
  for ``rltray doctor`` (app/hooks/openclaw.py reads ``spool/sessions/openclaw.loaded``).
- ``rl`` (the plugin's ``/rl`` command, owner and allowlisted senders only): prints
  ``{"text": ...}``, the answer the chat shows; the model never sees the command.
- ``button`` (a Good/Bad button under a reply, opt-in, Telegram direct chats, owner and
  allowlisted senders only): rates the turn of the message the button is on, like a
  reaction but at once; prints ``{"text": ...}``, which tells the plugin to mark the button.
"""

core = None  # capture_core, set by capture_core.agent_events() before any call

AGENT = "openclaw"  # the name the store records (hooks/registry.py)
EVENTS = ("end", "sent", "react", "rl", "button", "loaded")
LOADED = "openclaw.loaded"  # spool/sessions/: when and by which OpenClaw the plugin last loaded
USAGE = ("rltray: usage: /rl good [comment] | /rl bad [comment] | /rl 1-5 [comment] | /rl undo | "
         "/rl status | /rl lesson <text> | /rl lessons")

# Emoji -> the `/rl` subcommand a reaction means; any other reaction is no rating.
REACTIONS = {"\U0001f44d": "good", "\U0001f44e": "bad"}
MESSAGES_KEPT = 500  # delivered message ids remembered per session, newest kept
TRIGGERS = (None, "user")  # heartbeat, cron and follow-up runs are OpenClaw's, not the user's


def _text(content):
    """The text of an OpenClaw message's ``content``: a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content
                 if isinstance(p, dict) and p.get("type") in (None, "text", "output_text")]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _dialogue(messages):
    """[(role, text)] of the user and assistant messages that carry text, in order."""
    out = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            continue
        text = _text(message.get("content")).strip()
        if text:
            out.append((message["role"], text))
    return out


def strip_reactions(text):
    """The prompt without OpenClaw's system lines about reactions (they are no task)."""
    kept = [line for line in text.splitlines() if parse_reaction(line) is None]
    return "\n".join(kept).strip()


def parse_reaction(line):
    """(emoji, message id) from ``… reaction added: 👍 by … on msg 42``, else None."""
    at = line.find(" reaction added: ")
    if at < 0:
        return None
    rest = line[at + len(" reaction added: "):]
    emoji, _, tail = rest.partition(" ")
    marker = tail.rfind(" on msg ")
    if not emoji or marker < 0:
        return None
    digits = ""
    for ch in tail[marker + len(" on msg "):]:
        if not ch.isdigit():
            break
        digits += ch
    return (emoji, digits) if digits else None


def end(hook, payload):
    session = core.session_of(payload, "session")
    if session is None:
        hook.log("agent_end without a session key; nothing recorded")
        return
    if payload.get("trigger") not in TRIGGERS:
        return  # a run OpenClaw started itself: nothing the user rates
    if payload.get("success") is not True:
        # A failed or stopped run of the user's: no turn, but `/rl bad` typed about it must
        # not rate the answer before it (``capture_core.unanswered``).
        state, folder = hook.load_state(session)
        state["prompt_at"] = core.time.time()
        hook.save_state(folder, session, state)
        return
    dialogue = _dialogue(payload.get("messages"))
    last_user = max((i for i, (role, _) in enumerate(dialogue) if role == "user"), default=-1)
    answers = [text for role, text in dialogue[last_user + 1:] if role == "assistant"]
    if last_user < 0 or not answers:
        hook.log("agent_end without a user prompt and an answer after it; nothing recorded")
        return
    prompt = strip_reactions(dialogue[last_user][1])
    context = [{"role": role, "content": core.cap(text, core.MAX_CONTEXT_CHARS)}
               for role, text in dialogue[:last_user]][-core.MAX_CONTEXT:]
    channel = core.text_or_none(payload.get("channel"))
    state, folder = hook.load_state(session)
    fields = core.turn_fields(
        session, core.text_or_none(payload.get("run")), prompt, answers[-1],
        {"cwd": channel, "model": core.text_or_none(payload.get("model"))},
        context=context, event="openclaw-end", transcript=None,
    )
    duration = payload.get("duration_ms")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration >= 0:
        state["prompt_at"] = core.time.time() - duration / 1000  # record_turn's duration_s
    core.record_turn(hook, session, state, folder, fields)


def _messages_key(session):
    """The state file (a separate one: ``sent`` runs alongside ``end``) of a session's
    delivered message ids."""
    return session + "\0messages"


CHAT_MAX = 64
WHERE_MAX = 100  # app/spool.py keeps this much of a message record's channel


def _chat(payload, channel):
    """The chat a message is in, as one id: a platform's message ids are unique only within
    a chat (Telegram numbers each chat's messages from 1), and one OpenClaw session can
    span chats (the default ``dmScope`` puts every direct chat in ``agent:main:main``).
    OpenClaw names a chat as ``4242`` or as a target (``telegram:4242``,
    ``telegram:-100123:topic:7``); a topic is part of its chat. None when not given
    (``to``: where ``message_sent`` delivered, what a plugin loaded before ``chat`` sends)."""
    chat = core.text_or_none(payload.get("chat")) or core.text_or_none(payload.get("to"))
    if chat is None:
        return None
    chat = chat.strip()
    prefixes = tuple(f"{name}:" for name in ((channel or "").lower(),
                                              "tg" if channel == "telegram" else "") if name)
    while prefixes and chat.lower().startswith(prefixes):
        chat = chat.partition(":")[2].strip()
    if channel == "telegram":
        chat = chat.removeprefix("group:")
        for marker in (":topic:", ":direct-topic:"):
            chat = chat.partition(marker)[0]
    return chat[:CHAT_MAX] or None


def _where(channel, chat):
    """``<channel>:<chat>``, or the channel alone when the chat is unknown: how a ``message``
    record's channel and a rating's ``target_message`` name a chat (app/store/messages.py
    reads it back); cut to the 100 characters a record's channel may have, for both alike."""
    return f"{channel or ''}:{chat}"[:WHERE_MAX] if chat is not None else channel


def _message_key(message, chat):
    """A delivered message's key in a session's state: ``<chat>:<id>``, the id alone when the
    chat is unknown (and in state written before chats were told apart)."""
    return f"{chat}:{message}" if chat is not None else message


def _turn_of(messages, message, chat):
    """The run whose answer ``message`` in ``chat`` was, from a session's remembered ids;
    in no known chat, the one chat's that has such a message (None when several have)."""
    turn = messages.get(_message_key(message, chat))
    if turn is None and chat is not None:
        turn = messages.get(message)  # remembered with no chat: before chats were told apart
    if turn is None and chat is None:
        found = [t for key, t in messages.items() if key.endswith(":" + message)]
        turn = found[0] if len(found) == 1 else None
    return core.text_or_none(turn)


def sent(hook, payload):
    session = core.session_of(payload, "session")
    message = core.text_or_none(payload.get("message_id"))
    if session is None or message is None:
        return
    turn = core.text_or_none(payload.get("run"))
    if turn is None:
        last, folder = hook.load_state(session)
        if folder is not None:
            folder.close()
        turn = core.text_or_none(last.get("last_turn"))
    if turn is None:
        hook.log(f"message {message[:40]} delivered with no run to belong to; not remembered")
        return
    channel = core.text_or_none(payload.get("channel"))
    chat = _chat(payload, channel)
    key = _messages_key(session)
    state, folder = hook.load_state(key)
    known = state.get("messages") if isinstance(state.get("messages"), dict) else {}
    known.pop(_message_key(message, chat), None)
    known[_message_key(message, chat)] = turn
    for old in list(known)[: max(0, len(known) - MESSAGES_KEPT)]:
        del known[old]
    state["messages"] = known
    hook.save_state(folder, key, state)
    hook.spool({"kind": "message", "agent": hook.agent, "session": session, "turn": turn[:200],
                "channel": _where(channel, chat), "message_id": message[:200],
                "captured_at": core.iso_now()})


def react(hook, payload):
    session = core.session_of(payload, "session")
    prompt = payload.get("prompt")
    if session is None or not isinstance(prompt, str):
        return
    lines = [line.strip() for line in prompt.splitlines()]
    found = [(line, r) for line in lines
             if (r := parse_reaction(line)) is not None and r[0] in REACTIONS]
    if not found:
        return
    key = _messages_key(session)
    known, folder = hook.load_state(key)
    messages = known.get("messages") if isinstance(known.get("messages"), dict) else {}
    seen = known.get("reactions") if isinstance(known.get("reactions"), list) else []
    # OpenClaw's event line carries its time: the same line again is the same reaction
    fresh = [(line, r) for line, r in found if line not in seen]
    known["reactions"] = (seen + [line for line, _ in fresh])[-MESSAGES_KEPT:]
    hook.save_state(folder, key, known)
    channel = core.text_or_none(payload.get("channel"))
    chat = _chat(payload, channel)  # the chat of the run the reaction came in with
    for _, (emoji, message) in fresh:
        # a message not remembered here (state pruned) is found by the store
        record = _rating_record(hook, session, REACTIONS[emoji], message,
                                _turn_of(messages, message, chat), _where(channel, chat),
                                "openclaw-react")
        try:
            hook.spool(record)
        except Exception as exc:
            hook.log(f"reaction on msg {message} not recorded: {type(exc).__name__}: {exc}")


def _rating_record(hook, session, sub, message, turn, channel, event):
    """A ``command`` record rating the turn of ``message``: by its run id when this session's
    state remembers it, else by ``<channel>[:<chat>]:<message id>`` for the store to look up
    (``channel`` is ``_where``'s)."""
    record = {"kind": "command", "agent": hook.agent, "session": session, "command": sub,
              "target_turn": turn, "comment": None, "captured_at": core.iso_now(),
              "event": event}
    if turn is None:
        record["target_message"] = f"{channel or ''}:{message}"[:200]
    return record


BUTTONS = {"good": "rltray: rated this answer good.", "bad": "rltray: rated this answer bad.",
           "undo": "rltray: withdrew this answer's rating."}


def button(hook, payload):
    session = core.session_of(payload, "session")
    what = payload.get("what")
    message = core.text_or_none(payload.get("message_id"))
    if session is None or message is None or what not in BUTTONS:
        core.write_stdout({"text": "rltray: this button names no answer; nothing rated."})
        return
    known, folder = hook.load_state(_messages_key(session))
    if folder is not None:
        folder.close()
    messages = known.get("messages") if isinstance(known.get("messages"), dict) else {}
    channel = core.text_or_none(payload.get("channel"))
    chat = _chat(payload, channel)
    record = _rating_record(hook, session, what, message, _turn_of(messages, message, chat),
                            _where(channel, chat), "openclaw-button")
    try:
        hook.spool(record)
    except Exception as exc:
        hook.log(f"button on msg {message[:40]} not recorded: {type(exc).__name__}: {exc}")
        core.write_stdout({"text": "rltray: the rating could not be recorded; run `rltray "
                                   "doctor`."})
        return
    core.write_stdout({"text": BUTTONS[what]})


def rl(hook, payload):
    session = core.session_of(payload, "session")
    args = payload.get("args") if isinstance(payload.get("args"), str) else ""
    command = core.rl_command("/rl " + args)
    if session is None:
        said = "rltray: OpenClaw sent no session for this chat; rate with `rltray good` instead."
    elif command is None or command[0] not in core.RL_COMMANDS:
        said = core.RL_NEUTRAL if command is not None and command[0] == "3" else hook.usage
    else:
        state, folder = hook.load_state(session)
        sub, comment = command
        said = core.run_command(hook, session, state, folder, sub, comment,
                                core.text_or_none(payload.get("channel")))
    core.write_stdout({"text": said})


def loaded(hook, payload):
    version = payload.get("version")
    record = {"at": core.iso_now(), "version": version if isinstance(version, str) else None}
    folder = core.open_dir(hook.home, "spool", "sessions")
    try:
        core.write_atomic(folder, LOADED, core.dumps(record).encode("ascii"))
    finally:
        folder.close()
