"""The planner's I/O side, above planning (which reads no files): resolve the model and load the
workload they name, check the remote URL, then planning.make_plan."""

from __future__ import annotations

from kvstack.errors import PlanInfeasible
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.source import ModelSource
from kvstack.planning.plan import PlanRequest, SizingTrace, make_plan
from kvstack.planning.predict.capacity_schema import CapacityAsk
from kvstack.planning.predict.plan_capacity import plan_capacity
from kvstack.planning.schema import Plan
from kvstack.planning.workload import default_workload
from kvstack.remoteurl import RemoteURL, parse_remote_url
from kvstack.serving.engine_check import engine_checked, resolve_for_engine
from kvstack.serving.plan_inputs import PlanInputs
from kvstack.serving.workload_files import load_workload


def plan_for_model(
    request: PlanRequest,
    source: ModelSource,
    workload_name: str | None,
    snapshot: HardwareSnapshot,
    trace: SizingTrace | None = None,
) -> Plan:
    """Load the workload profile, then plan (pure from here) for a resolved model; ``trace`` (read by
    kvstack/traces) sizes the tiers from its capacity curve. The engine is asked first: its layers
    size the plan, and what it refuses is refused here (serving/engine_check.py)."""
    model = engine_checked(source, request, snapshot)
    workload = load_workload(workload_name) if workload_name else default_workload(model.max_context)
    plan = make_plan(snapshot, model, source.path, request, workload, trace)
    if source.revision is not None:
        plan = plan.model_copy()
        plan.model = plan.model.at_revision(source.revision)
    return plan


def plan_for_inputs(
    inputs: PlanInputs,
    remote: RemoteURL | str | None,
    trace: SizingTrace | None = None,
    snapshot: HardwareSnapshot | None = None,
    capacity: CapacityAsk | None = None,
) -> Plan:
    """The plan ``plan`` prints and ``export`` deploys: the inputs checked, the model resolved before
    the hardware is probed (a model that is not there fails at once), then planned on ``snapshot``
    (default: --hardware's, else this machine probed); with ``capacity`` (plan --slo-ttft), each
    layout's predicted capacity under its SLO on the step-level simulator (the trace's requests where
    given; costs from the trace's calibration where it has one)."""
    # remoteurl's rules (LMCache's): a malformed URL is an InputError naming the accepted forms; the
    # plan keeps the redacted form, never the password. Text is parsed here, once.
    request = inputs.plan_request(parse_remote_url(remote) if isinstance(remote, str) else remote)
    source = resolve_for_engine(inputs.model, inputs.revision, request.engine)
    snap = snapshot or inputs.snapshot()
    plan = plan_for_model(request, source, inputs.workload, snap, trace)
    if capacity is None:
        return plan
    served = trace.served if trace is not None else None  # --calibration: costs measured on the engine
    gpu_bytes = snap.gpus[0].memory_total_bytes if snap.gpus else None  # the scheduler's defaults follow it
    out = plan.model_copy()
    out.capacity = plan_capacity(plan, capacity, served, trace, gpu_bytes)
    return out


def require_feasible(plan: Plan, model_spec: str) -> Plan:
    """``plan``, or PlanInfeasible (exit 1) with its errors when no layout fits: what serve and
    export refuse, worded once."""
    if not plan.feasible:
        raise PlanInfeasible(
            "the plan is infeasible: " + "; ".join(plan.errors),
            hint=f"see: kvstack plan --model {model_spec} (same options) for the reasons",
        )
    return plan
