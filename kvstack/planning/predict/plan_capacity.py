"""``plan --slo-ttft``: each layout's predicted capacity (planning/predict/bound.py) from the plan's own TTFT
model and the workload it sizes. Pure.

The layouts are the plan's depths, as the trace's ``by_depth``: the engine's pool alone, then one
offload tier more each (an offload layout pays the offload path's per-request cost). A request is
the workload's context (a trace's mean prompt where a trace sized the tiers). The share of it each
level serves is the trace's simulated share where a trace sized the tiers, else the warm set's:
every request returns to one of ``users x reuse`` context-sized prefixes, evenly, so a level holding
``k`` of those ``W`` tokens (the tiers are inclusive: the largest so far) serves ``k / W``.

The costs are measured on the served engine where the plan has a calibration (``--calibration``:
planning/predict/served_capacity.py), on every platform; else the plan's FLOP model. The result names them.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstack.planning.predict.bound import (
    CapacityAsk,
    FetchCost,
    LayoutCosts,
    PlanCapacity,
    RequestShape,
    predict_capacity,
)
from kvstack.planning.predict.served_capacity import layout_names, served_costs
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.predict.trace_sizing import OFFLOAD_REQUEST_COST_S
from kvstack.planning.schema import Plan


def level_shares(plan: Plan) -> tuple[list[tuple[str, float]], str]:
    """(each level's share of a prompt, pool first; what the shares come from)."""
    if plan.trace is not None and plan.trace.tiers:
        return [(t.kind, t.hit_ratio) for t in plan.trace.tiers], f"the trace {plan.trace.source}, simulated"
    wl = plan.workload
    warm = max(1.0, wl.users * wl.reuse * wl.context_tokens)
    out: list[tuple[str, float]] = []
    held = 0.0
    for i, tier in enumerate(plan.cache.tiers):
        reach = max(held, min(1.0, tier.tokens / warm))
        out.append(("engine" if i == 0 else tier.kind, reach - held))
        held = reach
    why = (
        f"the warm set: {wl.users} user(s) x {wl.reuse:g} prefix(es) of {wl.context_tokens:,} tokens, "
        "each request returning to one of them evenly"
    )
    return out, why


def plan_costs(plan: Plan) -> list[LayoutCosts] | None:
    """The plan's layouts by depth, in seconds; None without a prefill figure or a forward step."""
    m, pool = plan.ttft, plan.engine_pool
    if m is None or pool is None or m.step_s is None:
        return None
    if m.prefill_flops_per_s is None or m.linear_flops_per_token is None or m.attn_flops_coeff is None:
        return None
    cost_s = plan.trace.offload_cost_s if plan.trace is not None else OFFLOAD_REQUEST_COST_S
    fetch = [
        FetchCost(t.kind, p.bw_bytes_per_s, p.latency_s, p.source)
        for t in plan.offload_tiers
        if (p := m.fetch.get(t.kind)) is not None
    ]
    names = layout_names([f.kind for f in fetch])
    return [
        LayoutCosts(
            name=name,
            fixed_s=m.step_s + (cost_s if k else 0.0),
            linear_s=m.linear_flops_per_token / m.prefill_flops_per_s,
            quadratic_s=m.attn_flops_coeff / m.prefill_flops_per_s,
            bytes_per_token=m.bytes_per_token,
            step_s=m.step_s,
            pool_tokens=pool.tokens,
            fetch=tuple(fetch[:k]),
            prefill_source=m.prefill_source,
            levels=("engine", *(f.kind for f in fetch[:k])),
        )
        for k, name in enumerate(names)
    ]


def _shape(
    prompt: int, ask: CapacityAsk, levels: Sequence[tuple[str, float]], costs: LayoutCosts
) -> RequestShape:
    """The request on ``costs``' layout: the shares of the levels it has (the pool and its tiers)."""
    shares = {k: v for k, v in levels if k in costs.levels}
    return RequestShape(float(prompt), float(ask.output_tokens), shares)


def capacity_costs(
    plan: Plan, served: ServedCalibration | None, prompt: int
) -> tuple[list[LayoutCosts], str] | None:
    """(the layouts' costs by depth, what they come from): measured on the served engine (``served``,
    for requests of ``prompt`` tokens), else the plan's FLOP model; None: neither."""
    if served is not None:
        return served_costs(plan, served, prompt)
    layouts = plan_costs(plan)
    if layouts is None or plan.ttft is None:
        return None
    return layouts, f"the plan's TTFT model ({plan.ttft.prefill_source})"


def plan_capacity(plan: Plan, ask: CapacityAsk, served: ServedCalibration | None = None) -> PlanCapacity:
    """Each of the plan's layouts' predicted capacity under ``ask``'s SLO, and what bounds it, from
    ``served`` (costs measured on the served engine) where given, else the plan's TTFT model."""
    t = plan.trace
    prompt = plan.workload.context_tokens
    if t is not None and t.requests:
        prompt = round(t.prompt_tokens / t.requests)
    levels, why = level_shares(plan)
    out = PlanCapacity(ask=ask, prompt_tokens=prompt, shares_from=why)  # filled in below
    costed = capacity_costs(plan, served, prompt)
    if costed is None and served is not None:
        out.note = "the plan has no engine pool to hold the KV in flight"
        return out
    if costed is None:
        out.note = (
            "no prefill figure on this platform to predict TTFT with "
            f"({plan.prefill_source}): calibrate it (doctor --calibrate) or measure with bench --sweep"
        )
        return out
    layouts, costs_from = costed
    out.costs_from = costs_from
    out.layouts = [
        predict_capacity(costs, _shape(prompt, ask, levels, costs), ask.slo_ttft_s, ask.share)
        for costs in layouts
    ]
    return out
