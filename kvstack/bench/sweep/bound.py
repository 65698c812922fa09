"""Pure: what bounds each layout at its knee, from what its steps measured, and the plan's predicted
capacity beside the measured one.

A step's load on each resource is planning/predict/bound.py's, at the step's measured figures: its request
rate (requests / its wall time), each request's mean prompt and output tokens and the share of the
prompt tokens each level served (the server's counters): each tier moves ``share x prompt tokens x
bytes_per_token`` per request against its bandwidth, prefill recomputes the rest against the
engine's prefill rate, and the KV in flight (the step's mean requests in flight, Little's law over
its end-to-end latencies, each holding its prompt and output) is held against the engine's pool.
The capacities are the plan's where kvstack served the layout (or ``--plan`` gave one): its TTFT
model's prefill and decode figures, each tier's bandwidth, the pool's tokens. Where the plan has no
prefill figure (the CPU platform) or there is no plan (``--url``), the prefill rate is measured: the
lowest step's recomputed tokens per request over its TTFT p50 (one prefill with little queueing),
and decode is not judged.

The predicted capacity is the plan's TTFT model's (``predicted_capacity``) or, given costs measured
on the served engine (``served_prediction``: ``plan --calibration``'s, as scripts/bench-capacity
predict compares them), those costs' (planning/predict/served_capacity.py), for the workload as the lowest
step sent it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvstack.bench.sweep.ladder import LoadKind
from kvstack.bench.sweep.schema import (
    CapacityPrediction,
    KneeBound,
    LayoutSweep,
    Slo,
    SweepResult,
    SweepStep,
)
from kvstack.planning.predict.bound import (
    ENGINE,
    LEVEL_OF_SOURCE,
    FetchCost,
    LayoutCapacity,
    LayoutCosts,
    RequestShape,
    ResourceUse,
    binding,
    predict_capacity,
    utilisation,
)
from kvstack.planning.predict.plan_capacity import capacity_costs, plan_costs
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.schema import Plan
from kvstack.units import fmt_bw, fmt_tokens


@dataclass(frozen=True)
class Figures:
    """What each resource gives, for one layout, and where that comes from."""

    costs: LayoutCosts
    modelled: bool  # the plan's prefill model (decode judged) or a measured prefill rate (not)
    offload_kind: str | None  # the tier an "offload" counter (no tier named) is put on
    source: str


def step_shape(step: SweepStep, offload_kind: str | None) -> RequestShape | None:
    """The step's mean request and each level's share of its prompt tokens (None: nothing sent)."""
    d = step.summary
    if d.requests == 0 or d.wall_s <= 0 or d.prompt_tokens <= 0:
        return None
    shares: dict[str, float] = {}
    for source, share in step.prompt_token_shares.items():
        level = LEVEL_OF_SOURCE.get(source)
        if source == "offload":  # held by a tier no counter names: the plan's first, else held all the same
            level = offload_kind or source
        if level is not None:
            shares[level] = shares.get(level, 0.0) + share
    if not step.prompt_token_shares and step.token_hit_rate is not None:
        shares = {"engine": step.token_hit_rate}  # a server that counts hits, not their sources
    output = d.output_tokens / max(1, d.ok)
    return RequestShape(d.prompt_tokens / d.requests, output, shares)


def in_flight(step: SweepStep) -> float | None:
    """The step's mean requests in flight: its requests' end-to-end seconds over its wall time."""
    e2e, wall = step.summary.e2e_s, step.summary.wall_s
    return None if e2e is None or wall <= 0 else e2e.mean * e2e.n / wall


def _measured_prefill(steps: list[SweepStep], offload_kind: str | None) -> tuple[float, str] | None:
    """Seconds per recomputed token: the lowest step's recomputed tokens per request over its TTFT p50."""
    for step in sorted((s for s in steps if s.complete), key=lambda s: s.load):
        shape, ttft = step_shape(step, offload_kind), step.summary.ttft_s
        if shape is None or ttft is None or ttft.p50 <= 0:
            continue
        recomputed = shape.prompt_tokens - shape.held_tokens
        if recomputed > 0:
            rate = recomputed / ttft.p50
            return (
                1 / rate,
                f"prefill {rate:,.0f} tokens/s measured (the lowest step's recompute over its TTFT p50)",
            )
    return None


