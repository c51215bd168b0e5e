"""``python -m rltray.trainer JOB.json`` — one training round as a polite child process.

The only contract with the tray is the job file in and JSON lines out (stdout,
one object per line: ``progress``, ``metric``, ``skipped``, ``log``, then exactly
one of ``done`` / ``paused`` / ``error`` last). Exit codes are one table:

====  =======================================================================
0     done (the adapter folder exists; ``accepted`` says what the gate decided)
3     paused: stdin closed (``RLTRAY_TRAINER_STDIN=stop``), the job folder's
      ``stop`` file, SIGTERM/SIGINT or parent death; checkpoint saved; run the
      same job again to resume
2     bad job or input (``kind: "job"``): the user must fix something
1     any other failure (``kind: "internal"``, ``"memory"``, ``"diverged"``)
====  =======================================================================

Why stdout is guarded: the protocol stream is a private duplicate of fd 1 and
fd 1 itself is pointed at stderr, so a library that prints (or a C extension
writing to fd 1) can never corrupt a progress line. The process lowers its own
priority and stops (checkpointing) when its parent dies (the tray's pid when the
runner passes it, ``priority.PARENT_PID_ENV``), so a crashed tray never leaves an
orphan burning the battery. The tray stops it without a signal or a console
(``stopchannel``): Windows has no SIGTERM, and its console events need a console
that the windowed tray does not have. A failure never leaves an adapter folder
that looks finished.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PAUSED = 3

#: Seconds a trainer whose parent died may spend checkpointing before it hard-exits.
ORPHAN_GRACE_S = 60.0


def _protocol_stream() -> TextIO:
    """A private copy of stdout for JSON lines; fd 1 then points at stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)


def _emitter(stream: TextIO) -> Callable[[dict[str, Any]], None]:
    lock = threading.Lock()

    def emit(line: dict[str, Any]) -> None:
        text = json.dumps(line, ensure_ascii=False, allow_nan=False, default=str)
        with lock:
            try:
                stream.write(text + "\n")
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the reader is gone (parent died); keep going to checkpoint

    return emit


def load_backend(job: Any, emit: Callable[[dict[str, Any]], None]) -> tuple[Any, Any]:
    """The job's preset resolved for its model, and its backend with the model loaded.

    Saying so on ``emit`` as it goes: loading a large model is the slow part the
    tray's progress line shows before any step.
    """
    from rltray.trainer import presets
    from rltray.trainer.backends.base import read_base_config, resolve_model_folder
    from rltray.trainer.backends.catalogue import make_backend

    config = read_base_config(resolve_model_folder(job.base_model, job.revision))
    hyper = presets.resolve(job.preset, presets.model_info(config), dict(job.hyper))
    backend = make_backend(job, hyper)
    emit({"type": "log", "message": f"loading {job.base_model} on the {job.backend} backend"})
    backend.load()
    emit({"type": "log", "message": f"model loaded on {backend.device_name}"})
    return backend, hyper


def _load_heldout(path: Path | None) -> list[Any]:
    from rltray.trainer.job import load_examples

    if path is None:
        return []
    try:
        if not Path(path).read_text(encoding="utf-8").strip():
            return []  # an empty held-out set is allowed: the gate notes the missing AUROC
    except OSError:
        pass  # load_examples reports it in one sentence
    return load_examples(path)


def _remove_partial_output(out: Path | None, existed: bool, job_id: str | None) -> None:
    """Delete an adapter folder this run wrote if the run then failed."""
    if out is None or existed or not out.is_dir():
        return
    meta = out / "rltray.json"
    try:
        ours = json.loads(meta.read_text(encoding="utf-8")).get("job_id") == job_id
    except (OSError, ValueError):
        ours = False
    if ours:
        shutil.rmtree(out, ignore_errors=True)


def _one_sentence(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if text else type(exc).__name__


FINAL_LINES = ("done", "paused", "error")


def peak_memory_bytes() -> int | None:
    """This process's peak resident memory so far (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        try:
            import psutil

            return int(psutil.Process().memory_info().peak_wset)
        except (ImportError, AttributeError):
            return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS: bytes; else KiB


def peak_gpu_memory_bytes() -> int | None:
    """The most CUDA memory this process's tensors held at once (None where the round
    never touched a CUDA GPU): a GPU round's RSS says little about whether it fits."""
    torch = sys.modules.get("torch")  # never imported here just to ask
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.max_memory_allocated())
    except Exception:  # a broken driver must not cost the round its final line
        return None


