"""Going back to an older rltray keeps the settings it knows; typos are still refused.

Regression pinned (review 3, finding 7; /tmp/review3-packaging/downgrade_config.sh): a
settings file that a newer rltray wrote with one setting this version does not know was
refused whole ("not a setting rltray knows"), so after a downgrade every setting went
out of effect and `rltray status` / `rltray run` failed.

Real parts: config.toml written by the real `config set`, edited as a newer release
would leave it, read back by the real CLI and doctor.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.cli import doctor
from rltray.app.errors import ExitCode
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.app.test_cli import cli


def this_version() -> str:
    import rltray.app

    return str(rltray.app.__version__)


def newer_file(paths: Paths) -> None:
    """What rltray 99.0.0 would leave: its writer line, a setting and a table this one lacks."""
    text = paths.config.read_text()
    text = text.replace(f"# written by rltray {this_version()}", "# written by rltray 99.0.0")
    text = text.replace("[training]\n", "[training]\n# a newer setting\nsome_new_setting = true\n")
    paths.config.write_text(text + "\n[newer_table]\nanything = 1\n")


@pytest.fixture
def paths(rltray_home: Path) -> Paths:
    paths = Paths.from_env()
    config.set_value(paths, "notify.every_nth", "3")  # every setting written, with its help
    return paths


def test_every_write_names_the_rltray_that_wrote_it(paths: Paths) -> None:
    assert paths.config.read_text().splitlines()[0] == f"# written by rltray {this_version()}"
    config.set_value(paths, "notify.every_nth", "4")
    assert paths.config.read_text().count("# written by rltray") == 1


def test_settings_a_newer_rltray_wrote_are_left_out_and_kept(paths: Paths) -> None:
    newer_file(paths)
    assert config.load_config(paths).notify.every_nth == 3  # the rest stays in effect
    code, _out, err = cli("status")
    assert code == ExitCode.OK, err
    assert config.from_newer(paths) == (
        "99.0.0", ["[newer_table]", "training.some_new_setting"]
    )
    with Service(paths) as service:
        check = doctor._config(service)
    assert check.state == doctor.WARN
    assert "written by rltray 99.0.0" in check.detail
    assert "training.some_new_setting" in check.detail
    config.set_value(paths, "notify.every_nth", "5")  # a write by the older rltray
    text = paths.config.read_text()
    assert "some_new_setting = true" in text and "[newer_table]" in text  # kept for the upgrade
    assert text.splitlines()[0] == "# written by rltray 99.0.0"  # still the newer one's
    assert config.load_config(paths).notify.every_nth == 5


def test_a_typo_in_a_file_this_rltray_wrote_is_still_refused(paths: Paths) -> None:
    text = paths.config.read_text().replace("[training]\n", "[training]\nmin_rating = 3\n")
    paths.config.write_text(text)
    with pytest.raises(config.ConfigError, match=r"training\.min_rating is not a setting"):
        config.load_config(paths)
    line = text.splitlines().index("min_rating = 3") + 1
    with pytest.raises(config.ConfigError, match=f", line {line}: "):
        config.load_config(paths)


def test_an_older_writer_line_is_no_licence_for_unknown_keys(paths: Paths) -> None:
    text = paths.config.read_text()
    older = text.replace(f"# written by rltray {this_version()}", "# written by rltray 0.0.1")
    paths.config.write_text(older.replace("[training]\n", "[training]\nnew_thing = 1\n"))
    with pytest.raises(config.ConfigError, match="new_thing is not a setting"):
        config.load_config(paths)
    assert os.stat(paths.config).st_size > 0
