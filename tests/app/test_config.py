"""Settings: one declaration drives validation, the documented TOML file and `describe()`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import tomlkit
from rltray.app import config
from rltray.app.config import Config, ConfigError
from rltray.app.errors import UserError
from rltray.app.paths import Paths

EXPECTED = {
    "agents.claude_code": ("bool", True),
    "agents.codex": ("bool", True),
    "agents.openclaw": ("bool", True),
    "notify.enabled": ("bool", True),
    "notify.ask": ("choice", "every"),
    "notify.every_nth": ("int", 3),
    "notify.expire_minutes": ("int", 15),
    "notify.training": ("bool", True),
    "notify.min_turn_seconds": ("int", 60),
    "notify.quiet_hours": ("str", ""),
    "training.base_model": ("str", ""),
    "training.backend": ("choice", "auto"),
    "training.preset": ("choice", "balanced"),
    "training.min_ratings": ("int", 32),
    "training.require_idle_minutes": ("int", 10),
    "training.require_ac_power": ("bool", True),
    "training.automatic": ("bool", True),
    "training.python": ("str", ""),
    "training.trust_remote_code": ("bool", False),
    "training.remote_host": ("str", ""),
    "training.remote_port": ("int", 22),
    "training.remote_user": ("str", ""),
    "training.remote_host_key": ("str", ""),
    "training.remote_dashboard_port": ("int", 8265),
    "training.remote_dir": ("str", "rltray-remote"),
    "training.remote_python": ("str", "python3"),
    "training.remote_gpus": ("int", 1),
    "training.remote_stop_grace_s": ("int", 300),
    "training.remote_base_model": ("str", ""),
    "ollama.model": ("str", ""),
    "ollama.host": ("str", "http://127.0.0.1:11434"),
    "ollama.keep_versions": ("int", 3),
    "ollama.num_ctx": ("int", 65536),
    "ollama.merged_type": ("choice", "q8_0"),
    "lessons.claude_code": ("bool", False),
    "lessons.codex": ("bool", False),
}


def test_every_setting_is_documented() -> None:
    settings = config.describe()
    undocumented = [s.key for s in settings if len(s.help) < 15 or not s.help.endswith(".")]
    assert undocumented == [], f"add a description= to: {undocumented}"
    # describe() sees every declared field, so a new undocumented field fails above.
    declared = sum(
        1
        for f in Config.model_fields.values()
        for info in f.annotation.model_fields.values()
        if not (isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("table"))
    )
    assert len(settings) == declared


def test_settings_types_defaults_and_ranges() -> None:
    found = {s.key: (s.type, s.default) for s in config.describe()}
    assert found == EXPECTED
    by_key = {s.key: s for s in config.describe()}
    assert (by_key["training.min_ratings"].minimum, by_key["training.min_ratings"].maximum) == (
        4,
        10000,
    )
    assert by_key["training.require_idle_minutes"].maximum == 1440
    assert by_key["training.backend"].choices == ("auto", "torch", "mlx")
    assert by_key["training.preset"].choices == ("careful", "balanced", "aggressive", "custom")


def test_no_file_means_defaults_and_nothing_written(paths: Paths) -> None:
    cfg = config.load_config(paths)
    assert cfg == Config()
    assert cfg.get("training.min_ratings") == 32
    assert not paths.config.exists()


def test_first_save_writes_a_documented_private_file(paths: Paths) -> None:
    config.save_config(paths, Config())
    text = paths.config.read_text()
    for setting in config.describe():
        assert f"{setting.name} =" in text
        assert setting.help.split()[0] in text
    if os.name == "posix":
        assert stat.S_IMODE(paths.config.stat().st_mode) == 0o600
    assert config.load_config(paths) == Config()
    assert [p.name for p in paths.home.iterdir() if p.name.endswith(".tmp")] == []


USER_FILE = """\
# my own note about this machine
[training]
# careful because the laptop is slow
preset = "aggressive"   # inline remark
min_ratings = 40

