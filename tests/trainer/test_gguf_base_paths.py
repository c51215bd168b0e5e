"""Where a GGUF base is converted, and how Transformers is shown the file (issue 23 item 12).

Two Windows failures, decided here by functions tested on every OS:

* the conversion showed Transformers the GGUF through ``os.symlink``, which needs
  admin rights or Developer Mode on Windows (WinError 1314): every GGUF base
  failed there;
* the cache folder was ``platformdirs.user_cache_dir("rltray")``, which on Windows is
  ``%LOCALAPPDATA%\\rltray\\rltray\\Cache``: inside the data folder
  ``%LOCALAPPDATA%\\rltray`` (``app/paths.py``), so gigabytes of weights sat with the
  user's ratings. ``appauthor=False`` alone still nests it (``...\\rltray\\Cache``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import platformdirs
import pytest
from platformdirs.macos import MacOS
from platformdirs.unix import Unix
from platformdirs.windows import Windows
from rltray.trainer import gguf_base


def _no_symlinks(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.EPERM, "A required privilege is not held by the client")


def _no_hard_links(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.EXDEV, "Invalid cross-device link")


def _windows(monkeypatch: pytest.MonkeyPatch, local: Path) -> Windows:
    """platformdirs' own Windows rules, with %LOCALAPPDATA% at ``local``."""
    monkeypatch.setattr(platformdirs.windows, "get_win_folder", lambda _csidl: str(local))
    return Windows(appname="rltray", appauthor=False)


def test_on_windows_the_cache_is_beside_the_data_folder_not_inside_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    local = tmp_path / "AppData" / "Local"
    dirs = _windows(monkeypatch, local)
    data = Path(dirs.user_data_dir)
    assert data == local / "rltray"  # the data folder app/paths.py uses
    # the bug: platformdirs' cache folder for rltray, with or without appauthor=False
    assert data in Path(Windows(appname="rltray").user_cache_dir).parents
    assert data in Path(dirs.user_cache_dir).parents
    root = gguf_base.default_cache_root(dirs)
    assert root == local / "rltray-cache" / "gguf-bases"
    assert data not in root.parents


@pytest.mark.parametrize("kind", [MacOS, Unix])
def test_on_macos_and_linux_the_cache_is_the_os_cache_folder(
        kind: type, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    dirs = kind(appname="rltray", appauthor=False)
    root = gguf_base.default_cache_root(dirs)
    assert root == Path(dirs.user_cache_dir) / "gguf-bases"
    assert Path(dirs.user_data_dir) not in root.parents
    want = {"MacOS": "Library/Caches/rltray", "Unix": ".cache/rltray"}[kind.__name__]
    assert root == tmp_path / want / "gguf-bases"


def test_the_environment_variable_still_moves_the_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(gguf_base.CACHE_ENV, str(tmp_path / "big-disk"))
    assert gguf_base.cache_root() == tmp_path / "big-disk"


def test_a_trainer_environment_without_platformdirs_says_how_to_mend_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainer environments built before the export extra carried platformdirs lack it
    (the app's own dependency does not go there): a GGUF base then got Python's
    ModuleNotFoundError instead of a sentence."""
    import sys

    monkeypatch.delenv(gguf_base.CACHE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # import fails as if absent
    with pytest.raises(gguf_base.GGUFBaseError) as caught:
        gguf_base.cache_root()
    assert "rltray trainer-env create" in str(caught.value)


def test_the_gguf_is_hard_linked_where_symlinks_need_admin_rights(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blob = tmp_path / "sha256-ab"
    blob.write_bytes(b"GGUF" + bytes(100))
    monkeypatch.setattr(os, "symlink", _no_symlinks)
    link = gguf_base.gguf_file_in(blob, tmp_path)
    assert link.name == "model.gguf" and not link.is_symlink()
    assert os.path.samefile(link, blob)  # no second copy of the bytes


def test_the_gguf_is_copied_where_neither_link_can_be_made(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blob = tmp_path / "ollama" / "sha256-ab"
    blob.parent.mkdir()
    blob.write_bytes(b"GGUF" + bytes(range(100)))
    (tmp_path / "work").mkdir()
    monkeypatch.setattr(os, "symlink", _no_symlinks)
    monkeypatch.setattr(os, "link", _no_hard_links)
    link = gguf_base.gguf_file_in(blob, tmp_path / "work")
    assert link.read_bytes() == blob.read_bytes() and not os.path.samefile(link, blob)


@pytest.mark.ml
def test_a_gguf_base_materializes_where_symlinks_need_admin_rights(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The whole torch path with symlinks refused, as on Windows without Developer Mode."""
    pytest.importorskip("gguf")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tinygguf import build_tiny_gguf

    gguf = build_tiny_gguf(tmp_path / "t.gguf", hf_tokenizer=True)
    assert gguf_base.converter() == "torch"  # the path that shows Transformers a file name
    monkeypatch.setattr(os, "symlink", _no_symlinks)
    folder = gguf_base.materialize(gguf, cache=tmp_path / "cache")
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits and links")
@pytest.mark.parametrize("umask", [0o000, 0o022], ids=oct)
def test_the_hash_index_is_private_and_written_through_no_planted_link(
    tmp_path: Path, umask: int
) -> None:
    """Regression (review2-sec cache_umask): hashes.json (which models the user trains, by
    path) was 0666 under umask 000 and 0644 in a 0755 folder under 022, written through
    the predictable ``.hashes.<pid>.tmp``, which follows a link planted there."""
    cache = tmp_path / ".cache" / "rltray" / "gguf-bases"
    model = tmp_path / "secret-project.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    old = os.umask(umask)
    try:
        gguf_base.file_sha256(model, cache)
        victim = tmp_path / "victim.txt"
        victim.write_text("keep me")
        (cache / f".hashes.{os.getpid()}.tmp").symlink_to(victim)
        os.utime(model, ns=(1, 1))  # a changed file: hashed and written again
        gguf_base.file_sha256(model, cache)
    finally:
        os.umask(old)
    assert victim.read_text() == "keep me"
    assert cache.stat().st_mode & 0o777 == 0o700
    assert (cache / "hashes.json").stat().st_mode & 0o777 == 0o600
    for parent in (tmp_path / ".cache", tmp_path / ".cache" / "rltray"):
        assert parent.stat().st_mode & 0o777 == 0o755, parent
    assert str(model) in (cache / "hashes.json").read_text()
