"""The CUDA platform's choices: the connector, the TP size and the GPU budget, the KV dtype, the GPU
pool and the tiers below it with their break-even lengths and predicted TTFT."""

from __future__ import annotations

import math

from kvstack.connectors import spec_of
from kvstack.connectors.engines import engine_spec
from kvstack.hardware.gpu_specs import gpu_spec
from kvstack.hardware.snapshot import GpuInfo, HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import gpu_engine
from kvstack.planning import tiers as tr
from kvstack.planning.assemble import (
    Asked,
    PlatformChoices,
    manager_off_cost,
    manager_off_note,
    planned_retention,
)
from kvstack.planning.carriage import CarryDecision
from kvstack.planning.connector import choose_connector, install_warnings
from kvstack.planning.kv import KvLayout, chunk_size
from kvstack.planning.layout import EnginePool, offload_tiers, with_breakeven
from kvstack.planning.notes import Notes
from kvstack.planning.parallel import Attempt, choose_tp, infeasible_error, needed_gpus
from kvstack.planning.predict.ttft import gpu_step, ttft_model
from kvstack.planning.quantization import weights_note
from kvstack.planning.request import PlanRequest
from kvstack.planning.retention import retention_note
from kvstack.planning.schema import Connector, Tier, Workload
from kvstack.planning.stored_kv import StoredKv, object_groups_flag, stored_kv
from kvstack.redact import redact_url
from kvstack.units import fmt_bytes, fmt_tokens


def cuda_choices(asked: Asked, notes: Notes) -> PlatformChoices | None:
    """What the plan is on the snapshot's GPUs; None where a connector that needs vLLM's hybrid KV
    cache manager off would carry no tier after all: plan again with --offload none (the manager on)."""
    snapshot, model, request, wl = asked.snapshot, asked.model, asked.request, asked.wl
    versions = _versions(snapshot, request)
    remote = redact_url(request.remote_url) if request.remote_url else None
    wanted, connector_why, decision = _connector(model, request, remote)
    if decision.carriage == "manager-off" or model.hybrid:
        notes.reasons["layers"] = decision.reason
    gpu = snapshot.gpus[0]
    if engine_spec(request.engine).asks_own_kv_spec and (weights := weights_note(model, gpu)) is not None:
        notes.reasons["quantization"] = weights
    layout = KvLayout(decision.hybrid_manager, gpu_engine(gpu.memory_total_bytes or 0, gpu.name))
    chosen, tp_why = choose_tp(snapshot, model, request, wl, versions.get("sglang"), layout)
    kv, budget = chosen.kv, chosen.budget
    _note_gpus(snapshot, model, request, wl, chosen, tp_why, notes)
    gpu_tier = _gpu_tier(chosen, gpu)
    notes.reasons["gpu_tier"] = gpu_tier.reason
    notes.reasons["working_set"] = (
        f"{wl.users} user(s) x {wl.reuse:g} x {fmt_bytes(kv.session_bytes)} per "
        f"{fmt_tokens(wl.context_tokens)} session = {fmt_bytes(chosen.working_set)} at {chosen.dtype.value}"
    )
    retention = planned_retention(chosen.working_set, request, wl, kv, asked.curve, notes)
    lower: list[Tier] = []
    connector: Connector = "none"
    stored: StoredKv | None = None
    if chosen.problem is None:
        lower, connector, stored = _below_gpu(
            snapshot, request, chosen, wanted, connector_why, remote, retention, notes, model, layout
        )
    else:
        notes.reasons["connector"] = "none: the plan is infeasible"
    wired = spec_of(connector).offloads
    if not wired and decision.carriage == "manager-off":
        return None
    if decision.carriage == "manager-off":
        manager_off_note(model, chosen.dtype.bytes_per_element, wl.context_tokens, kv, notes, layout.engine)
    for w in install_warnings(request.engine, connector, versions):
        notes.warn(w)
    lower, prefill = with_breakeven(snapshot, model, chosen, lower, notes, wl.context_tokens)
    tiers = [gpu_tier, *lower]
    if decision.carriage == "manager-off" and wired:
        manager_off_cost(tiers, kv, notes)
    hbm = gpu_spec(gpu.name, gpu.compute_capability).hbm_bytes_per_s
    step = gpu_step(budget.weights_per_rank, hbm)
    per_token = stored.bytes_per_token if stored is not None else kv.effective_bytes_per_token
    ttft = ttft_model(wl.context_tokens, per_token, lower, prefill=prefill, step=step)
    covered = _note_capacity(chosen, tiers, connector, wl, retention, notes)
    return PlatformChoices(
        platform="cuda",
        kv_cache_dtype=chosen.dtype.value,
        kv=kv,
        layout=layout,
        tiers=tiers,
        connector=connector,
        tensor_parallel_size=chosen.tp,
        gpu_memory_utilization=chosen.utilization,
        working_set=chosen.working_set,
        retention=retention,
        sessions_gpu=kv.sessions(budget.pool_total),
        sessions_all_tiers=kv.sessions(covered),
        ttft=ttft,
        feasible=not notes.errors,
        remote_url=remote,
        gpu=gpu,
        prefill=prefill,
    )


