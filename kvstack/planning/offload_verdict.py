"""A trace in the plan: its capacity curve replaces the retention rule, and its verdict on offload
decides ``--offload auto`` (planning/predict/trace_sizing.py predicts; this module applies). Pure."""

from __future__ import annotations

import math
from collections.abc import Callable

from kvstack.errors import InputError
from kvstack.planning.connector import readmits_lower_hits
from kvstack.planning.predict.capacity import CapacityCurve, capacity_curve
from kvstack.planning.predict.trace_sizing import SizingTrace, trace_sizing, trace_target
from kvstack.planning.request import PlanRequest
from kvstack.planning.schema import Plan
from kvstack.units import fmt_bytes


def trace_curve(trace: SizingTrace | None, request: PlanRequest) -> CapacityCurve | None:
    """The trace's capacity curve (None without a trace); --retain and a trace cannot both size."""
    if trace is None:
        return None
    if request.retain_factor is not None or request.retain_bytes is not None:
        raise InputError(
            "--retain and --trace both size the tiers", hint="drop --retain (the trace sizes them) or --trace"
        )
    return capacity_curve(trace.requests, trace.block_tokens)


def block_bytes(bytes_per_token: float, curve: CapacityCurve) -> int:
    """One trace block's KV at the planned dtype (all ranks)."""
    return max(1, math.ceil(bytes_per_token * curve.block_tokens))


def _sizing_reason(plan: Plan, trace: SizingTrace, curve: CapacityCurve) -> str:
    sample = f" ({trace.sample})" if trace.sample else ""
    return (
        f"trace {trace.source}{sample}: {curve.requests:,} requests, {curve.total_tokens:,} prompt tokens, "
        f"{curve.block_refs:,} block references ({curve.distinct_blocks:,} distinct) over "
        f"{trace.duration_s / 60:.0f} min; an unbounded LRU prefix cache serves {curve.max_ratio:.1%} of "
        "prompt tokens (the retention rule is not used)"
    )


def apply_trace(
    plan: Plan,
    trace: SizingTrace,
    curve: CapacityCurve,
    without_offload: Callable[[], Plan],
    *,
    auto: bool,
) -> Plan:
    """``plan`` (sized from the trace) with its trace section; when offload does not pay on this
    trace and --offload was auto, the plan ``without_offload`` returns instead, saying why."""
    per_token = plan.ttft.bytes_per_token if plan.ttft is not None else float(plan.cache.kv_bytes_per_token)
    bb = block_bytes(per_token, curve)
    target, _ = trace_target(curve, bb)
    readmit = readmits_lower_hits(plan.transfer.connector)
    sizing = trace_sizing(
        trace, curve, bb, plan.cache.tiers, target=target, ttft=plan.ttft, readmit=readmit,
        chunk_tokens=plan.cache.chunk_size,
    )  # fmt: skip
    reasons = {**plan.reasons, "sizing": _sizing_reason(plan, trace, curve)}
    warnings = list(plan.warnings)
    if sizing.shortfall:
        warnings.append(sizing.shortfall)
    busy = sizing.with_offload.prefill_busy if sizing.with_offload is not None else None
    if busy is not None and busy > 1:
        warnings.append(
            f"this trace asks {busy:.1f}x the prefill the engine can do (predicted, with the planned tiers): "
            "requests will queue and TTFT grow past the predicted figures (more GPUs, or more replicas)"
        )
    if sizing.offload_pays is False and plan.offloads:
        if auto and plan.transfer.remote_url is None:
            base = without_offload()
            reasons = {
                **base.reasons,
                "sizing": reasons["sizing"],
                "offload": f"none (--offload auto): {sizing.verdict}",
                "connector": "none: offload does not pay on this trace",
            }
            kept = [w for w in base.warnings if not w.startswith("--offload none:")]
            held = fmt_bytes(base.cache.tiers[0].size_bytes) if base.cache.tiers else "0 B"
            kept.append(
                f"offload does not pay on this trace: the engine's pool ({held}) alone serves it; "
                "--offload lmcache-mp (or another connector) plans the tiers anyway"
            )
            out = base.with_notes(reasons=reasons, warnings=kept)
            out.trace = sizing
            return out
        warnings.append(f"{sizing.verdict} (offload planned as asked: --offload {plan.transfer.connector})")
    out = plan.with_notes(reasons=reasons, warnings=warnings)
    out.trace = sizing
    return out
