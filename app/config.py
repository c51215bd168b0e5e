"""User settings: declared once as pydantic models, kept in config.toml with the user's comments.

Why this shape (Datasette's SETTINGS habit): each setting is written down once,
with its type, default, allowed values and help text, and everything else is
derived from that declaration: validation, the documented TOML file, the CLI's
``rltray settings`` listing and the settings page. A test fails if a setting
has no help text.

The file is edited with tomlkit so a hand-edited config keeps its comments and
order; it is written 0600 through a temp file and a rename, and a symlinked
config.toml is refused rather than followed. A broken file is reported in one
sentence naming the file, line and key, and is never overwritten.

Over 30 KB on purpose: the declarations are most of it, and the reading rules that
depend on them (errors by file and line, what a newer rltray's file may hold) stay
beside them.
"""

from __future__ import annotations

import os
import re
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import tomlkit
import tomlkit.exceptions
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from rltray.app import basemodel
from rltray.app.errors import UserError
from rltray.app.fileio import UnsafePathError, read_regular_file, write_private_atomic
from rltray.app.paths import Paths, not_yours

#: The trainer's hyperparameter names (``trainer/presets.py`` HYPER_FIELDS; the app does
#: not import the trainer, tests/app/test_config.py ties the two): what a
#: ``[training.hyper]`` table may set for the ``custom`` preset.
TRAINER_HYPER_FIELDS = (
    "adv_clip", "alpha", "auroc_tolerance", "batch_size", "beta", "degen_cap", "delta_hi",
    "delta_lo", "dropout", "ema_decay", "epochs", "gate_profile", "general_prompts",
    "grad_clip", "guard_max_gap", "guard_turns", "kl_cap", "kl_cap_total", "lr",
    "max_seq_len", "nll_cap", "rank", "rated_nll_cap", "ref_prompts", "ref_tokens", "rho_hi",
    "rho_lo", "step_examples", "target_modules", "warmup_steps", "weight_decay",
)  # fmt: skip

_QUIET = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