def _plan_figures(plan: Plan) -> tuple[list[FetchCost], float, int, str]:
    """(the offload tiers' fetch paths, KV bytes per token, the pool's tokens, their sources)."""
    m, pool = plan.ttft, plan.engine_pool
    fetch = [] if m is None else [
        FetchCost(t.kind, p.bw_bytes_per_s, p.latency_s, p.source)
        for t in plan.offload_tiers if (p := m.fetch.get(t.kind)) is not None
    ]  # fmt: skip
    per_token = m.bytes_per_token if m is not None else float(plan.cache.kv_bytes_per_token)
    tokens = pool.tokens if pool is not None else 0
    bws = ", ".join(f"{f.kind} {fmt_bw(f.bw_bytes_per_s)}" for f in fetch) or "no offload tier"
    return fetch, per_token, tokens, f"the plan's tiers ({bws}) and pool ({fmt_tokens(tokens)} tokens)"


def layout_figures(name: str, plan: Plan | None, steps: list[SweepStep]) -> Figures | None:
    """The layout's resources: the plan's TTFT model where it has one, else a measured prefill rate
    (with the plan's tiers and pool where there is a plan); None: nothing to judge against."""
    offload_kind = plan.offload_tiers[0].kind if plan is not None and plan.offload_tiers else None
    modelled = plan_costs(plan) if plan is not None else None
    if plan is not None and modelled:
        source = f"the plan's TTFT model ({modelled[-1].prefill_source}); {_plan_figures(plan)[3]}"
        return Figures(modelled[-1], True, offload_kind, source)
    prefill = _measured_prefill(steps, offload_kind)
    if prefill is None:
        return None
    fetch, per_token, tokens, tiers = _plan_figures(plan) if plan is not None else ([], 0.0, 0, "")
    costs = LayoutCosts(
        name=name,
        fixed_s=0.0,
        linear_s=prefill[0],
        quadratic_s=0.0,
        bytes_per_token=per_token,
        step_s=0.0,
        pool_tokens=tokens,
        fetch=tuple(fetch),
    )
    return Figures(costs, False, offload_kind, "; ".join(x for x in (prefill[1], tiers) if x))


def step_resources(figures: Figures, step: SweepStep) -> list[ResourceUse]:
    """Each resource's utilisation at what ``step`` measured (the pool: its measured KV in flight)."""
    shape = step_shape(step, figures.offload_kind)
    if shape is None:
        return []
    rate = step.summary.requests / step.summary.wall_s
    flying = in_flight(step)
    out: list[ResourceUse] = []
    for use in utilisation(figures.costs, shape, rate):
        if use.resource == "decode" and not figures.modelled:
            continue
        if use.resource == "pool":
            if not figures.costs.pool_tokens or flying is None:
                continue
            kv = flying * (shape.prompt_tokens + shape.output_tokens)
            why = "KV in flight: the step's requests in flight x their tokens"
            use = use.model_copy()
            use.demand, use.utilisation, use.source = kv, kv / use.capacity, why
        out.append(use)
    busy = sum(u.utilisation for u in out if u.resource in ENGINE)
    return [_engine_busy(u, busy) if u.resource in ENGINE else u for u in out]


def _engine_busy(use: ResourceUse, busy: float) -> ResourceUse:
    """``use`` with the engine's total utilisation beside its own."""
    out = use.model_copy()
    out.engine_busy = busy
    return out


def knee_bound(lay: LayoutSweep, figures: Figures) -> KneeBound | None:
    """The bound at the layout's knee: read at the lowest failing step (the top step when none
    failed), beside the highest step that passed below it."""
    cap = lay.capacity
    by_load = {s.load: s for s in lay.steps if s.complete}
    if cap.status == "not_measured":
        return None
    at = cap.load if cap.status == "above_ladder" else cap.lowest_failing
    if at is None or at not in by_load:
        return None
    passing = cap.highest_passing if cap.status == "bracketed" else None
    note = {"above_ladder": "no step failed: read at the top step", "below_first_step":
            "the first step already failed: read there"}.get(cap.status, "")  # fmt: skip
    uses = step_resources(figures, by_load[at])
    return KneeBound(
        at_load=at,
        passing_load=passing,
        bound=binding(uses),
        resources=uses,
        passing=step_resources(figures, by_load[passing]) if passing in by_load else [],
        figures=figures.source,
        note=note,
    )


