"""The mount table from ``/proc/self/mountinfo`` (shared by the disk and cgroup probes).

mountinfo rather than /proc/self/mounts: it also gives each mount's device number, which maps
to /sys/block without guessing from device names (overlay, /dev/root, LVM), and the root of
bind mounts, which cgroup paths are relative to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    mount_point: str  # absolute, as this process sees it
    root: str  # the directory of the filesystem that is mounted here (bind mounts, cgroups)
    devno: tuple[int, int]  # (major, minor)
    fstype: str
    source: str
    options: frozenset[str]  # per-mount and per-superblock options together

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        head, tail = left.split(), right.split()
        if not sep or len(head) < 6 or len(tail) < 2:
            continue
        try:
            major, minor = (int(x) for x in head[2].split(":"))
        except ValueError:
            continue
        opts = set(head[5].split(","))
        if len(tail) > 2:
            opts.update(tail[2].split(","))
        mounts.append(
            Mount(
                mount_point=_unescape(head[4]),
                root=_unescape(head[3]),
                devno=(major, minor),
                fstype=tail[0],
                source=_unescape(tail[1]),
                options=frozenset(opts),
            )
        )
    return mounts


def read_mounts(root: Path = Path("/")) -> list[Mount]:
    """This process's mounts; ``root`` lets tests point at a sample tree."""
    try:
        text = (root / "proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return parse_mountinfo(text)


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding absolute ``path``: the longest matching mount point, last one wins."""
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        inside = path == mp or mp == "/" or path.startswith(mp + "/")
        # Later entries shadow earlier ones at the same mount point (stacked mounts).
        if inside and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best