class ConfigError(UserError):
    """The settings file or a new value is invalid; the message is one sentence naming the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _agents_settings() -> type[_Section]:
    """``agents.<name>``: one switch per agent of ``hooks/registry.py`` (a new agent gets
    its switch from its registry line; ingest drops the records of one switched off)."""
    from rltray.app.hooks import registry

    switches: dict[str, Any] = {
        entry.setting: (
            bool,
            Field(
                True,
                description=f"Capture turns from {entry.display_name} ({entry.captures}).",
                json_schema_extra={"label": f"Capture {entry.display_name}"},
            ),
        )
        for entry in registry.AGENTS
    }
    model = create_model("AgentsSettings", __base__=_Section, **switches)
    model.__doc__ = "Which coding agents rltray captures turns from."
    return model


AgentsSettings = _agents_settings()


def _lessons_settings() -> type[_Section]:
    """``lessons.<name>``: per agent of ``hooks/registry.py``, whether it is told the user's
    lessons at session start (app/lessons/); off until the user turns it on, because
    it puts the user's own comments into the agent's context."""
    from rltray.app.hooks import registry

    switches: dict[str, Any] = {
        entry.setting: (
            bool,
            Field(
                False,
                description=(
                    f"Tell {entry.display_name} the lessons drawn from your rated answers "
                    "at the start of each session (off until you turn it on)."
                ),
                json_schema_extra={"label": f"Lessons for {entry.display_name}"},
            ),
        )
        for entry in registry.lesson_agents()
    }
    model = create_model("LessonsSettings", __base__=_Section, **switches)
    model.__doc__ = "Which coding agents are told the lessons from the user's ratings."
    return model


LessonsSettings = _lessons_settings()


class NotifySettings(_Section):
    """When rltray asks for a rating."""

    enabled: bool = Field(
        True,
        description="Show a notification with Good / Bad buttons after each captured turn.",
        json_schema_extra={"label": "Ask for ratings"},
    )
    ask: Literal["every", "nth", "long", "never"] = Field(
        "every",
        json_schema_extra={"label": "Ask about"},
        description=(
            "Which turns to ask about: every turn, every Nth turn (see every_nth), only turns "
            "that took longer than min_turn_seconds, or never (rate from the tray or CLI)."
        ),
    )
    every_nth: int = Field(
        3,
        ge=1,
        le=1000,
        description='With ask = "nth": ask about one turn in this many.',
        json_schema_extra={"label": "Every Nth turn"},
    )
    min_turn_seconds: int = Field(
        60,
        ge=0,
        le=86400,
        description='With ask = "long": ask only about turns that took at least this long.',
    )
    expire_minutes: int = Field(
        15,
        ge=0,
        le=1440,
        description=(
            "Take a rating notification down after this many minutes (0: when the desktop "
            "decides). A newer turn of the same session replaces it on screen either way."
        ),
    )
    training: bool = Field(
        True,
        json_schema_extra={"label": "When a training round ends"},
        description=(
            "Tell, quietly, when a training round ends: a new version is active, a round "
            "was rejected and why, or training failed."
        ),
    )
    quiet_hours: str = Field(
        "",
        description=(
            "Daily local-time window with no notifications and no training start, "
            'as "HH:MM-HH:MM" (may cross midnight, e.g. "22:00-08:00"); empty for none.'
        ),
        json_schema_extra={"expect": 'empty or a time range like "22:00-08:00"'},
    )

    @field_validator("quiet_hours")
    @classmethod
    def _quiet_hours(cls, value: str) -> str:
        parse_quiet_hours(value)
        return value.strip()


class TrainingSettings(_Section):
    """What to train and when."""

    base_model: str = Field(
        "",
        description=(
            "The local open-weights model to train: a folder or a Hugging Face id already in "
            "the local cache; empty until chosen in the setup wizard."
        ),
    )
    backend: Literal["auto", "torch", "mlx"] = Field(
        "auto", description="Training library: auto uses mlx on Apple Silicon and torch elsewhere."
    )
    preset: Literal["careful", "balanced", "aggressive", "custom"] = Field(
        "balanced",
        description=(
            "How far each round may move the model: careful takes small steps, balanced "
            "larger ones; custom is balanced with the values of the [training.hyper] table "
            "in config.toml. aggressive (bigger steps to balanced's drift cap) is no longer "
            "offered by the setup wizard; the measurements are in rltray's bench/README.md."
        ),
    )
    min_ratings: int = Field(
        32, ge=4, le=10000, description="Start a training round once this many new ratings wait."
    )
    require_idle_minutes: int = Field(
        10,
        ge=0,
        le=1440,
        description="Train only after the keyboard and mouse were idle this long (0: any time).",
    )
    require_ac_power: bool = Field(
        True,
        description="Train only while a laptop is plugged in (desktops always qualify).",
        json_schema_extra={"label": "Require AC power"},
    )
    automatic: bool = Field(
        True,
        description=(
            "Start training rounds on their own when enough ratings wait and the machine is "
            "idle (the tray's Pause automatic training unticks this)."
        ),
    )
    python: str = Field(
        "",
        json_schema_extra={"label": "Trainer Python"},
        description=(
            "The Python interpreter that runs the trainer (a virtual environment with torch or "
            "mlx); empty to use rltray's own interpreter when it can train."
        ),
    )
    trust_remote_code: bool = Field(
        False,
        description=(
            "Allow a model's own Python code from its hub folder to run while training "
            "(needed by a few architectures; only turn on for models you trust)."
        ),
    )
    # -- training on a bigger machine (issue 26): Ray Jobs over SSH; the SSH key and the
    # Ray token live in the OS keyring (`rltray secrets set remote-ssh-key|ray-token`)
    remote_host: str = Field(
        "",
        json_schema_extra={"label": "Remote training host"},
        description=(
            "Train on this machine (a GPU box or a cluster's head node) through Ray Jobs "
            "over SSH; empty to train here."
        ),
    )
    remote_port: int = Field(22, ge=1, le=65535, description="The remote machine's SSH port.")
    remote_user: str = Field("", description="The SSH login on the remote machine.")
    remote_host_key: str = Field(
        "",
        json_schema_extra={"label": "Remote SSH host key"},
        description=(
            "The remote machine's SSH host key fingerprint (SHA256:...), accepted once after "
            "comparing it; a different key is refused."
        ),
    )
    remote_dashboard_port: int = Field(
        8265, ge=1, le=65535,
        description="The Ray dashboard's port on the remote's localhost (reached through SSH).",
    )  # fmt: skip
    remote_dir: str = Field(
        "rltray-remote",
        json_schema_extra={"label": "Remote folder"},
        description="The remote folder for run folders and parent adapters (relative: home).",
    )
    remote_python: str = Field(
        "python3",
        json_schema_extra={"label": "Remote trainer Python"},
        description="The remote Python that has rltray's trainer, torch and peft installed.",
    )
    remote_gpus: int = Field(
        1, ge=0, le=64, description="GPUs each remote round asks Ray for.",
        json_schema_extra={"label": "Remote GPUs"},
    )  # fmt: skip
    remote_stop_grace_s: int = Field(
        300, ge=10, le=3600, json_schema_extra={"label": "Remote stop grace (seconds)"},
        description="Seconds Ray waits for a stopped round to checkpoint before killing it.",
    )  # fmt: skip
    remote_base_model: str = Field(
        "",
        description="The base model's path or id on the remote machine; empty: the same name.",
    )
    hyper: dict[str, float | int | bool | str] = Field(
        default_factory=dict,
        description=(
            "With preset custom: the trainer's hyperparameters to change from balanced "
            "(a [training.hyper] table in config.toml, e.g. lr = 5e-5, epochs = 3); the "
            "trainer checks each value when a round starts."
        ),
        json_schema_extra={"table": True},
    )

    @field_validator("hyper")
    @classmethod
    def _hyper(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(TRAINER_HYPER_FIELDS))
        if unknown:
            raise ValueError(
                f"{unknown[0]!r} is not a trainer hyperparameter; the known ones are "
                + ", ".join(TRAINER_HYPER_FIELDS)
            )
        return value


class OllamaSettings(_Section):
    """Where trained adapters are published."""

    model: str = Field(
        "",
        description=(
            "The Ollama model that adapters are published on top of (e.g. qwen2.5-coder:7b); "
            "empty to skip publishing."
        ),
    )
    host: str = Field(
        "http://127.0.0.1:11434",
        description="URL of the Ollama server.",
        json_schema_extra={"expect": "an http:// or https:// URL"},
    )
    keep_versions: int = Field(
        3,
        ge=1,
        le=100,
        description=(
            "How many published versions keep their own Ollama tag (<model>-rltray:vN); older "
            "tags are deleted, never the active one's."
        ),
    )
    num_ctx: int = Field(
        65536,
        json_schema_extra={"label": "Context length"},
        ge=2048,
        le=1048576,
        description=(
            "Context length (tokens) set on the published models; coding agents need at least "
            "64k, while Ollama defaults to 4k on small GPUs."
        ),
    )
    merged_type: Literal["q8_0", "f16", "base"] = Field(
        "q8_0",
        description=(
            "How merged layers are stored when Ollama needs a merged model (0.34.1 and later): "
            "q8_0 is near-lossless, f16 exact but larger, base the base's own quantization. "
            "A layer is never re-quantized onto the base's own grid (that rounds a trained "
            "change away) and one that would lose over 20% of its change is stored as F16."
        ),
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/]+(:\d+)?/?$", value.strip()):
            raise ValueError("expected an http:// or https:// URL")
        return value.strip()


class Config(_Section):
    """Every setting, grouped into the TOML file's tables."""

    agents: AgentsSettings = Field(default_factory=AgentsSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    ollama: OllamaSettings = Field(default_factory=OllamaSettings)
    lessons: LessonsSettings = Field(default_factory=LessonsSettings)

    def get(self, key: str) -> Any:
        """The value of ``section.name``."""
        setting = _setting(key)
        return getattr(getattr(self, setting.section), setting.name)


def parse_quiet_hours(value: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """``"22:00-08:00"`` -> ((22, 0), (8, 0)); empty -> None; anything else -> ValueError."""
    text = value.strip()
    if not text:
        return None
    match = _QUIET.match(text)
    if match is None:
        raise ValueError('expected a time range like "22:00-08:00"')
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    if (h1, m1) == (h2, m2):
        raise ValueError("the start and end of quiet hours must differ")
    return (h1, m1), (h2, m2)


# -- the declaration, flattened ----------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting as the CLI and the settings page show it."""

    key: str  # "training.preset"
    section: str
    name: str
    type: str  # "bool" | "int" | "str" | "choice"
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    expect: str | None = None  # wording for values with a format (quiet hours, URLs)
    label: str = ""  # what the settings page calls it, in words (the key is its hint)

    def expectation(self) -> str:
        """What a valid value looks like, to finish the sentence "KEY must be ..."."""
        if self.expect:
            return self.expect
        if self.choices:
            return "one of " + ", ".join(f'"{c}"' for c in self.choices)
        if self.type == "bool":
            return "true or false"
        if self.type == "int":
            return f"a whole number from {self.minimum} to {self.maximum}"
        return "text in quotes"

    def parse(self, text: str) -> Any:
        """Turn command-line text into this setting's type (validation happens afterwards).

        A TOML string (``"4"``, as config.toml shows values and the help says "text in
        quotes") is read as its content: `rltray config set training.min_ratings '"4"'`
        was refused as "not '4'", which read as if 4 itself were wrong.
        """
        text = _unquoted(text)
        raw = text.strip()
        if self.type == "bool":
            lowered = raw.lower()
            if lowered in ("true", "yes", "on", "1"):
                return True
            if lowered in ("false", "no", "off", "0"):
                return False
            raise ConfigError(f"{self.key} must be {self.expectation()}, not {text!r}.")
        if self.type == "int":
            try:
                return int(raw)
            except ValueError:
                raise ConfigError(
                    f"{self.key} must be {self.expectation()}, not {text!r}."
                ) from None
        return raw if self.type == "choice" else text


def _unquoted(text: str) -> str:
    """The content of a quoted TOML string (``"4"`` or ``'4'``); other text as given."""
    raw = text.strip()
    if len(raw) < 2 or raw[0] != raw[-1] or raw[0] not in "\"'":
        return text
    try:
        value = tomlkit.parse(f"v = {raw}")["v"]
    except tomlkit.exceptions.ParseError:
        return text
    return str(value) if isinstance(value, str) else text


def describe() -> list[Setting]:
    """Every setting, in declaration order."""
    out: list[Setting] = []
    for section, field in Config.model_fields.items():
        model = typing.cast(type[BaseModel], field.annotation)
        for name, info in model.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if extra.get("table"):
                continue  # a table edited in config.toml itself, not one setting
            ann = info.annotation
            choices = tuple(typing.get_args(ann)) if typing.get_origin(ann) is Literal else None
            bounds = {type(m).__name__: m for m in info.metadata}
            kind = "choice" if choices else {bool: "bool", int: "int"}.get(ann, "str")  # type: ignore[arg-type]
            out.append(
                Setting(
                    key=f"{section}.{name}",
                    section=section,
                    name=name,
                    type=kind,
                    default=info.get_default(call_default_factory=True),
                    help=info.description or "",
                    choices=choices,
                    minimum=getattr(bounds.get("Ge"), "ge", None),
                    maximum=getattr(bounds.get("Le"), "le", None),
                    expect=typing.cast("str | None", extra.get("expect")),
                    label=str(extra.get("label") or name.replace("_", " ").capitalize()),
                )
            )
    return out


def _setting(key: str) -> Setting:
    for setting in describe():
        if setting.key == key:
            return setting
    known = ", ".join(s.key for s in describe())
    raise ConfigError(f"There is no setting {key!r}; the settings are: {known}.")


# -- reading -----------------------------------------------------------------


def load_config(paths: Paths) -> Config:
    """The settings in effect: the file's values over the defaults (no file: all defaults).

    Settings a newer rltray wrote (``from_newer``) are left out, kept in the file.
    """
    text = _read_text(paths)
    if text is None:
        return Config()
    data = _parse(paths, text).unwrap()
    if _newer_writer(text):
        data, _left = _known_only(data)
    return _validate(data, paths, text)


# Every write leaves the newest rltray version that wrote the file in its first comment
# line (a comment: any rltray reads it as one). Why (review 3, finding 7): unknown keys are
# refused, so a typo in a hand edit is reported with its file, line and the known names;
# but after a downgrade every setting a newer rltray added made the whole file invalid, and
# every setting went out of effect. A key is "from a newer rltray" only when this line says
# a newer rltray wrote the file: those are left out with doctor's warning and kept in the
# file for the upgrade back; any other unknown key still fails, as a typo would. Guessing
# typos by spelling instead would let a wrong name pass with a mere warning. The same rule
# covers a [training.hyper] name and a choice (training.preset = "turbo") this rltray does
# not know (review 4): a newer trainer's knob or preset is as much a newer setting. The
# line may end in CRLF (a file edited on Windows) and name a pre-release (0.2.0rc1).
_WRITER = re.compile(r"^# written by rltray (\S+)[ \t]*\r?$", re.MULTILINE)
_WRITER_LINE = "# written by rltray {version}"
# Tables of free names and the names this rltray knows in each (the rest of a newer file's
# table is left out like an unknown key).
_NAMED_TABLES: dict[str, tuple[str, ...]] = {"training.hyper": TRAINER_HYPER_FIELDS}


def from_newer(paths: Paths) -> tuple[str, list[str]] | None:
    """The newer rltray that wrote the settings file and the settings of its that this rltray
    leaves out (for doctor); None when this rltray knows every key, or no newer one wrote it."""
    try:
        text = _read_text(paths)
    except ConfigError:
        return None
    newer = _newer_writer(text or "")
    if text is None or newer is None:
        return None
    _known, left = _known_only(_parse(paths, text).unwrap())
    return (newer, left) if left else None


def _this_version() -> str:
    import rltray.app

    return str(rltray.app.__version__)


_VERSION = re.compile(
    r"v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?(?P<post>post|rev|r)[-_.]?(?P<post_n>\d*)|-(?P<post_implicit>\d+))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?",
    re.IGNORECASE,
)
_PRE_ORDER = {"a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3, "preview": 3}
_NO_DEV = 1 << 62  # a release without .devN sorts after its dev releases


def _version_key(version: str) -> tuple[Any, ...] | None:
    """A sortable key for a release name, read leniently as PEP 440 orders them:
    ``0.2.0.dev1 < 0.2.0a1 < 0.2.0rc1 < 0.2.0 < 0.2.0.post1 < 0.2.1`` (trailing zeros
    do not count: ``0.2 == 0.2.0``). None for what is no release name, and for
    ``0+unknown`` (``rltray.app.__version__`` of a source tree never installed): no file is
    then taken as newer, so unknown keys stay refused."""
    found = _VERSION.fullmatch(version.strip())
    if found is None or (found["local"] or "").lower() == "unknown":
        return None
    release = [int(part) for part in found["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    dev = _NO_DEV if found["dev_n"] is None else int(found["dev_n"] or 0)
    post_n = found["post_n"] if found["post"] else found["post_implicit"]
    post = -1 if post_n is None else int(post_n or 0)
    if found["pre"]:
        pre: tuple[int, ...] = (_PRE_ORDER[found["pre"].lower()], int(found["pre_n"] or 0))
    elif dev != _NO_DEV and post < 0:
        pre = (0,)  # 0.2.0.dev1 comes before 0.2.0a1
    else:
        pre = (4,)  # the release itself
    return (tuple(release), pre, post, dev)


def _newer_writer(text: str) -> str | None:
    """The version in the file's writer line when it is newer than this rltray, else None."""
    found = _WRITER.search(text)
    if found is None:
        return None
    theirs, ours = _version_key(found.group(1)), _version_key(_this_version())
    return found.group(1) if theirs and ours and theirs > ours else None


def _known_only(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data`` without the tables, keys, [training.hyper] names and choices this rltray does
    not declare, and what was left out (``[table]``, ``table.key``, ``table.key = value``)."""
    fields = {name: f.annotation for name, f in Config.model_fields.items()}
    out: dict[str, Any] = {}
    tables: list[str] = []
    left: list[str] = []
    for table, values in data.items():
        model = fields.get(table)
        if model is None:
            tables.append(f"[{table}]")
            continue
        if not (isinstance(values, dict) and isinstance(model, type)
                and issubclass(model, BaseModel)):  # fmt: skip
            out[table] = values
            continue
        kept: dict[str, Any] = {}
        for key, value in values.items():
            field = model.model_fields.get(key)
            name = f"{table}.{key}"
            if field is None:
                left.append(name)
            elif name in _NAMED_TABLES and isinstance(value, dict):
                known = _NAMED_TABLES[name]
                kept[key] = {k: v for k, v in value.items() if k in known}
                left += [f"{name}.{k}" for k in value if k not in known]
            elif (typing.get_origin(field.annotation) is Literal and isinstance(value, str)
                  and value not in typing.get_args(field.annotation)):  # fmt: skip
                left.append(f"{name} = {value!r}")
            else:
                kept[key] = value
        out[table] = kept
    return out, tables + left


def _newer_values(data: dict[str, Any]) -> dict[str, Any]:
    """The values of settings this rltray knows that ``_known_only`` left out of ``data``: a
    choice it lacks (``training.preset``) and a named table's unknown names
    (``training.hyper``), so ``save_config`` writes them back instead of the default."""
    known, _left = _known_only(data)
    out: dict[str, Any] = {}
    for table, values in known.items():
        given = data.get(table)
        if not isinstance(values, dict) or not isinstance(given, dict):
            continue
        for key, value in given.items():
            name = f"{table}.{key}"
            if name in _NAMED_TABLES and isinstance(value, dict):
                extra = {k: v for k, v in value.items() if k not in _NAMED_TABLES[name]}
                if extra:
                    out[name] = extra
            elif key not in values and key in _section_fields(table):
                out[name] = value
    return out


def _section_fields(table: str) -> set[str]:
    """The setting names of ``[table]``."""
    model = Config.model_fields[table].annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        return set(model.model_fields)
    return set()


def _stamped(text: str) -> str:
    """``text`` with its writer line naming the newest rltray that wrote it (this one, unless
    a newer one did: its settings must stay recognisable as its own). Only the version is
    replaced, so a CRLF file keeps its line ends."""
    ours = _this_version()
    found = _WRITER.search(text)
    if found is not None:
        theirs, mine = _version_key(found.group(1)), _version_key(ours)
        if theirs and mine and theirs > mine:
            return text
        return text[: found.start(1)] + ours + text[found.end(1) :]
    newline = "\r\n" if "\r\n" in text else "\n"
    return _WRITER_LINE.format(version=ours) + newline + text


def _read_text(paths: Paths) -> str | None:
    path = paths.config
    if not path.exists() and not path.is_symlink():
        return None

    def strict(st: os.stat_result) -> None:  # it names programs rltray runs
        why = not_yours(path, "The settings file", st)
        if why:
            raise ConfigError(why)

    try:
        data = read_regular_file(path, check=strict)
    except UnsafePathError:
        raise ConfigError(
            f"{path} is a symbolic link or not a regular file; rltray does not follow links, "
            "so replace it with a regular file."
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; save it as UTF-8.") from None


def _parse(paths: Paths, text: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        reason = re.sub(r" at line \d+ col \d+$", "", str(exc))
        raise ConfigError(
            f"{paths.config}, line {exc.line}: this is not valid TOML ({reason})."
        ) from None


def _validate(data: dict[str, Any], paths: Paths | None = None, text: str = "") -> Config:
    try:
        return Config.model_validate(data, strict=True)
    except ValidationError as exc:
        raise ConfigError(_explain(exc.errors()[0], data, paths, text)) from None


def _explain(err: Any, data: dict[str, Any], paths: Paths | None, text: str) -> str:
    loc = [str(p) for p in err["loc"]]
    where = ""
    if paths is not None:
        line = _line_of(text, loc[0], loc[1] if len(loc) > 1 else None)
        where = f"{paths.config}, line {line}: " if line else f"{paths.config}: "
    if len(loc) == 1:
        if err["type"] == "extra_forbidden":
            tables = ", ".join(f"[{s}]" for s in Config.model_fields)
            return (f"{where}[{loc[0]}] is not a settings table rltray knows (known: {tables}); "
                    f"fix its name, or delete it if a newer rltray than {_this_version()} wrote "
                    "it.")  # fmt: skip
        return f"{where}[{loc[0]}] must be a table of settings."
    key = f"{loc[0]}.{loc[1]}"
    if err["type"] == "extra_forbidden":
        known = ", ".join(s.name for s in describe() if s.section == loc[0])
        return (f"{where}{key} is not a setting rltray knows (known in [{loc[0]}]: {known}); "
                f"fix its name, or delete it if a newer rltray than {_this_version()} wrote "
                "it.")  # fmt: skip
    if key not in {s.key for s in describe()}:  # a table (training.hyper): pydantic's words
        message = str(err.get("msg", "is not valid")).removeprefix("Value error, ")
        name = f" {loc[2]}" if len(loc) > 2 else ""
        return f"{where}[{key}]{name}: {message}."
    setting = _setting(key)
    found = data.get(loc[0], {}).get(loc[1]) if isinstance(data.get(loc[0]), dict) else None
    return f"{where}{key} must be {setting.expectation()}, not {found!r}."


def _line_of(text: str, section: str, name: str | None) -> int | None:
    """1-based line of ``[section]`` or of ``name = ...`` inside it (best effort)."""
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"^\s*\[\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\s*(#.*)?$", line)
        if header:
            current = header.group(1).strip("\"' ")
            if name is None and current == section:
                return number
            continue
        if name is None:
            continue
        if current == section and re.match(rf"^\s*[\"']?{re.escape(name)}[\"']?\s*=", line):
            return number
        if current is None and re.match(rf"^\s*{re.escape(section)}\.{re.escape(name)}\s*=", line):
            return number
    return None


# -- writing -----------------------------------------------------------------


def save_config(paths: Paths, config: Config) -> None:
    """Write ``config``; an existing file keeps its comments, order and untouched keys."""
    text = _read_text(paths)
    fresh = text is None
    doc = _fresh_document() if text is None else _parse(paths, text)
    newer = {} if text is None or not _newer_writer(text) else _newer_values(doc.unwrap())
    for setting in describe():
        value = config.get(setting.key)
        if setting.key in newer:  # a newer rltray's value, left out when read: kept
            theirs = newer[setting.key]
            if isinstance(theirs, dict) and isinstance(value, dict):
                value = {**value, **theirs}
            elif value == setting.default:  # what it read as: unchanged since
                value = theirs
        table = doc.get(setting.section)
        if table is not None and setting.name in table:
            if table[setting.name] != value:
                table[setting.name] = _keep_comment(table[setting.name], value)
        elif fresh or value != setting.default:
            if table is None:
                table = tomlkit.table()
                doc.add(setting.section, table)
            if fresh:
                for line in _help_lines(setting):
                    table.add(tomlkit.comment(line))
                table.add(setting.name, value)
            else:  # item assignment: a section split in two (``[training.hyper]`` after
                table[setting.name] = value  # another table) is a proxy with no ``add``
    paths.ensure()
    text = _stamped(tomlkit.dumps(doc))
    write_private_atomic(paths.config, text.encode("utf-8"), mode=0o600)


def _keep_comment(old: Any, value: Any) -> Any:
    """A new value item that keeps the old line's inline ``# comment``."""
    item = tomlkit.item(value)
    trivia = getattr(old, "trivia", None)
    if trivia is not None and trivia.comment:
        item.trivia.comment_ws = trivia.comment_ws
        item.trivia.comment = trivia.comment
    return item


def _fresh_document() -> tomlkit.TOMLDocument:
    doc = tomlkit.document()
    doc.add(tomlkit.comment("rltray settings: edit here or in the settings window."))
    doc.add(tomlkit.comment("Each setting's help is above it; comments you add are kept."))
    return doc


def _help_lines(setting: Setting) -> list[str]:
    text = setting.help
    if setting.choices:
        text += " One of: " + ", ".join(setting.choices) + "."
    elif setting.type == "int":
        text += f" Range {setting.minimum} to {setting.maximum}."
    return textwrap.wrap(text, 86)


# Rules checked when a value is *set* (the CLI, the settings page, the wizard: all through
# ``Settings.save_many``), never when config.toml is read: a model folder on an unplugged
# disk must flag that one setting (doctor says so), not put every other setting out of effect.
_ON_SET: dict[str, Callable[[str], str | None]] = {basemodel.KEY: basemodel.problem}


def refusal_on_set(key: str, value: Any, current: Any) -> str | None:
    """Why ``value`` may not be set for ``key`` now (one sentence), or None.

    A value equal to ``current`` is not checked again: a form that re-sends the
    whole page must not fail on a setting the user did not touch.
    """
    check = _ON_SET.get(key)
    if check is None:
        return None
    parsed = _setting(key).parse(value) if isinstance(value, str) else value
    if not isinstance(parsed, str) or parsed.strip() == str(current).strip():
        return None
    return check(parsed)


def set_value(paths: Paths, key: str, value: Any) -> Config:
    """Change one setting, validate, write; return the new config.

    Text (from the CLI or a form) is parsed to the setting's declared type first.
    """
    setting = _setting(key)
    parsed = setting.parse(value) if isinstance(value, str) else value
    current = load_config(paths)
    data = current.model_dump()
    data[setting.section][setting.name] = parsed
    try:
        updated = Config.model_validate(data, strict=True)
    except ValidationError as exc:
        raise ConfigError(_explain(exc.errors()[0], data, None, "")) from None
    save_config(paths, updated)
    return updated
