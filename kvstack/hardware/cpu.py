"""The CPU: its model, the cores this process may use (affinity and the cgroup's CPU quota), the NUMA
nodes, the instruction-set features that decide the engine's kernels and compute dtype, and a
measured DRAM copy bandwidth (a CPU tier's speed).

On the CPU platform the CPU is what computes: vLLM's CPU build picks its kernels from AVX-512 and
AVX512-BF16 (vllm/platforms/cpu.py: ``_C_AVX512`` with both, else ``_C_AVX2``), and a CPU without bf16
arithmetic multiplies bf16 many times slower than float32 (docs/measurements.md). Every reader takes
``root`` (normally ``/``) so tests can point it at a recorded tree.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from pathlib import Path

from kvstack.hardware.memory import controller_hierarchy, numa_nodes, tightest
from kvstack.hardware.mounts import read_mounts
from kvstack.hardware.snapshot import TRACKED_FEATURES, CpuInfo
from kvstack.units import fmt_bytes

ROOT = Path("/")
COPY_BYTES = 64 * 1024 * 1024  # larger than any last-level cache here, so the copy is DRAM's
COPY_RUNS = 7


def _cpuinfo(text: str) -> tuple[dict[str, str], int]:
    """The first processor's fields of /proc/cpuinfo (x86 and Arm name them differently: the flags
    are the same on every core here), and how many processors it lists."""
    out: dict[str, str] = {}
    processors = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        processors += key == "processor"
        if key:
            out.setdefault(key, value.strip())  # the first processor's
    return out, processors


def parse_cpu_list(text: str) -> int | None:
    """How many CPUs a list like ``0-3,8,10-11`` names (``Cpus_allowed_list``, ``cpuset.cpus``)."""
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            count += int(hi or lo) - int(lo) + 1
        except ValueError:
            return None
    return count or None


def affinity_cpus(root: Path = ROOT) -> int | None:
    """CPUs this process may run on: ``Cpus_allowed_list`` in /proc/self/status (the affinity mask,
    which taskset, docker --cpuset-cpus and Kubernetes' static CPU manager set)."""
    try:
        text = (root / "proc/self/status").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    return None


def _cores(d: Path) -> float | None:
    """The CPU quota one cgroup directory sets, in cores (None: none)."""
    if (d / "cpu.max").is_file():  # v2: "max 100000" or "200000 100000"
        quota, _, period = (d / "cpu.max").read_text(encoding="utf-8").strip().partition(" ")
        return int(quota) / int(period) if quota != "max" and period else None
    if (d / "cpu.cfs_quota_us").is_file():  # v1: -1 is no quota
        quota_us = int((d / "cpu.cfs_quota_us").read_text(encoding="utf-8").strip())
        period_us = int((d / "cpu.cfs_period_us").read_text(encoding="utf-8").strip())
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    return None


def cpu_quota(root: Path = ROOT) -> tuple[float | None, str | None]:
    """``(cores, reason)``: the cgroup's CPU quota in cores; None with no reason: no quota."""
    mounts = read_mounts(root)
    if not mounts:
        return None, "cannot read /proc/self/mountinfo"
    try:
        found = controller_hierarchy(root, mounts, "cpu")
        return (tightest(found.leaf, found.top, _cores) if found is not None else None), None
    except (OSError, ValueError) as exc:
        return None, f"cannot read the cgroup CPU quota: {exc}"


def measure_copy_bw(size: int = COPY_BYTES, runs: int = COPY_RUNS) -> tuple[float, str]:
    """One thread's DRAM copy bandwidth (bytes/s): the median of ``runs`` copies of ``size`` bytes
    between two buffers whose pages are already touched (a fresh buffer would time page faults)."""
    src = bytearray(b"\x5a") * size
    dst = bytearray(size)
    view_src, view_dst = memoryview(src), memoryview(dst)
    view_dst[:] = view_src
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        view_dst[:] = view_src  # one memcpy
        times.append(time.perf_counter() - start)
    method = f"one thread, memcpy of {fmt_bytes(size)} between touched buffers, median of {runs} runs"
    return size / statistics.median(times), method


def usable_cores(affinity: int | None, quota: float | None) -> int | None:
    """The cores the engine can keep busy: the affinity mask, bounded by the quota (rounded down,
    at least one: a 1.5-core quota keeps one OpenMP thread busy, not two)."""
    if affinity is None:
        return None
    if quota is None:
        return affinity
    return max(1, min(affinity, math.floor(quota)))


def probe_cpu(root: Path = ROOT, measure: bool = True) -> CpuInfo:
    """This machine's CPU; ``measure`` False skips the copy (a recorded tree has no memory to copy)."""
    unknown: dict[str, str] = {}
    try:
        info, processors = _cpuinfo((root / "proc/cpuinfo").read_text(encoding="utf-8"))
    except OSError:
        info, processors = {}, 0
    model = info.get("model name") or info.get("Model name") or info.get("Hardware")
    if model is None:
        unknown["model"] = "no 'model name' in /proc/cpuinfo"
    flags = set((info.get("flags") or info.get("Features") or "").split())
    if not flags:
        unknown["features"] = "no flags in /proc/cpuinfo"
    affinity = affinity_cpus(root)
    if affinity is None:
        unknown["usable_cores"] = "no Cpus_allowed_list in /proc/self/status"
    quota, why = cpu_quota(root)
    if why:
        unknown["cpu_quota"] = why
    nodes = numa_nodes(root)
    if nodes is None:
        unknown["numa_nodes"] = "no node* entries in /sys/devices/system/node"
    bw, method = measure_copy_bw() if measure else (None, None)
    if not measure:
        unknown["copy_bw_bytes_per_s"] = "not measured"
    return CpuInfo(
        model=model,
        vendor=info.get("vendor_id") or info.get("CPU implementer"),
        architecture=platform.machine() if root == ROOT else None,
        logical_cpus=os.cpu_count() if root == ROOT else processors or None,
        affinity_cpus=affinity,
        cpu_quota=quota,
        usable_cores=usable_cores(affinity, quota),
        numa_nodes=nodes,
        features=[f for f in TRACKED_FEATURES if f in flags],
        copy_bw_bytes_per_s=bw,
        copy_bw_method=method,
        unknown=unknown,
    )
