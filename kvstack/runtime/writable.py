"""Whether kvstack can create and write a directory: the one check, for every directory flag.

``--cache-dir`` and ``--run-dir`` are checked once, before anything is planned or started, the dry
run included, even when no tier of the plan will use the cache dir (``require_writable_dir``): a path
under /proc or /sys, on a read-only mount, or where this user may not create files is refused with
one line. That check reads the nearest existing ancestor's mode and the mount table
(hardware/mounts.py); it creates nothing. The launch's preflight then asks only what could not be
known before (``require_room``): the free space the disk tier needs, and a real write where the
directory exists (a full quota shows only then).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvstack.errors import PathError
from kvstack.fsutil import existing_ancestor, may_write_in
from kvstack.hardware.mounts import mount_of, parse_mountinfo, read_mounts
from kvstack.units import fmt_bytes

# Kernel filesystems that hold no user files: mkdir there fails (ENOENT, EPERM) or means something else.
PSEUDO_FS = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "devpts",
        "mqueue",
        "configfs",
        "bpf",
        "pstore",
        "fusectl",
        "efivarfs",
        "binfmt_misc",
        "autofs",
        "nsfs",
    }
)


def require_writable_dir(path: Path | str, flag: str, *, mountinfo: str | None = None) -> None:
    """Refuse ``path`` when kvstack could not create it (or files in it); nothing is written."""
    path = Path(path)
    base = existing_ancestor(path)
    mounts = parse_mountinfo(mountinfo) if mountinfo is not None else read_mounts()
    mount = mount_of(str(base.resolve()), mounts)
    if mount is not None and mount.fstype in PSEUDO_FS:
        kind = f"a {mount.fstype} filesystem of the kernel that keeps no files"
        raise PathError(
            f"{flag} {path} is on {mount.mount_point}, {kind}",
            hint=f"choose a directory on a disk for {flag}",
        )
    if mount is not None and mount.read_only:
        raise PathError(
            f"{flag} {path} is on {mount.mount_point}, which is mounted read-only",
            hint=f"choose a directory on a writable filesystem for {flag}",
        )
    if not base.is_dir():
        raise PathError(
            f"{flag} {path}: {base} is not a directory", hint=f"choose a directory path for {flag}"
        )
    if not may_write_in(base):
        what = "write to" if base == path else f"create {path} in"
        raise PathError(
            f"{flag} {path}: this user cannot {what} {base}",
            hint=f"choose a directory you can write for {flag}",
        )


def require_room(path: Path | str, flag: str, *, need_bytes: int = 0) -> None:
    """At launch, for a ``path`` ``require_writable_dir`` passed: where it exists, create and remove a
    file in it (access() trusts mode bits); refuse it when its filesystem has less than
    ``need_bytes`` free."""
    path = Path(path)
    base = existing_ancestor(path)
    if base == path:
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".kvstack-probe-"):
                pass
        except OSError as exc:
            raise PathError(
                f"{flag} {path}: cannot write to it: {exc.strerror}",
                hint=f"choose a directory you can write for {flag}",
            ) from exc
    if need_bytes > 0:
        st = os.statvfs(base)
        free = st.f_bavail * st.f_frsize
        if free < need_bytes:
            raise PathError(
                f"{flag} {path} has {fmt_bytes(free)} free but the plan needs {fmt_bytes(need_bytes)}",
                hint=f"free space, choose another {flag}, or plan a smaller disk tier",
            )