def with_peak_memory(emit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """``emit`` that sends a ``peak_memory_bytes`` metric (and ``peak_gpu_memory_bytes``
    after a CUDA round) just before the final line.

    Why: the runner keeps metric lines with the run, so the setup wizard and
    `rltray runs` can show what a round on this machine really held, next to the
    estimate made before any round ran.
    """

    def emit_with_peak(line: dict[str, Any]) -> None:
        if line.get("type") in FINAL_LINES:
            gpu = peak_gpu_memory_bytes()
            if gpu:
                emit({"type": "metric", "name": "peak_gpu_memory_bytes", "value": gpu})
            peak = peak_memory_bytes()
            if peak:
                emit({"type": "metric", "name": "peak_memory_bytes", "value": peak})
        emit(line)

    return emit_with_peak


def run(job_path: str, emit: Callable[[dict[str, Any]], None], stop: threading.Event) -> int:
    """Load the job, train, print the last line; return the exit code."""
    from rltray.trainer.job import JobError, error_line, load_examples, load_job, paused_line

    out: Path | None = None
    existed = True
    job_id: str | None = None
    try:
        job = load_job(job_path)
        out, job_id = job.out, job.id
        existed = out.exists()
        if existed and any(out.iterdir()):
            from rltray.trainer.finish import written_result

            written = written_result(job)  # stopped after it wrote its adapter: that is its result
            if written is None:
                raise JobError(f"the adapter folder {out} already exists; give the job a new 'out'")
            emit({"type": "log", "message": "this round had written its adapter before it was "
                  "stopped; its result is reported from that folder"})  # fmt: skip
            emit(written.line())
            return EXIT_DONE
        examples = load_examples(job.examples)
        heldout = _load_heldout(job.heldout)

        backend, hyper = load_backend(job, emit)

        from rltray.trainer.train import train

        outcome = train(backend, examples, heldout, job, hyper, emit, stop.is_set)
        if outcome.status == "paused":
            line = paused_line(outcome.checkpoint) if outcome.checkpoint else None
            emit(line or {"type": "paused", "checkpoint": None})
            return EXIT_PAUSED
        assert outcome.result is not None
        emit(outcome.result.line())
        return EXIT_DONE
    except JobError as exc:
        _remove_partial_output(out, existed, job_id)
        emit(error_line(_one_sentence(exc), "job"))
        return EXIT_BAD_INPUT
    except MemoryError:
        _remove_partial_output(out, existed, job_id)
        emit(
            error_line(
                "the trainer ran out of memory; use a smaller batch_size or max_seq_len", "memory"
            )
        )
        return EXIT_FAILED
    except FloatingPointError as exc:
        _remove_partial_output(out, existed, job_id)
        emit(error_line(_one_sentence(exc), "diverged"))
        return EXIT_FAILED
    except Exception as exc:
        _remove_partial_output(out, existed, job_id)
        traceback.print_exc(file=sys.stderr)
        kind = "memory" if "out of memory" in str(exc).lower() else "internal"
        emit(error_line(f"training failed: {type(exc).__name__}: {_one_sentence(exc)}", kind))
        return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    """Entry point: guard stdout, lower priority, watch the parent and signals, run."""
    parser = argparse.ArgumentParser(prog="python -m rltray.trainer", description=__doc__)
    parser.add_argument("job", help="the job file (TrainJob JSON v1)")
    emit = _emitter(_protocol_stream())
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors still end with one JSON error line
        if exc.code in (0, None):
            return EXIT_DONE
        emit(
            {"type": "error", "message": "usage: python -m rltray.trainer JOB.json", "kind": "job"}
        )
        return EXIT_BAD_INPUT

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():  # a second signal: the user really wants us gone
            os._exit(EXIT_PAUSED)
        stop.set()

    # SIGHUP: `rltray train` in a terminal that is closed; pause at a checkpoint, not die
    for name in ("SIGTERM", "SIGINT", "SIGBREAK", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), on_signal)

    from rltray.trainer.priority import ParentWatch, lower_priority, parent_pid_from_env
    from rltray.trainer.stopchannel import StopChannel

    def on_parent_death() -> None:
        stop.set()
        timer = threading.Timer(ORPHAN_GRACE_S, os._exit, args=(EXIT_FAILED,))
        timer.daemon = True
        timer.start()

    def on_stop(reason: str) -> None:
        emit({"type": "log", "message": f"stopping: {reason}"})
        stop.set()

    emit({"type": "log", "message": f"priority: {lower_priority()}"})
    watch = ParentWatch(on_parent_death, parent_pid=parent_pid_from_env()).start()
    channel = StopChannel.from_env(args.job, on_stop).start()
    try:
        return run(args.job, with_peak_memory(emit), stop)
    finally:
        channel.close()
        watch.stop()


if __name__ == "__main__":
    sys.exit(main())
