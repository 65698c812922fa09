"""What a simulation gives: each request's TTFT, TPOT and where its prompt came from, and their
aggregates. Pure.

A request's TTFT is the end of the step that computes its prompt's last token (which samples its
first output token) minus its arrival; its TPOT the mean time between its later tokens,
``(finish - first token) / (output tokens - 1)`` (none with one output token). Its prompt's tokens
come from the engine's pool, from each offload tier, or are recomputed, as found when it was first
admitted (a preempted request's recompute is counted apart). Quantiles interpolate linearly between
order statistics (``numpy.percentile``'s default, as trace_ttft.py's summaries).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True, slots=True)
class RequestResult:
    index: int  # the request's position in the workload given
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None  # None: rejected (it can never fit the pool or, unchunked, the budget)
    tpot_s: float | None  # None: one output token, or rejected
    finish_s: float | None
    pool_hit_tokens: int
    tier_hit_tokens: tuple[int, ...]  # per tier, the layout's order
    recomputed_tokens: int  # prompt tokens computed at its first admission
    preemptions: int = 0
    preempted_recompute_tokens: int = 0  # tokens computed again after preemptions
    gated: bool = False  # the layout's gate kept it off the offload path (Layout.gate_*)

    @property
    def rejected(self) -> bool:
        return self.ttft_s is None


class SimSummary(BaseModel):
    """The aggregates a report prints."""

    model_config = ConfigDict(extra="forbid")

    layout: str
    requests: int
    rejected: int
    steps: int
    duration_s: float  # first arrival to last finish
    busy_fraction: float  # the engine's time in steps over duration_s
    # Each resource's seconds over duration_s (SimResult.busy_by): compute's parts, each tier's link.
    busy_share_by: dict[str, float] = Field(default_factory=dict)
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_mean_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    preemptions: int
    # prompt tokens by source over all prompt tokens: "engine", each tier's kind, "recomputed"
    shares: dict[str, float] = Field(default_factory=dict)


@dataclass(frozen=True)
class SimResult:
    layout: str
    tier_kinds: tuple[str, ...]
    requests: tuple[RequestResult, ...]
    steps: int
    busy_s: float
    start_s: float
    end_s: float
    # The seconds each resource spent, as the engine charged its steps: "prefill" (prompt chunks,
    # attention included), "decode" (decoding sequences and their KV read), "step" (each step's fixed
    # cost and the offload path's per-request cost) and each tier's kind (its loads and stores,
    # blocking or overlapped: an overlapped tier's time can exceed the steps' it hides under).
    busy_by: Mapping[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.duration_s if self.duration_s > 0 else 0.0

    def busy_shares(self) -> dict[str, float]:
        """Each resource's seconds (``busy_by``) over the run's duration."""
        d = self.duration_s
        return {k: v / d for k, v in self.busy_by.items()} if d > 0 else {}

    def ttfts(self) -> list[float]:
        return [r.ttft_s for r in self.requests if r.ttft_s is not None]

    def tpots(self) -> list[float]:
        return [r.tpot_s for r in self.requests if r.tpot_s is not None]

    def ttft_quantile(self, q: float) -> float | None:
        """TTFT at quantile ``q`` (0..1) of the served requests."""
        return quantile(self.ttfts(), q)

    def shares(self) -> dict[str, float]:
        """Each source's share of every prompt token: the pool, each tier, the rest recomputed."""
        total = sum(r.prompt_tokens for r in self.requests)
        served = [r for r in self.requests if not r.rejected]
        by = {"engine": sum(r.pool_hit_tokens for r in served)}
        for k, kind in enumerate(self.tier_kinds):
            by[kind] = by.get(kind, 0) + sum(r.tier_hit_tokens[k] for r in served)
        by["recomputed"] = sum(r.recomputed_tokens for r in served)
        return {k: v / total for k, v in by.items()} if total else {}

    def summary(self) -> SimSummary:
        ttfts, tpots = self.ttfts(), self.tpots()
        return SimSummary(
            layout=self.layout,
            requests=len(self.requests),
            rejected=sum(r.rejected for r in self.requests),
            steps=self.steps,
            duration_s=self.duration_s,
            busy_fraction=self.busy_fraction,
            busy_share_by=self.busy_shares(),
            ttft_p50_s=quantile(ttfts, 0.5),
            ttft_p90_s=quantile(ttfts, 0.9),
            ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else None,
            tpot_p50_s=quantile(tpots, 0.5),
            tpot_p90_s=quantile(tpots, 0.9),
            preemptions=sum(r.preemptions for r in self.requests),
            shares=self.shares(),
        )


def quantile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), 100 * q)) if len(values) else None
