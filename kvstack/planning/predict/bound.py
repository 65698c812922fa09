"""Where offload stops paying: each resource's utilisation at a load, the one that binds, and the
highest load a layout sustains under a TTFT SLO. Pure.

The costs are the plan's TTFT model (planning/predict/ttft.py, planning/predict/trace_ttft.py's
``flop_depth``) in seconds: a request of ``N`` prompt tokens of which the caches hold ``H`` costs the
forward step and the offload path's per-request cost (``fixed_s``), the recompute of the rest
(``linear_s x (N - H) + quadratic_s x (N^2 - H^2)``) and each offload tier's fetch
(``latency + tokens x bytes_per_token / bandwidth``). At ``rate`` requests/s each resource is busy:

- **prefill** (the engine's compute): ``rate x recompute seconds``;
- **decode** (the same compute): ``rate x output tokens x linear_s``, a decoded token's linear
  FLOPs in a batch; prefill and decode share the engine, so it saturates when their sum reaches 1,
  and the larger part names it (decode bound by memory, a forward step shared by a batch as large
  as the pool holds, is the pool's bound: its KV in flight);
- **each offload tier** (DRAM copies, the disk's read rate, the Redis link):
  ``rate x tokens it serves x bytes_per_token / bandwidth``;
- **the KV pool**: the KV in flight (Little's law: ``rate x`` a request's unloaded residence, its
  TTFT plus ``output tokens x step_s``, ``x (N + output)`` tokens) over the pool's tokens.

The predicted TTFT at a quantile ``q`` (the SLO's share) adds each queue's waiting time as an M/M/1
queue's: ``S x max(0, ln(rho / (1 - q))) / (1 - rho)`` for a service time ``S`` at utilisation
``rho`` (the engine's queue for the recompute, each tier's for its transfer); the pool adds no
wait below saturation. A layout's capacity is the highest rate whose predicted TTFT stays within the
SLO, or the rate at which its bound resource saturates, whichever is lower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kvstack.planning.predict.capacity_schema import (
    RESOURCE_LABELS,
    CapacityAsk,
    CapacityStatus,
    FetchCost,
    LayoutCapacity,
    LayoutCosts,
    PlanCapacity,
    ResourceUse,
)

# The schema lives in capacity_schema; these names stay importable from here (bench/sweep/bound.py).
__all__ = [
    "ENGINE",
    "LEVEL_OF_SOURCE",
    "RESOURCE_LABELS",
    "CapacityAsk",
    "CapacityStatus",
    "FetchCost",
    "LayoutCapacity",
    "LayoutCosts",
    "PlanCapacity",
    "RequestShape",
    "ResourceUse",
    "binding",
    "fetch_seconds",
    "predict_capacity",
    "recompute_seconds",
    "saturation_rate",
    "ttft_quantile",
    "unloaded_ttft",
    "utilisation",
    "wait_quantile",
]

# The names a sweep's counters give the levels (clients/token_sources.py) and the plan's kinds.
LEVEL_OF_SOURCE: dict[str, str] = {
    "engine_cache": "engine",
    "dram": "cpu",
    "disk": "disk",
    "remote": "remote",
}
ENGINE = ("prefill", "decode")  # the two parts of the engine's compute
_SEARCH_STEPS = 80  # bisection steps on the rate: far below any figure's precision


@dataclass(frozen=True)
class RequestShape:
    """A request of the load: its tokens and the share of its prompt each level serves (``engine``
    and the offload tiers' kinds); the rest is recomputed."""

    prompt_tokens: float
    output_tokens: float
    shares: Mapping[str, float]

    @property
    def held_tokens(self) -> float:
        return min(1.0, sum(self.shares.values())) * self.prompt_tokens


@dataclass(frozen=True)
class _Demand:
    """One resource per request: its utilisation per request/s and its service time on the TTFT path
    (0: it adds no queue to the TTFT)."""

    use: ResourceUse  # at 1 request/s
    service_s: float


def recompute_seconds(costs: LayoutCosts, shape: RequestShape) -> float:
    n, held = shape.prompt_tokens, shape.held_tokens
    return costs.linear_s * (n - held) + costs.quadratic_s * (n * n - held * held)


def fetch_seconds(costs: LayoutCosts, shape: RequestShape) -> dict[str, float]:
    """Each tier's transfer time for the tokens it serves (its latency apart: it holds no link)."""
    return {
        f.kind: shape.shares.get(f.kind, 0.0) * shape.prompt_tokens * costs.bytes_per_token / f.bw_bytes_per_s
        for f in costs.fetch
    }


def unloaded_ttft(costs: LayoutCosts, shape: RequestShape) -> float:
    latency = sum(f.latency_s for f in costs.fetch if shape.shares.get(f.kind, 0.0) > 0)
    fetch = sum(fetch_seconds(costs, shape).values())
    return costs.fixed_s + recompute_seconds(costs, shape) + fetch + latency


def _demands(costs: LayoutCosts, shape: RequestShape) -> list[_Demand]:
    n = shape.prompt_tokens
    recomputed = n - shape.held_tokens
    prefill_s = recompute_seconds(costs, shape)
    token_s = costs.linear_s  # a decoded token's engine seconds, batched
    residence = unloaded_ttft(costs, shape) + shape.output_tokens * costs.step_s
    kv = n + shape.output_tokens
    out = [
        _Demand(
            _use(
                "prefill",
                prefill_s,
                recomputed,
                recomputed / prefill_s if prefill_s > 0 else 0.0,
                "tokens/s",
                costs.prefill_source,
            ),
            prefill_s,
        ),
        _Demand(
            _use(
                "decode",
                shape.output_tokens * token_s,
                shape.output_tokens,
                1 / token_s if token_s else 0.0,
                "tokens/s",
                "a decoded token's linear FLOPs, batched",
            ),
            0.0,
        ),
        _Demand(
            _use(
                "pool",
                residence * kv / costs.pool_tokens if costs.pool_tokens else 0.0,
                residence * kv,
                float(costs.pool_tokens),
                "tokens",
                "KV in flight: rate x residence x tokens",
            ),
            0.0,
        ),
    ]
    for f, seconds in zip(costs.fetch, fetch_seconds(costs, shape).values(), strict=True):
        served = shape.shares.get(f.kind, 0.0) * n * costs.bytes_per_token
        out.append(_Demand(_use(f.kind, seconds, served, f.bw_bytes_per_s, "B/s", f.source), seconds))
    return out


def _use(
    resource: str,
    per_rate: float,
    demand: float,
    capacity: float,
    unit: Literal["B/s", "tokens/s", "tokens"],
    source: str,
) -> ResourceUse:
    label = RESOURCE_LABELS.get(resource, resource)
    return ResourceUse(resource=resource, label=label, utilisation=per_rate, demand=demand,
                       capacity=capacity, unit=unit, source=source)  # fmt: skip


def utilisation(costs: LayoutCosts, shape: RequestShape, rate: float) -> list[ResourceUse]:
    """Every resource at ``rate`` requests/s: prefill, decode, the pool, then each offload tier."""
    uses = [d.use.model_copy() for d in _demands(costs, shape)]
    for u in uses:
        u.utilisation, u.demand = u.utilisation * rate, u.demand * rate
    engine = sum(u.utilisation for u in uses if u.resource in ENGINE)
    for u in uses:  # each the copy made above
        if u.resource in ENGINE:
            u.engine_busy = engine
    return uses


def binding(uses: Sequence[ResourceUse]) -> ResourceUse | None:
    """The resource nearest saturation (the engine by whichever of its parts uses more of it)."""
    return max(uses, key=lambda u: (u.pressure, u.utilisation), default=None)


def wait_quantile(service_s: float, rho: float, quantile: float) -> float:
    """An M/M/1 queue's waiting time at ``quantile``: ``S x max(0, ln(rho / (1 - q))) / (1 - rho)``."""
    if service_s <= 0 or rho <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    return service_s * max(0.0, math.log(rho / (1 - quantile))) / (1 - rho)


def ttft_quantile(costs: LayoutCosts, shape: RequestShape, rate: float, quantile: float) -> float:
    """The predicted TTFT at ``quantile`` under ``rate`` requests/s (inf once a resource saturates)."""
    uses = utilisation(costs, shape, rate)
    if any(u.pressure >= 1 for u in uses):
        return math.inf
    ttft = unloaded_ttft(costs, shape)
    for d, u in zip(_demands(costs, shape), uses, strict=True):
        ttft += wait_quantile(d.service_s, u.pressure, quantile)
    return ttft


def saturation_rate(costs: LayoutCosts, shape: RequestShape) -> float | None:
    """The rate at which the first resource reaches 100% (None: the request asks nothing of any)."""
    per_rate = utilisation(costs, shape, 1.0)
    most = max((u.pressure for u in per_rate), default=0.0)
    return 1 / most if most > 0 else None


def predict_capacity(
    costs: LayoutCosts, shape: RequestShape, slo_ttft_s: float, quantile: float
) -> LayoutCapacity:
    """The highest rate whose predicted TTFT at ``quantile`` is within ``slo_ttft_s``, and what binds it."""
    shares = {k: round(v, 6) for k, v in shape.shares.items()}
    out = LayoutCapacity(layout=costs.name, status="no_costs", shares=shares)  # filled in below
    unloaded = unloaded_ttft(costs, shape)
    sat = saturation_rate(costs, shape)
    if sat is None:
        out.note = "the request asks nothing of any resource"
        return out
    out.unloaded_ttft_s, out.saturation_rate_per_s = unloaded, sat
    if unloaded > slo_ttft_s:
        out.status, out.rate_per_s = "slo_below_unloaded", 0.0
        out.resources = utilisation(costs, shape, 0.0)
        out.note = "the SLO is below an idle engine's TTFT"
        return out
    status: CapacityStatus
    lo, hi = 0.0, sat
    if ttft_quantile(costs, shape, sat * (1 - 1e-9), quantile) <= slo_ttft_s:
        lo, status = sat, "saturation"
    else:
        status = "slo"
        for _ in range(_SEARCH_STEPS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if ttft_quantile(costs, shape, mid, quantile) <= slo_ttft_s else (lo, mid)
    uses = utilisation(costs, shape, lo)
    residence = unloaded + shape.output_tokens * costs.step_s
    ttft = ttft_quantile(costs, shape, lo * (1 - 1e-9), quantile)
    out.status, out.rate_per_s, out.in_flight = status, lo, lo * residence
    out.bound, out.resources = binding(uses), uses
    out.ttft_at_capacity_s = ttft if math.isfinite(ttft) else None
    return out
