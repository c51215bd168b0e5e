"""`rltray trainer-env`: which packages for which machine, and a real environment built from
the registry that trains one step; a failed re-build keeps the previous environment.

The slow tests build a real venv with pip from the configured package index
(torch's CPU wheel comes from that index here, so they pass ``--torch-index
none``: this machine reaches no other index) and skip, saying so, when the
registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.paths import Paths
from rltray.app.training.trainerenv import build as trainerenv_build
from rltray.app.training.trainerenv import plan as trainerenv_plan
from rltray.app.training.trainerenv import python as trainerenv_python
from rltray.app.training.trainerenv.plan import (
    CPU_INDEX,
    CUDA_INDEX,
    TORCH_PIN,
    TrainerEnvError,
    detect_backend,
    requirements_for,
    torch_index,
)

REQUIRES = [
    "platformdirs>=4.2",
    'torch>=2.4; extra == "torch"',
    'transformers>=4.56; extra == "torch"',
    'gguf>=0.17; extra == "torch"',
    'mlx>=0.29; sys_platform == "darwin" and extra == "mlx"',
    'mlx[cpu]>=0.29; sys_platform == "linux" and extra == "mlx"',
    'mlx-lm>=0.28; extra == "mlx"',
    'gguf>=0.17; extra == "mlx"',
    'httpx>=0.27; extra == "export"',
    'pytest>=8; extra == "test"',
]


def test_requirements_keep_platform_markers_and_leave_torch_to_the_pin() -> None:
    assert requirements_for(REQUIRES, ("torch", "export")) == [
        "transformers>=4.56", "gguf>=0.17", "httpx>=0.27",
    ]  # fmt: skip
    assert requirements_for(REQUIRES, ("mlx",)) == [
        'mlx>=0.29; sys_platform == "darwin"',
        'mlx[cpu]>=0.29; sys_platform == "linux"',
        "mlx-lm>=0.28",
        "gguf>=0.17",
    ]


def test_the_bundled_wheel_names_the_same_requirements(tmp_path: Path) -> None:
    wheel = tmp_path / "rltray-0.1.0-py3-none-any.whl"
    metadata = "Metadata-Version: 2.4\nName: rltray\n" + "".join(
        f"Requires-Dist: {line}\n" for line in REQUIRES
    )
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("rltray-0.1.0.dist-info/METADATA", metadata)
    assert trainerenv_plan.wheel_requires(wheel) == REQUIRES


def test_torch_comes_from_the_index_that_has_the_right_build() -> None:
    assert torch_index("cpu", plat="linux") == CPU_INDEX  # PyPI's Linux wheel is the CUDA one
    assert torch_index("cpu", plat="win32") == CPU_INDEX
    assert torch_index("cpu", plat="darwin") is None
    assert torch_index("mps", plat="darwin") is None
    assert torch_index("cuda", plat="linux") == CUDA_INDEX
    assert torch_index("cpu", override="none", plat="linux") is None
    assert torch_index("cpu", override="https://mirror.example/whl", plat="linux") == (
        "https://mirror.example/whl"
    )


def test_the_backend_follows_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert detect_backend("darwin", "arm64")[0] == "mlx"
    assert detect_backend("darwin", "x86_64")[0] == "mps"
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: no CUDA
    assert detect_backend("linux", "x86_64")[0] == "cpu"
    with pytest.raises(TrainerEnvError, match="nvidia-smi"):
        trainerenv_plan.plan("cuda")
    # An nvidia-smi that lists a GPU the way the real one does (`nvidia-smi -L`).
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)'\n")
    smi.chmod(0o755)
    backend, why = detect_backend("linux", "x86_64")
    assert backend == "cuda" and "NVIDIA H100 80GB HBM3" in why
    the_plan = trainerenv_plan.plan("cuda")
    assert the_plan.pins == (TORCH_PIN,) and the_plan.index == CUDA_INDEX


def test_an_intel_mac_or_rosetta_gets_one_sentence_before_pip_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.13.0 has no macOS x86_64 wheel and MLX needs Apple Silicon: pip's raw
    "no matching distribution" error was all a user saw (issue 23 item 3)."""
    monkeypatch.setattr(trainerenv_plan, "under_rosetta", lambda: False)
    for backend in (None, "cpu", "mps", "mlx"):
        with pytest.raises(TrainerEnvError) as caught:
            trainerenv_plan.plan(backend, plat="darwin", machine="x86_64")
        assert str(caught.value) == trainerenv_plan.INTEL_MAC
    monkeypatch.setattr(trainerenv_plan, "under_rosetta", lambda: True)
    with pytest.raises(TrainerEnvError) as caught:
        trainerenv_plan.plan(plat="darwin", machine="x86_64")
    assert str(caught.value) == trainerenv_plan.ROSETTA
    assert trainerenv_plan.plan(plat="darwin", machine="arm64").backend == "mlx"


