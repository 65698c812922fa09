"""Whether kvstack could create and write a directory, found out without writing anything.

``--cache-dir`` and ``--run-dir`` are checked before anything is planned or started, the dry run
included, even when no tier of the plan will use the cache dir: a path under /proc or /sys, on a
read-only mount, or where this user may not create files is refused with one line. The check reads
the nearest existing ancestor's mode and the mount table; it creates nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvstack.errors import PathError

MOUNTINFO = Path("/proc/self/mountinfo")
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


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) + 1 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_of(path: Path, mountinfo: str | None = None) -> tuple[str, str, set[str]] | None:
    """(mount point, filesystem type, mount options) of the mount holding ``path`` (resolved)."""
    try:
        text = mountinfo if mountinfo is not None else MOUNTINFO.read_text(encoding="utf-8")
    except OSError:
        return None
    best: tuple[str, str, set[str]] | None = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or not tail:
            continue
        point = _unescape(fields[4])
        inside = str(path) == point or point == "/" or str(path).startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, tail[0], set(fields[5].split(",")))
    return best


def existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def require_writable_dir(path: Path, flag: str, mountinfo: str | None = None) -> None:
    """Refuse ``path`` when kvstack could not create it (or files in it); writes nothing."""
    base = existing_ancestor(path)
    real = base.resolve()
    mount = mount_of(real, mountinfo)
    if mount is not None and mount[1] in PSEUDO_FS:
        raise PathError(
            f"{flag} {path} is on {mount[0]}, a {mount[1]} filesystem of the kernel that keeps no files",
            hint=f"choose a directory on a disk for {flag}",
        )
    if mount is not None and "ro" in mount[2]:
        raise PathError(
            f"{flag} {path} is on {mount[0]}, which is mounted read-only",
            hint=f"choose a directory on a writable filesystem for {flag}",
        )
    if not base.is_dir():
        raise PathError(
            f"{flag} {path}: {base} is not a directory", hint=f"choose a directory path for {flag}"
        )
    if not os.access(base, os.W_OK | os.X_OK):
        what = "write to" if base == path else f"create {path} in"
        raise PathError(
            f"{flag} {path}: this user cannot {what} {base}",
            hint=f"choose a directory you can write for {flag}",
        )
