"""`rltray use|export-model`: run a trained version inside the agents, or export it.

``rltray use codex [VERSION]`` writes a Codex profile file
(``$CODEX_HOME/rltray.config.toml``, selected with ``codex --profile rltray``) on
Codex's built-in ``ollama`` provider, which talks Ollama's Responses API
(``wire_api = "responses"``); another Ollama host gets its own provider entry
with that wire API. ``rltray use claude-code [VERSION]`` prints the environment
that points Claude Code at Ollama's Anthropic Messages API — main, background
(haiku) and subagent models all on the tag — and with ``--shell`` writes a small
launcher script. Neither touches the agents' own config files, so the rltray
hooks installed there keep capturing turns: ratings of the local model's own
answers are the best ones (on-policy).

Everything written is recorded in ``use.json`` in the data folder with the
bytes it replaced, so ``rltray use --undo`` puts each file back exactly as it
was (removes it when it did not exist) — unless the user edited it since, which
is said and left alone.

``rltray export-model VERSION --format peft|gguf-adapter|gguf-merged`` writes a
version for llama.cpp, LM Studio or vLLM users; the GGUF formats run in the
trainer's environment (``python -m rltray.trainer.export``), never in this process.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, NothingToDo, UserError

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.service import Service

PROFILE = "rltray"
MANIFEST = "use.json"
DEFAULT_HOST = "http://127.0.0.1:11434"


# -- which tag ---------------------------------------------------------------------------


def resolve_tag(service: Service, version: str | None) -> str:
    """The Ollama tag for ``version`` (default: ``…-rltray:latest``, the active version)."""
    from rltray.app.words import parse_version

    if version is None:
        return _latest_tag(service)
    number = parse_version(version)
    adapter = service.store.get_adapter(int(number or 0))
    if adapter is None:
        raise UserError(f"There is no version v{number}; `rltray versions` lists them.")
    if not adapter.ollama_tag:
        # a tag the export's prune deleted is forgotten with it (publisher._forget_pruned)
        from rltray.app.training.publisher import describe

        why = describe(adapter.metrics.get("publication")) or "not published to Ollama"
        raise UserError(
            f"v{number} is {why}; `rltray versions` shows which versions are published, and "
            f"`rltray rollback {number}` publishes it again as the active one."
        )
    return adapter.ollama_tag


def _latest_tag(service: Service) -> str:
    """``latest`` of the model set up now (``ollama.model``), which serves the active version.

    Regression (review 3 r3): it was built from the newest published version's tag, so
    after ollama.model changed `rltray use codex` pointed the agent at the old model's
    ``latest``. The name is the one the export gave it, kept in the served record; a
    record from before it was kept is named by the export's own rule, the trainer's
    ``ollama_names`` (standard library only, the one trainer module the app imports: an
    import-linter contract in pyproject.toml says so), where the trainer is installed. The
    app bundle has none (review 4: `use` failed there on the import).
    """
    from rltray.app.training import served

    model = service.settings(strict=True).ollama.model.strip()
    if not model:
        raise UserError(
            "No version is served by Ollama: ollama.model is empty; set it (`rltray config "
            "set ollama.model MODEL`) and rltray publishes each version there."
        )
    record = served.read_served(service.paths)
    pointed = record.get("model") == model and "version" in record
    if pointed and record.get("tag"):
        return str(record["tag"])
    try:
        from rltray.trainer.export.ollama_names import latest_tag, tag_stem
    except ImportError:  # the app bundle: the trainer lives in the trainer environment
        raise NothingToDo(
            f"rltray has not pointed {model}'s latest tag at a version yet: run `rltray "
            "publish` (Ollama running), then this again."
        ) from None
    stem = tag_stem(model)
    ours = any((a.ollama_tag or "").rpartition(":")[0] == stem
               for a in service.store.list_adapters())  # fmt: skip
    if not (pointed or ours):
        raise NothingToDo(
            f"No version is published to Ollama yet for {model}: train one (`rltray train`), "
            "or send the active one with `rltray publish`."
        )
    return latest_tag(model)


# -- the files `use` writes, and undo ---------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Written:
    """The ``use.json`` record: every file `use` wrote, with what it replaced."""

    def __init__(self, home: Path) -> None:
        self.path = home / MANIFEST
        try:
            self.entries: dict[str, dict[str, Any]] = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            self.entries = {}

    def write(self, target: Path, data: bytes, mode: int = 0o600) -> None:
        from rltray.app.fileio import write_private_atomic

        key = str(target)
        if key not in self.entries:  # keep the bytes from before our first write
            before = target.read_bytes() if target.is_file() else None
            self.entries[key] = {
                "before": None if before is None else base64.b64encode(before).decode(),
            }
        target.parent.mkdir(parents=True, exist_ok=True)
        write_private_atomic(target, data, mode=mode)
        self.entries[key]["sha256"] = _sha(data)
        self._save()

    def _save(self) -> None:
        from rltray.app.fileio import write_private_atomic

        if self.entries:
            write_private_atomic(self.path, (json.dumps(self.entries, indent=1) + "\n").encode())
        elif self.path.exists():
            self.path.unlink()

    def undo(self) -> tuple[list[str], list[str]]:
        """Put every file back; (done, kept because the user changed them since)."""
        done, kept = [], []
        for key, entry in list(self.entries.items()):
            target = Path(key)
            if target.is_file() and _sha(target.read_bytes()) != entry.get("sha256"):
                kept.append(key)
                continue
            before = entry.get("before")
            if before is None:
                if target.is_file():
                    target.unlink()
            else:
                from rltray.app.fileio import write_private_atomic

                write_private_atomic(target, base64.b64decode(before))
            done.append(key)
            del self.entries[key]
        self._save()
        return done, kept


def codex_home(env: dict[str, str]) -> Path:
    override = env.get("CODEX_HOME")
    home = Path(env.get("HOME") or Path.home())
    return Path(override).expanduser() if override else home / ".codex"


def codex_profile(tag: str, host: str, num_ctx: int) -> str:
    """The profile file's text (TOML)."""
    import tomlkit

    doc = tomlkit.document()
    doc.add(tomlkit.comment("Written by `rltray use codex`: your rltray-trained model on Ollama."))
    doc.add(tomlkit.comment(f"Start it with `codex --profile {PROFILE}`; `rltray use --undo` "
                            "removes this file."))
    doc.add("model", tag)
    doc.add("model_context_window", num_ctx)
    if host.rstrip("/") == DEFAULT_HOST or host.rstrip("/") == "http://localhost:11434":
        doc.add("model_provider", "ollama")  # built-in: Ollama's Responses API
    else:
        doc.add("model_provider", "rltray-ollama")
        provider = tomlkit.table()
        provider.add("name", "Ollama (rltray)")
        provider.add("base_url", host.rstrip("/") + "/v1")
        provider.add("wire_api", "responses")
        providers = tomlkit.table(is_super_table=True)
        providers.add("rltray-ollama", provider)
        doc.add("model_providers", providers)
    return tomlkit.dumps(doc)


