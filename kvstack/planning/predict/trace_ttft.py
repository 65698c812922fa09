"""TTFT per request over a simulated trace, with the offload tiers one level at a time. Pure.

Two cost models, one shape (planning/predict/trace_sizing.py picks): FLOPs (the plan's prefill figure: a
forward step, recompute at the platform's FLOP/s, each tier's latency + bytes / bandwidth, and the
offload path's cost per request) or seconds measured on the served engine (planning/predict/served_ttft.py:
a plain layout's costs for the pool alone, an offload layout's below it). Down the hierarchy one
tier at a time: the levels above a tier serve the same whatever lies below them (inclusive), so
"the pool and the first k tiers" is the first k + 1 levels' hits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kvstack.planning.predict.breakeven import PrefillModel
from kvstack.planning.predict.served_ttft import FloatArray, ServedCalibration, whole_chunks
from kvstack.planning.schema import TtftModel
from kvstack.planning.trace_schema import TtftSummary


def summarize(ttft: FloatArray, recompute_s: FloatArray, left: FloatArray, duration_s: float) -> TtftSummary:
    """p50 / p90 / mean of ``ttft``; ``left`` the tokens recomputed per request."""
    return TtftSummary(
        p50_s=float(np.percentile(ttft, 50)),
        p90_s=float(np.percentile(ttft, 90)),
        mean_s=float(ttft.mean()),
        recomputed_tokens=int(left.sum()),
        prefill_busy=round(float(recompute_s.sum()) / duration_s, 4),
    )


def flop_depth(
    kinds: Sequence[str],
    lengths: FloatArray,
    levels: FloatArray,
    ttft: TtftModel,
    *,
    cost_s: float,
    bytes_per_token: float,
    duration_s: float,
) -> list[TtftSummary] | None:
    """One summary per depth from the plan's FLOP model; None without a prefill figure."""
    step, flops = ttft.step_s, ttft.prefill_flops_per_s
    linear, attn = ttft.linear_flops_per_token, ttft.attn_flops_coeff
    if step is None or flops is None or linear is None or attn is None:
        return None
    prefill = PrefillModel(flops, linear, attn, ttft.prefill_source)
    extra: FloatArray = np.zeros(len(lengths))
    out: list[TtftSummary] = []
    for k, kind in enumerate(kinds):
        if k == 1:
            extra = extra + cost_s
        path = ttft.fetch.get(kind) if k > 0 else None
        if path is not None:
            extra = extra + np.where(
                levels[k] > 0, path.latency_s + levels[k] * bytes_per_token / path.bw_bytes_per_s, 0.0
            )
        held = levels[: k + 1].sum(axis=0)
        left = lengths - held
        recompute = (
            prefill.linear_flops_per_token * left + prefill.attn_flops_coeff * (lengths**2 - held**2)
        ) / prefill.flops_per_s
        summary = summarize(step + recompute + extra, recompute, left, duration_s)
        summary.tiers = "+".join(kinds[: k + 1])
        out.append(summary)
    return out


def served_depth(
    kinds: Sequence[str],
    lengths: FloatArray,
    levels: FloatArray,
    served: ServedCalibration,
    *,
    cost_s: float,
    fetch_fallback: Mapping[str, float],
    duration_s: float,
    chunk_tokens: int = 0,
) -> list[TtftSummary]:
    """One summary per depth from costs measured on the served engine. ``fetch_fallback``: seconds
    per token by plan tier kind, for a tier the calibration has no fetch figure for;
    ``chunk_tokens``: the connector's chunk (its per-chunk cost, where the calibration has one)."""
    offload = served.offload_costs(cost_s, {})
    chunks = whole_chunks(lengths, chunk_tokens) if chunk_tokens else None
    fetched: FloatArray = np.zeros(len(lengths))
    out: list[TtftSummary] = []
    for k, kind in enumerate(kinds):
        costs = served.plain if k == 0 else offload
        if k > 0:
            per_token = offload.fetch_per_token(kind)
            fetched = fetched + levels[k] * (
                per_token if per_token is not None else fetch_fallback.get(kind, 0.0)
            )
        held = levels[: k + 1].sum(axis=0)
        ttft, recompute = costs.predict(lengths, held, fetched, chunks if k > 0 else None)
        summary = summarize(ttft, recompute, lengths - np.minimum(held, lengths), duration_s)
        summary.tiers = "+".join(kinds[: k + 1])
        out.append(summary)
    return out
