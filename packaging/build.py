"""Build the rltray bundle for this OS: icons, rltray's wheel, PyInstaller, archive, report.

`make package` runs it on Linux; on macOS and Windows run
``python packaging/build.py`` in a venv with ``pip install -e '.[package]'``
(packaging/README.md). Steps, each of which must succeed:

1. draw the icons from icons/rltray.svg (packaging/make_icons.py);
2. build rltray's own wheel: the bundle carries it so `rltray trainer-env create`
   can install the trainer into a fresh environment without the source tree;
3. run PyInstaller on pyinstaller/rltray.spec (one folder);
4. refuse a bundle holding torch, transformers or mlx;
5. on macOS sign it (macos/sign.sh: ad hoc unless MACOS_SIGN_IDENTITY is set);
6. pack it (tar.gz; zip on Windows) and print its size on disk and packed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FORBIDDEN = ("torch", "transformers", "mlx")  # top-level names that must never be bundled
SETUPTOOLS = "setuptools>=77"  # reads pyproject's SPDX `license = "Apache-2.0"`


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def setuptools_too_old(version: str | None) -> bool:
    """Whether ``version`` (None: not installed) cannot build rltray's wheel."""
    if version is None:
        return True
    major = version.split(".")[0]
    return not major.isdigit() or int(major) < 77


def ensure_setuptools() -> None:
    """The wheel is built without build isolation, so with this environment's setuptools.

    A venv made by Python 3.11's ensurepip has setuptools 65, which refuses the
    SPDX license (`make package` failed on a fresh clone, issue 22); Python 3.12+
    venvs have none. `make package` installs the package extra, which pins it;
    this covers a venv made by hand (packaging/README.md).
    """
    from importlib import metadata

    try:
        version: str | None = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        version = None
    if setuptools_too_old(version):
        run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
             SETUPTOOLS])  # fmt: skip


def forbidden_files(folder: Path) -> list[str]:
    """Bundle paths whose any part is (or starts a dist-info/lib of) a forbidden package."""
    found = []
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        for part in parts:
            name = part.split(".")[0].split("-")[0].lower()
            if name in FORBIDDEN or name.startswith(("libtorch", "libmlx")):
                found.append("/".join(parts))
                break
    return found


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def archive(bundle: Path, out: Path) -> Path:
    """The bundle as one compressed file a user downloads (``release_member``: no builder's
    uid, no file anyone but its owner may change)."""
    if os.name == "nt":
        return Path(shutil.make_archive(str(out), "zip", bundle.parent, bundle.name))
    target = out.with_name(out.name + ".tar.gz")
    with tarfile.open(target, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname=bundle.name, filter=release_member)
    return target


def release_member(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """One archive entry as a release carries it: owned by root (uid/gid 0), writable by its
    owner only.

    Why (review 3, finding 8): the tarball carried the build account's uid/gid (1001) and,
    under Debian's umask 002, group-writable files; `sudo tar -xzf ... -C /opt` keeps both,
    so that account (or its group) could change the program every hook and login runs as
    each user, and rltray itself refuses such a folder (app/bundle.py unsafe_location).
    """
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode &= ~0o022
    return info


def platform_tag() -> str:
    import platform

    system = {"darwin": "macos", "win32": "windows"}.get(sys.platform, "linux")
    return f"{system}-{platform.machine().lower()}"


def build(out: Path, archive_it: bool = True) -> Path:
    out = out.resolve()
    started = time.monotonic()
    env = {**os.environ, "RLTRAY_BUILD_DIR": str(out)}
    run([sys.executable, str(HERE / "make_icons.py"), str(out / "icons")])
    shutil.rmtree(out / "wheel", ignore_errors=True)
    ensure_setuptools()
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out / "wheel"), str(ROOT)])  # fmt: skip
    # PyInstaller's import analysis cannot see through an editable install's
    # finder, so it analyses the wheel's files, unpacked here (the spec's pathex).
    shutil.rmtree(out / "src", ignore_errors=True)
    (wheel,) = (out / "wheel").glob("rltray-*.whl")
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
         "--target", str(out / "src"), str(wheel)])  # fmt: skip
    run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
         "--distpath", str(out / "dist"), "--workpath", str(out / "work"),
         str(HERE / "pyinstaller" / "rltray.spec")],
        env=env,
    )  # fmt: skip
    bundle = out / "dist" / ("rltray.app" if sys.platform == "darwin" else "rltray")
    bad = forbidden_files(bundle)
    if bad:
        raise SystemExit(f"the bundle holds what it must not ({', '.join(FORBIDDEN)}): {bad[:5]}")
    if sys.platform == "darwin":
        run(["sh", str(HERE / "macos" / "sign.sh"), str(bundle)])
    seconds = time.monotonic() - started
    size = folder_size(bundle)
    print(f"bundle: {bundle} ({size / 1e6:.0f} MB on disk, built in {seconds:.0f} s)")
    if archive_it:
        packed = archive(bundle, out / f"rltray-{version()}-{platform_tag()}")
        print(f"archive: {packed} ({packed.stat().st_size / 1e6:.0f} MB)")
    return bundle


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("rltray")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "package")
    parser.add_argument("--no-archive", action="store_true", help="skip the .tar.gz / .zip")
    args = parser.parse_args(argv)
    try:
        build(args.out, archive_it=not args.no_archive)
    except subprocess.CalledProcessError as exc:
        print(f"build failed: {' '.join(map(str, exc.cmd))} exited {exc.returncode}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
