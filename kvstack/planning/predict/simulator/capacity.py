"""A layout's capacity under an SLO, bisected on the simulator. Pure.

As a load sweep defines it (bench/sweep/stats.py ``within_slo``, ``step_of``): a request is within
the SLO when it was served with TTFT at most ``ttft_s`` and, where asked and it has one, TPOT at
most ``tpot_s`` (a rejected request is outside); a load meets the SLO when at least ``share`` of
its requests are within. Each load is the whole workload replayed from empty caches at
``multiplier`` times its rate (as each sweep step draws fresh prompts: nothing hits an earlier
step's cache).

Two options a planner's steady state asks for (plan --slo-ttft, planning/predict/plan_capacity.py):
``warmup`` requests (the workload's first, by index) warm the caches and are not counted; and with
``keep_up`` a load must also not leave a growing backlog: the counted requests' last finish comes at
most ``keep_up`` of their arrival span (plus ``drain_s``, one request's own residence) after their
last arrival (a finite replay of an overloaded engine can hold its TTFT within the SLO while its
queue grows; this is where the queue shows).

The capacity is the highest multiplier meeting the SLO: from ``start``, doubled while it meets it
or halved while it does not, until a meeting and a failing multiplier bracket it, then bisected
until the bracket is narrower than ``tolerance`` of its upper end (``(hi - lo) / hi``, the sweep's
``MIN_RATE_GAP`` measure). The search assumes a load that meets the SLO is met by every lower one;
each probe is kept, so a caller can see where that did not hold. With ``closed`` the load is a
number of clients in a closed loop (a ``concurrency:`` sweep's steps; engine.py ``simulate``).
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
    kept_up: bool = True  # the keep_up test (True without one)


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


def share_within(result: SimResult, slo: Slo, warmup: int = 0) -> float:
    """The share of the requests after the first ``warmup`` (by index) within ``slo``."""
    rows = [r for r in result.requests if r.index >= warmup]
    return sum(within(r, slo) for r in rows) / len(rows) if rows else 0.0


def kept_up(result: SimResult, keep_up: float, drain_s: float = 0.0, warmup: int = 0) -> bool:
    """Whether the requests after the first ``warmup`` were all served within ``keep_up`` of their
    arrival span plus ``drain_s`` after their last arrival (see the module's docstring)."""
    rows = [r for r in result.requests if r.index >= warmup]
    if not rows or any(r.finish_s is None for r in rows):
        return False
    first = min(r.arrival_s for r in rows)
    last = max(r.arrival_s for r in rows)
    end = max(r.finish_s for r in rows if r.finish_s is not None)
    return end - last <= keep_up * (last - first) + drain_s


def run_at(
    requests: Sequence[SimRequest],
    layout: Layout,
    multiplier: float,
    *,
    fast_forward: bool = True,
    closed: bool = False,
) -> SimResult:
    """The workload served at ``multiplier`` times its rate (its TTFT p50 / p90: ``.summary()``);
    ``closed``: by ``multiplier`` clients in a closed loop instead (engine.py ``simulate``)."""
    if closed:
        return simulate(requests, layout, fast_forward=fast_forward, clients=max(1, round(multiplier)))
    return simulate(at_multiplier(requests, multiplier), layout, fast_forward=fast_forward)


def probe(
    requests: Sequence[SimRequest],
    layout: Layout,
    slo: Slo,
    multiplier: float,
    *,
    fast_forward: bool = True,
    warmup: int = 0,
    keep_up: float | None = None,
    drain_s: float = 0.0,
    closed: bool = False,
) -> Probe:
    result = run_at(requests, layout, multiplier, fast_forward=fast_forward, closed=closed)
    share = share_within(result, slo, warmup)
    kept = keep_up is None or kept_up(result, keep_up, drain_s, warmup)
    return Probe(
        multiplier=multiplier,
        share_within=share,
        meets=len(result.requests) > warmup and share >= slo.share and kept,
        ttft_p50_s=result.ttft_quantile(0.5),
        ttft_p90_s=result.ttft_quantile(0.9),
        busy_fraction=result.busy_fraction,
        kept_up=kept,
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
    warmup: int = 0,
    keep_up: float | None = None,
    drain_s: float = 0.0,
    closed: bool = False,
) -> CapacitySearch:
    """The highest multiple of the workload's rate at which ``layout`` meets ``slo`` (see the
    module's docstring), searched within [``lowest``, ``highest``]; ``base_rate_per_s`` is the
    counted requests' rate (those after the first ``warmup``). ``closed``: the highest number of
    clients in a closed loop instead (a sweep's ``concurrency:`` steps), whole numbers from 1, the
    bracket bisected until its ends are adjacent or within ``tolerance``; ``base_rate_per_s`` 1."""
    if not 0 < tolerance < 1 or not 0 < lowest <= start <= highest:
        raise ValueError("0 < tolerance < 1 and 0 < lowest <= start <= highest")
    if closed:
        start, lowest, highest = max(1, round(start)), 1, max(1, round(highest))
    probes: list[Probe] = []

    def meets(m: float) -> bool:
        p = probe(
            requests,
            layout,
            slo,
            m,
            fast_forward=fast_forward,
            warmup=warmup,
            keep_up=keep_up,
            drain_s=drain_s,
            closed=closed,
        )
        probes.append(p)
        return p.meets

    def result(status: SearchStatus, lo: float | None, hi: float | None) -> CapacitySearch:
        return CapacitySearch(
            layout=layout.name,
            status=status,
            lo=lo,
            hi=hi,
            base_rate_per_s=1.0 if closed else rate_per_s(requests[warmup:] if warmup else requests),
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
            m = max(lowest, hi // 2 if closed else hi / 2)
            if meets(m):
                lo = m
            else:
                hi = m
    while (hi - lo) / hi > tolerance and not (closed and hi - lo <= 1):
        m = (lo + hi) // 2 if closed else (lo + hi) / 2
        if meets(m):
            lo = m
        else:
            hi = m
    return result("bracketed", lo, hi)
