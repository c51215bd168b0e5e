"""Codex's hook payloads: its Stop hook and its notify program's agent-turn-complete.

Stdlib only, like ``capture_core.py``, which loads this module by the event's
prefix (``codex-...``) and sets ``core`` to itself before calling; this module
imports nothing, so a hook run loads exactly the shared core and one agent.
A new agent is a module like this one plus its line in ``hooks/registry.py``.
"""

core = None  # capture_core, set by capture_core.agent_events() before any call

AGENT = "codex"  # the name the store records (hooks/registry.py)
EVENTS = ("stop", "prompt", "notify", "start")  # codex-<event>; prompt, start: capture_core's
# Codex's terminal UI refuses unknown slash commands, so there a rating is `$rl`, the
# rltray skill's mention (`codex exec` takes both).
USAGE = (
    "rltray: usage: $rl good [comment] | $rl bad [comment] | $rl 1-5 [comment] | $rl undo | "
    "$rl status | $rl lesson <text> | $rl lessons (`/rl ...` also works in `codex exec`)"
)


# Codex keeps a SessionStart's context in the thread (a developer message), and runs SessionStart
# again on every resume (seen with 0.169.0): a thread already given the lessons is not given
# them twice (capture_core.start_hook). Claude Code does not pile them up on resume.
LESSONS_KEPT = True

# Codex's terminal UI names each new thread by asking the model in a thread of its own, and
# `notify` reports that turn like any other; it is Codex's, not the user's, so never a turn.
CODEX_TITLE_PROMPT = "Generate a concise, single-line task title"


def stop(hook, payload):
    session = core.session_of(payload, "session_id")
    if session is None:
        hook.log("Stop payload without session_id; nothing recorded")
        return
    response = core.text_or_none(payload.get("last_assistant_message"))
    if response is None:
        hook.log("Stop without last_assistant_message; leaving this turn to notify")
        return
    state, folder = hook.load_state(session)
    turn = core.text_or_none(payload.get("turn_id"))
    prompt = core.pending_prompt(state, payload.get("stop_hook_active") is True, turn)
    if prompt is None and turn is not None and turn[:200] == state.get("last_turn"):
        prompt = ""  # notify recorded this turn first, with its prompt; the store keeps that one
    elif prompt is None:
        # The prompt hook did not see this turn's prompt (not trusted yet, timed out, or it
        # was `$rl bad` that reached the model): the prompt in the state is an older turn's.
        # notify reports the turn with its own input, or applies the `$rl` it was.
        hook.log("Stop of a turn whose prompt the prompt hook did not see; leaving it to notify")
        if folder is not None:
            folder.close()
        return
    transcript = core.text_or_none(payload.get("transcript_path"))
    fields = core.turn_fields(
        session, turn, prompt, response, payload, context=[], event="stop", transcript=transcript
    )
    core.record_turn(hook, session, state, folder, fields)


def notify(hook, payload):
    if payload.get("type") != "agent-turn-complete":
        return
    session = core.session_of(payload, "thread-id")
    response = core.text_or_none(payload.get("last-assistant-message"))
    if session is None or response is None:
        hook.log("agent-turn-complete without thread-id or last-assistant-message; skipped")
        return
    inputs = payload.get("input-messages")
    inputs = [m for m in inputs if isinstance(m, str)] if isinstance(inputs, list) else []
    if inputs and inputs[-1].startswith(CODEX_TITLE_PROMPT):
        return  # Codex naming the thread, not a turn of the user's (see CODEX_TITLE_PROMPT)
    state, folder = hook.load_state(session)
    turn = core.text_or_none(payload.get("turn-id"))
    command = core.rl_command(inputs[-1]) if inputs else None
    if command is not None:
        # The user typed `$rl bad` but the prompt hook did not take it (Codex's hooks are not
        # trusted yet), so it reached the model: rate the turn it meant, the one before.
        sub, comment = command
        if sub not in core.RL_COMMANDS:
            hook.log(f"{inputs[-1][:40]!r} from notify is no rltray command; nothing done")
            if folder is not None:
                folder.close()
            return
        if turn is not None and turn[:200] == state.get("last_turn"):
            # A Stop recorded the model's reply to this `$rl` as the newest turn, with a prompt
            # it took for this turn's (one typed before and never answered): that reply is
            # no answer to rate. The session is as it was before it: the `$rl` rates the
            # turn before, or nothing when the prompt before it was never answered.
            hook.log(f"turn {turn[:40]} answered {inputs[-1][:40]!r}, not a task; "
                     "not the turn this rates")
            state.update(last_turn=core.text_or_none(state.get("prev_turn")),
                         last_turn_at=state.get("prev_turn_at"), last_turn_preview="")
            if state.get("last_rated_turn") == turn[:200]:
                state.pop("last_rated_turn", None)
            hook.save_state(folder, session, state, keep_open=True)  # whatever `$rl` does
        cwd = core.text_or_none(payload.get("cwd"))
        said = core.run_command(hook, session, state, folder, sub, comment, cwd)
        hook.log(f"applied from notify (the prompt hook did not run): {said}")
        return
    prompt = inputs[-1] if inputs else (core.pending_prompt(state, turn=turn) or "")
    if turn is None:  # the turn Stop recorded, when it is this prompt and answer again
        turn = core.same_turn(hook, state, prompt, response)
    context = [
        {"role": "user", "content": core.cap(m, core.MAX_CONTEXT_CHARS)} for m in inputs[:-1]
    ]
    fields = core.turn_fields(
        session, turn, prompt, response, payload,
        context=context[-core.MAX_CONTEXT :], event="codex-notify", transcript=None,
    )  # fmt: skip
    core.record_turn(hook, session, state, folder, fields)