def test_cpu_and_mlx_plans_pin_what_they_install() -> None:
    cpu = trainerenv_plan.plan("cpu", "none")
    assert cpu.pins == (TORCH_PIN,) and cpu.library == "torch"
    assert not any(r.split(";")[0].strip() == "torch" for r in cpu.requirements)
    assert {"transformers", "peft"} <= {r.split(">")[0] for r in cpu.requirements}
    mlx = trainerenv_plan.plan("mlx")
    assert mlx.pins == () and mlx.library == "mlx" and mlx.index is None
    assert any(r.startswith("mlx-lm") for r in mlx.requirements)
    # the trainer finds its cache folders (GGUF bases, kept base answers) with platformdirs,
    # which a plain venv with the training stack lacks
    for p in (cpu, mlx):
        assert any(r.startswith("platformdirs") for r in p.requirements), p.requirements


def test_no_usable_base_python_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(TrainerEnvError, match=r"No Python 3\.10\+ with venv.*--python"):
        trainerenv_python.find_base_python(str(tmp_path / "python9"))


# -- real environments (slow) ------------------------------------------------------


def registry_problem(python: str = sys.executable) -> str | None:
    """None when the configured index serves torch's CPU build, else why the test cannot run.

    ``--torch-index none`` (this machine reaches no PyTorch index) is only safe
    where the configured index has the CPU wheel: PyPI's own Linux wheel is the
    CUDA build, which pulls gigabytes of nvidia packages.
    """
    done = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
         "--quiet", "--report", "-", TORCH_PIN],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        return "the package registry cannot be reached: " + (
            done.stderr.strip().splitlines() or ["no answer"]
        )[-1]
    versions = [item["metadata"]["version"] for item in json.loads(done.stdout)["install"]]
    if not all(v.endswith("+cpu") for v in versions):
        return f"the configured index offers torch {versions} but not its CPU build"
    return None


@pytest.fixture(scope="module")
def built_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    problem = registry_problem()
    if problem:
        pytest.skip(f"no trainer environment is built: {problem}")
    home = tmp_path_factory.mktemp("trainer-env-home")
    env = {**os.environ, "RLTRAY_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", "trainer-env", "create", "--backend", "cpu",
         "--torch-index", "none"],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return home, env, done.stdout


@pytest.mark.slow
def test_create_builds_an_environment_that_trains_and_records_it(
    built_env: tuple[Path, dict[str, str], str],
) -> None:
    home, env, output = built_env
    python = home / "trainer-env" / "bin" / "python"
    assert "Successfully installed" in output  # pip's own progress was shown
    assert "Ready: one training step took" in output and "cpu float32" in output
    assert config.load_config(Paths(home)).training.python == str(python)
    probe = subprocess.run(
        [str(python), "-c", "import torch, rltray.trainer; print(torch.__version__); "
         "from rltray.trainer import gguf_base, base_answers; "
         "print(gguf_base.cache_root()); print(base_answers.root())"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert probe.returncode == 0 and probe.stdout.startswith("2.13.0"), probe
    assert probe.stdout.splitlines()[1].endswith("gguf-bases"), probe.stdout
    assert not (home / "trainer-env.new").exists() and not (home / "trainer-env.old").exists()
    status = subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", "trainer-env", "status", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert json.loads(status.stdout)["in_use"] is True
    selftest = subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", "--selftest"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    line = next(x for x in selftest.stdout.splitlines() if "trainer environment:" in x)
    assert line.startswith("✓") and str(python) in line


@pytest.mark.slow
def test_a_failed_rebuild_keeps_the_previous_environment(
    built_env: tuple[Path, dict[str, str], str],
) -> None:
    home, _env, _ = built_env
    paths = Paths(home)
    marker = home / "trainer-env" / "kept-from-before"
    marker.write_text("the environment that worked")
    before = config.load_config(paths).training.python
    broken = replace(
        trainerenv_plan.plan("cpu", "none"),
        requirements=("rltray-no-such-package==1.0",),  # pip cannot resolve it: a real failure
    )
    said: list[str] = []
    with pytest.raises(TrainerEnvError, match="previous trainer environment is unchanged"):
        trainerenv_build.build(paths, broken, sys.executable, said.append)
    assert any("rltray-no-such-package" in line for line in said)  # pip's own words shown
    assert marker.read_text() == "the environment that worked"
    assert not (home / "trainer-env.new").exists()
    assert config.load_config(paths).training.python == before
    still = subprocess.run(
        [before, "-c", "import torch, rltray.trainer"], capture_output=True, timeout=120
    )
    assert still.returncode == 0


def test_system_pythons_are_tried_newest_first_and_py_first_on_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("python3", "python3.12", "python3.10", "python", "py"):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    names = [Path(p).name for p in trainerenv_python.system_pythons("linux")]
    assert names == ["python3.12", "python3.10", "python3"]
    assert Path(trainerenv_python.system_pythons("win32")[0]).name == "py"


def test_a_python_without_venv_is_passed_over_with_the_reason(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 'No module named ensurepip' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(TrainerEnvError, match=r"has no venv/ensurepip \(No module named ensurepip"):
        trainerenv_python.find_base_python(str(fake))
    assert trainerenv_python.find_base_python(sys.executable) == sys.executable


def test_a_source_checkout_installs_its_own_tree() -> None:
    """Not the released rltray from an index: the trainer environment of a checkout must
    train with the code beside it (a wrong root sent pip looking for rltray==0.1.0)."""
    source, _requires = trainerenv_plan.rltray_source()
    root = Path(__file__).resolve().parents[2]
    assert Path(source) == root, source