def codex_once(tag: str, host: str) -> str:
    """A one-off Codex command on ``tag`` without the profile.

    ``codex --oss -m TAG`` alone fails on Codex 0.169 ("No default OSS provider
    configured"): the provider must be named, and another Ollama host given through
    ``CODEX_OSS_BASE_URL``. Run by tests/agents/ against the real Codex.
    """
    command = f"codex --oss --local-provider ollama -m {shlex.quote(tag)}"
    if host.rstrip("/") in (DEFAULT_HOST, "http://localhost:11434"):
        return command
    return f"CODEX_OSS_BASE_URL={shlex.quote(host.rstrip('/') + '/v1')} {command}"


def claude_env(tag: str, host: str) -> dict[str, str]:
    """Claude Code on Ollama's Anthropic API, every model slot (main, background, subagents)."""
    return {
        "ANTHROPIC_BASE_URL": host.rstrip("/"),
        "ANTHROPIC_AUTH_TOKEN": "ollama",
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_MODEL": tag,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": tag,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": tag,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": tag,
        "ANTHROPIC_SMALL_FAST_MODEL": tag,  # the background model's older name
        "CLAUDE_CODE_SUBAGENT_MODEL": tag,
    }


def launcher_script(env: dict[str, str], tag: str) -> str:
    lines = ["#!/bin/sh", "# Written by `rltray use claude-code --shell`; `rltray use --undo` "
             "removes it.", "# Claude Code on your rltray-trained model served by Ollama."]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(f'exec claude --model {shlex.quote(tag)} "$@"')
    return "\n".join(lines) + "\n"


