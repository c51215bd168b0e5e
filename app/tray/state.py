"""What the tray shows, computed from the service in one snapshot, with no GUI library.

Why a separate module: the icon, its tooltip and every label of the menu are
functions of one ``TrayState``; computing it apart from pystray lets tests
check each line against a real store without a display, and lets the tray
compare two snapshots to redraw only when something changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rltray.app.runtime import Runtime
    from rltray.app.service import Service

IDLE, TRAINING, ATTENTION = "idle", "training", "attention"
LAST_ANSWER_CHARS = 48  # the "Rate last answer" submenu names the answer in one short line


@dataclass(frozen=True)
class VersionChoice:
    """One line of the Roll back submenu."""

    version: int | None  # None: the plain base model
    label: str
    active: bool


@dataclass(frozen=True)
class TrayState:
    mode: str  # IDLE / TRAINING / ATTENTION
    percent: int | None  # training progress, when training
    status: str  # first menu line: ratings and the active version
    next_training: str  # second menu line: what the next training waits for
    problems: tuple[str, ...]  # why the icon asks for attention, one sentence each
    paused: bool  # automatic training paused
    training: bool
    snoozed_until: str | None  # local "HH:MM" / "tomorrow HH:MM", None when not snoozed
    versions: tuple[VersionChoice, ...] = field(default=())
    # The turn "Rate last answer" rates: the newest when the menu was drawn, so a click
    # rates the answer the menu named, not one another agent finished since.
    last_turn: int | None = None
    last_label: str = ""  # "Turn 12 · fix the parser", shown in that submenu

    @property
    def tooltip(self) -> str:
        head = f"rltray — training {self.percent or 0}%" if self.training else "rltray"
        lines = [head, self.status, *self.problems]
        return "\n".join(lines)


def snapshot(runtime: Runtime) -> TrayState:
    """Read everything the tray shows; never raises (a failing read becomes a problem line)."""
    service = runtime.service
    problems: list[str] = []
    settings = service.settings()  # the last valid copy while config.toml is broken
    paused = not settings.training.automatic
    broken = service.settings_problem()
    if broken:  # say it, keep the tray, capture and notifications up
        problems.append(f"config.toml is not in effect: {broken}")
    if not settings.training.base_model:
        problems.append("No model is set up for training (Open settings → Model).")
    status = runtime.status()
    training = status["training"]
    progress = training.get("progress") or {}
    running = bool(training.get("running"))
    untrained = int(status.get("untrained") or 0)
    active = training.get("active_version")
    line = f"{untrained} new rating{'s' if untrained != 1 else ''} · " + (
        f"active v{active}" if active else "base model"
    )
    problems.extend(_stopped_problem(training.get("stopped")) or _run_problem(service))
    versions = service.versions()
    problems.extend(_publish_problem(versions))
    notifier = runtime.notifier
    if notifier is not None:
        problems.extend(notifier.delivery_problems())
    percent = int(float(progress.get("percent") or 0)) if running else None
    if running:
        next_line = f"Training now… {percent}%"
    else:
        next_line = "Next training: " + str(training.get("next_training") or "not checked yet")
    snoozed = runtime.snooze_end()  # an ended snooze is no snooze (the menu offered to end it)
    last = service.store.newest_turn()
    return TrayState(
        mode=TRAINING if running else (ATTENTION if problems else IDLE),
        percent=percent,
        status=line,
        next_training=next_line,
        problems=tuple(problems),
        paused=paused,
        training=running,
        snoozed_until=None if snoozed is None else _when(snoozed),
        versions=tuple(_versions(versions, active, settings.training.base_model)),
        last_turn=None if last is None else last.id,
        last_label="" if last is None else _answer_label(last),
    )


def _answer_label(turn: Any) -> str:
    """One short menu line naming a turn: its id and what was asked (or answered)."""
    from rltray.app.words import preview

    return f"Turn {turn.id} · {preview(turn.prompt or turn.response, LAST_ANSWER_CHARS)}"


def _run_problem(service: Service) -> list[str]:
    """The newest run failed: say so until a later run succeeds."""
    runs = service.runs(limit=1)
    if runs and runs[0]["status"] == "failed":
        error = (runs[0].get("error") or "no reason recorded").strip().splitlines()
        return [f"The last training run failed: {error[-1][:160] if error else ''}"]
    return []


def _stopped_problem(stopped: dict[str, Any] | None) -> list[str]:
    """Automatic training gave up (the failure budget): why, and the trainer's last line."""
    if not stopped:
        return []
    line = f"{str(stopped['message']).capitalize()}. Last: {str(stopped.get('cause'))[:160]}"
    tail = [ln for ln in str(stopped.get("log_tail") or "").splitlines() if ln.strip()]
    return [line] + ([f"trainer.log: {tail[-1][:160]}"] if tail else [])


def _publish_problem(rows: list[dict[str, Any]]) -> list[str]:
    """The active version could not be published to Ollama: the agents still run the old one."""
    for row in rows:
        if row.get("active") and str(row.get("published") or "").startswith("not published"):
            return [f"v{row['version']} is {row['published']}"]
    return []


def _versions(rows: list[dict[str, Any]], active: int | None, base_model: str = ""
              ) -> list[VersionChoice]:
    """The versions the tray offers: usable ones of the model set up now (one of another
    base would be served on a model it was never judged on; rollback refuses it)."""
    from types import SimpleNamespace

    from rltray.app.training.jobbuild import other_base

    choices = []
    for row in rows:
        if row.get("status") == "rejected":
            continue
        if other_base(SimpleNamespace(base_model=row.get("base_model")), base_model):
            continue
        metrics = row.get("metrics") or {}
        score = metrics.get("auroc_new")
        date = str(row.get("created_at") or "")[:10]
        label = f"v{row['version']} · {date}"
        if isinstance(score, (int, float)):
            label += f" · held-out {score:.2f}"
        if row.get("ollama_tag"):
            label += f" · {row['ollama_tag']}"
        choices.append(VersionChoice(row["version"], label, row["version"] == active))
    choices.append(VersionChoice(None, "Base model (no adapter)", active is None))
    return choices


def _when(moment: Any) -> str:
    from datetime import datetime

    now = datetime.now(moment.tzinfo) if getattr(moment, "tzinfo", None) else datetime.now()
    return f"{moment:%H:%M}" if moment.date() == now.date() else f"{moment:%a %H:%M}"
