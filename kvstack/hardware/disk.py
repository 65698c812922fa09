"""Candidate cache locations: mount, filesystem, device, NVMe/rotational, size (fio is separate).

By default every writable real filesystem is a candidate; ``--path`` values are resolved to the
mount that holds them. tmpfs is memory, never a disk tier: it is left out of the defaults and
flagged when a user names it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvstack.errors import PathError
from kvstack.fsutil import existing_ancestor, may_write_in
from kvstack.hardware.mounts import Mount, mount_of, read_mounts
from kvstack.hardware.snapshot import DiskInfo

ROOT = Path("/")

MEMORY_FS = frozenset({"tmpfs", "ramfs"})
# Filesystems that can hold a cache directory. Others (proc, sysfs, cgroup, squashfs, ...)
# are kernel views or read-only images.
REAL_FS = frozenset(
    {
        "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "bcachefs", "jfs", "reiserfs",
        "overlay", "nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "wekafs",
        "fuse.juicefs", "fuse.weka", "ceph", "fuse.ceph-fuse", "vfat", "exfat", "ntfs3",
        "fuseblk",
    }
)  # fmt: skip
# Never a cache location even when writable.
_SKIP_PREFIXES = ("/boot", "/proc", "/sys", "/dev", "/run", "/snap", "/efi")


@dataclass
class BlockDevice:
    name: str  # e.g. "nvme0n1", "sda", "dm-0"
    nvme: bool | None
    rotational: bool | None
    reasons: dict[str, str] = field(default_factory=dict)


class BlockIndex:
    """Whole disks and partitions from ``/sys/block`` (plain files: no symlink walking)."""

    def __init__(self, root: Path = ROOT) -> None:
        self._root = root
        self._by_devno: dict[tuple[int, int], str] = {}  # devno -> disk name
        self._by_name: dict[str, str] = {}  # disk or partition name -> disk name
        base = root / "sys/block"
        try:
            disks = sorted(base.iterdir())
        except OSError:
            disks = []
        for disk in disks:
            self._add(disk, disk.name)
            try:
                children = sorted(p for p in disk.iterdir() if (p / "partition").exists())
            except OSError:
                children = []
            for part in children:
                self._add(part, disk.name)

    def _add(self, path: Path, disk: str) -> None:
        self._by_name[path.name] = disk
        try:
            major, minor = (path / "dev").read_text(encoding="utf-8").strip().split(":")
        except (OSError, ValueError):
            return
        self._by_devno[(int(major), int(minor))] = disk

    def disk_for(self, devno: tuple[int, int], source: str) -> str | None:
        disk = self._by_devno.get(devno)
        if disk is None and source.startswith("/dev/"):
            disk = self._by_name.get(Path(source).name)
        return disk

    def describe(self, disk: str, depth: int = 0) -> BlockDevice:
        """NVMe and rotational facts; LVM/RAID (dm-*, md*) inherit them from their members."""
        base = self._root / "sys/block" / disk
        try:
            slaves = sorted(p.name for p in (base / "slaves").iterdir())
        except OSError:
            slaves = []
        if slaves and depth < 4:
            members = [self.describe(self._by_name.get(s, s), depth + 1) for s in slaves]
            nvme = None if any(m.nvme is None for m in members) else all(m.nvme for m in members)
            rot = None if any(m.rotational is None for m in members) else any(m.rotational for m in members)
            return BlockDevice(disk, nvme, rot)
        reasons: dict[str, str] = {}
        rotational: bool | None = None
        try:
            rotational = (base / "queue/rotational").read_text(encoding="utf-8").strip() == "1"
        except OSError:
            reasons["rotational"] = f"no /sys/block/{disk}/queue/rotational"
        return BlockDevice(disk, disk.startswith("nvme"), rotational, reasons)


def _usable_mount(m: Mount) -> bool:
    mp = m.mount_point
    skipped = any(mp == p or mp.startswith(p + "/") for p in _SKIP_PREFIXES)
    return m.fstype in REAL_FS and not m.read_only and not skipped


def candidate_mounts(mounts: list[Mount], root: Path = ROOT) -> list[Mount]:
    """Writable real filesystems, one per device (the shortest mount point wins)."""
    best: dict[tuple[int, int], Mount] = {}
    for m in mounts:
        if not _usable_mount(m) or not (root / m.mount_point.lstrip("/")).is_dir():
            continue
        if mount_of(m.mount_point, mounts) is not m:  # shadowed by a later mount
            continue
        kept = best.get(m.devno)
        if kept is None or len(m.mount_point) < len(kept.mount_point):
            best[m.devno] = m
    return sorted(best.values(), key=lambda m: m.mount_point)


def _writable_dir(mount: Mount, mounts: list[Mount], root: Path) -> Path | None:
    """A directory on ``mount`` this user can write (where a test file or cache would go)."""
    tried = [root / mount.mount_point.lstrip("/")]
    if root == ROOT:
        # Scratch directories first, so that a test file never lands in / itself; they count
        # only when they live on this very mount.
        tried = [Path(tempfile.gettempdir()), Path("/var/tmp"), Path.home(), *tried]
    for d in tried:
        real = str(d.resolve()) if root == ROOT else str(d)
        on_mount = root != ROOT or mount_of(real, mounts) is mount
        if on_mount and may_write_in(d):
            return d
    return None


def _info(path: str, mount: Mount, writable_dir: Path | None, blocks: BlockIndex, root: Path) -> DiskInfo:
    unknown: dict[str, str] = {}
    tmpfs = mount.fstype in MEMORY_FS
    device = mount.source if mount.source.startswith("/dev/") else None
    nvme: bool | None = None
    rotational: bool | None = None
    if tmpfs:
        nvme, rotational = False, False
    else:
        disk = blocks.disk_for(mount.devno, mount.source)
        if disk is None:
            why = f"{mount.fstype} on {mount.source}: no block device under /sys/block"
            unknown["nvme"] = unknown["rotational"] = why
        else:
            dev = blocks.describe(disk)
            device = device or f"/dev/{disk}"
            nvme, rotational = dev.nvme, dev.rotational
            unknown.update(dev.reasons)
    total = free = None
    try:
        st = os.statvfs(root / mount.mount_point.lstrip("/"))
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    except OSError as exc:
        unknown["total_bytes"] = unknown["free_bytes"] = f"statvfs failed: {exc.strerror}"
    if writable_dir is None and not mount.read_only:
        unknown["writable"] = "no directory on this filesystem is writable by this user"
    return DiskInfo(
        path=path,
        mount=mount.mount_point,
        fstype=mount.fstype,
        device=device,
        nvme=nvme,
        rotational=rotational,
        tmpfs=tmpfs,
        writable=writable_dir is not None,
        total_bytes=total,
        free_bytes=free,
        unknown=unknown,
    )


def resolve_path(path: Path, mounts: list[Mount]) -> tuple[Path, Mount]:
    """The absolute real path and the mount holding it (the path itself may not exist yet)."""
    p = Path(os.path.abspath(os.path.expanduser(path)))
    if p.exists() and not p.is_dir():
        raise PathError(f"--path {path} is a file, not a directory", hint="give the directory for the cache")
    real = existing_ancestor(p).resolve()
    mount = mount_of(str(real), mounts)
    if mount is None:
        raise PathError(f"cannot find the filesystem holding {path}", hint="check that the path is mounted")
    return p, mount


def require_existing_dirs(paths: Sequence[Path]) -> None:
    """``doctor --path`` names existing directories: a typo would otherwise measure the disk of an
    ancestor (often /) and report its figures under the name the user meant."""
    for given in paths:
        p = Path(os.path.expanduser(given))
        if not p.exists():
            raise PathError(
                f"--path {given} does not exist",
                hint=f"create it first (mkdir -p {given}) or pass a directory on the disk to check",
            )


def probe_disks(paths: Sequence[Path] | None = None, root: Path = ROOT) -> tuple[list[DiskInfo], list[Path]]:
    """Disk facts per candidate, and the directory to run fio in for each (same order).

    An unwritable candidate still gets a directory (its mount point); the fio step skips it
    because its ``DiskInfo.writable`` is False.
    """
    mounts = read_mounts(root)
    blocks = BlockIndex(root)
    disks: list[DiskInfo] = []
    dirs: list[Path] = []
    if paths:
        for given in paths:
            p, mount = resolve_path(given, mounts)
            existing = existing_ancestor(p)
            ok = may_write_in(existing)
            disks.append(_info(str(p), mount, existing if ok else None, blocks, root))
            dirs.append(existing)
        return disks, dirs
    for mount in candidate_mounts(mounts, root):
        top = root / mount.mount_point.lstrip("/")
        wdir = _writable_dir(mount, mounts, root)
        # The location reported is where a cache would go: the mount point, or a writable
        # directory on it (e.g. /tmp on a root filesystem this user cannot write at /).
        where = mount.mount_point if wdir in (None, top) else str(wdir)
        disks.append(_info(where, mount, wdir, blocks, root))
        dirs.append(wdir or top)
    return disks, dirs
