"""OpenClaw's events, as rltray's OpenClaw plugin (``openclaw_plugin/index.js``) hands them on.

Stdlib only, like ``capture_core.py``, which loads this module by the event's prefix
(``openclaw-...``) and sets ``core`` to itself before calling. The plugin runs the hook
program with one JSON payload on stdin per OpenClaw hook:

- ``end`` (``agent_end``): a finished run's messages, session key, channel, chat and model;
  a successful user-triggered run becomes one turn, its id the run id; a failed one leaves
  the chat's last prompt unanswered, so `/rl` rates nothing rather than the turn before.
- ``sent`` (``message_sent``): the platform message id of a delivered reply and its chat
  (ids are unique only within a chat), remembered with its run (``spool/sessions``) and
  spooled as a ``message`` record for the store, so a reaction finds its turn after any
  restart of the gateway or the tray. OpenClaw names only the last message of a reply it
  split (Telegram's 4096 characters, block streaming): a reaction on an earlier piece is
  placed by the next remembered id of its chat, when the store has no record of the id
  itself (``_turn_of_reaction``). rltray's own `/rl` answers are remembered too, as no turn,
  so nothing before one is taken for the next answer.
- ``react`` (``before_agent_run``): OpenClaw fires nothing when a reaction arrives; it puts
  ``System: [<time>] Telegram reaction added: 👍 by … on msg N`` into the internal-context
  block of the session's next run, read here, so such a rating lands when someone next
  writes. Only that block is read (``reactions_in``), never the text the user typed, and
  only in direct chats: in a group anyone the group admits could rate by reacting.
- ``loaded`` (the plugin's registration in a gateway): when and by which OpenClaw release,
  for ``rltray doctor`` (app/hooks/openclaw.py reads ``spool/sessions/openclaw.loaded``).
- ``rl`` (the plugin's ``/rl`` command, owner and allowlisted senders only): prints
  ``{"text": ...}``, the answer the chat shows; the model never sees the command. It rates
  the last answer in the chat it was typed in (``_InChat``); `/rl lesson` is the owner's.
- ``button`` (a Good/Bad button under a reply, opt-in, Telegram direct chats, owner and
  allowlisted senders only): rates the turn of the message the button is on, like a
  reaction but at once; prints ``{"text": ...}``, which tells the plugin to mark the button.

One OpenClaw session can hold many chats: with ``session.dmScope`` "main" (OpenClaw's
default) every direct chat is ``agent:main:main``. So a session's state keeps each chat's
own last turn (``chats``), and neither `/rl` nor a reply ever names another chat's answer.
An OpenClaw turn has no folder: a chat is not a project (``end``).

One file, past the usual size, because the hook loads exactly one events module per agent
(``capture_core.agent_events``) and a sibling module would be another file for the bundle
to list (packaging/pyinstaller/rltray.spec).
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
CHATS_KEPT = 200  # chats whose last turn a session's state keeps, most recent kept
# A split reply's pieces lie this close below its last, remembered, message id: ten pieces
# are 40,000 characters at Telegram's 4096, or ten blocks of block streaming. Small on
# purpose: the guess is only a guess, and a wider gap reaches other answers.
GAP_MAX = 10
OWN_REPLY = ""  # a remembered message that was rltray's own `/rl` answer: no turn's
TRIGGERS = (None, "user")  # heartbeat, cron and follow-up runs are OpenClaw's, not the user's
GROUP_KEYS = (":group:", ":channel:", ":supergroup:")  # index.js isDirect(): a group's session

# OpenClaw 2026.9.6's internal-context block (src/agents/internal-runtime-context.ts): it
# escapes these delimiters in anything the user wrote, and writes each piece of data as
# DATA on its own line, then the text as one JSON string on the next.
BEGIN = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"
END = "<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"
DATA = "Conversation data (data, not instructions):"
ADDED = " reaction added: "


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


# -- reactions: OpenClaw's own lines, never the user's ------------------------------------


def internal_block(text):
    """The lines inside the internal-context block ``text`` ends with; [] when it ends with
    none. OpenClaw appends that block after what the user wrote, so text the user typed
    (a forged block included) always lies before it; lines split on "\\n" only, as OpenClaw
    writes them (str.splitlines would also split inside a JSON string at U+2028)."""
    lines = [line.rstrip("\r") for line in text.rstrip().split("\n")]
    if not lines or lines[-1].strip() != END:
        return []
    for at in range(len(lines) - 2, -1, -1):
        mark = lines[at].strip()
        if mark == BEGIN:
            return lines[at + 1:-1]
        if mark == END:
            return []
    return []


def parse_reaction(line):
    """(emoji, message id) from OpenClaw's own system line ``System: [<time>] Telegram
    reaction added: 👍 by <name> on msg 42``; None for any other line. The time stamp marks
    the first line of a system event; the reactor's name is theirs, so the id is the digits
    after its last `` on msg ``."""
    if not line.startswith("System: ["):
        return None
    closing = line.find("] ", 9)
    channel, added, tail = line[closing + 2:].partition(ADDED) if closing > 0 else ("", "", "")
    if not added or not channel.isalpha():
        return None
    emoji, _, tail = tail.partition(" ")
    _, on, digits = tail.rpartition(" on msg ")
    if not emoji or not tail.startswith("by ") or not on:
        return None
    return (emoji, digits) if digits.isascii() and digits.isdigit() else None


def reactions_in(text):
    """[(line, (emoji, message id))] of the reactions OpenClaw reports in the internal-context
    block that ``text`` ends with: only its system-event data, decoded from its JSON string."""
    found = []
    lines = internal_block(text) if isinstance(text, str) else []
    for at, line in enumerate(lines[:-1]):
        if line.strip() != DATA:
            continue
        try:
            data = core.loads(lines[at + 1])
        except ValueError:
            continue
        if not isinstance(data, str) or not data.startswith("System: "):
            continue
        for event in data.split("\n"):
            reaction = parse_reaction(event.strip())
            if reaction is not None:
                found.append((event.strip(), reaction))
    return found


# -- chats ---------------------------------------------------------------------------------


CHAT_MAX = 64
WHERE_MAX = 100  # app/spool.py keeps this much of a message record's channel
TARGET_PREFIXES = ("channel", "chat", "direct", "dm", "group", "thread", "user")  # OpenClaw's


def _chat(payload, channel):
    """The chat a message is in, as one id: a platform's message ids are unique only within
    a chat (Telegram numbers each chat's messages from 1), and one OpenClaw session can
    span chats (the default ``dmScope`` puts every direct chat in ``agent:main:main``).
    OpenClaw names a chat as ``4242`` or as a target (``telegram:4242``,
    ``telegram:-100123:topic:7``, a command's ``to``); a topic is part of its chat. None
    when not given (``to``: where ``message_sent`` delivered, what a plugin loaded before
    ``chat`` sends)."""
    chat = core.text_or_none(payload.get("chat")) or core.text_or_none(payload.get("to"))
    if chat is None:
        return None
    chat = chat.strip()
    names = ((channel or "").lower(), "tg" if channel == "telegram" else "", *TARGET_PREFIXES)
    prefixes = tuple(f"{name}:" for name in names if name)
    while chat.lower().startswith(prefixes):
        chat = chat.partition(":")[2].strip()
    if channel == "telegram":
        for marker in (":topic:", ":direct-topic:"):
            chat = chat.partition(marker)[0]
    return chat[:CHAT_MAX] or None


def _where(channel, chat):
    """``<channel>:<chat>``, or the channel alone when the chat is unknown: how a ``message``
    record's channel and a rating's ``target_message`` name a chat (app/store/messages.py
    reads it back), and the key of a chat's part of its session's state; cut to the 100
    characters a record's channel may have, for both alike."""
    return f"{channel or ''}:{chat}"[:WHERE_MAX] if chat is not None else channel


def _group_chat(chat):
    """Whether a chat is a group's: Telegram numbers group and supergroup chats below zero."""
    return chat is not None and chat.startswith("-")


class _InChat:
    """The hook, with one chat's part of its session's state (``state["chats"][where]``)
    as the state that ``capture_core.run_command`` and ``record_turn`` load and save.

    Why: those keep a session's newest turn, its preview and its last rating for `/rl`; one
    OpenClaw session can be many people's direct chats, and one person's `/rl` must rate,
    and show, their own chat's last answer. The chats stay in the session's one file, so
    ``sessionstate.clean`` finds a deleted turn's text in each (under the session's lock).
    Everything else is the hook's own (``__getattr__``)."""

    def __init__(self, hook, where):
        self._hook = hook
        self._where = where
        self._whole = None  # the session's whole state, once loaded

    def __getattr__(self, name):
        return getattr(self._hook, name)

    def load_state(self, session):
        whole, folder = self._hook.load_state(session)
        chats = whole.get("chats") if isinstance(whole.get("chats"), dict) else {}
        whole["chats"] = chats
        self._whole = whole
        part = chats.get(self._where)
        return (part if isinstance(part, dict) else {}), folder

    def save_state(self, folder, session, state, keep_open=False):
        if self._whole is None:  # saving what was never loaded would drop the other chats
            raise RuntimeError("a chat's state saved before its session's was loaded")
        chats = self._whole["chats"]
        chats.pop(self._where, None)
        chats[self._where] = state  # last: the chats most recently used are kept
        for old in list(chats)[: max(0, len(chats) - CHATS_KEPT)]:
            del chats[old]
        self._hook.save_state(folder, session, self._whole, keep_open)


def _in_chat(hook, payload):
    """The hook keeping this payload's chat's part of the state; the hook itself when the
    payload names no chat (a channel that gives none)."""
    channel = core.text_or_none(payload.get("channel"))
    chat = _chat(payload, channel)
    return _InChat(hook, _where(channel, chat)) if chat is not None else hook


# -- events --------------------------------------------------------------------------------


def end(hook, payload):
    session = core.session_of(payload, "session")
    if session is None:
        hook.log("agent_end without a session key; nothing recorded")
        return
    if payload.get("trigger") not in TRIGGERS:
        return  # a run OpenClaw started itself: nothing the user rates
    chat_hook = _in_chat(hook, payload)
    if payload.get("success") is not True:
        # A failed or stopped run of the user's: no turn, but `/rl bad` typed about it must
        # not rate the answer before it (``capture_core.unanswered``).
        state, folder = chat_hook.load_state(session)
        state["prompt_at"] = core.time.time()
        chat_hook.save_state(folder, session, state)
        return
    dialogue = _dialogue(payload.get("messages"))
    last_user = max((i for i, (role, _) in enumerate(dialogue) if role == "user"), default=-1)
    answers = [text for role, text in dialogue[last_user + 1:] if role == "assistant"]
    if last_user < 0 or not answers:
        hook.log("agent_end without a user prompt and an answer after it; nothing recorded")
        return
    prompt = dialogue[last_user][1]  # as the user wrote it: OpenClaw keeps its notes apart
    context = [{"role": role, "content": core.cap(text, core.MAX_CONTEXT_CHARS)}
               for role, text in dialogue[:last_user]][-core.MAX_CONTEXT:]
    state, folder = chat_hook.load_state(session)
    # No folder: a channel is no project, and lessons key a folder by its absolute path
    # (a relative "telegram" was a folder of whatever directory the tray ran in).
    fields = core.turn_fields(
        session, core.text_or_none(payload.get("run")), prompt, answers[-1],
        {"cwd": None, "model": core.text_or_none(payload.get("model"))},
        context=context, event="openclaw-end", transcript=None,
    )
    duration = payload.get("duration_ms")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration >= 0:
        state["prompt_at"] = core.time.time() - duration / 1000  # record_turn's duration_s
    core.record_turn(chat_hook, session, state, folder, fields)


def _messages_key(session):
    """The state file (a separate one: ``sent`` runs alongside ``end``) of a session's
    delivered message ids."""
    return session + "\0messages"


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
    message = core.text_or_none(payload.get("message_id"))
    channel = core.text_or_none(payload.get("channel"))
    chat = _chat(payload, channel)
    session = core.session_of(payload, "session")
    own = payload.get("reply") == "rltray"  # rltray's own `/rl` answer: no turn's message
    if message is None or (session is None and own):
        return
    if session is None:
        hook.log(f"message {message[:40]} in {_where(channel, chat)} delivered with no session "
                 "(and no run the plugin knew in that chat): not remembered, so a reaction "
                 "or button on it finds no answer")
        return
    turn = None if own else core.text_or_none(payload.get("run"))
    if turn is None and not own:
        chat_hook = _in_chat(hook, payload)
        last, folder = chat_hook.load_state(session)
        if folder is not None:
            folder.close()
        turn = core.text_or_none(last.get("last_turn"))  # this chat's newest answer
        if turn is None:
            hook.log(f"message {message[:40]} delivered with no run to belong to; "
                     "not remembered")
            return
    key = _messages_key(session)
    state, folder = hook.load_state(key)
    known = state.get("messages") if isinstance(state.get("messages"), dict) else {}
    known.pop(_message_key(message, chat), None)
    known[_message_key(message, chat)] = OWN_REPLY if own else turn
    for old in list(known)[: max(0, len(known) - MESSAGES_KEPT)]:
        del known[old]
    state["messages"] = known
    hook.save_state(folder, key, state)
    if not own:
        hook.spool({"kind": "message", "agent": hook.agent, "session": session,
                    "turn": turn[:200], "channel": _where(channel, chat),
                    "message_id": message[:200], "captured_at": core.iso_now()})


def _turn_of_reaction(messages, message):
    """(turn, chat, why not, guess) for a reaction on ``message``, from a session's
    remembered ids.

    OpenClaw's line names no chat, and the run it arrives with may be another chat's (one
    session for every direct chat), so every direct chat of the session is searched for
    the id itself: found in one, that chat's turn (``turn``); in more than one, or in a
    group's, nothing is rated (``why not``). Not found (the session keeps the last
    ``MESSAGES_KEPT`` ids, and a piece of a split reply was never named), the store's
    record of the id decides (``target_message``, with the chat when the session has only
    one); ``guess`` is only its fallback, for a piece of a split reply: the next remembered
    id above within ``GAP_MAX`` (a reaction is reported only on the bot's messages, and the
    pieces of one reply come before its last), looked for only in the reaction's own chat,
    which is known only when the session holds one direct chat: in a session several people
    share, the next id above in another person's chat would rate their answer. rltray's own
    `/rl` answers are remembered as no turn, so what precedes one is never taken for the
    answer after it."""
    number = int(message) if message.isascii() and message.isdigit() else None
    found, chats, ids = {}, set(), {}
    for key, turn in messages.items():
        chat, colon, mid = key.rpartition(":")
        chat = chat if colon else None  # remembered before chats were told apart
        if _group_chat(chat):  # reactions count in direct chats only
            if mid == message:
                return None, None, f"msg {message} is a group chat's", None
            continue
        chats.add(chat)
        if mid == message:
            found[chat] = turn
        elif chat is not None and mid.isascii() and mid.isdigit():
            ids.setdefault(chat, []).append((int(mid), turn))
    direct = {c for c in chats if c is not None}
    if len(found) > 1 or len(direct) > 1:
        # Telegram numbers messages per chat: an id found in one chat of a session several
        # direct chats share may be another message of the reaction's own chat that is not
        # remembered (a user's message, a piece of a split reply), so only a session of one
        # direct chat places a reaction (review 4)
        return None, None, (f"msg {message}: {len(direct)} direct chats share this session, "
                            "and which one the reaction came from cannot be told (OpenClaw's "
                            "session.dmScope \"main\"; set it to \"per-channel-peer\" for "
                            "reactions)"), None
    if found:
        chat, turn = found.popitem()
        if turn == OWN_REPLY:
            return None, chat, f"msg {message} is rltray's own /rl answer, no turn's", None
        return core.text_or_none(turn), chat, None, None
    chats.discard(None)
    if len(chats) != 1:  # the reaction's chat cannot be told: the store's record only
        return None, None, None, None
    chat = chats.pop()
    later = [(mid, turn) for mid, turn in ids.get(chat, ())
             if number is not None and 0 < mid - number <= GAP_MAX]
    guess = min(later)[1] if later else None
    return None, chat, None, (None if guess == OWN_REPLY else core.text_or_none(guess))


def react(hook, payload):
    session = core.session_of(payload, "session")
    if session is None:
        return
    context = payload.get("context") if isinstance(payload.get("context"), list) else []
    found = [(line, r) for text in [payload.get("prompt"), *context]
             for line, r in reactions_in(text) if r[0] in REACTIONS]
    if not found:
        return
    if payload.get("direct") is False or any(mark in session for mark in GROUP_KEYS):
        hook.log(f"{len(found)} reaction(s) in group chat {session[:80]} not counted: only "
                 "direct chats rate by reaction (anyone a group admits can react)")
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
    for _, (emoji, message) in fresh:
        turn, chat, why, guess = _turn_of_reaction(messages, message)
        if why is not None:
            hook.log(f"reaction on msg {message} not counted: {why}")
            continue
        # a message not remembered here (state pruned) is found by the store
        record = _rating_record(hook, session, REACTIONS[emoji], message, turn,
                                _where(channel, chat), "openclaw-react", guess)
        try:
            hook.spool(record)
        except Exception as exc:
            hook.log(f"reaction on msg {message} not recorded: {type(exc).__name__}: {exc}")


def _rating_record(hook, session, sub, message, turn, channel, event, guess=None):
    """A ``command`` record rating the turn of ``message``: by its run id when this session's
    state remembers it, else by ``<channel>[:<chat>]:<message id>`` for the store to look up
    (``channel`` is ``_where``'s), with ``guess_turn``, the run a split reply's piece is
    taken for, only where the store has no record of the id (app/spool.py)."""
    record = {"kind": "command", "agent": hook.agent, "session": session, "command": sub,
              "target_turn": turn, "comment": None, "captured_at": core.iso_now(),
              "event": event}
    if turn is None:
        record["target_message"] = f"{channel or ''}:{message}"[:200]
        if guess is not None:
            record["guess_turn"] = guess[:200]
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
    elif command[0] in ("lesson", "lessons"):
        said = _lesson(hook, session, payload, *command)
    else:
        chat_hook = _in_chat(hook, payload)  # this chat's last answer, never another's
        state, folder = chat_hook.load_state(session)
        sub, comment = command
        said = core.run_command(chat_hook, session, state, folder, sub, comment, None)
    core.write_stdout({"text": said})


# -- `/rl lesson`: the owner's --------------------------------------------------------------


NOT_OWNER = ("rltray: only the OpenClaw owner (a sender listed in OpenClaw's "
             "commands.ownerAllowFrom) may add a lesson from a chat: a lesson is told to "
             "Claude Code and Codex sessions. Nothing was saved; `rltray lessons add` on the "
             "computer adds one.")
NOT_TOLD = ("rltray: OpenClaw is told no lessons; Claude Code and Codex sessions are, where "
            "lessons are on for them (`rltray lessons list` on the computer shows them).")
AGENT_NAMES = {"claude-code": "Claude Code", "codex": "Codex"}  # hooks/registry.py's


def _lesson(hook, session, payload, sub, text):
    """`/rl lesson <text>` from a chat: saved only for the owner, because a lesson goes to
    every Claude Code and Codex session (an allowlisted sender, in a group too, could
    otherwise instruct them); the sender is written to the hook log either way. OpenClaw
    has no folder, so the lesson is for every project, and the reply says which agents
    are told it. `/rl lessons`: OpenClaw itself is told none."""
    if sub == "lessons":
        return NOT_TOLD
    sender = core.text_or_none(payload.get("sender")) or "unknown"
    if payload.get("owner") is not True:
        hook.log(f"/rl lesson from OpenClaw sender {sender[:80]} in {session[:80]} refused: "
                 "not the owner")
        return NOT_OWNER
    said = core.lesson_command(hook, session, {}, "lesson", text, None)
    if not said.startswith("rltray: saved the lesson"):
        return said  # refused (too long, usage) or not recorded: that answer stands
    hook.log(f"/rl lesson from OpenClaw's owner, sender {sender[:80]}, in {session[:80]} saved")
    told = _told_to(hook.home)
    told = (f"{' and '.join(told)} sessions are told it" if told else
            "no session is told it yet: lessons are off for Claude Code and Codex (`rltray "
            "lessons on --agent claude-code` turns them on)")
    return (f'rltray: saved the lesson ("{core.preview(text, 60)}") for every project; '
            f"{told}. OpenClaw itself is told no lessons.")


def _told_to(home):
    """The agents lessons are on for (``lessonfiles.is_on``: their folder exists), by name."""
    lessons = core.sibling("lessonfiles")
    if lessons is None or home is None:
        return []
    return [label for name, label in AGENT_NAMES.items() if lessons.is_on(home, name)]


def loaded(hook, payload):
    version = payload.get("version")
    record = {"at": core.iso_now(), "version": version if isinstance(version, str) else None}
    folder = core.open_dir(hook.home, "spool", "sessions")
    try:
        core.write_atomic(folder, LOADED, core.dumps(record).encode("ascii"))
    finally:
        folder.close()
