"""The Linux launcher entry must be one a desktop accepts and must start rltray.

A broken .desktop file is silently ignored by GNOME/KDE, which would leave a
user without a visible tray no way to open rltray; these checks are the ones
`desktop-file-validate` would fail on first.
"""

from __future__ import annotations

import configparser
from pathlib import Path

import tomlkit

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "packaging" / "linux" / "rltray.desktop"


def load_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # keys are case-sensitive in the Desktop Entry spec
    parser.read_string(ENTRY.read_text("utf-8"))
    return parser["Desktop Entry"]


def test_required_keys_are_present() -> None:
    entry = load_entry()
    assert entry["Type"] == "Application"
    for key in ("Name", "Exec", "Icon", "Comment"):
        assert entry.get(key), key
    assert entry["Categories"].endswith(";")  # lists end with a semicolon per the spec


def test_exec_runs_the_installed_console_script() -> None:
    scripts = tomlkit.parse((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    program, *args = load_entry()["Exec"].split()
    assert program in scripts
    assert args == ["run"]


def test_icon_names_a_shipped_icon() -> None:
    icon = load_entry()["Icon"]
    assert (ROOT / "packaging" / "icons" / f"{icon}.svg").is_file()
