"""``plan --slo-ttft --calibration`` and ``bench --sweep``'s prediction: each layout's costs for the
step-level simulator (planning/predict/sim_layouts.py) from costs measured on the served engine
(planning/predict/served_ttft.py), on every platform. Pure.

The mapping, per layout by depth (the engine's pool alone, then one offload tier more each):

- ``fixed_s``: a request's fixed cost on that layout's path, ``hit_s + miss_s`` (a whole-prompt hit
  is HTTP, scheduling and one forward step; the miss intercept what every request pays beyond it).
  The pool alone takes the plain layout's costs; an offload layout the offload layout's, measured
  (else the plain ones plus the plan's offload cost a request), plus ``chunk_s`` for each whole
  chunk of the prompt where the calibration measured a per-chunk cost;
- ``linear_s`` and ``quadratic_s``: the measured recompute, seconds per token and per token^2;
- each offload tier's fetch: its measured seconds per token as a bandwidth (KV bytes per token over
  it; a tier with no figure of its own is taken at DRAM's, as the trace's verdict takes it), else the
  plan's path for the tier; a tier measured at no cost per token serves its share free;
- ``step_s`` (a decoded token, the KV's residence) and ``decode_seq_s``: the calibration's forward
  step by its one rule (served_ttft.py ``ServedCalibration.forward_step``, the plan's forward step
  its fallback before the whole-prompt hit), a decoding sequence at ``linear_s`` where decode was
  not measured;
- the pool: the plan's.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstack.planning.predict.capacity_schema import FetchCost, LayoutCosts
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.planning.predict.trace_sizing import OFFLOAD_REQUEST_COST_S
from kvstack.planning.schema import Plan
from kvstack.units import fmt_ms


def layout_names(kinds: Sequence[str]) -> list[str]:
    """``engine``, then ``engine+cpu``, ``engine+cpu+disk``: the layouts by depth."""
    return ["engine", *(f"engine+{'+'.join(kinds[:k])}" for k in range(1, len(kinds) + 1))]


def _fetch(plan: Plan, costs: ServedCosts, bytes_per_token: float, source: str) -> tuple[FetchCost, ...]:
    """The offload tiers' fetch paths: measured seconds per token as bandwidths, else the plan's."""
    out: list[FetchCost] = []
    paths = plan.ttft.fetch if plan.ttft is not None else {}
    for tier in plan.offload_tiers:
        per_token = costs.fetch_per_token(tier.kind)
        if per_token is not None and per_token > 0:
            how = f"measured: {per_token * 1e6:.3g} us a token fetched, {source}"
            out.append(FetchCost(tier.kind, bytes_per_token / per_token, 0.0, how))
        elif per_token is None and (path := paths.get(tier.kind)) is not None:
            out.append(FetchCost(tier.kind, path.bw_bytes_per_s, path.latency_s, path.source))
    return tuple(out)


def served_costs(
    plan: Plan, served: ServedCalibration, prompt_tokens: int
) -> tuple[list[LayoutCosts], str] | None:
    """(the plan's layouts by depth costed from ``served``, the sentence saying so) for requests of
    ``prompt_tokens`` (the per-chunk cost); None without the engine's pool to hold the KV in flight."""
    pool = plan.engine_pool
    if pool is None:
        return None
    m = plan.ttft
    bytes_per_token = m.bytes_per_token if m is not None else float(plan.cache.kv_bytes_per_token)
    cost_s = plan.trace.offload_cost_s if plan.trace is not None else OFFLOAD_REQUEST_COST_S
    offload = served.offload_costs(cost_s, {})
    step = served.forward_step(m.step_s if m is not None else None)
    source = served.source or "a served calibration"
    fetch = _fetch(plan, offload, bytes_per_token, source)
    chunks = prompt_tokens // plan.cache.chunk_size if plan.cache.chunk_size > 0 else 0
    kinds = [t.kind for t in plan.offload_tiers]
    layouts = []
    for k, name in enumerate(layout_names(kinds)):
        c = offload if k else served.plain
        layouts.append(
            LayoutCosts(
                name=name,
                fixed_s=c.fixed_s + (c.chunk_s * chunks if k else 0.0),
                linear_s=c.linear_s,
                quadratic_s=c.quadratic_s,
                bytes_per_token=bytes_per_token,
                step_s=step.fixed_s,
                pool_tokens=pool.tokens,
                fetch=tuple(f for f in fetch if f.kind in kinds[:k]),
                prefill_source=f"measured: {c.linear_s * 1e6:.3g} us a token recomputed, {source}",
                levels=("engine", *kinds[:k]),
                decode_seq_s=step.per_seq_s,
            )
        )
    offload_how = (
        f"{served.offload_layout} for the offload layouts"
        if served.offload is not None
        else f"{served.plain_layout} plus the plan's offload cost ({fmt_ms(cost_s)}) for the offload layouts"
    )
    why = (
        f"costs measured on the served engine ({source}): {served.plain_layout} for the pool alone "
        f"(a request's fixed cost {fmt_ms(served.plain.fixed_s)}), {offload_how} "
        f"(fixed {fmt_ms(offload.fixed_s)}); decode step {step.how}"
    )
    return layouts, why
