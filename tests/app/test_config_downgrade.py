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


# -- review 4: a newer trainer's knobs and presets, pre-release and CRLF writer lines ------


def newer_training(paths: Paths, writer: str = "99.0.0", newline: str = "\n") -> str:
    """What a newer rltray leaves for its own trainer: a [training.hyper] name and a preset
    this one lacks, beside a setting this one knows (min_ratings = 7)."""
    text = paths.config.read_text()
    text = text.replace(f"# written by rltray {this_version()}", f"# written by rltray {writer}")
    text = text.replace('preset = "balanced"', 'preset = "turbo"')
    text = text.replace("min_ratings = 32", "min_ratings = 7")
    text += "\n[training.hyper]\nnew_knob = 1\nlr = 5e-5\n"
    assert 'preset = "turbo"' in text and "min_ratings = 7" in text
    paths.config.write_bytes(text.replace("\n", newline).encode())
    return text


def test_a_newer_trainers_knob_and_preset_are_left_out_and_kept(paths: Paths) -> None:
    """Regression (review 4, item 4; /tmp/review4-a/config/downgrade.py): an unknown
    [training.hyper] name or preset value from a newer rltray refused the whole file."""
    newer_training(paths)
    loaded = config.load_config(paths).training
    assert (loaded.min_ratings, loaded.preset, loaded.hyper) == (7, "balanced", {"lr": 5e-5})
    assert config.from_newer(paths) == (
        "99.0.0", ["training.preset = 'turbo'", "training.hyper.new_knob"]
    )
    with Service(paths) as service:
        check = doctor._config(service)
    assert check.state == doctor.WARN and "training.hyper.new_knob" in check.detail
    config.set_value(paths, "training.min_ratings", "9")  # a write by the older rltray
    text = paths.config.read_text()
    assert 'preset = "turbo"' in text and "new_knob = 1" in text, text  # kept for the upgrade
    assert config.load_config(paths).training.min_ratings == 9
    config.set_value(paths, "training.preset", "careful")  # a choice the user makes here wins
    assert 'preset = "careful"' in paths.config.read_text()


def test_an_unknown_knob_in_a_file_this_rltray_wrote_is_still_refused(paths: Paths) -> None:
    newer_training(paths, writer=this_version())
    with pytest.raises(config.ConfigError, match=r"training\.preset must be one of"):
        config.load_config(paths)
    paths.config.write_text(paths.config.read_text().replace('"turbo"', '"custom"'))
    with pytest.raises(config.ConfigError, match="'new_knob' is not a trainer hyperparameter"):
        config.load_config(paths)


@pytest.mark.parametrize("writer", ["99.0.0rc1", "99.0.0.dev3", "99.0.0.post1", "99.0"])
def test_a_pre_release_writer_line_is_read(paths: Paths, writer: str) -> None:
    newer_training(paths, writer=writer)
    assert config.load_config(paths).training.min_ratings == 7
    assert config.from_newer(paths) is not None


def test_a_crlf_writer_line_is_read(paths: Paths) -> None:
    """A file saved by a Windows editor: the writer line ends in \\r."""
    newer_training(paths, newline="\r\n")
    assert b"# written by rltray 99.0.0\r\n" in paths.config.read_bytes()
    assert config.load_config(paths).training.min_ratings == 7


def test_release_names_sort_as_pep_440_says() -> None:
    ordered = ["0.1.0.dev1", "0.1.0a1", "0.1.0b2", "0.1.0rc1", "0.1.0", "0.1.0.post1", "0.1.1",
               "0.2.0.dev0", "0.2.0rc1", "0.2", "0.10"]  # fmt: skip
    keys = [config._version_key(v) for v in ordered]
    assert None not in keys
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert len(set(keys)) == len(keys)
    assert config._version_key("0.2") == config._version_key("0.2.0")
    assert config._version_key("0+unknown") is None and config._version_key("soon") is None


def test_an_older_pre_release_writer_is_no_licence_either(paths: Paths) -> None:
    text = paths.config.read_text()
    older = text.replace(f"# written by rltray {this_version()}", "# written by rltray 0.1.0rc1")
    paths.config.write_text(older.replace("[training]\n", "[training]\nnew_thing = 1\n"))
    with pytest.raises(config.ConfigError, match="new_thing is not a setting"):
        config.load_config(paths)
