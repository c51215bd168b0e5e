"""`rltray hooks install|uninstall|status`: the terminal face of the agent installers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode

if TYPE_CHECKING:
    from rltray.app.context import Context


def run(ctx: Context, action: str, agent_name: str) -> int:
    from rltray.app.hooks import registry

    agents = registry.all_agents() if agent_name == "all" else [registry.get(agent_name)]
    service = ctx.service()
    if action == "status":
        return _status(ctx, agents)
    for agent in agents:
        report = (
            agent.install(service.paths) if action == "install" else agent.uninstall(service.paths)
        )
        ctx.out.print(f"[bold]{agent.display_name}[/]")
        for line in report.lines:
            ctx.out.print(f"  {line}")
    service.store.log_event("hooks", f"hooks {action} for {agent_name}")
    return ExitCode.OK


def _status(ctx: Context, agents: list) -> int:
    from rich.table import Table
    from rltray.app.service import local_time

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
            agent.display_name,
            pieces or ("installed" if st.installed else "not installed"),
            events,
        )
        notes += st.notes
    ctx.out.print(table)
    # Notes are instructions (trust the hooks in /hooks): full lines, not a wrapped cell.
    for note in notes:
        ctx.out.print(note, soft_wrap=True)
    return ExitCode.OK
