"""The writability check reads the mount table and the nearest existing directory; it writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.runtime.writable import mount_of, require_writable_dir

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
40 27 8:2 / /mnt/ro\\040disk ro,relatime - ext4 /dev/sdb1 ro
41 27 8:3 / /mnt/rw rw,relatime - xfs /dev/sdc1 rw
"""


def test_the_longest_mount_point_holding_the_path_wins() -> None:
    assert mount_of(Path("/proc/self/x"), MOUNTINFO) == ("/proc", "proc", {"rw", "relatime"})
    assert mount_of(Path("/procfoo"), MOUNTINFO) == ("/", "ext4", {"rw", "relatime"})
    assert mount_of(Path("/mnt/ro disk/kv"), MOUNTINFO) == ("/mnt/ro disk", "ext4", {"ro", "relatime"})


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
