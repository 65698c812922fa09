"""The plan's predicted TTFT of a context-sized prefix, recomputed, as a hit on the engine's pool and
from each offload tier (its tier table's TTFT column, "TTFT if recomputed"), on the step-level
simulator of the planned layout (planning/predict/simulator/alone.py: the request alone). Pure.

The layouts are ``plan --slo-ttft``'s (planning/predict/plan_capacity.py ``plan_costs``, mapped by
sim_layouts.py): the plan's FLOP model for the prefill, its forward step, the engine's scheduler
defaults for the device (the context computed in chunks of its token budget, each chunk a step), the
connector's per-request cost and overlap, each tier's fetch path. Where the plan has no prefill
figure or forward step (the CPU platform without a calibration) its closed-form figures stand
(planning/predict/ttft.py): a fetch over the tier's bandwidth, no recompute. A tier smaller than
the prefix (a staging buffer) has no figure: the reason says why.
"""

from __future__ import annotations

from kvstack.planning.predict.plan_capacity import plan_costs
from kvstack.planning.predict.sim_layouts import sim_layouts
from kvstack.planning.predict.simulator.alone import pool_hit_ttft, recomputed_ttft, tier_hit_ttft
from kvstack.planning.schema import Plan
from kvstack.units import fmt_ms, fmt_tokens


def simulated_ttft(plan: Plan, device_bytes: int | None = None) -> Plan:
    """``plan`` with its TTFT figures from the simulator and ``reasons["ttft"]`` saying how; as it
    was where the plan cannot be simulated (see the module's docstring) or the engine could not
    hold the context. ``device_bytes``: one GPU's memory (the scheduler's defaults follow it)."""
    m, layouts = plan.ttft, plan_costs(plan)
    if m is None or layouts is None:
        return plan
    sims, limits_from = sim_layouts(plan, layouts, device_bytes)
    tokens = max(1, m.context_tokens)
    deepest = sims[-1]
    recompute, hit = recomputed_ttft(sims[0], tokens), pool_hit_ttft(sims[0], tokens)
    small = [t for t in deepest.tiers if t.capacity_chunks * t.chunk_tokens < tokens]
    tiers = {t.kind: tier_hit_ttft(deepest, k, tokens) for k, t in enumerate(deepest.tiers) if t not in small}
    if recompute is None or hit is None or any(s is None for s in tiers.values()):
        return plan
    out = plan.model_copy()
    out.ttft = m.model_copy()
    out.ttft.recompute_s, out.ttft.hit_s = recompute, hit
    out.ttft.tier_s = {kind: s for kind, s in tiers.items() if s is not None}
    budget = sims[0].limits.max_num_batched_tokens
    steps = -(-tokens // budget)
    parts = [
        f"recomputed in {steps} step(s) of up to {budget:,} tokens, {fmt_ms(recompute)}",
        f"a hit on the engine's pool {fmt_ms(hit)} (its last block recomputed)",
    ]
    if out.ttft.tier_s:
        fetched = ", ".join(f"{kind} {fmt_ms(s)}" for kind, s in out.ttft.tier_s.items())
        parts.append(
            f"from a tier alone, its offload path's {fmt_ms(deepest.request_s)} a request included: {fetched}"
        )
    parts += [
        f"{t.kind} holds {fmt_tokens(t.capacity_chunks * t.chunk_tokens)} tokens, less than the prefix: "
        "it serves none of it alone (a prefix is looked up from its first chunk, which its LRU evicted first)"
        for t in small
    ]
    why = (
        f"a {fmt_tokens(tokens)}-token prompt alone on the step-level simulator: "
        + "; ".join(parts)
        + f" (scheduler: {limits_from})"
    )
    reasons = dict(plan.reasons)
    reasons["ttft"] = why
    return out.with_notes(reasons=reasons)
