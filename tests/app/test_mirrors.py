"""Constants the app holds for the other side of a process boundary match that side's.

The app never imports the trainer (it may live in another Python) and the
hook program imports nothing of the app, so a few facts are written down on
both sides. Each pair is tied here; the test imports only the light trainer
modules (no torch), so it runs everywhere the app tests run.
"""

from __future__ import annotations

import typing

from rltray.app import config, spool
from rltray.app.hooks import capture_core
from rltray.app.training import jobbuild
from rltray.trainer import evaluate, job, presets
from rltray.web.wizard import PRESETS, RETIRED


def test_the_preset_names_are_the_trainers_everywhere_the_app_offers_them() -> None:
    trainer_presets = set(presets.PRESET_TABLE)
    setting = typing.get_args(config.TrainingSettings.model_fields["preset"].annotation)
    assert set(setting) == trainer_presets
    assert set(jobbuild.DATA_SHARES) == trainer_presets
    offered = {name for name, *_ in PRESETS}
    assert offered | set(RETIRED) == trainer_presets and not offered & set(RETIRED)


def test_training_hyper_may_set_exactly_the_trainers_hyperparameters() -> None:
    assert sorted(config.TRAINER_HYPER_FIELDS) == sorted(presets.HYPER_FIELDS)


def test_the_held_out_minimum_is_the_gates() -> None:
    assert jobbuild.MIN_HELDOUT_PER_CLASS == evaluate.MIN_HELDOUT_PER_CLASS


def test_the_roles_the_app_writes_are_the_ones_the_trainer_reads() -> None:
    assert set(jobbuild.ROLES) == set(job.ROLES)
    assert set(spool.ROLES) <= set(job.ROLES)


def test_the_spool_takes_what_the_hook_writes_and_no_more() -> None:
    for name in ("MAX_TEXT", "MAX_CONTEXT", "MAX_CONTEXT_CHARS"):
        assert getattr(spool, name) == getattr(capture_core, name), name


def test_the_data_shares_left_the_trainer() -> None:
    """One owner: the app builds the split, so the trainer's table no longer carries them."""
    assert "replay_share" not in presets.HYPER_FIELDS
    assert "heldout_fraction" not in presets.HYPER_FIELDS


def test_the_apps_backend_table_is_the_trainers_catalogue() -> None:
    from rltray.app.training import backends
    from rltray.app.training.trainerenv import plan
    from rltray.trainer.backends.catalogue import CATALOGUE

    assert {n: b.requires for n, b in backends.BACKENDS.items()} == {
        n: e.requires for n, e in CATALOGUE.items()
    }
    setting = typing.get_args(config.TrainingSettings.model_fields["backend"].annotation)
    assert set(setting) == {"auto", *backends.BACKENDS}
    assert set(job.BACKENDS) == set(backends.BACKENDS)
    # the trainer environment's flavours (cuda, mps, cpu, mlx) each install one backend
    for flavour in plan.EXTRAS:
        assert plan.EXTRAS[flavour][0] in {b.extra for b in backends.BACKENDS.values()}


def test_the_registry_names_each_agent_as_its_class_does() -> None:
    from rltray.app.hooks import registry

    for entry in registry.AGENTS:
        cls = entry.load()
        assert (cls.name, cls.display_name) == (entry.name, entry.display_name)
