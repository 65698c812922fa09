"""make_plan: hardware snapshot + KV geometry + workload -> Plan. Pure: no I/O, no clock, no env."""

from __future__ import annotations

from dataclasses import replace

from kvstack.errors import InputError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.planning.assemble import Asked, assemble_plan
from kvstack.planning.compute_dtype import choose_compute_dtype
from kvstack.planning.cpu_plan import cpu_choices
from kvstack.planning.cuda_plan import cuda_choices
from kvstack.planning.notes import Notes
from kvstack.planning.offload_verdict import apply_trace, trace_curve
from kvstack.planning.predict.capacity import CapacityCurve
from kvstack.planning.predict.tier_ttft import simulated_ttft
from kvstack.planning.predict.trace_sizing import SizingTrace
from kvstack.planning.request import PlanRequest, validate_request
from kvstack.planning.schema import Plan, Workload
from kvstack.planning.tuned import apply_tuned
from kvstack.units import fmt_tokens

__all__ = ["PlanRequest", "SizingTrace", "make_plan"]


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
    out = workload.model_copy()
    out.context_tokens, out.users = context, users
    return out


def make_plan(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    model_path: str,
    request: PlanRequest,
    workload: Workload,
    trace: SizingTrace | None = None,
) -> Plan:
    """The plan; with ``trace``, the tiers are sized from its capacity curve
    (planning/predict/trace_sizing.py) instead of the retention rule, and --offload auto drops
    offload that does not pay on it. Its TTFT figures come from the step-level simulator of the
    layout chosen (planning/predict/tier_ttft.py)."""
    device_bytes = snapshot.gpus[0].memory_total_bytes if snapshot.gpus else None
    return simulated_ttft(_chosen(snapshot, model, model_path, request, workload, trace), device_bytes)


def _chosen(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    model_path: str,
    request: PlanRequest,
    workload: Workload,
    trace: SizingTrace | None,
) -> Plan:
    """The layout chosen (see ``make_plan``)."""
    validate_request(request)
    if request.tuned is not None:
        if trace is not None:
            raise InputError(
                "--tuned and --trace both choose the layout", hint="drop --trace (tune read it) or --tuned"
            )
        asked = request.with_offload(request.tuned.connector)
        return apply_tuned(_plan(snapshot, model, model_path, asked, workload, None), request.tuned)
    curve = trace_curve(trace, request)
    plan = _plan(snapshot, model, model_path, request, workload, curve)
    if trace is None or curve is None:
        return plan
    without = request.with_offload("none")
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
    """The platform's choices (CUDA where the snapshot has GPUs, else the CPU backend), assembled,
    for the model as the engine computes it (planning/compute_dtype.py)."""
    notes = Notes()
    compute = choose_compute_dtype(snapshot, model, request.dtype)
    model = model.computed_in(compute.value)
    if model.local_refusal is not None:
        notes.warn(model.local_refusal)
    asked = Asked(snapshot, model, request, _workload(request, workload, model, notes), curve)
    without = request.with_offload("none")
    if snapshot.gpus:
        choices = cuda_choices(asked, notes)
        if choices is None:  # no tier to carry after all: plan the engine without a connector, afresh
            return _plan(snapshot, model, model_path, without, workload, curve)
    else:
        choices = cpu_choices(asked, notes)
        if choices is None:  # the same, keeping what the first pass noted
            choices = cpu_choices(replace(asked, request=without), notes)
    if choices is None:
        raise AssertionError("--offload none always plans")
    if compute.asked or not snapshot.gpus:  # on CUDA the model's own dtype, as it always was
        notes.reason_after("platform", "dtype", compute.reason)
    return assemble_plan(asked, model_path, choices, notes)
