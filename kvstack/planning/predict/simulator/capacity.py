"""A layout's capacity under an SLO, bisected on the simulator. Pure.

As a load sweep defines it (bench/sweep/stats.py ``within_slo``, ``step_of``): a request is within
the SLO when it was served with TTFT at most ``ttft_s`` and, where asked and it has one, TPOT at
most ``tpot_s`` (a rejected request is outside); a load meets the SLO when at least ``share`` of
its requests are within. Each load is the whole workload replayed from empty caches at
``multiplier`` times its rate (as each sweep step draws fresh prompts: nothing hits an earlier
step's cache).

The capacity is the highest multiplier meeting the SLO: from ``start``, doubled while it meets it
or halved while it does not, until a meeting and a failing multiplier bracket it, then bisected
until the bracket is narrower than ``tolerance`` of its upper end (``(hi - lo) / hi``, the sweep's
``MIN_RATE_GAP`` measure). The search assumes a load that meets the SLO is met by every lower one;
each probe is kept, so a caller can see where that did not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvstack.planning.predict.simulator.engine import simulate
from kvstack.planning.predict.simulator.inputs import Layout, SimRequest
from kvstack.planning.predict.simulator.results import RequestResult, SimResult
from kvstack.planning.predict.simulator.workload import at_multiplier, rate_per_s

SearchStatus = Literal["bracketed", "above_range", "below_range"]


class Slo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)
    share: float = Field(default=0.9, gt=0, le=1)


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    multiplier: float
    share_within: float
    meets: bool
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    busy_fraction: float


class CapacitySearch(BaseModel):
    """The bracket: ``lo`` met the SLO, ``hi`` did not (None beyond the range searched)."""

    model_config = ConfigDict(extra="forbid")

    layout: str
    status: SearchStatus
    lo: float | None  # the capacity, as a multiple of the workload's rate
    hi: float | None
    base_rate_per_s: float  # the workload's own rate (multiplier 1)
    probes: list[Probe] = Field(default_factory=list)  # in the order run

    @property
    def rate_per_s(self) -> float | None:
        return None if self.lo is None else self.lo * self.base_rate_per_s


def within(r: RequestResult, slo: Slo) -> bool:
    if r.ttft_s is None:
        return False
    if slo.ttft_s is not None and r.ttft_s > slo.ttft_s:
        return False
    return slo.tpot_s is None or r.tpot_s is None or r.tpot_s <= slo.tpot_s


def share_within(result: SimResult, slo: Slo) -> float:
    rows = result.requests
    return sum(within(r, slo) for r in rows) / len(rows) if rows else 0.0


def run_at(
    requests: Sequence[SimRequest], layout: Layout, multiplier: float, *, fast_forward: bool = True
) -> SimResult:
    """The workload served at ``multiplier`` times its rate (its TTFT p50 / p90: ``.summary()``)."""
    return simulate(at_multiplier(requests, multiplier), layout, fast_forward=fast_forward)


def probe(
    requests: Sequence[SimRequest], layout: Layout, slo: Slo, multiplier: float, *, fast_forward: bool = True
) -> Probe:
    result = run_at(requests, layout, multiplier, fast_forward=fast_forward)
    share = share_within(result, slo)
    return Probe(
        multiplier=multiplier,
        share_within=share,
        meets=bool(result.requests) and share >= slo.share,
        ttft_p50_s=result.ttft_quantile(0.5),
        ttft_p90_s=result.ttft_quantile(0.9),
        busy_fraction=result.busy_fraction,
    )


def capacity(
    requests: Sequence[SimRequest],
    layout: Layout,
    slo: Slo,
    *,
    start: float = 1.0,
    tolerance: float = 0.1,
    lowest: float = 1 / 1024,
    highest: float = 1024.0,
    fast_forward: bool = True,
) -> CapacitySearch:
    """The highest multiple of the workload's rate at which ``layout`` meets ``slo`` (see the
    module's docstring), searched within [``lowest``, ``highest``]."""
    if not 0 < tolerance < 1 or not 0 < lowest <= start <= highest:
        raise ValueError("0 < tolerance < 1 and 0 < lowest <= start <= highest")
    probes: list[Probe] = []

    def meets(m: float) -> bool:
        p = probe(requests, layout, slo, m, fast_forward=fast_forward)
        probes.append(p)
        return p.meets

    def result(status: SearchStatus, lo: float | None, hi: float | None) -> CapacitySearch:
        return CapacitySearch(
            layout=layout.name,
            status=status,
            lo=lo,
            hi=hi,
            base_rate_per_s=rate_per_s(requests),
            probes=probes,
        )

    lo: float | None = None
    hi: float | None = None
    m = start
    if meets(m):
        lo = m
        while hi is None:
            if lo >= highest:
                return result("above_range", lo, None)
            m = min(highest, lo * 2)
            if meets(m):
                lo = m
            else:
                hi = m
    else:
        hi = m
        while lo is None:
            if hi <= lowest:
                return result("below_range", None, hi)
            m = max(lowest, hi / 2)
            if meets(m):
                lo = m
            else:
                hi = m
    while (hi - lo) / hi > tolerance:
        m = (lo + hi) / 2
        if meets(m):
            lo = m
        else:
            hi = m
    return result("bracketed", lo, hi)
