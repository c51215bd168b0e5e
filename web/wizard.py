"""Setup wizard: agents, model, backend, preset, schedule, notifications — one page, six steps.

The agents step also asks whether each agent is told the lessons (off by default), with
the Lessons page's own switches (``lesson_switches.html``), so both say the same thing.

Each step reads live state through a JSON route below and saves through the
same calls the CLI uses: hooks through the agent plugins (`rltray hooks
install`), settings through ``config.set_value`` (settings.save_values), the
test notification through the service's notifier. The wizard opens by itself
until it was finished once (``needs_setup``), and can be re-run any time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flask import Blueprint, jsonify, render_template, request
from rltray.app.errors import UserError
from rltray.app.userpath import user_path
from rltray.web import lessons_view, machine, models, ollama_models
from rltray.web.settings import save_values
from rltray.web.state import state

bp = Blueprint("wizard", __name__)
ENV_JOB = "trainer environment"
#: (name, what it does, what the measurements say of it, in words). The numbers live in one
#: place, bench/README.md (learning_smollm2.py, three preferences x two seeds), which the
#: page names; copying them here let them go stale when the presets or the gate changed.
PRESETS = (
    (
        "careful",
        "Small, slow steps: each round moves the model a little and stays close to it.",
        "Measured: keeps the model's other answers as they were; learns a preference over "
        "more rounds.",
    ),
    (
        "balanced",
        "The default: learns your preferences in a few rounds without drifting far.",
        "Measured: learns most preferences in a round; a round that costs the model more "
        "than the gate allows is rejected and the active version stays. The gate does "
        "not see every loss: one round it kept left the asked-for function out of more "
        "answers than the base did.",
    ),
    (
        "custom",
        "Balanced, with the trainer's values you set in config.toml's [training.hyper] "
        "table; for experiments.",
        "Not measured: it is whatever you set.",
    ),
)
#: Presets the config still accepts but the wizard no longer offers: (name, why), shown
#: only to a user whose config names one, so the page says what their rounds use. The
#: measurements behind each are in bench/README.md ("Held to issue 20's KL line").
RETIRED = {
    "aggressive": (
        "No longer offered: measured against balanced, it learned about as much, cost the "
        "model more of what it could do every time, and most of the rounds the gate kept "
        "were outside the limits the gate is meant to hold. Your settings still use it; "
        "pick another preset to switch."
    ),
}
#: Where the measured results are (shown under the presets).
RESULTS = "bench/README.md in rltray's source (learning_smollm2.py)"



@bp.get("/setup")
def page() -> Any:
    from rltray.app import config

    current = state().service.settings()
    return render_template(
        "wizard.html",
        presets=PRESETS,
        retired=RETIRED,
        results=RESULTS,
        current=current,
        first_run=state().service.needs_setup(),
        settings={s.key: s for s in config.describe()},
        lesson_agents=lessons_view.agent_rows(),  # the agents step's lessons opt-in
    )


# -- 1. agents ------------------------------------------------------------------------


def agent_rows() -> list[dict[str, Any]]:
    from rltray.app.hooks import registry

    service = state().service
    arrived = service.store.counts().get("by_agent", {})
    rows = []
    for agent in registry.all_agents():
        st = agent.status(service.paths)
        info = arrived.get(agent.name) or {}
        rows.append(
            {
                "name": agent.name,
                "display_name": agent.display_name,
                "detected": st.detected,
                "installed": st.installed,
                "stale": st.stale,
                "hooks_disabled": st.hooks_disabled,
                "pieces": st.pieces,
                "config_files": [str(p) for p in st.config_files],
                "notes": st.notes,
                "turns": info.get("turns", 0),
                "last_event_at": info.get("last_captured_at"),
                "waiting": st.installed and not info.get("turns"),
            }
        )
    return rows


@bp.post("/api/setup/agents")
def api_agents() -> Any:
    """The agents and what each captured (a POST: it stores waiting hook records first)."""
    service = state().service
    service.ingest()  # show events the moment their hook records land
    return jsonify(agent_rows())


@bp.post("/api/setup/agents/<name>/<action>")
def api_agent_action(name: str, action: str) -> Any:
    from rltray.app.hooks import registry

    if action not in ("install", "uninstall"):
        raise UserError("The action is install or uninstall.")
    service = state().service
    agent = registry.get(name)
    if action == "install" and not agent.detect():
        raise UserError(agent.not_found_report().lines[0])
    if action == "install":  # a hook program in a folder others can write: refused, as the CLI
        from rltray.app.hooks.base import refuse_unsafe_program

        refuse_unsafe_program([agent], service.paths)
    report = agent.install(service.paths) if action == "install" else agent.uninstall(service.paths)
    service.note("hooks", f"hooks {action} for {name} (settings window)")
    return jsonify({"lines": report.lines, "agents": agent_rows()})


# -- 2. model -------------------------------------------------------------------------


def _roots() -> list[str]:
    extra = state().options.get("model_roots")
    if extra is not None:
        return [str(p) for p in extra]
    home = Path(os.environ.get("HOME") or Path.home())
    return [str(home / "models")]


def _ollama_host(current: Any) -> str:
    return str(state().options.get("ollama_host") or current.ollama.host)


def _memory() -> int | None:
    import psutil

    return int(psutil.virtual_memory().total)


def _peaks() -> dict[str, dict[str, Any]]:
    from rltray.app.training import versions

    service = state().service
    return versions.measured_peaks(service.store, service.paths)


def _fit(model: dict[str, Any], total: int | None, peaks: dict[str, Any]) -> dict[str, Any]:
    path = str(model.get("path") or model.get("blob") or "").strip()
    return models.memory_fit(model, total, peaks.get(path) if path else None)


@bp.post("/api/setup/models")
def api_models() -> Any:
    """Models found here (folders and GGUF files) and Ollama's models with their GGUF files
    (a POST: it asks Ollama, a request out)."""

    current = state().service.settings()
    roots = _roots()
    folder = (request.get_json(silent=True) or {}).get("folder")  # a JSON object or none
    folder = folder.strip() if isinstance(folder, str) else ""
    if folder:
        path = user_path(folder)
        if not path.exists():
            raise UserError(f"{folder} is not on this machine.")
        roots.append(str(path))
    if current.training.base_model and Path(current.training.base_model).exists():
        roots.append(current.training.base_model)
    total, peaks = _memory(), _peaks()
    ollama = ollama_models.list_models(_ollama_host(current), os.environ)
    blobs = {m.get("blob") for m in ollama["models"]}
    seen: set[str] = set()
    unique = []
    for m in models.scan(os.environ, roots):
        if m["path"] in seen or m["path"] in blobs:  # an Ollama blob is listed with its name
            continue
        seen.add(m["path"])
        m["memory"] = _fit(m, total, peaks)
        unique.append(m)
    for o in ollama["models"]:
        o["memory"] = _fit(o, total, peaks) if o.get("blob") else None
    if folder and not any(m["path"] == str(Path(folder).expanduser()) for m in unique):
        found_here = [m for m in unique if m["path"].startswith(str(Path(folder).expanduser()))]
        if not found_here:
            raise UserError(
                f"{folder} holds no model rltray can train: a folder with a config.json "
                "(Hugging Face layout) or a .gguf file, or a folder of those."
            )
    return jsonify(
        {
            "models": unique,
            "ollama": ollama,
            "memory_gib": round((total or 0) / 2**30, 1),
            "chosen": {"base_model": current.training.base_model, "ollama": current.ollama.model},
        }
    )


@bp.post("/api/setup/model")
def api_choose_model() -> Any:
    """Save the trainable model (and the Ollama model it pairs with); explain any mismatch.

    Choosing one of Ollama's models sends its GGUF blob as ``path`` and its name as
    ``ollama``: the trainer trains on the very file Ollama serves, a pair by construction.
    """

    body = request.get_json(silent=True) or {}
    path = str(body.get("path") or "").strip()
    problem = models.trainable_problem(path)
    if problem:
        raise UserError(problem)
    chosen = models.describe(Path(path).expanduser())
    if chosen.get("error"):
        raise UserError(chosen["error"])
    ollama_name = str(body.get("ollama") or "").strip()
    problems: list[str] = []
    same_file = False
    if ollama_name:
        listed = ollama_models.list_models(_ollama_host(state().service.settings()), os.environ)
        match = next((m for m in listed["models"] if m["name"] == ollama_name), None)
        if match is None:
            problems.append(f"Ollama has no model {ollama_name!r} now; it was saved anyway.")
        elif match.get("blob") and Path(match["blob"]) == Path(path).expanduser():
            same_file = True
        else:
            problems += models.pair(chosen, match)
    values: dict[str, Any] = {"training.base_model": path, "ollama.model": ollama_name}
    errors, changed = save_values(values)
    if errors:
        raise UserError(next(iter(errors.values())))
    return jsonify({"saved": changed, "mismatches": problems, "same_file": same_file,
                    "memory": _fit(chosen, _memory(), _peaks())})  # fmt: skip


# -- 3. backend -----------------------------------------------------------------------


@bp.post("/api/setup/backend")
def api_backend() -> Any:
    """What the trainer interpreter can train with (a POST: it runs that interpreter, once at
    a time, and answers from a short-lived cache: a page that fired fifty of these would
    otherwise start fifty torch imports)."""

    current = state().service.settings()
    python = machine.trainer_python(current.training.python)
    if python is None:  # a bundle before its trainer environment: nothing to probe
        from rltray.app.training.trainerenv.build import venv_python

        python = str(venv_python(_env_folder()))  # where `trainer-env create` puts it
        info: dict[str, Any] = {"executable": python, "error": machine.NO_TRAINER}
    else:
        info = state().probes.probe(python)
    job = state().jobs.running(ENV_JOB)
    return jsonify(
        {
            "python": python,
            "configured": current.training.python,
            "info": info,
            "backend": machine.backend(info),
            "packages": _planned_packages(),
            "env_folder": str(_env_folder()),
            "job": job.as_dict() if job else None,
        }
    )


def _env_folder() -> Path:
    return state().service.paths.home / "trainer-env"


def _planned_packages() -> list[str]:
    """What `rltray trainer-env create` would install here (its plan), for the page."""
    from rltray.app.training.trainerenv import plan as trainerenv_plan

    try:
        chosen = trainerenv_plan.plan()
    except UserError as exc:
        return [str(exc)]
    return [*chosen.pins, *chosen.requirements]


@bp.post("/api/setup/trainer-env")
def api_trainer_env() -> Any:
    """Build the trainer environment with `rltray trainer-env create`; poll /api/jobs/<id>.

    The one implementation (app/cli/trainerenv.py: built beside, proven by a real
    training step, swapped in, training.python recorded) runs as a child process;
    its pip "Progress N of M" lines drive the page's bar.
    """
    from rltray.app.bundle import cli_argv

    jobs = state().jobs
    running = jobs.running(ENV_JOB)
    if running is not None:
        return jsonify(running.as_dict())
    extra = list(state().options.get("env_cli_args") or [])
    steps = [("Building the trainer environment", cli_argv("trainer-env", "create", *extra))]
    service = state().service

    def done(job: Any) -> None:
        python = service.settings().training.python
        service.note("setup", f"created the trainer environment for {python}")
        job.result = {"python": python}

    return jsonify(jobs.start(ENV_JOB, steps, on_done=done).as_dict())


@bp.get("/api/jobs/<job_id>")
def api_job(job_id: str) -> Any:
    job = state().jobs.get(job_id)
    if job is None:
        raise UserError(f"There is no job {job_id}.")
    return jsonify(job.as_dict())


# -- 6. notifications ---------------------------------------------------------------


@bp.post("/api/setup/test-notification")
def api_test_notification() -> Any:
    """Send a test notification and say whether the desktop showed it."""
    notifier = state().runtime.notifier
    own = notifier is None
    if own:
        from rltray.app.desktop.notifier import Notifier

        notifier = Notifier(lambda *_: None)
        notifier.start().result(10)
    try:
        shown = bool(notifier.send_test().result(15))
        problems = notifier.delivery_problems()
    finally:
        if own:
            notifier.close()
    message = (
        "The test notification was shown."
        if shown
        else "The test notification was not shown: " + (" ".join(problems) or "no reason given.")
    )
    return jsonify({"shown": shown, "message": message, "problems": problems})


@bp.post("/api/setup/finish")
def api_finish() -> Any:
    """Finish setup; the answer says plainly whether training can start or waits for a model."""
    service = state().service
    service.finish_setup()
    problem = models.trainable_problem(service.settings().training.base_model.strip())
    if problem:
        message = (
            "Setup finished. rltray will capture turns and ask for ratings; training waits "
            "until you choose a model to train (step 2, Model)."
        )
    else:
        message = "Setup finished. rltray will ask for ratings and train on its own."
    return jsonify({"done": True, "trainable": problem is None, "message": message})
