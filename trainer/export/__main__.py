"""``python -m rltray.trainer.export COMMAND …``: the export and Ollama steps as a process.

Why a process: the tray never imports torch, gguf or numpy-heavy code; it runs
this in the trainer's environment (``training.python``) and reads one JSON line
back: ``{"ok": true, …}`` or ``{"ok": false, "error": "<one sentence>"}`` with
exit code 1 (2 for bad arguments).

Commands:
  publish     register an adapter folder as ``<base>-rltray:vN`` (and ``latest``), prune
  latest      point ``<base>-rltray:latest`` at version N or the base (rollback);
              republishes N first unless its tag carries ``--blob`` (the blob the
              caller's publication record names; ``*`` trusts the tag as it is)
  adapter     write the GGUF LoRA adapter of a PEFT folder
  merge       write base GGUF + adapter as one merged GGUF
  materialize turn a GGUF into the cached HF folder the trainer loads (prints the folder)
  pair        check that an HF folder matches an Ollama model (every difference at once)
  locate      the GGUF file behind an Ollama model (its blob path)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rltray.trainer.export")
    sub = p.add_subparsers(dest="command", required=True)

    def ollama_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("--host", default="http://127.0.0.1:11434")
        q.add_argument("--model", required=True, help="the Ollama base model, e.g. smollm2:135m")

    pub = sub.add_parser("publish")
    ollama_args(pub)
    pub.add_argument("--adapter", required=True, type=Path)
    pub.add_argument("--version", required=True, type=int)
    pub.add_argument("--workdir", required=True, type=Path)
    pub.add_argument("--keep", type=int, default=3)
    pub.add_argument("--active", type=int, default=None)
    pub.add_argument("--num-ctx", type=int, default=65536)
    pub.add_argument("--base-gguf", type=Path, default=None)
    pub.add_argument("--merged-type", default="q8_0", choices=("q8_0", "f16", "base"))
    pub.add_argument("--no-latest", action="store_true")

    lat = sub.add_parser("latest")
    ollama_args(lat)
    lat.add_argument("--version", type=int, default=None, help="omit for the plain base")
    lat.add_argument("--adapter", type=Path, default=None)
    lat.add_argument("--blob", default=None, help="sha256:… the version's tag must carry")
    lat.add_argument("--workdir", type=Path, default=None)
    lat.add_argument("--keep", type=int, default=3)
    lat.add_argument("--num-ctx", type=int, default=65536)
    lat.add_argument("--base-gguf", type=Path, default=None)
    lat.add_argument("--merged-type", default="q8_0", choices=("q8_0", "f16", "base"))

    ad = sub.add_parser("adapter")
    ad.add_argument("--adapter", required=True, type=Path)
    ad.add_argument("--out", required=True, type=Path)
    ad.add_argument("--base-gguf", required=True, type=Path)
    ad.add_argument("--dtype", default="f32", choices=("f32", "f16"))

    mg = sub.add_parser("merge")
    mg.add_argument("--adapter", required=True, type=Path)
    mg.add_argument("--out", required=True, type=Path)
    mg.add_argument("--base-gguf", required=True, type=Path)
    mg.add_argument("--type", default="q8_0", choices=("q8_0", "f16", "base"))

    mat = sub.add_parser("materialize")
    mat.add_argument("gguf", type=Path)
    mat.add_argument("--cache", type=Path, default=None)

    pair = sub.add_parser("pair")
    ollama_args(pair)
    pair.add_argument("--base", required=True, type=Path, help="the Hugging Face folder")

    loc = sub.add_parser("locate")
    ollama_args(loc)
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import gguf_adapter, merge
    from .ollama_client import Ollama
    from .ollama_errors import ModelMissing, OllamaError
    from .ollama_model import blob_from_manifests
    from .ollama_publish import publish, serve

    if args.command == "publish":
        with Ollama(args.host) as client:
            pub = publish(
                client,
                args.model,
                args.adapter,
                args.version,
                workdir=args.workdir,
                make_latest=not args.no_latest,
                keep=args.keep,
                active=args.active,
                num_ctx=args.num_ctx,
                base_gguf=args.base_gguf,
                merged_type=args.merged_type,
            )
        return pub.as_dict()
    if args.command == "latest":
        with Ollama(args.host) as client:
            return serve(
                client, args.model, args.version, blob=args.blob, adapter_dir=args.adapter,
                workdir=args.workdir, keep=args.keep, num_ctx=args.num_ctx,
                base_gguf=args.base_gguf, merged_type=args.merged_type,
            )  # fmt: skip
    if args.command == "adapter":
        import gguf

        arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(args.base_gguf))
        problems = gguf_adapter.fit_problems(
            args.adapter, arch, gguf_adapter.base_shapes(args.base_gguf)
        )
        if problems:
            raise ValueError("the adapter does not fit this GGUF: " + "; ".join(problems[:5]))
        out = gguf_adapter.export(args.adapter, args.out, arch_info=arch, dtype=args.dtype)
        return {"out": str(out), "size": out.stat().st_size}
    if args.command == "merge":
        report = merge.merge(args.base_gguf, args.adapter, args.out, out_type=args.type)
        return {"out": str(report.out), "size": report.size, "base_size": report.base_size,
                "quantization": report.describe(), "merged_tensors": report.merged,
                "delivered": report.delivered()}
    if args.command == "materialize":
        from .. import gguf_base

        started = time.monotonic()
        folder = gguf_base.materialize(args.gguf, cache=args.cache)
        return {"folder": str(folder), "seconds": round(time.monotonic() - started, 2)}
    if args.command == "pair":
        from .. import gguf_base

        with Ollama(args.host) as client:
            info = client.show(args.model)
        template = gguf_base.gguf_chat_template(info.blob_path) if (
            info.blob_path and info.blob_path.is_file()) else None
        problems = gguf_base.pairing_problems(args.base, info.model_info, template)
        if problems:
            raise OllamaError(
                f"The weights in {args.base} do not match the Ollama model {args.model}: "
                + "; ".join(problems) + "."
            )
        return {"matches": True}
    if args.command == "locate":
        try:
            with Ollama(args.host) as client:
                info = client.show(args.model)
        except ModelMissing:
            raise
        except OllamaError:
            found = blob_from_manifests(args.model)  # Ollama not running: its files
            if found is None:
                raise
            return {"gguf": str(found), "readable": True, "architecture": None,
                    "quantization": None, "via": "manifests"}
        readable = bool(info.blob_path and info.blob_path.is_file())
        return {"gguf": str(info.blob_path) if info.blob_path else None, "readable": readable,
                "architecture": info.architecture, "quantization": info.quantization,
                "via": "api/show"}
    raise ValueError(f"unknown command {args.command}")


#: The exit code of an export whose parent died (nobody reads its answer any more).
EXIT_ORPHANED = 1


def _orphaned() -> None:
    """The tray (or CLI) that started this export is gone: stop now. Review 3 r6: a tray
    killed mid-export left its export merging and uploading on its own, an orphan under
    no lock; the next publish sweeps what it left in ``publish/`` (app/training/publisher)."""
    os._exit(EXIT_ORPHANED)


def main(argv: list[str] | None = None) -> int:
    from ..priority import ParentWatch, lower_priority, parent_pid_from_env

    args = _parser().parse_args(argv)
    # A merge, a requantize or an upload runs for minutes after a round, whatever the
    # user is doing then: at the trainer's own low CPU and IO priority, like the round.
    lower_priority()
    # and, like the trainer, it dies with its parent (the pid the publisher passes, else
    # the process that started it)
    watch = ParentWatch(_orphaned, parent_pid=parent_pid_from_env()).start()
    try:
        result = run(args)
    except Exception as exc:  # one sentence on stdout for the caller, the type for logs
        from ..gguf_base import GGUFBaseError
        from .ollama_errors import OllamaError

        ours = isinstance(exc, (OllamaError, GGUFBaseError))
        message = str(exc) if ours else f"{type(exc).__name__}: {exc}"
        print(json.dumps({"ok": False, "error": message}), flush=True)
        return 1
    finally:
        watch.stop()
    print(json.dumps({"ok": True, **result}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
