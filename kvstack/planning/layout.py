"""The tiers below the GPU: which ones, how large, their bandwidth and break-even lengths."""

from __future__ import annotations

from dataclasses import replace

from kvstack.hardware.calibrate.model import Calibration, calibration_of
from kvstack.hardware.gpu_specs import GpuSpec, gpu_spec, host_link_bytes_per_s
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.planning import breakeven as be
from kvstack.planning import tiers as tr
from kvstack.planning.calibrated import prefill_rate_explained, tier_read_bw_explained
from kvstack.planning.notes import Notes
from kvstack.planning.parallel import Attempt
from kvstack.planning.request import PlanRequest
from kvstack.planning.schema import Connector, Tier
from kvstack.units import fmt_bytes, fmt_tokens

Lower = tuple[list[Tier], Connector]


def offload_tiers(
    snapshot: HardwareSnapshot,
    request: PlanRequest,
    chosen: Attempt,
    wanted: Connector,
    connector_why: str,
    remote: str | None,
    retention: int,
    notes: Notes,
) -> Lower:
    """(tiers below the GPU, connector). HBM only when the retention
    target fits it; DRAM then disk fill the retention target top-down."""
    kv, pool = chosen.kv, chosen.budget.pool_total
    fits = chosen.working_set <= pool
    if wanted == "none":
        notes.reasons["offload"] = connector_why
        notes.reasons["connector"] = "none"
        if not fits:
            notes.warn("--offload none: prefixes that do not fit the GPU pool will be recomputed")
        return [], "none"
    # cache_root only says where a disk tier goes (serve always passes one): it forces nothing.
    forced = request.offload != "auto" or remote is not None
    if retention <= pool and not forced:
        notes.reasons["offload"] = (
            f"the retention target ({fmt_bytes(retention)}) fits the GPU pool ({fmt_bytes(pool)}): "
            "no offload tier, no connector"
        )
        notes.reasons["connector"] = "none: nothing to offload"
        return [], "none"
    if not fits:
        why = f"the working set ({fmt_bytes(chosen.working_set)}) exceeds the GPU pool ({fmt_bytes(pool)})"
    elif retention > pool:
        why = f"the retention target ({fmt_bytes(retention)}) exceeds the GPU pool ({fmt_bytes(pool)})"
    else:
        why = "offload asked for explicitly"
    notes.reasons["offload"] = why
    host = tr.host_capacity(snapshot.memory, kv.tp)
    cpu, why = tr.cpu_tier(host, snapshot.memory, kv, pool, chosen.working_set, retention, wanted)
    notes.reasons["cpu_tier"] = why
    disk: Tier | None = None
    above = max(pool, cpu.size_bytes if cpu else 0)
    if not request.disk_tier:
        notes.reasons["disk_tier"] = "off (--no-disk)"
    elif retention > above:
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
    else:
        notes.reasons["disk_tier"] = "not needed: DRAM holds the retention target"
    remote_tier: Tier | None = None
    if remote is not None:
        remote_tier, warns = tr.remote_tier(snapshot, remote, kv)
        notes.reasons["remote_tier"] = remote_tier.reason
        for w in warns:
            notes.warn(w)
    if cpu is None and (disk or remote_tier):
        cpu = tr.staging_cpu_tier(host, snapshot.memory, kv, wanted)
        if cpu is None:
            notes.warn("no DRAM for the staging buffer that disk/remote tiers go through: both dropped")
            disk = remote_tier = None
        else:
            notes.reasons["cpu_tier"] = cpu.reason
    tiers = [t for t in (cpu, disk, remote_tier) if t is not None]
    if not tiers:
        notes.reasons["connector"] = "none: no tier below the GPU qualifies"
        if not fits:
            notes.warn("no offload tier qualifies: prefixes that do not fit the GPU pool will be recomputed")
        return [], "none"
    notes.reasons["connector"] = connector_why
    if wanted == "native":
        notes.reasons["per_rank"] = (
            "vLLM native offload takes the TOTAL across TP ranks (--kv-offloading-size)"
        )
    else:
        notes.reasons["per_rank"] = (
            f"{wanted} sizes its DRAM/disk tiers per TP rank: each of the {kv.tp} rank(s) gets "
            "size_bytes_per_rank"
        )
    return tiers, wanted


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
    host->device and disk read bandwidths (planning/calibrated.py) in place of the data sheets'.
    """
    """Each tier below the GPU with its read bandwidth and break-even prefix length."""
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
        out.append(tier.model_copy(update={"read_bw_bytes_per_s": bw, "breakeven_tokens": n}))
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
