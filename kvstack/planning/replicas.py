"""One machine split among N replicas of an engine: what each replica's plan may take. Pure.

Each replica is planned for its share of the machine (its GPUs, 1/N of the DRAM the planner's
reserve rule leaves, of /dev/shm and of each disk's free space), so the N plans together fit it.
"""

from __future__ import annotations

from kvstack.hardware.snapshot import HardwareSnapshot, MemoryInfo
from kvstack.planning.tiers import host_capacity


def _ceiling_view(memory: MemoryInfo, ceiling: int) -> MemoryInfo:
    out = memory.model_copy()
    out.available_bytes = ceiling
    out.cgroup_limit_bytes = None if memory.cgroup_limit_bytes is None else ceiling
    return out


def share_memory(memory: MemoryInfo, replicas: int) -> MemoryInfo:
    """The memory view of one of ``replicas`` engines: the planner's own reserve rule
    (planning.tiers.host_capacity) leaves each view 1/N of the DRAM it leaves the machine.

    Dividing the memory itself would count the OS's reserve N times; this finds the smallest
    ceiling whose usable part is the share, so the N plans together fit the machine.
    """
    limits = [v for v in (memory.available_bytes, memory.cgroup_limit_bytes) if v is not None]
    if not limits:
        return memory
    ceiling = min(limits)
    share = host_capacity(memory, 0).usable // replicas
    lo, hi = 0, ceiling
    while lo < hi:  # usable grows with the ceiling: bisect for the share
        mid = (lo + hi) // 2
        if host_capacity(_ceiling_view(memory, mid), 0).usable >= share:
            hi = mid
        else:
            lo = mid + 1
    view = _ceiling_view(memory, lo)

    def part(value: int | None) -> int | None:
        return None if value is None else value // replicas

    view.total_bytes, view.shm_free_bytes = part(memory.total_bytes), part(memory.shm_free_bytes)
    return view  # _ceiling_view's own copy


def replica_snapshot(snapshot: HardwareSnapshot, replicas: int, gpus_each: int) -> HardwareSnapshot:
    """What one of ``replicas`` engines on this machine gets: ``gpus_each`` GPUs, its share of
    DRAM (share_memory) and /dev/shm, and 1/N of each disk's free space."""
    out = snapshot.model_copy()
    out.gpus = snapshot.gpus[:gpus_each]
    out.memory = share_memory(snapshot.memory, replicas)
    out.disks = []
    for d in snapshot.disks:
        disk = d.model_copy()
        disk.free_bytes = None if d.free_bytes is None else d.free_bytes // replicas
        out.disks.append(disk)
    return out


def device_groups(tp: int, replicas: int, visible: list[str]) -> list[list[str]]:
    """The CUDA_VISIBLE_DEVICES entries of each replica: ``tp`` GPUs apiece, none shared."""
    return [visible[i * tp : (i + 1) * tp] for i in range(replicas)]
