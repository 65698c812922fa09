"""make_plan: hardware snapshot + KV geometry + workload -> Plan. Pure: no I/O, no clock, no env."""

from __future__ import annotations

from kvstack.errors import InputError
from kvstack.hardware.gpu_specs import gpu_spec
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import gpu_engine
from kvstack.planning.capacity import CapacityCurve
from kvstack.planning.carriage import carry, first_as_allocated, refuse_forced
from kvstack.planning.connector import auto_candidates, install_warnings, wanted_connector
from kvstack.planning.cpu_plan import cpu_plan, manager_off_cost, manager_off_note
from kvstack.planning.kv import KvLayout, bounded_layers, chunk_size
from kvstack.planning.layout import offload_tiers, with_breakeven
from kvstack.planning.notes import Notes
from kvstack.planning.offload_verdict import apply_trace, block_bytes, trace_curve
from kvstack.planning.parallel import choose_tp, infeasible_error, needed_gpus
from kvstack.planning.request import PlanRequest, validate_request
from kvstack.planning.retention import retention_note, retention_target
from kvstack.planning.schema import Concurrency, Connector, Plan, Tier, Workload
from kvstack.planning.trace_sizing import TraceInput, trace_target
from kvstack.planning.ttft import gpu_step, ttft_model
from kvstack.planning.tuned import apply_tuned
from kvstack.redact import redact_url
from kvstack.units import fmt_bytes, fmt_tokens

__all__ = ["PlanRequest", "TraceInput", "make_plan"]


def _versions(snapshot: HardwareSnapshot, request: PlanRequest) -> dict[str, str | None]:
    sw = snapshot.software
    out: dict[str, str | None] = {"vllm": sw.vllm, "sglang": sw.sglang, "lmcache": sw.lmcache}
    out.update(request.engine_versions)
    return out


def _workload(request: PlanRequest, workload: Workload, model: ModelGeometry, notes: Notes) -> Workload:
    """Context and users: the request wins over the workload; the model's maximum bounds both."""
    if request.context is not None:
        if request.context > model.max_context:
            raise InputError(
                f"--context {request.context} is above {model.name}'s maximum context of {model.max_context}",
                hint=f"use --context {fmt_tokens(model.max_context)} or less",
            )
        context, why = request.context, f"--context {fmt_tokens(request.context)}"
    elif workload.context_tokens > model.max_context:
        context = model.max_context
        notes.warn(
            f"workload {workload.name} asks for {fmt_tokens(workload.context_tokens)} tokens; "
            f"{model.name} stops at {fmt_tokens(model.max_context)}"
        )
        why = f"{model.name}'s maximum (the workload's {fmt_tokens(workload.context_tokens)} is more)"
    else:
        context = workload.context_tokens
        why = "the model's maximum" if workload.name == "default" else f"workload {workload.name}"
    users = request.users or workload.users
    notes.reasons["context"] = (
        f"{fmt_tokens(context)} tokens from {why}; {users} concurrent user(s), "
        f"{workload.reuse:g} context-sized prefix(es) per user kept warm"
    )
    return workload.model_copy(update={"context_tokens": context, "users": users})


def make_plan(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    model_path: str,
    request: PlanRequest,
    workload: Workload,
    trace: TraceInput | None = None,
) -> Plan:
    """The plan; with ``trace``, the tiers are sized from its capacity curve (planning/trace_sizing.py)
    instead of the retention rule, and --offload auto drops offload that does not pay on it."""
    validate_request(request)
    if request.tuned is not None:
        if trace is not None:
            raise InputError(
                "--tuned and --trace both choose the layout", hint="drop --trace (tune read it) or --tuned"
            )
        asked = request.model_copy(update={"offload": request.tuned.connector})
        return apply_tuned(_plan(snapshot, model, model_path, asked, workload, None), request.tuned)
    curve = trace_curve(trace, request)
    plan = _plan(snapshot, model, model_path, request, workload, curve)
    if trace is None or curve is None:
        return plan
    without = request.model_copy(update={"offload": "none"})
    return apply_trace(
        plan,
        trace,
        curve,
        lambda: _plan(snapshot, model, model_path, without, workload, curve),
        auto=request.offload == "auto",
    )