def _versions(snapshot: HardwareSnapshot, request: PlanRequest) -> dict[str, str | None]:
    sw = snapshot.software
    out: dict[str, str | None] = {"vllm": sw.vllm, "sglang": sw.sglang, "lmcache": sw.lmcache}
    out.update(request.engine_versions)
    return out


def _connector(
    model: ModelGeometry, request: PlanRequest, remote: str | None
) -> tuple[Connector, str, CarryDecision]:
    chosen = choose_connector(model, request.engine, request.offload, remote, "cuda")
    return chosen.connector, chosen.reason, chosen.decision


def _note_gpus(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    request: PlanRequest,
    wl: Workload,
    chosen: Attempt,
    tp_why: str,
    notes: Notes,
) -> None:
    """The platform, TP, memory and dtype reasons; what about the GPUs deserves a warning; what does
    not fit, as an error."""
    gpus = snapshot.gpus[: chosen.tp]
    budget = chosen.budget
    notes.reasons.update(
        platform=f"cuda: {len(snapshot.gpus)} x {gpus[0].name}",
        tensor_parallel_size=tp_why,
        gpu_memory_utilization=chosen.util_note,
        weights=(
            f"{fmt_bytes(model.weight_bytes)} ({model.params / 1e9:.1f}B params, {model.weight_dtype}"
            f"{', as the checkpoint stores them' if model.checkpoint_bytes is not None else ''}), "
            f"{fmt_bytes(budget.weights_per_rank)} per GPU"
        ),
        kv_cache_dtype=chosen.dtype.reason,
    )
    for w in chosen.dtype.warnings:
        notes.warn(w)
    if any(g.mig_enabled for g in gpus):
        notes.warn("MIG is enabled on a GPU: the engine sees a MIG slice, not the whole GPU's memory")
    if len({g.name for g in gpus}) > 1:
        notes.warn("the GPUs differ: sizes follow the smallest one")
    if chosen.problem is not None:
        notes.errors.append(
            infeasible_error(chosen, needed_gpus(snapshot, model, request, wl), model, wl, gpus[0].name)
        )


def _gpu_tier(chosen: Attempt, gpu: GpuInfo) -> Tier:
    """The engine's pool in HBM: what the utilization leaves after weights, activations and graphs."""
    budget = chosen.budget
    return Tier(
        kind="gpu",
        size_bytes=budget.pool_total,
        size_bytes_per_rank=max(0, budget.pool_per_rank),
        tokens=chosen.kv.tokens(budget.pool_total),
        read_bw_bytes_per_s=gpu_spec(gpu.name, gpu.compute_capability).hbm_bytes_per_s * chosen.tp,
        breakeven_tokens=0,
        reason=(
            f"{fmt_bytes(budget.memory_per_rank)} x {chosen.utilization:.2f} - "
            f"{fmt_bytes(budget.weights_per_rank)} weights - {fmt_bytes(budget.reserve_per_rank)} "
            "activations/CUDA graphs = "
            f"{fmt_bytes(max(0, budget.pool_per_rank))} per GPU"
        ),
    )