[notify]
enabled = false
"""


def test_set_value_keeps_the_users_comments_and_order(paths: Paths) -> None:
    paths.ensure()
    paths.config.write_text(USER_FILE)
    cfg = config.set_value(paths, "training.preset", "careful")
    cfg = config.set_value(paths, "training.require_idle_minutes", "30")
    text = paths.config.read_text()
    for kept in ("# my own note", "# careful because", "# inline remark", "min_ratings = 40"):
        assert kept in text
    assert text.index("[training]") < text.index("[notify]")
    assert 'preset = "careful"' in text and "require_idle_minutes = 30" in text
    assert "agents" not in text  # untouched defaults are not pinned into the user's file
    loaded = config.load_config(paths)
    assert loaded == cfg
    assert (loaded.training.preset, loaded.training.min_ratings) == ("careful", 40)
    assert loaded.notify.enabled is False


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("notify.enabled", "off", False),
        ("agents.codex", "YES", True),
        ("training.min_ratings", " 64 ", 64),
        ("training.backend", "mlx", "mlx"),
        ("notify.quiet_hours", "22:00-08:00", "22:00-08:00"),
        ("ollama.host", "http://localhost:1234", "http://localhost:1234"),
        ("training.base_model", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B"),
    ],
)
def test_set_value_parses_text_to_the_declared_type(paths: Paths, key, text, value) -> None:
    assert config.set_value(paths, key, text).get(key) == value
    assert config.load_config(paths).get(key) == value


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        (
            "training.min_ratings",
            "lots",
            "training.min_ratings must be a whole number from 4 to 10000",
        ),
        (
            "training.min_ratings",
            "3",
            "training.min_ratings must be a whole number from 4 to 10000",
        ),
        ("training.require_idle_minutes", "1441", "from 0 to 1440"),
        ("training.backend", "cuda", 'training.backend must be one of "auto", "torch", "mlx"'),
        ("notify.enabled", "maybe", "notify.enabled must be true or false"),
        ("notify.quiet_hours", "25:00-08:00", 'like "22:00-08:00"'),
        ("notify.quiet_hours", "22:00-22:00", 'like "22:00-08:00"'),
        ("ollama.host", "localhost:11434", "http:// or https:// URL"),
        ("training.speed", "1", "There is no setting 'training.speed'"),
    ],
)
def test_bad_values_are_one_clear_sentence_and_change_nothing(paths, key, text, message) -> None:
    config.save_config(paths, Config())
    before = paths.config.read_bytes()
    with pytest.raises(ConfigError) as info:
        config.set_value(paths, key, text)
    assert message in str(info.value)
    assert str(info.value).endswith(".") and str(info.value).count("\n") == 0
    assert paths.config.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[training\npreset = ", "line 1: this is not valid TOML"),
        ("[training]\nbackend = 'torch'\nmin_ratings = \"32\"\n", "line 3: training.min_ratings"),
        ("[notify]\n\nenabled = 1\n", "line 3: notify.enabled must be true or false, not 1"),
        ("[training]\npreset = 'fast'\n", "line 2: training.preset must be one of"),
        ("[training]\nspeed = 2\n", "line 2: training.speed is not a setting rltray knows"),
        ("[gpu]\nname = 'x'\n", "line 1: [gpu] is not a settings table"),
        ("training = 3\n", "[training] must be a table"),
    ],
)
def test_an_invalid_file_names_file_line_and_key_and_is_untouched(paths, content, message) -> None:
    paths.ensure()
    paths.config.write_text(content)
    with pytest.raises(ConfigError) as info:
        config.load_config(paths)
    assert str(paths.config) in str(info.value)
    assert message in str(info.value)
    with pytest.raises(ConfigError):
        config.set_value(paths, "training.preset", "careful")
    assert paths.config.read_text() == content


def test_config_error_is_a_user_error() -> None:
    assert issubclass(ConfigError, UserError)


@pytest.mark.skipif(os.name != "posix", reason="symlinks need privileges on Windows")
def test_a_symlinked_config_is_refused_never_followed(paths: Paths, tmp_path: Path) -> None:
    paths.ensure()
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("[training]\npreset = 'careful'\n")
    paths.config.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="symbolic link"):
        config.load_config(paths)
    with pytest.raises(ConfigError, match="symbolic link"):
        config.set_value(paths, "training.preset", "aggressive")
    with pytest.raises(ConfigError, match="symbolic link"):
        config.save_config(paths, Config())
    assert elsewhere.read_text() == "[training]\npreset = 'careful'\n"
    assert paths.config.is_symlink()


def test_a_failed_write_leaves_the_old_file(paths: Paths, monkeypatch) -> None:
    paths.ensure()
    paths.config.write_text(USER_FILE)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        config.set_value(paths, "training.preset", "careful")
    assert paths.config.read_text() == USER_FILE
    assert sorted(p.name for p in paths.home.iterdir() if p.is_file()) == ["config.toml"]


def test_saved_file_is_plain_toml_other_tools_can_read(paths: Paths) -> None:
    config.set_value(paths, "training.min_ratings", "100")
    doc = tomlkit.parse(paths.config.read_text()).unwrap()
    assert doc["training"]["min_ratings"] == 100


def test_parse_quiet_hours() -> None:
    assert config.parse_quiet_hours("") is None
    assert config.parse_quiet_hours("22:30-07:05") == ((22, 30), (7, 5))
    for bad in ("22-08", "24:00-01:00", "10:00-10:00", "1:00-2:00"):
        with pytest.raises(ValueError):
            config.parse_quiet_hours(bad)


def test_custom_reads_a_hyper_table_and_refuses_what_the_trainer_does_not_know(
    rltray_home: Path,
) -> None:
    paths = Paths.from_env().ensure()
    paths.config.write_text(
        '[training]\npreset = "custom"\n\n[training.hyper]\nlr = 5e-5\nepochs = 3\n'
    )
    loaded = config.load_config(paths)
    assert loaded.training.hyper == {"lr": 5e-5, "epochs": 3}
    config.set_value(paths, "training.min_ratings", 8)  # another key keeps the table
    assert config.load_config(paths).training.hyper == {"lr": 5e-5, "epochs": 3}
    assert "[training.hyper]" in paths.config.read_text()
    paths.config.write_text("[training.hyper]\nlearning_rate = 1e-4\n")
    with pytest.raises(ConfigError, match="'learning_rate' is not a trainer hyperparameter"):
        config.load_config(paths)


@pytest.mark.skipif(os.name != "posix", reason="POSIX owners and permission bits")
def test_a_config_others_can_write_is_refused_not_read(paths: Paths) -> None:
    """Regression (review2-sec swap_datafolder): config.toml names programs rltray runs
    (training.python), so one that other users can change is refused, as ssh's
    StrictModes refuses an authorized_keys they can."""
    paths.ensure()
    paths.config.write_text('[training]\npython = "/tmp/evil.sh"\n')
    os.chmod(paths.config, 0o666)
    with pytest.raises(ConfigError) as err:
        config.load_config(paths)
    assert str(err.value) == (
        f"The settings file {paths.config} can be changed by other users (mode 0666), who "
        f"could put their own settings, and programs to run, there: run `chmod 600 "
        f"{paths.config}`."
    )
    with pytest.raises(ConfigError, match="can be changed by other users"):
        config.set_value(paths, "training.preset", "fast")
    os.chmod(paths.config, 0o644)  # the usual umask's file is fine
    assert config.load_config(paths).training.python == "/tmp/evil.sh"


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0, reason="only root can hand a file to another user"
)
def test_a_config_another_user_owns_is_refused_not_read(paths: Paths) -> None:
    import pwd

    paths.ensure()
    paths.config.write_text('[training]\npython = "/tmp/evil.sh"\n')
    os.chown(paths.config, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(ConfigError) as err:
        config.load_config(paths)
    said = str(err.value)
    assert said.startswith(f"The settings file {paths.config} belongs to nobody, not to you")
    assert f"`sudo chown root {paths.config}`" in said and "move it aside" in said
