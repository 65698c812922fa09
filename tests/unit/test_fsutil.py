import os
import stat
from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.fsutil import atomic_write, ensure_private_dir


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
