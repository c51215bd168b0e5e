"""The release tarball carries no builder's uid and no file others may change.

Regression pinned (review 3, finding 8; /tmp/review3-packaging/archive_owner.sh): the
archive kept the build account's uid/gid (1001) and, under Debian's umask 002, its
group-writable modes; `sudo tar -xzf ... -C /opt` made /opt/rltray that account's to
change, under every user's hooks and login entry.

Real parts: a bundle-shaped folder with real modes (and, as root, the build account's
owner), the real ``packaging/build.py archive``, and GNU tar extracting it as root.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

BUILD = Path(__file__).resolve().parents[2] / "packaging" / "build.py"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="tar.gz archives are POSIX's")


def build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("packaging_build", BUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bundle_folder(root: Path) -> Path:
    """dist/rltray as a build under umask 002 leaves it, owned by uid 1001 when we can."""
    folder = root / "dist" / "rltray"
    (folder / "_internal" / "rltray").mkdir(parents=True)
    exe = folder / "rltray"
    exe.write_text("#!/bin/sh\necho real rltray\n")
    data = folder / "_internal" / "rltray" / "capture.py"
    data.write_text("x = 1\n")
    for path, mode in ((folder, 0o775), (folder / "_internal", 0o775),
                       (folder / "_internal" / "rltray", 0o775), (exe, 0o775), (data, 0o664)):
        path.chmod(mode)
        if os.geteuid() == 0:
            os.chown(path, 1001, 1001)
    return folder


def test_every_member_is_roots_and_only_its_owner_may_write_it(tmp_path: Path) -> None:
    target = build_module().archive(bundle_folder(tmp_path), tmp_path / "rltray-0.1.0-linux")
    with tarfile.open(target) as tar:
        members = tar.getmembers()
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "root", "root")}
    assert [m.name for m in members if m.mode & 0o022] == []
    modes = {m.name: m.mode for m in members}
    assert modes["rltray/rltray"] == 0o755 and modes["rltray/_internal/rltray/capture.py"] == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="extracting as root keeps owners; needs root")
@pytest.mark.skipif(shutil.which("tar") is None, reason="needs tar")
def test_sudo_tar_into_opt_gives_a_folder_rltray_accepts(tmp_path: Path) -> None:
    from rltray.app import bundle

    target = build_module().archive(bundle_folder(tmp_path), tmp_path / "rltray-0.1.0-linux")
    opt = tmp_path / "opt"
    opt.mkdir(mode=0o755)
    subprocess.run(["tar", "-xzf", str(target), "-C", str(opt)], check=True, timeout=60)
    program = opt / "rltray" / "rltray"
    st = program.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o755)
    for folder in (program.parent, program.parent / "_internal"):
        assert folder.stat().st_uid == 0 and not folder.stat().st_mode & 0o022, folder
    # nothing below the extracted folder is open to others (pytest's tmp_path is in /tmp,
    # which rltray refuses for its own reasons: checked from the folder down)
    assert bundle._others_can_replace(program, "linux") is None
    assert bundle._others_can_replace(program.parent, "linux") is None
