"""`rltray hooks install|uninstall|status`: the terminal face of the agent installers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.hooks.base import Agent
    from rltray.app.paths import Paths


def run(ctx: Context, action: str, agent_name: str, lessons_file: bool = False,
        accept: bool = False, reply_buttons: str | None = None) -> int:
    from rltray.app.hooks import registry

    if lessons_file and action != "install":
        raise UserError("--lessons-file goes with `rltray hooks install` only "
                        "(uninstall removes the file too).", ExitCode.USAGE)
    if reply_buttons is not None and (action != "install" or agent_name != "openclaw"):
        raise UserError("--reply-buttons goes with `rltray hooks install --agent openclaw` "
                        "only (buttons under replies are an OpenClaw plugin setting).",
                        ExitCode.USAGE)
    agents = registry.all_agents() if agent_name == "all" else [registry.get(agent_name)]
    service = ctx.service()
    if action == "status":
        return _status(ctx, agents)
    if action == "install":
        from rltray.app.hooks.base import refuse_unsafe_program

        _refuse_when_nothing_to_install(agents, agent_name)
        refuse_unsafe_program(agents, service.paths, ctx.env)  # a program others can replace
    failed: list[tuple[Agent, UserError]] = []
    for agent in agents:
        if action == "install" and getattr(agent, "consent", None) and agent.detect():
            agent.accepted = accept or _accepts(ctx, agent)  # type: ignore[attr-defined]
        if reply_buttons is not None:
            agent.reply_buttons = reply_buttons == "on"  # type: ignore[attr-defined]
        try:  # one agent's unreadable file must not leave the others as they were
            report = (agent.install(service.paths) if action == "install"
                      else agent.uninstall(service.paths))  # fmt: skip
        except UserError as exc:
            if len(agents) == 1:
                raise
            failed.append((agent, exc))
            continue
        if lessons_file:
            report.lines += _lessons_file(agent, service.paths)
        ctx.say((agent.display_name, "bold"))
        for line in report.lines:
            ctx.say(f"  {line}")
    service.store.log_event("hooks", f"hooks {action} for {agent_name}")
    if action == "install" and len(failed) < len(agents):
        _say_where_the_hooks_point(ctx, agents[0].command("claude-stop", service.paths))
    for agent, exc in failed:
        ctx.warn(f"{agent.display_name}: {exc}")
    if failed:
        names = ", ".join(agent.display_name for agent, _ in failed)
        raise UserError(f"{action} did not finish for {names} (said above); every other "
                        "agent is done.", failed[0][1].exit_code)
    return ExitCode.OK


def _accepts(ctx: Context, agent: Agent) -> bool:
    """An agent whose install gives rltray more than hooks (OpenClaw's conversation access)
    says what first; only a yes on a terminal, or the flag, accepts."""
    isatty = getattr(ctx.stdin, "isatty", None)
    if isatty is None or not isatty():
        return False
    ctx.say(agent.consent)  # type: ignore[attr-defined]
    return ctx.confirm(f"Give {agent.display_name} rltray's plugin with conversation access?")


def _lessons_file(agent: Agent, paths: Paths) -> list[str]:
    """`--lessons-file`: Claude Code's opt-in rules file; other agents have no such file."""
    from rltray.app.hooks.claude_code import ClaudeCode

    if isinstance(agent, ClaudeCode):
        return agent.install_lessons_file(paths).lines if agent.detect() else []
    return [f"{agent.display_name} has no rules folder for rltray's own file (its instructions "
            "files are yours), so its lessons come through the SessionStart hook only."]


def _say_where_the_hooks_point(ctx: Context, argv: list[str]) -> None:
    """The hooks hold absolute paths: moving the folder they name stops capture without a
    word, so say it while the user is looking (doctor checks it later)."""
    ctx.say(
        f"The hooks run {argv[0]} {argv[3]}; if either moves (this folder, its virtual "
        "environment or the app), capture stops until you run `rltray hooks install` again."
    )


def _refuse_when_nothing_to_install(agents: list, agent_name: str) -> None:
    """An install that would install nothing is a failure the user must see, not exit 0."""
    missing = [a for a in agents if not a.detect()]
    if agent_name != "all" and missing:
        raise UserError(missing[0].not_found_report().lines[0], ExitCode.NOT_AVAILABLE)
    if len(missing) == len(agents):
        names = " nor ".join(a.display_name for a in agents)
        raise UserError(
            f"Neither {names} was found on this machine (no config folder, no program on "
            "PATH); nothing installed. Install an agent, then run `rltray hooks install` again.",
            ExitCode.NOT_AVAILABLE,
        )


def _status(ctx: Context, agents: list) -> int:
    from rich.table import Table
    from rich.text import Text
    from rltray.app.words import local_time

    service = ctx.service()
    arrived = service.status()["agents"]
    table = Table("agent", "hooks", "events arrived")
    notes: list[str] = []
    for agent in agents:
        st = agent.status(service.paths)
        pieces = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in st.pieces.items())
        info = arrived.get(agent.name)
        if info:
            events = f"{info['turns']} turns, last {local_time(info['last_event_at'])}"
        else:
            events = "never"
        table.add_row(
            Text(agent.display_name),
            Text(pieces or ("installed" if st.installed else "not installed")),
            Text(events),
        )
        notes += st.notes
    ctx.out.print(table)
    # Notes are instructions (trust the hooks in /hooks): full lines, not a wrapped cell.
    for note in notes:
        ctx.say(note)
    return ExitCode.OK
