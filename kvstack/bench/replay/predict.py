"""Predicted vs measured: simulate exactly the requests a replay sent on the sizes the servers report.

The simulation is planning's (``planning.predict.capacity.simulate_hierarchy``): each level an LRU over
what it sees, inclusive as LMCache's write-through tiers are, and without copying an L2 hit back
into L1 where LMCache does not (``bench.replay.sizes.lmcache_hierarchy``). Measured shares come from the
servers' counters (``clients.token_sources``), so the two columns answer the same question: of all
prompt tokens sent, what share did each tier serve?
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvstack.bench.replay import results
from kvstack.bench.replay.prompts import SentRequest
from kvstack.bench.replay.sizes import Hierarchy
from kvstack.clients import token_sources
from kvstack.clients.token_sources import MeasuredSources
from kvstack.planning.predict.capacity import simulate_hierarchy

TIERS: tuple[str, ...] = token_sources.CACHE_ORDER


@dataclass(frozen=True)
class TierRow:
    tier: str
    predicted: float | None  # share of prompt tokens
    measured: float | None

    @property
    def gap_points(self) -> float | None:
        if self.predicted is None or self.measured is None:
            return None
        return (self.measured - self.predicted) * 100

    def document(self) -> results.TierShare:
        return results.TierShare(
            tier=self.tier, predicted=self.predicted, measured=self.measured, gap_points=self.gap_points
        )


@dataclass(frozen=True)
class TierPrediction:
    """What each tier of one served layout is predicted to serve of the prompt tokens a replay sent."""

    layout: str
    hierarchy: Hierarchy
    prompt_tokens: int
    predicted_tokens: dict[str, int] = field(default_factory=dict)
    per_request: dict[str, list[int]] = field(default_factory=dict)  # tier -> tokens per sent request

    def rows(
        self, measured_tokens: dict[str, float], measured_total: float, predicted: bool = True
    ) -> list[TierRow]:
        """A row per tier simulated or measured (a tier only measured has no predicted share)."""
        out: list[TierRow] = []
        for tier in TIERS:
            simulated = predicted and tier in self.predicted_tokens
            if not simulated and not measured_tokens.get(tier):
                continue
            share = (
                self.predicted_tokens[tier] / self.prompt_tokens if simulated and self.prompt_tokens else None
            )
            measured = measured_tokens.get(tier, 0.0) / measured_total if measured_total > 0 else None
            out.append(TierRow(tier, share, measured))
        return out


def predict(
    layout: str, sent: Sequence[SentRequest], hierarchy: Hierarchy, block_tokens: int
) -> TierPrediction:
    """What each level of ``hierarchy`` serves of ``sent``, in the order they were sent."""
    requests = [s.as_trace() for s in sent]
    total = sum(s.prompt_tokens for s in sent)
    if not hierarchy.levels:
        return TierPrediction(layout, hierarchy, total, {token_sources.RECOMPUTED: total}, {})
    result = simulate_hierarchy(
        requests,
        [lv.blocks for lv in hierarchy.levels],
        inclusive=hierarchy.inclusive,
        block_tokens=block_tokens,
        unit_tokens=[lv.unit_tokens for lv in hierarchy.levels],
        readmit=hierarchy.readmit,
    )
    tokens = {lv.tier: int(hit) for lv, hit in zip(hierarchy.levels, result.hit_tokens, strict=True)}
    tokens[token_sources.RECOMPUTED] = result.recomputed_tokens
    per_request = {lv.tier: list(rows) for lv, rows in zip(hierarchy.levels, result.per_request, strict=True)}
    return TierPrediction(layout, hierarchy, total, tokens, per_request)


def comparison(
    prediction: TierPrediction,
    measured: MeasuredSources,
    measured_from: str,
    no_prediction: str | None = None,
    ttft: results.TtftCheck | None = None,
) -> results.LayoutComparison:
    """results.json's per-layout comparison: sizes simulated, both columns, the gap per tier.
    ``no_prediction``: why the simulation cannot stand for this layout (its tiers are unknown):
    the measured column alone, and the reason."""
    tokens = measured.tokens
    total = sum(tokens.values())
    rows = prediction.rows(tokens, total, predicted=no_prediction is None)
    gaps = [abs(r.gap_points) for r in rows if r.gap_points is not None]
    return results.LayoutComparison(
        layout=prediction.layout,
        hierarchy=prediction.hierarchy.document(),
        prompt_tokens_sent=prediction.prompt_tokens,
        prompt_tokens_measured=total,
        predicted_tokens=prediction.predicted_tokens if no_prediction is None else {},
        measured_tokens=tokens,
        tiers=[r.document() for r in rows],
        max_gap_points=max(gaps) if gaps else None,
        no_prediction=no_prediction,
        measured_derived=measured.derived,
        measured_from=measured_from,
        ttft=ttft,
    )