def _in_unit(lay: LayoutCapacity, kind: LoadKind, trace_rate_per_s: float | None) -> float | None:
    """A predicted capacity in the sweep's unit."""
    if lay.rate_per_s is None:
        return None
    if kind == "concurrency":
        return lay.in_flight
    if kind == "trace_rate":
        return lay.rate_per_s / trace_rate_per_s if trace_rate_per_s else None
    return lay.rate_per_s


def predicted_capacity(
    lay: LayoutSweep, plan: Plan | None, kind: LoadKind, slo: Slo, trace_rate_per_s: float | None
) -> CapacityPrediction | None:
    """The plan's capacity for the workload as the lowest step sent it (its prompts, outputs and
    the levels' shares measured), beside the measured capacity (None: no plan)."""
    if plan is None:
        return None
    costs = plan_costs(plan)
    if not costs:
        return CapacityPrediction(
            status="no_costs", note="the plan has no prefill figure to predict TTFT with"
        )
    if slo.ttft_s is None:
        return CapacityPrediction(status="no_costs", note="the plan predicts TTFT only; the SLO has none")
    offload_kind = plan.offload_tiers[0].kind if plan.offload_tiers else None
    lowest = min((s for s in lay.steps if s.complete), key=lambda s: s.load, default=None)
    shape = step_shape(lowest, offload_kind) if lowest is not None else None
    if shape is None:
        return CapacityPrediction(status="no_costs", note="no step completed to take the workload from")
    return _beside(lay, predict_capacity(costs[-1], shape, slo.ttft_s, slo.share), kind, trace_rate_per_s)


def _beside(
    lay: LayoutSweep, pred: LayoutCapacity, kind: LoadKind, trace_rate_per_s: float | None, note: str = ""
) -> CapacityPrediction:
    """A predicted capacity in the sweep's unit beside the measured one, and their ratio."""
    load = _in_unit(pred, kind, trace_rate_per_s)
    cap = lay.capacity
    measured = cap.load if cap.status in ("bracketed", "above_ladder") else None
    ratio = load / measured if load is not None and measured else None
    return CapacityPrediction(status=pred.status, load=load, rate_per_s=pred.rate_per_s, bound=pred.bound,
                              measured_load=measured, ratio=ratio, at_least=cap.status == "above_ladder",
                              note="; ".join(x for x in (note, pred.note) if x))  # fmt: skip


def served_prediction(
    lay: LayoutSweep,
    plan: Plan,
    served: ServedCalibration,
    kind: LoadKind,
    slo: Slo,
    trace_rate_per_s: float | None,
) -> CapacityPrediction:
    """The capacity predicted from costs measured on the served engine (``plan --calibration``'s,
    planning/predict/served_capacity.py) for the workload as the lowest step sent it, beside the measured
    one: ``plan``'s deepest layout (its pool alone for a layout without offload); the note says
    which costs."""
    if slo.ttft_s is None:
        return CapacityPrediction(
            status="no_costs", note="the calibration predicts TTFT only; the SLO has none"
        )
    offload_kind = plan.offload_tiers[0].kind if plan.offload_tiers else None
    lowest = min((s for s in lay.steps if s.complete), key=lambda s: s.load, default=None)
    shape = step_shape(lowest, offload_kind) if lowest is not None else None
    if shape is None:
        return CapacityPrediction(status="no_costs", note="no step completed to take the workload from")
    costed = capacity_costs(plan, served, round(shape.prompt_tokens))
    if not costed or not costed[0]:
        return CapacityPrediction(
            status="no_costs", note="the plan has no engine pool to hold the KV in flight"
        )
    costs, source = costed
    return _beside(
        lay, predict_capacity(costs[-1], shape, slo.ttft_s, slo.share), kind, trace_rate_per_s, source
    )


def explain_sweep(result: SweepResult, plans: Mapping[str, Plan | None]) -> SweepResult:
    """Each layout with its bound at the knee and (its plan known) the predicted capacity beside it."""
    trace_rate = result.trace.rate_per_s if result.trace is not None else None
    layouts = []
    for lay in result.layouts:
        plan = plans.get(lay.name)
        figures = layout_figures(lay.name, plan, lay.steps)
        bound = knee_bound(lay, figures) if figures is not None else None
        predicted = predicted_capacity(lay, plan, result.kind, result.slo, trace_rate)
        judged = lay.model_copy()
        judged.bound, judged.predicted = bound, predicted
        layouts.append(judged)
    out = result.model_copy()
    out.layouts = layouts
    return out
