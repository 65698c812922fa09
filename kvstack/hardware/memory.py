"""Host memory: RAM, the cgroup limit (v1 and v2), /dev/shm, the locked-memory limit, NUMA nodes.

Every reader takes ``root`` (normally ``/``) so tests can point it at a sample tree.
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvstack.hardware.mounts import Mount, read_mounts
from kvstack.hardware.snapshot import MemoryInfo

ROOT = Path("/")

# cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 on 4 KiB pages);
# anything this large is no limit at all.
_NO_LIMIT = 1 << 62


def read_meminfo(root: Path = ROOT) -> dict[str, int]:
    """``/proc/meminfo`` in bytes (the file says kB and means KiB)."""
    out: dict[str, int] = {}
    try:
        text = (root / "proc/meminfo").read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"(\w+(?:\(\w+\))?):\s+(\d+)(?:\s+kB)?", line)
        if m:
            scale = 1024 if line.rstrip().endswith("kB") else 1
            out[m.group(1)] = int(m.group(2)) * scale
    return out


def self_cgroups(root: Path) -> dict[str, str]:
    """Controller -> cgroup path from ``/proc/self/cgroup``; v2's unified entry is key ``""``."""
    out: dict[str, str] = {}
    try:
        text = (root / "proc/self/cgroup").read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def cgroup_dir(root: Path, mount: Mount, cg_path: str) -> Path:
    """Our cgroup's directory under ``mount``. A cgroup namespace or a container's bind mount
    can hide the full path; then the mount point itself is our cgroup."""
    base = root / mount.mount_point.lstrip("/")
    mroot = mount.root.rstrip("/")
    if cg_path == mroot or cg_path.startswith(mroot + "/"):
        rel = cg_path[len(mroot) :].lstrip("/")
        candidate = base / rel
        if candidate.is_dir():
            return candidate
    return base


def _read_limit(path: Path) -> int | None:
    """A limit file's value; ``None`` for "max" or the no-limit sentinel."""
    text = path.read_text(encoding="utf-8").strip()
    if text == "max":
        return None
    value = int(text)
    return None if value >= _NO_LIMIT else value


def tightest(leaf: Path, top: Path, read: Callable[[Path], float | None]) -> float | None:
    """The tightest of ``read(dir)`` from our cgroup up to the hierarchy's root (limits are
    hierarchical); ``read`` answers None for a directory with no limit."""
    best: float | None = None
    d = leaf
    while True:
        value = read(d)
        if value is not None and (best is None or value < best):
            best = value
        if d == top or top not in d.parents:
            return best
        d = d.parent


def _min_limit(leaf: Path, top: Path, filename: str) -> int | None:
    """Tightest memory limit in ``filename`` from our cgroup up."""
    found = tightest(leaf, top, lambda d: _read_limit(d / filename) if (d / filename).is_file() else None)
    return None if found is None else int(found)


@dataclass(frozen=True)
class Hierarchy:
    """Where one cgroup controller's limits for this process live."""

    version: int  # 1 or 2
    leaf: Path  # our cgroup's directory
    top: Path  # the hierarchy's root (limits are inherited from every directory up to it)


def controller_hierarchy(root: Path, mounts: list[Mount], controller: str) -> Hierarchy | None:
    """``controller``'s v1 hierarchy, else the v2 one where the controller is enabled; None where
    neither is mounted. Raises OSError or ValueError where a cgroup file cannot be read."""
    groups = self_cgroups(root)
    v1 = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
    if v1 is not None:
        return Hierarchy(
            1, cgroup_dir(root, v1, groups.get(controller, "/")), root / v1.mount_point.lstrip("/")
        )
    v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if v2 is None:
        return None
    top = root / v2.mount_point.lstrip("/")
    if controller not in (top / "cgroup.controllers").read_text(encoding="utf-8").split():
        return None
    return Hierarchy(2, cgroup_dir(root, v2, groups.get("", "/")), top)


def cgroup_memory_limit(root: Path = ROOT) -> tuple[int | None, int | None, str | None]:
    """``(cgroup_version, limit_bytes, reason)``: limit ``None`` means no limit (reason None)
    or unknown (reason says why)."""
    mounts = read_mounts(root)
    if not mounts:
        return None, None, "cannot read /proc/self/mountinfo"
    try:
        found = controller_hierarchy(root, mounts, "memory")
        if found is not None:
            limit_file = "memory.limit_in_bytes" if found.version == 1 else "memory.max"
            return found.version, _min_limit(found.leaf, found.top, limit_file), None
    except (OSError, ValueError) as exc:
        return None, None, f"cannot read the cgroup memory limit: {exc}"
    return None, None, "no cgroup memory controller mounted"


def memlock_limit(root: Path = ROOT) -> tuple[int | None, bool, str | None]:
    """``(soft_limit_bytes, unlimited, reason)`` of RLIMIT_MEMLOCK (``ulimit -l``)."""
    try:
        text = (root / "proc/self/limits").read_text(encoding="utf-8")
    except OSError:
        if root != ROOT:
            return None, False, "no proc/self/limits in this tree"
        limit, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        return (None, True, None) if limit == resource.RLIM_INFINITY else (limit, False, None)
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory") :].split()[0]
            return (None, True, None) if soft == "unlimited" else (int(soft), False, None)
    return None, False, "no 'Max locked memory' line in /proc/self/limits"


def numa_nodes(root: Path = ROOT) -> int | None:
    node_dir = root / "sys/devices/system/node"
    try:
        return sum(1 for p in node_dir.iterdir() if re.fullmatch(r"node\d+", p.name)) or None
    except OSError:
        return None


def shm_size(root: Path = ROOT) -> tuple[int | None, int | None, str | None]:
    """``(total_bytes, free_bytes, reason)`` of /dev/shm."""
    try:
        st = os.statvfs(root / "dev/shm")
    except OSError as exc:
        return None, None, f"cannot stat /dev/shm: {exc.strerror}"
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, None


def probe_memory(root: Path = ROOT) -> MemoryInfo:
    unknown: dict[str, str] = {}
    info = read_meminfo(root)
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None:
        unknown["total_bytes"] = "no MemTotal in /proc/meminfo"
    if available is None:
        unknown["available_bytes"] = "no MemAvailable in /proc/meminfo"
    version, limit, why = cgroup_memory_limit(root)
    if why:
        unknown["cgroup_limit_bytes"] = why
    shm_total, shm_free, why = shm_size(root)
    if why:
        unknown["shm_bytes"] = why
    memlock, unlimited, why = memlock_limit(root)
    if why:
        unknown["memlock_limit_bytes"] = why
    nodes = numa_nodes(root)
    if nodes is None:
        unknown["numa_nodes"] = "no node* entries in /sys/devices/system/node"
    return MemoryInfo(
        total_bytes=total,
        available_bytes=available,
        cgroup_version=version,
        cgroup_limit_bytes=limit,
        shm_bytes=shm_total,
        shm_free_bytes=shm_free,
        memlock_limit_bytes=memlock,
        memlock_unlimited=unlimited,
        numa_nodes=nodes,
        unknown=unknown,
    )
