"""Packaging tests reuse the desktop fakes of tests/app (private D-Bus, notification server,
StatusNotifierWatcher); pytest puts only each test file's own folder on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

APP_TESTS = str(Path(__file__).resolve().parents[1] / "app")
if APP_TESTS not in sys.path:
    sys.path.append(APP_TESTS)
