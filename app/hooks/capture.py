"""rltray's hook program: record one finished agent turn (or one `/rl` command) and exit.

Agents run it as ``<python> -I -S capture.py --home <data folder> [--chain <json>] <event>``
with the payload on stdin (``codex-notify``: as the last argument). ``build_command``
is the one place that spells that argv; installers call it and never build their own.

This file is deliberately tiny: Python compiles the script it runs from source on
every start, but imports modules from cached bytecode, so the work lives in the
stdlib-only sibling ``capture_core.py``, imported by file location (the ``-I``
flag keeps this folder off ``sys.path``, and it is taken off again at once so no
later import can pick up a sibling module by accident). Nothing of rltray is
imported and nothing can make the agent see a failure: exit status is always 0.
"""

import os
import sys


def build_command(event, home, python=sys.executable, chain=None):
    """The argv an agent runs for ``event``; ``chain`` is the user's previous notify argv.

    Called by the installers (in the app), never by the hook run itself: the events
    are the ones the agents' modules beside ``capture_core`` declare.
    """
    from rltray.app.hooks import capture_core

    if not capture_core.is_event(event):
        known = ", ".join(capture_core.known_events())
        raise ValueError(f"unknown hook event {event!r}; expected one of {known}")
    argv = [str(python), "-I", "-S", os.path.abspath(__file__), "--home", os.fspath(home)]
    if chain:
        import json

        argv += ["--chain", json.dumps([str(part) for part in chain])]
    argv.append(event)
    return argv


def _run():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        import capture_core
    finally:
        sys.path.remove(here)
    capture_core.main()


if __name__ == "__main__":
    try:  # noqa: SIM105 (contextlib costs import time in the hook)
        _run()
    except BaseException:  # a closed stdout, an interrupt: still never fail the agent
        pass
    sys.exit(0)
