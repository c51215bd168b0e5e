"""rltray's hook program: record one finished agent turn (or one `/rl` command) and exit.

Agents run it as ``<python> -I -S capture.py --home <data folder> [--chain <json>] <event>``
with the payload on stdin (``codex-notify``: as the last argument). ``build_command``
is the one place that spells that argv; installers call it and never build their own.

This file is deliberately tiny: Python compiles the script it runs from source on
every start (every statement here costs each run), but imports modules from cached
bytecode, so the work, and ``build_command``'s body, live in the stdlib-only sibling
``capture_core.py``, imported by file location (the ``-I`` flag keeps this folder off
``sys.path``, and it is taken off again at once so no later import can pick up a sibling
module by accident; ``capture_core.run`` does that, and ends the process). Nothing of
rltray is imported, nor ``os`` (see ``capture_core``), and nothing can make the agent see a
failure: exit status is always 0. ``__file__`` is absolute (Python >= 3.9 makes the
script's so), so its folder is what precedes the last separator.
"""

import sys


def build_command(event, home, python=sys.executable, chain=None):
    """The argv an agent runs for ``event``; ``chain`` is the user's previous notify argv."""
    from rltray.app.hooks import capture_core

    return capture_core.build_command(event, home, python, chain, __file__)


if __name__ == "__main__":
    try:
        sys.path.insert(0, __file__[: max(__file__.rfind("/"), __file__.rfind("\\"))])
        import capture_core

        capture_core.run()
    except BaseException:  # a closed stdout, an interrupt: still never fail the agent
        sys.exit(0)
