from __future__ import annotations

from kvstack.hardware.mounts import mount_of, parse_mountinfo, read_mounts

from .fixtures import PROC


def test_parse_mountinfo_fields_and_escapes() -> None:
    mounts = read_mounts(PROC / "gpu_host_v2")
    by_point = {m.mount_point: m for m in mounts}
    root = by_point["/"]
    assert (root.devno, root.fstype, root.source) == ((259, 2), "ext4", "/dev/nvme0n1p2")
    assert "errors=remount-ro" in root.options and not root.read_only
    assert by_point["/snap/core20/2318"].read_only
    # "\040" in mountinfo is a space in the mount point.
    assert by_point["/mnt/my models"].fstype == "nfs4"
    assert by_point["/srv/kv"].root == "/kv"


def test_malformed_lines_are_skipped() -> None:
    text = "garbage\n36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
    (only,) = parse_mountinfo(text)
    assert only.mount_point == "/mnt2" and only.root == "/mnt1" and only.devno == (98, 0)


def test_mount_of_picks_the_deepest_mount() -> None:
    mounts = read_mounts(PROC / "gpu_host_v2")
    assert mount_of("/data/kv/cache", mounts).mount_point == "/data"  # type: ignore[union-attr]
    assert mount_of("/database", mounts).mount_point == "/"  # type: ignore[union-attr]
    assert mount_of("/dev/shm/x", mounts).fstype == "tmpfs"  # type: ignore[union-attr]


def test_missing_mountinfo_gives_no_mounts(tmp_path: object) -> None:
    from pathlib import Path

    assert read_mounts(Path(str(tmp_path))) == []
