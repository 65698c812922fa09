"""The one-line answer to "what can this machine serve?" (pure: a function of the snapshot)."""

from __future__ import annotations

from collections import Counter

from kvstack.hardware import nvml
from kvstack.hardware.checks import DISK_MIN_BW, SHM_MIN_BYTES, usable_ram
from kvstack.hardware.gpu import architecture, kv_dtypes
from kvstack.hardware.snapshot import DiskInfo, GpuInfo, HardwareSnapshot
from kvstack.units import GIB, fmt_bw, fmt_bytes

CPU_TIER_MIN_RAM = 8 * GIB  # below this there is no room for a CPU tier next to the engine


def short_name(name: str) -> str:
    return name.removeprefix("NVIDIA ").strip()


def _gpu_part(gpus: list[GpuInfo]) -> str:
    groups: Counter[tuple[str, tuple[int, int] | None]] = Counter(
        (short_name(g.name), g.compute_capability) for g in gpus
    )
    parts = []
    for (name, cc), n in groups.items():
        facts = [a for a in [architecture(cc)] if a]
        dtypes = kv_dtypes(cc)
        if dtypes:
            facts.append("+".join(dtypes) + " KV")
        detail = f" ({', '.join(facts)})" if facts else ""
        parts.append(f"{n}x {name}{detail}")
    return " + ".join(parts)


def best_disk(disks: list[DiskInfo]) -> DiskInfo | None:
    """The fastest writable real disk (measured first, then NVMe, then anything)."""
    usable = [d for d in disks if not d.tmpfs and d.writable]
    if not usable:
        return None
    return max(usable, key=lambda d: (d.read_bw_bytes_per_s or 0.0, bool(d.nvme), not d.rotational))


def _disk_part(disk: DiskInfo | None) -> str:
    if disk is None:
        return "no writable disk"
    kind = "NVMe" if disk.nvme else "disk"
    bw = disk.read_bw_bytes_per_s
    return f"{kind} at {fmt_bw(bw)}" if bw is not None else f"{kind} (bandwidth not measured)"


def _disk_tier_ok(disk: DiskInfo | None) -> bool:
    if disk is None:
        return False
    if disk.read_bw_bytes_per_s is not None:
        return disk.read_bw_bytes_per_s >= DISK_MIN_BW
    return disk.rotational is False


def summarize(snap: HardwareSnapshot) -> str:
    mem = snap.memory
    ram = usable_ram(mem)
    limited = mem.cgroup_limit_bytes is not None and ram == mem.cgroup_limit_bytes
    ram_part = f"{fmt_bytes(ram)} RAM" + (" (cgroup limit)" if limited else "") if ram else "RAM unknown"
    disk = best_disk(snap.disks)
    if not snap.gpus:
        why = "no NVIDIA driver" if nvml.is_absent(snap.gpu_reason) else (snap.gpu_reason or "none visible")
        cpu = snap.cpu
        cpu_part = f"{cpu.usable_cores or '?'} cores {cpu.isa}, " if cpu is not None else ""
        return (
            f"no GPU ({why}), {cpu_part}{ram_part}, {_disk_part(disk)}: CPU platform, demo-sized models only"
        )
    tiers = ["GPU"]
    shm_ok = mem.shm_bytes is None or mem.shm_bytes >= SHM_MIN_BYTES
    if ram is not None and ram >= CPU_TIER_MIN_RAM and shm_ok:
        tiers.append("CPU")
    if _disk_tier_ok(disk):
        tiers.append("disk")
    verdict = "GPU tier only" if tiers == ["GPU"] else f"{'+'.join(tiers)} tiers possible"
    return f"{_gpu_part(snap.gpus)}, {ram_part}, {_disk_part(disk)}: {verdict}"
