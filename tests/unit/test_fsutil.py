import os
import stat
from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.fsutil import atomic_write, check_private_dir, ensure_private_dir


def test_atomic_write_replaces_whole_file_private(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.json"
    atomic_write(target, "first")
    atomic_write(target, "second")
    assert target.read_text() == "second"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_atomic_write_leaves_nothing_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.json"
    atomic_write(target, "old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_private_dir_created_0700_and_tightened(tmp_path: Path) -> None:
    d = ensure_private_dir(tmp_path / "cache")
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    ensure_private_dir(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700


def test_world_writable_dir_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(PathError, match="world-writable"):
        ensure_private_dir(shared)


def test_missing_parents_are_created_private_too(tmp_path: Path) -> None:
    leaf = ensure_private_dir(tmp_path / "cache" / "model-fp" / "disk")
    for d in (leaf, leaf.parent, leaf.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_check_private_dir_changes_nothing(tmp_path: Path) -> None:
    check_private_dir(tmp_path / "missing")  # a directory still to be created is fine
    assert not (tmp_path / "missing").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)
    with pytest.raises(PathError, match="group- or world-writable") as info:
        check_private_dir(shared, "--run-dir")
    assert info.value.hint == f"chmod 700 {shared} or choose another --run-dir"
    assert stat.S_IMODE(shared.stat().st_mode) == 0o775  # refused, not "fixed"


def test_check_private_dir_names_the_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(PathError, match=f"{tmp_path / 'afile'} is not a directory"):
        check_private_dir(tmp_path / "afile" / "cache")
    with pytest.raises(PathError, match="is not a directory"):
        check_private_dir(tmp_path / "afile")


def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)  # nobody
    else:
        theirs = Path("/")  # root's, and not group-writable: another user's for anyone but root
    try:
        with pytest.raises(PathError, match="owned by another user"):
            check_private_dir(theirs)
        with pytest.raises(PathError, match="owned by another user"):
            ensure_private_dir(theirs)
    finally:
        if theirs != Path("/"):
            os.chown(theirs, os.getuid(), os.getgid())