def cmd_use(ctx: Context, args: argparse.Namespace) -> int:

    service = ctx.service(ingest=False)
    written = Written(service.paths.home)
    if args.undo:
        if args.agent or args.version:
            raise UserError("`rltray use --undo` takes no agent or version.")
        if not written.entries:
            raise NothingToDo("`rltray use` has written nothing that is still there to undo.")
        done, kept = written.undo()
        for path in done:
            ctx.say("Restored " if Path(path).exists() else "Removed ", path)
        for path in kept:
            ctx.warn(f"Left {path} alone: it changed since rltray wrote it.")
        return ExitCode.OK if not kept else ExitCode.ERROR
    if args.agent is None:
        raise UserError("Say which agent: `rltray use codex` or `rltray use claude-code`.")
    cfg = service.settings(strict=True)
    tag = resolve_tag(service, args.version)
    host = cfg.ollama.host
    if args.agent == "codex":
        target = codex_home(ctx.env) / f"{PROFILE}.config.toml"
        written.write(target, codex_profile(tag, host, cfg.ollama.num_ctx).encode())
        ctx.say("Wrote ", (str(target), "bold"), f" (model {tag}).")
        ctx.say("Start Codex on it: ", (f"codex --profile {PROFILE}", "bold"),
                f"   (or once: {codex_once(tag, host)})")
        return ExitCode.OK
    env = claude_env(tag, host)
    if args.shell:
        target = service.paths.home / "bin" / "claude-rltray"
        written.write(target, launcher_script(env, tag).encode(), mode=0o700)
        ctx.say("Wrote ", (str(target), "bold"), f": it starts Claude Code on {tag}.")
        ctx.say("Run it instead of `claude` (add its folder to PATH, or alias it).")
        return ExitCode.OK
    ctx.say(f"# Claude Code on {tag} (paste into your shell, then run `claude`):")
    for key, value in env.items():
        ctx.say(f"export {key}={shlex.quote(value)}")
    ctx.say(f"# or once: ANTHROPIC_BASE_URL={shlex.quote(env['ANTHROPIC_BASE_URL'])} "
            f"ANTHROPIC_AUTH_TOKEN=ollama ANTHROPIC_API_KEY=\"\" claude --model {tag}")
    return ExitCode.OK


# -- export-model ----------------------------------------------------------------------------


