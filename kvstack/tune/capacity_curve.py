"""--objective capacity, the data: one candidate's sweep on the user's trace (bench --sweep's steps and
capacity, in x trace rate) and each step's TTFT per request, which the verdict pairs with none's.
Pure: made by tune/capacity.py, judged by tune/capacity_verdict.py, kept in results.json."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvstack.bench.sweep.schema import LayoutSweep, SweepStep
from kvstack.tune import results


@dataclass(frozen=True)
class CandidateCapacity:
    sweep: LayoutSweep
    # Per step of ``sweep.steps`` (same order): the TTFT of each request sent, by index (None: failed).
    step_ttfts: list[list[float | None]] = field(default_factory=list)

    @property
    def value(self) -> float:
        """The capacity as a multiple of the trace's rate: 0 where even the lowest step failed or
        none completed; the ladder's top where none failed (a lower bound then)."""
        load = self.sweep.capacity.load
        return load if load is not None else 0.0

    @property
    def above_ladder(self) -> bool:
        return self.sweep.capacity.status == "above_ladder"

    def step(self, load: float) -> tuple[SweepStep, list[float | None]] | None:
        """The complete step at ``load`` and its TTFTs (None: no such step completed)."""
        for s, ttfts in zip(self.sweep.steps, self.step_ttfts, strict=False):
            if s.load == load and s.complete:
                return s, ttfts
        return None

    def document(self) -> results.CapacityRow:
        return results.CapacityRow(sweep=self.sweep, step_ttft_s=self.step_ttfts)

    @classmethod
    def of(cls, doc: results.CapacityRow) -> CandidateCapacity:
        return cls(doc.sweep, [list(t) for t in doc.step_ttft_s])


def step_ttfts(
    sweep: LayoutSweep, ttft_by_step: dict[int, dict[int, float | None]]
) -> list[list[float | None]]:
    """Per step of ``sweep``, the TTFTs of its requests in the order sent (``ttft_by_step``: step ->
    request index -> TTFT, None when it failed)."""
    out: list[list[float | None]] = []
    for s in sweep.steps:
        got = ttft_by_step.get(s.step, {})
        out.append([got.get(i) for i in range(max(got, default=-1) + 1)])
    return out
