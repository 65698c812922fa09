"""The one writability check (runtime/writable.py): the mount table and the nearest existing directory,
nothing written; for a launch, also the free space and a real write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.runtime.writable import require_room, require_writable_dir


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/proc/kvstack", "a proc filesystem"),
        ("/sys/fs/kv", "a sysfs filesystem"),
    ],
)
def test_kernel_filesystems_are_refused_with_one_line(path: str, words: str) -> None:
    with pytest.raises(PathError) as err:
        require_writable_dir(Path(path), "--cache-dir")  # the real mount table
    assert words in err.value.message and "\n" not in err.value.message
    assert err.value.hint is not None and "--cache-dir" in err.value.hint
    assert not Path(path).exists()


def test_a_read_only_mount_is_refused(tmp_path: Path) -> None:
    table = f"27 1 8:1 / / rw - ext4 /dev/sda1 rw\n50 27 8:9 / {tmp_path} ro,relatime - ext4 /dev/x ro\n"
    with pytest.raises(PathError, match="mounted read-only"):
        require_writable_dir(tmp_path / "cache", "--cache-dir", mountinfo=table)


def test_a_writable_directory_passes_and_nothing_is_created(tmp_path: Path) -> None:
    before = sorted(os.listdir(tmp_path))
    require_writable_dir(tmp_path / "a" / "b", "--cache-dir")
    require_writable_dir(tmp_path, "--run-dir")
    assert sorted(os.listdir(tmp_path)) == before


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(PathError, match="is not a directory"):
        require_writable_dir(tmp_path / "f" / "cache", "--cache-dir")


def test_the_launch_check_writes_where_the_directory_exists_and_leaves_nothing(tmp_path: Path) -> None:
    require_room(tmp_path, "--cache-dir")
    require_room(tmp_path / "new" / "deeper", "--cache-dir")  # not there yet: nothing to write in
    assert os.listdir(tmp_path) == []


def test_too_little_space_names_both_figures(tmp_path: Path) -> None:
    with pytest.raises(PathError, match=r"^--cache-dir .* GiB free but the plan needs") as err:
        require_room(tmp_path / "kv", "--cache-dir", need_bytes=1 << 60)
    assert err.value.hint is not None and "--cache-dir" in err.value.hint


def test_a_directory_without_write_permission_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: permission bits do not restrict root, so no read-only dir exists")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(PathError, match="this user cannot write to"):
        require_writable_dir(ro, "--run-dir")
    with pytest.raises(PathError, match="this user cannot create"):
        require_writable_dir(ro / "run", "--run-dir")