def _export_process(
    service: Service, args: list[str], run: Callable[..., Any] = subprocess.run
) -> dict[str, Any]:
    from rltray.app import childpython
    from rltray.app.training import jobbuild

    python = jobbuild.training_python(service.settings(strict=True).training)
    # a private cwd and PYTHONSAFEPATH: never an rltray/ planted where the user stands
    proc = run([python, "-m", "rltray.trainer.export", *args], capture_output=True, text=True,
               **childpython.options())  # fmt: skip
    lines = [ln for ln in (proc.stdout or "").splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise UserError(f"The export failed: {tail[0]}", ExitCode.ERROR)
    result = json.loads(lines[-1])
    if not result.get("ok"):
        raise UserError(str(result.get("error")), ExitCode.ERROR)
    return result


def _base_gguf(service: Service) -> str:
    """The GGUF the version was trained on / Ollama serves, for the GGUF formats."""
    cfg = service.settings(strict=True)
    base = Path(cfg.training.base_model).expanduser()
    if base.is_file():
        return str(base)
    if cfg.ollama.model.strip():
        found = _export_process(
            service, ["locate", "--host", cfg.ollama.host, "--model", cfg.ollama.model]
        )
        if found.get("readable"):
            return str(found["gguf"])
    raise UserError(
        "The GGUF formats need the base model as a GGUF file: set training.base_model to it, "
        "or ollama.model to the Ollama model it came from (on this machine)."
    )


def cmd_export_model(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.training import jobbuild
    from rltray.app.words import parse_version

    service = ctx.service(ingest=False)
    number = parse_version(args.version)
    adapter = service.store.get_adapter(int(number or 0))
    if adapter is None or not Path(adapter.path).is_dir():
        raise UserError(f"There is no version v{number}; `rltray versions` lists them.")
    base_now = service.settings(strict=True).training.base_model
    if args.format != "peft" and jobbuild.other_base(adapter, base_now):
        # review 3 r10: merged onto the GGUF of the model set up now, a pairing nothing
        # judged (same-shaped siblings load without a complaint); rollback's refusal
        raise UserError(
            f"v{number} was trained on {adapter.base_model}, but the model set up now is "
            f"{base_now.strip()}: its GGUF would carry it onto a model it was never judged "
            f"on. Set training.base_model back to {adapter.base_model} first, or export it "
            "with --format peft."
        )
    out_dir = Path(args.output or ".").expanduser().resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.format == "peft":
        target = out_dir / f"rltray-v{number}-peft"
        if target.exists():
            raise UserError(f"{target} already exists; choose another folder with -o.")
        shutil.copytree(adapter.path, target)
        ctx.say("Wrote ", (str(target), "bold"),
                " (PEFT: load with peft, vLLM --lora-modules, or convert_lora_to_gguf.py).")
        return ExitCode.OK
    base = _base_gguf(service)
    if args.format == "gguf-adapter":
        target = out_dir / f"rltray-v{number}-adapter.gguf"
        result = _export_process(service, ["adapter", "--adapter", adapter.path,
                                           "--base-gguf", base, "--out", str(target)])
        ctx.say("Wrote ", (str(target), "bold"),
                f" ({result['size'] / 1e6:.1f} MB; llama.cpp: --lora with {Path(base).name}).")
        return ExitCode.OK
    target = out_dir / f"rltray-v{number}-merged.gguf"
    result = _export_process(service, ["merge", "--adapter", adapter.path, "--base-gguf", base,
                                       "--out", str(target), "--type", args.type])
    ctx.say("Wrote ", (str(target), "bold"),
            f" ({result['size'] / 1e6:.0f} MB, base {result['base_size'] / 1e6:.0f} MB; "
            f"{result['quantization']}).")
    return ExitCode.OK


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
    from rltray.app.hooks import registry

    p = add("use", cmd_use, "run a trained version in Codex or Claude Code (through Ollama)")
    p.add_argument("agent", nargs="?", choices=registry.names())
    p.add_argument("version", nargs="?", help="v3 or 3; default: the active version (latest)")
    p.add_argument("--shell", action="store_true",
                   help="claude-code: write a launcher script instead of printing the variables")
    p.add_argument("--undo", action="store_true", help="remove what `rltray use` wrote")
    p = add("export-model", cmd_export_model,
            "write a version for llama.cpp, LM Studio or vLLM (`export` writes the ratings)")
    p.add_argument("version", help="v3 or 3")
    p.add_argument("--format", required=True, choices=("peft", "gguf-adapter", "gguf-merged"))
    p.add_argument("-o", "--output", help="folder to write into (default: the current folder)")
    p.add_argument("--type", default="q8_0", choices=("q8_0", "f16", "base"),
                   help="gguf-merged: how merged layers are stored")
