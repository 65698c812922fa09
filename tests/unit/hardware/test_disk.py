from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.hardware.disk import BlockIndex, candidate_mounts, probe_disks, resolve_path
from kvstack.hardware.mounts import Mount, read_mounts

from .fixtures import PROC

GPU_HOST = PROC / "gpu_host_v2"
CONTAINER = PROC / "container_v1"
K8S = PROC / "k8s_pod_v2"


def test_candidates_are_writable_real_filesystems_one_per_device() -> None:
    mounts = read_mounts(GPU_HOST)
    points = [m.mount_point for m in candidate_mounts(mounts, GPU_HOST)]
    # /srv/kv is a bind of /data (same device): one entry. /boot/efi, squashfs, tmpfs: never.
    assert points == ["/", "/data", "/mnt/hdd", "/mnt/my models"]


def test_disk_facts_from_sys_block() -> None:
    disks, dirs = probe_disks(None, GPU_HOST)
    by = {d.mount: d for d in disks}
    assert (by["/"].device, by["/"].nvme, by["/"].rotational) == ("/dev/nvme0n1p2", True, False)
    # md RAID0 of two NVMe drives is NVMe and not rotational, from its members.
    assert (by["/data"].device, by["/data"].nvme, by["/data"].rotational) == ("/dev/md0", True, False)
    assert (by["/mnt/hdd"].nvme, by["/mnt/hdd"].rotational) == (False, True)
    nfs = by["/mnt/my models"]
    assert nfs.nvme is None and nfs.rotational is None
    assert "no block device" in nfs.unknown["nvme"]
    assert all(not d.tmpfs and d.writable for d in disks)
    assert dirs == [GPU_HOST / (d.mount or "/").lstrip("/") for d in disks]


def test_container_skips_file_binds_and_knows_no_overlay_device() -> None:
    disks, _ = probe_disks(None, CONTAINER)
    assert [d.mount for d in disks] == ["/", "/workspace"]
    overlay, workspace = disks
    assert overlay.fstype == "overlay" and overlay.nvme is None
    assert (workspace.device, workspace.nvme, workspace.rotational) == ("/dev/nvme1n1", True, False)


def test_whole_disk_mount_and_sizes() -> None:
    disks, _ = probe_disks(None, K8S)
    cache = next(d for d in disks if d.mount == "/cache")
    assert cache.device == "/dev/nvme3n1" and cache.nvme is True
    assert cache.total_bytes is not None and cache.free_bytes is not None
    assert 0 < cache.free_bytes <= cache.total_bytes


def test_block_index_maps_partitions_and_names() -> None:
    idx = BlockIndex(GPU_HOST)
    assert idx.disk_for((259, 1), "/dev/nvme0n1p1") == "nvme0n1"
    assert idx.disk_for((0, 99), "/dev/sda1") == "sda"  # by name when the devno is virtual (btrfs)
    assert idx.disk_for((0, 99), "overlay") is None
    assert idx.describe("md0").nvme is True


def test_missing_rotational_file_is_a_reason(tmp_path: Path) -> None:
    (tmp_path / "sys/block/vdb").mkdir(parents=True)
    (tmp_path / "sys/block/vdb/dev").write_text("252:16\n")
    dev = BlockIndex(tmp_path).describe("vdb")
    assert dev.rotational is None and "rotational" in dev.reasons


def _mount(point: str, fstype: str = "ext4") -> Mount:
    return Mount(point, "/", (8, 1), fstype, "/dev/sda1", frozenset({"rw"}))


def test_resolve_path_walks_up_to_an_existing_parent(tmp_path: Path) -> None:
    mounts = [_mount("/"), _mount(str(tmp_path), "xfs")]
    wanted = tmp_path / "not" / "yet"
    p, mount = resolve_path(wanted, mounts)
    assert p == wanted and mount.fstype == "xfs"


def test_resolve_path_refuses_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(PathError) as exc:
        resolve_path(f, [_mount("/")])
    assert exc.value.exit_code == 2 and exc.value.hint


def test_given_tmpfs_path_is_flagged_as_memory() -> None:
    disks, _ = probe_disks([Path("/dev/shm")])
    (shm,) = disks
    if shm.fstype not in ("tmpfs", "ramfs"):
        pytest.skip(f"/dev/shm is {shm.fstype} on this machine, not tmpfs")
    assert shm.tmpfs and shm.nvme is False and shm.rotational is False
