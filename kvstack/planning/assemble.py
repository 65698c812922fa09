"""The one plan assembler: what a platform chose (CUDA: planning/cuda_plan.py, CPU: planning/cpu_plan.py)
in, the ``Plan`` out; and the steps both platforms take on the way (the retention target, the engine
limits' reasons, the cost of a hybrid model carried with vLLM's hybrid KV cache manager off)."""

from __future__ import annotations

from dataclasses import dataclass

from kvstack.hardware.snapshot import GpuInfo, HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import CPU_ENGINE, EngineKvParams
from kvstack.planning.carriage import MANAGER_OFF_FLAG
from kvstack.planning.kv import KvFootprint, KvLayout, bounded_layers, chunk_size, footprint
from kvstack.planning.notes import Notes
from kvstack.planning.offload_verdict import block_bytes
from kvstack.planning.predict.breakeven import PrefillModel
from kvstack.planning.predict.capacity import CapacityCurve
from kvstack.planning.predict.trace_sizing import trace_target
from kvstack.planning.request import PlanRequest
from kvstack.planning.retention import retention_target
from kvstack.planning.schema import (
    CacheLayout,
    Concurrency,
    Connector,
    KvTransfer,
    Parallelism,
    Plan,
    PlannedModel,
    Platform,
    Tier,
    TtftModel,
    Workload,
)
from kvstack.units import fmt_bytes, fmt_tokens


@dataclass(frozen=True)
class Asked:
    """What one plan is for: the machine, the model, the request, the workload (its context and users
    settled against the model) and, where a trace sizes the tiers, its capacity curve."""

    snapshot: HardwareSnapshot
    model: ModelGeometry
    request: PlanRequest
    wl: Workload
    curve: CapacityCurve | None = None


@dataclass(frozen=True)
class PlatformChoices:
    """What a platform chose: the engine's pool and the tiers below it, the engine's settings and the
    figures only the platform knows. The assembler states the rest the same way on every platform."""

    platform: Platform
    kv_cache_dtype: str
    kv: KvFootprint
    layout: KvLayout
    tiers: list[Tier]  # the engine's own pool first
    connector: Connector
    tensor_parallel_size: int
    gpu_memory_utilization: float
    working_set: int
    retention: int
    sessions_gpu: int
    sessions_all_tiers: int
    ttft: TtftModel
    feasible: bool
    remote_url: str | None = None  # redacted
    gpu: GpuInfo | None = None  # the first GPU the engine runs on (CUDA)
    prefill: PrefillModel | None = None  # the prefill rate the break-even lengths came from (CUDA)
    prefix_caching: bool = True


def assemble_plan(asked: Asked, model_path: str, choices: PlatformChoices, notes: Notes) -> Plan:
    """The plan from a platform's choices and the notes made while choosing."""
    model, wl = asked.model, asked.wl
    c, kv, prefill = choices, choices.kv, choices.prefill
    chunk = note_engine_limits(wl, notes)
    return Plan(
        engine=asked.request.engine,
        platform=c.platform,
        model=PlannedModel(
            path=model_path, geometry=model, weight_bytes=model.weight_bytes, max_model_len=wl.context_tokens
        ),
        cache=CacheLayout(
            kv_cache_dtype=c.kv_cache_dtype,
            kv_bytes_per_token=kv.bytes_per_token,
            tiers=c.tiers,
            chunk_size=chunk,
            gpu_memory_utilization=c.gpu_memory_utilization,
            prefix_caching=c.prefix_caching,
            hybrid_manager=None if c.layout.hybrid_manager or not model.hybrid else "off",
            kv_in_flight_tokens=c.layout.engine.in_flight_tokens if bounded_layers(model) else None,
        ),
        parallel=Parallelism(tensor_parallel_size=c.tensor_parallel_size),
        transfer=KvTransfer(connector=c.connector, remote_url=c.remote_url),
        workload=wl,
        concurrency=Concurrency(
            context_tokens=wl.context_tokens,
            sessions_gpu=c.sessions_gpu,
            sessions_all_tiers=c.sessions_all_tiers,
            working_set_bytes=c.working_set,
            retention_target_bytes=c.retention,
            retained_bytes=min(c.retention, max(t.size_bytes for t in c.tiers)),
        ),
        gpu_name=c.gpu.name if c.gpu is not None else None,
        compute_capability=c.gpu.compute_capability if c.gpu is not None else None,
        prefill_tokens_per_s=round(prefill.tokens_per_s(wl.context_tokens), 1)
        if prefill is not None
        else None,
        prefill_source=(
            "calibrated" if prefill is not None and prefill.source.startswith("calibrated") else "estimate"
        ),
        ttft=c.ttft,
        warnings=notes.warnings,
        reasons=notes.reasons,
        feasible=c.feasible,
        errors=notes.errors,
    )


def note_engine_limits(wl: Workload, notes: Notes) -> int:
    """The prefill chunk size, with its reason and max_model_len's (the planned context)."""
    chunk, chunk_why = chunk_size(wl.context_tokens)
    notes.reasons["chunk_size"] = chunk_why
    notes.reasons["max_model_len"] = f"{wl.context_tokens}: the planned context"
    return chunk


def planned_retention(
    working_set: int,
    request: PlanRequest,
    wl: Workload,
    kv: KvFootprint,
    curve: CapacityCurve | None,
    notes: Notes,
) -> int:
    """What the tiers should hold together: the retention rule's target, or with a trace the size its
    capacity curve asks for (planning/predict/trace_sizing.py); the reason says which."""
    retention, why = retention_target(working_set, request, wl)
    if curve is not None:
        retention, why = trace_target(curve, block_bytes(kv.effective_bytes_per_token, curve))
    notes.reasons["retention"] = why
    return retention


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
