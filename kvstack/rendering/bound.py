"""What bounds a layout, in words: ``disk read 92% of 1.9 GB/s``; and ``plan --slo-ttft``'s
predicted capacity per layout (planning/predict/bound.py computes; this only words it)."""

from __future__ import annotations

from kvstack.planning.predict.bound import LayoutCapacity, PlanCapacity, ResourceUse
from kvstack.units import fmt_bw, fmt_ms


def amount(value: float, unit: str) -> str:
    """A resource's figure in its unit: ``1.9 GB/s``, ``12,400 tokens/s``, ``1,200,000 tokens``."""
    if unit == "B/s":
        return fmt_bw(value)
    return f"{value:,.0f} {unit}"


def bound_text(use: ResourceUse) -> str:
    """``disk read 92% of 1.9 GB/s``; the engine's parts say how busy the engine is with both."""
    text = f"{use.label} {use.utilisation:.0%} of {amount(use.capacity, use.unit)}"
    if use.engine_busy is not None and use.engine_busy - use.utilisation >= 0.005:
        text += f" (the engine {use.engine_busy:.0%} busy with prefill and decode)"
    return text


def _layout_line(lay: LayoutCapacity, quantile: str) -> str:
    tiers = lay.layout.removeprefix("engine+").replace("+", " + ")
    name = "engine pool alone" if lay.layout == "engine" else f"+ {tiers}"
    if lay.status == "no_costs" or lay.rate_per_s is None:
        return f"{name}: no prediction ({lay.note})"
    if lay.status == "slo_below_unloaded":
        return f"{name}: no capacity: an idle engine's TTFT is {fmt_ms(lay.unloaded_ttft_s)}, above the SLO"
    how = "saturates" if lay.status == "saturation" else f"reaches the SLO at TTFT {quantile}"
    inflight = f" (~{lay.in_flight:.1f} in flight)" if lay.in_flight is not None else ""
    bound = bound_text(lay.bound) if lay.bound is not None else "none"
    return (
        f"{name}: {lay.rate_per_s:.3g} requests/s{inflight}, where it {how}; bound: {bound}; "
        f"TTFT idle {fmt_ms(lay.unloaded_ttft_s)}, at capacity {fmt_ms(lay.ttft_at_capacity_s)}"
    )


def capacity_lines(cap: PlanCapacity) -> list[str]:
    """The heading, what the costs come from, then one line per layout."""
    q = f"p{cap.ask.share * 100:g}"
    head = (
        f"predicted capacity under TTFT {q} <= {cap.ask.slo_ttft_s * 1000:g} ms: requests of "
        f"{cap.prompt_tokens:,} prompt and {cap.ask.output_tokens} output tokens; "
        f"shares from {cap.shares_from}"
    )
    if not cap.layouts:
        return [head, f"  no prediction: {cap.note}"]
    costs = (
        f"  costs: {cap.costs_from}; capacity in requests/s (as bench --sweep rate:..., Poisson "
        "arrivals; with --trace, x the trace's rate), in flight at an idle request's residence"
    )
    return [head, costs, *(f"  {_layout_line(lay, q)}" for lay in cap.layouts)]