def _plan(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    model_path: str,
    request: PlanRequest,
    workload: Workload,
    curve: CapacityCurve | None,
) -> Plan:
    notes = Notes()
    wl = _workload(request, workload, model, notes)
    if not snapshot.gpus:
        return cpu_plan(snapshot, model, model_path, request, wl, notes, curve=curve)
    versions = _versions(snapshot, request)
    remote = redact_url(request.remote_url) if request.remote_url else None
    wanted, connector_why = wanted_connector(request.engine, request.offload, remote)
    decision = carry(model, wanted, "cuda")
    if request.offload == "auto" and wanted != "none" and decision.carriage != "as-allocated":
        better = first_as_allocated(model, auto_candidates(request.engine, remote), "cuda")
        if better is not None:
            connector_why = (
                f"{better[0]}: carries {model.name}'s layers as vLLM allocates them, where {wanted} "
                f"would not ({decision.reason}) (--offload auto)"
            )
            wanted, decision = better
    if decision.carriage == "cannot":
        if request.offload != "auto":
            refuse_forced(model, wanted, decision)
        wanted, connector_why = "none", f"none: {decision.reason}"
        decision = carry(model, "none", "cuda")
    if decision.carriage == "manager-off" or model.hybrid:
        notes.reasons["layers"] = decision.reason
    gpu0 = snapshot.gpus[0]
    layout = KvLayout(decision.hybrid_manager, gpu_engine(gpu0.memory_total_bytes or 0, gpu0.name))
    chosen, tp_why = choose_tp(snapshot, model, request, wl, versions.get("sglang"), layout)
    gpus = snapshot.gpus[: chosen.tp]
    gpu = gpus[0]
    kv, budget = chosen.kv, chosen.budget
    notes.reasons.update(
        platform=f"cuda: {len(snapshot.gpus)} x {gpu.name}",
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
            infeasible_error(chosen, needed_gpus(snapshot, model, request, wl), model, wl, gpu.name)
        )
    gpu_tier = Tier(
        kind="gpu",
        size_bytes=budget.pool_total,
        size_bytes_per_rank=max(0, budget.pool_per_rank),
        tokens=kv.tokens(budget.pool_total),
        read_bw_bytes_per_s=gpu_spec(gpu.name, gpu.compute_capability).hbm_bytes_per_s * chosen.tp,
        breakeven_tokens=0,
        reason=(
            f"{fmt_bytes(budget.memory_per_rank)} x {chosen.utilization:.2f} - "
            f"{fmt_bytes(budget.weights_per_rank)} weights - {fmt_bytes(budget.reserve_per_rank)} "
            "activations/CUDA graphs = "
            f"{fmt_bytes(max(0, budget.pool_per_rank))} per GPU"
        ),
    )
    notes.reasons["gpu_tier"] = gpu_tier.reason
    notes.reasons["working_set"] = (
        f"{wl.users} user(s) x {wl.reuse:g} x {fmt_bytes(kv.session_bytes)} per "
        f"{fmt_tokens(wl.context_tokens)} session = {fmt_bytes(chosen.working_set)} at {chosen.dtype.value}"
    )
    retention, retention_why = retention_target(chosen.working_set, request, wl)
    if curve is not None:
        retention, retention_why = trace_target(curve, block_bytes(kv.effective_bytes_per_token, curve))
    notes.reasons["retention"] = retention_why
    lower: list[Tier] = []
    connector: Connector = "none"
    if chosen.problem is None:
        lower, connector = offload_tiers(
            snapshot, request, chosen, wanted, connector_why, remote, retention, notes
        )
    else:
        notes.reasons["connector"] = "none: the plan is infeasible"
    if connector == "none" and decision.carriage == "manager-off":
        # No tier to carry after all: plan the engine as it runs without a connector (the manager on).
        return _plan(
            snapshot, model, model_path, request.model_copy(update={"offload": "none"}), workload, curve
        )
    if decision.carriage == "manager-off":
        manager_off_note(model, chosen.dtype.bytes_per_element, wl.context_tokens, kv, notes, layout.engine)
    for w in install_warnings(request.engine, connector, versions):
        notes.warn(w)
    lower, prefill = with_breakeven(snapshot, model, chosen, lower, notes, wl.context_tokens)
    tiers = [gpu_tier, *lower]
    if decision.carriage == "manager-off" and connector != "none":
        manager_off_cost(tiers, kv, notes)
    hbm = gpu_spec(gpu.name, gpu.compute_capability).hbm_bytes_per_s
    ttft = ttft_model(
        wl.context_tokens,
        kv.effective_bytes_per_token,
        lower,
        prefill=prefill,
        step=gpu_step(budget.weights_per_rank, hbm),
    )
    sessions_gpu = kv.sessions(budget.pool_total)
    if chosen.problem is None and sessions_gpu < wl.users:
        notes.warn(
            f"the GPU pool holds {sessions_gpu} of the {wl.users} concurrent "
            f"{fmt_tokens(wl.context_tokens)}-token sessions: the rest wait, and their prefixes come back "
            "from the lower tiers"
        )
    # The tiers are inclusive (each keeps a copy of the faster ones): the largest bounds the distinct KV.
    covered = max(t.size_bytes for t in tiers)
    if chosen.problem is None and chosen.working_set > covered and connector != "none":
        notes.warn(
            f"the working set ({fmt_bytes(chosen.working_set)}) exceeds the largest tier "
            f"({fmt_bytes(covered)}): the least recently used prefixes will be recomputed"
        )
    if chosen.problem is None:
        unsized = any(t.kind == "remote" and t.size_bytes == 0 for t in tiers)
        retention_note(retention, covered, notes, unsized_remote=unsized)
    chunk, chunk_why = chunk_size(wl.context_tokens)
    notes.reasons["chunk_size"] = chunk_why
    notes.reasons["max_model_len"] = f"{wl.context_tokens}: the planned context"
    return Plan(
        engine=request.engine,
        platform="cuda",
        model=model,
        model_path=model_path,
        kv_cache_dtype=chosen.dtype.value,
        kv_bytes_per_token=kv.bytes_per_token,
        tiers=tiers,
        connector=connector,
        chunk_size=chunk,
        max_model_len=wl.context_tokens,
        tensor_parallel_size=chosen.tp,
        gpu_memory_utilization=chosen.utilization,
        weight_bytes=model.weight_bytes,
        workload=wl,
        concurrency=Concurrency(
            context_tokens=wl.context_tokens,
            sessions_gpu=sessions_gpu,
            sessions_all_tiers=kv.sessions(covered),
            working_set_bytes=chosen.working_set,
            retention_target_bytes=retention,
            retained_bytes=min(retention, covered),
        ),
        remote_url=remote,
        gpu_name=gpu.name,
        compute_capability=gpu.compute_capability,
        prefill_tokens_per_s=round(prefill.tokens_per_s(wl.context_tokens), 1),
        prefill_source="calibrated" if prefill.source.startswith("calibrated") else "estimate",
        ttft=ttft,
        warnings=notes.warnings,
        reasons=notes.reasons,
        feasible=not notes.errors,
        errors=notes.errors,
        hybrid_manager=None if layout.hybrid_manager or not model.hybrid else "off",
        kv_in_flight_tokens=layout.engine.in_flight_tokens if bounded_layers(model) else None,
    )