def _below_gpu(
    snapshot: HardwareSnapshot,
    request: PlanRequest,
    chosen: Attempt,
    wanted: Connector,
    connector_why: str,
    remote: str | None,
    retention: int,
    notes: Notes,
    model: ModelGeometry,
    layout: KvLayout,
) -> tuple[list[Tier], Connector, StoredKv | None]:
    """(tiers below the GPU, connector, what the connector stores where it differs from what the
    engine allocates): none where no offload is wanted, or where the retention target fits the GPU
    pool and nothing forces a tier; else what offload_tiers plans, sized by the stored bytes."""
    kv, pool = chosen.kv, chosen.budget.pool_total
    fits = chosen.working_set <= pool
    if wanted == "none":
        notes.reasons["offload"] = connector_why
        notes.reasons["connector"] = "none"
        if not fits:
            notes.warn("--offload none: prefixes that do not fit the GPU pool will be recomputed")
        return [], "none", None
    # cache_root only says where a disk tier goes (serve always passes one): it forces nothing.
    forced = request.offload != "auto" or remote is not None
    if retention <= pool and not forced:
        notes.reasons["offload"] = (
            f"the retention target ({fmt_bytes(retention)}) fits the GPU pool ({fmt_bytes(pool)}): "
            "no offload tier, no connector"
        )
        notes.reasons["connector"] = "none: nothing to offload"
        return [], "none", None
    if not fits:
        why = f"the working set ({fmt_bytes(chosen.working_set)}) exceeds the GPU pool ({fmt_bytes(pool)})"
    elif retention > pool:
        why = f"the retention target ({fmt_bytes(retention)}) exceeds the GPU pool ({fmt_bytes(pool)})"
    else:
        why = "offload asked for explicitly"
    notes.reasons["offload"] = why
    host = tr.host_capacity(snapshot.memory, kv.tp)
    below = EnginePool("cuda", kv, pool, chosen.working_set, host)
    stored = stored_kv(
        model, kv, chosen.dtype.bytes_per_element, wanted, "cuda", layout.hybrid_manager,
        chunk_size(kv.context)[0],
    )  # fmt: skip
    if stored is not None:
        notes.reasons["stored_kv"] = stored.reason
    if flag := object_groups_flag(model, wanted, "cuda", layout.hybrid_manager):
        notes.reasons["object_groups"] = (
            f"{flag}: each sliding-window size gets an object group of its own, so a hit needs only "
            "a sliding group's last ceil(window / chunk) chunks and older sliding chunks can be evicted "
            "without losing it (lmcache/v1/kv_layer_groups.py:666-721, distributed/api.py:365-369)"
        )
    if stored is not None:
        below = EnginePool("cuda", stored.kv, pool, math.ceil(chosen.working_set * stored.ratio), host)
        retention = math.ceil(retention * stored.ratio)
    tiers = offload_tiers(snapshot, request, below, wanted, remote, retention, notes)
    if not tiers:
        notes.reasons["connector"] = "none: no tier below the GPU qualifies"
        if not fits:
            notes.warn("no offload tier qualifies: prefixes that do not fit the GPU pool will be recomputed")
        return [], "none", None
    notes.reasons["connector"] = connector_why
    spec = spec_of(wanted)
    if spec.cache_server:
        notes.reasons["per_rank"] = (
            f"{wanted}: one cache server holds the KV of all {kv.tp} TP rank(s), so each tier's size is "
            "the server's total (size_bytes)"
        )
    elif spec.sizing.dram_figure == "total":
        notes.reasons["per_rank"] = f"{spec.title} takes the TOTAL across TP ranks (size_bytes)"
    else:
        notes.reasons["per_rank"] = (
            f"{wanted} sizes its DRAM/disk tiers per TP rank: each of the {kv.tp} rank(s) gets "
            "size_bytes_per_rank"
        )
    return tiers, wanted, stored


def _note_capacity(
    chosen: Attempt, tiers: list[Tier], connector: Connector, wl: Workload, retention: int, notes: Notes
) -> int:
    """Warnings where the GPU pool or the tiers fall short, and whether the tiers meet the retention
    target; returns the KV the tiers hold (inclusive: the largest bounds it)."""
    sessions_gpu = chosen.kv.sessions(chosen.budget.pool_total)
    if chosen.problem is None and sessions_gpu < wl.users:
        notes.warn(
            f"the GPU pool holds {sessions_gpu} of the {wl.users} concurrent "
            f"{fmt_tokens(wl.context_tokens)}-token sessions: the rest wait, and their prefixes come back "
            "from the lower tiers"
        )
    covered = max(t.size_bytes for t in tiers)
    if chosen.problem is None and chosen.working_set > covered and spec_of(connector).offloads:
        notes.warn(
            f"the working set ({fmt_bytes(chosen.working_set)}) exceeds the largest tier "
            f"({fmt_bytes(covered)}): the least recently used prefixes will be recomputed"
        )
    if chosen.problem is None:
        retention_note(retention, tiers, notes)
    return covered
