"""The trainer's on/off settings from the environment (``RLTRAY_TRAINER_BF16``,
``RLTRAY_TRAINER_RECOMPUTE``): one reading, so every switch takes the same words."""

from __future__ import annotations

import os


def env_switch(name: str) -> bool | None:
    """True for ``1``/``on``/``yes``/``true``, False for ``0``/``off``/``no``/``false``
    (any case), None for unset, ``auto`` or any other word, which leaves the choice to
    the trainer."""
    value = os.environ.get(name, "auto").strip().lower()
    if value in ("1", "on", "yes", "true"):
        return True
    if value in ("0", "off", "no", "false"):
        return False
    return None
