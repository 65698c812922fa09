"""--objective capacity, the measurement: a proven candidate, once its replay is judged, swept on the
same engine at multiples of the trace's rate, as ``bench --trace --sweep rate:...`` sweeps a layout
(bench/replay/trace_sweep.py: an open loop, each step's blocks from a seed of its own, so no step is served
from the replay or an earlier step; the ladder only, no bisection, so that every candidate is
measured at the same loads and the verdict can pair them at any one of them).

Load 1 is the trace's own clock (the slice's timestamps as recorded), whatever --time-scale paces
the replay before it (tune's default sends it back to back, one in flight)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvstack.bench.replay.trace_bench import Shared
from kvstack.bench.replay.trace_sweep import span_s, sweep_replay, trace_runner
from kvstack.bench.sweep.ladder import LoadLadder
from kvstack.bench.sweep.schema import Capacity, LayoutSweep, Slo, SweepRow
from kvstack.bench.sweep.steps import StepPlan, sweep_steps
from kvstack.errors import InputError
from kvstack.redact import redact_url
from kvstack.serving.served_layout import ServedLayout
from kvstack.traces.mooncake import TraceRow
from kvstack.tune import results
from kvstack.tune.capacity_curve import CandidateCapacity, step_ttfts
from kvstack.tune.measure import CandidateReplay


@dataclass(frozen=True)
class CapacityRequest:
    ladder: LoadLadder  # x trace rate, 1 in it
    slo: Slo
    seed: int  # step i's blocks from seed + i (the replay before the sweep used the seed before it)
    trace_rate_per_s: float  # load 1 as requests/s: the replayed slice's own rate
    span_s: float  # the slice's first to last arrival at load 1

    @property
    def sweep_s(self) -> float:
        """About how long a candidate's sweep sends for: the slice's span at every load."""
        return sum(self.span_s / k for k in self.ladder.loads)

    def setup(self) -> results.CapacitySetup:
        return results.CapacitySetup(
            slo=self.slo, multiples=list(self.ladder.loads), seed=self.seed,
            trace_rate_per_s=self.trace_rate_per_s,
        )  # fmt: skip


def capacity_request(
    ladder: LoadLadder, slo: Slo, seed: int, rows: Sequence[TraceRow], path: str
) -> CapacityRequest:
    """The sweep each candidate gets; InputError when the replayed slice spans no time (no rate)."""
    span = span_s(arrivals(rows))
    if len(rows) < 2 or span <= 0:
        raise InputError(
            f"--objective capacity: the replayed slice of {path} ({len(rows)} requests) spans no time, "
            "so it has no rate to take multiples of",
            hint="replay more of the trace (--replay-requests) or a trace with timestamps",
        )
    return CapacityRequest(ladder, slo, seed, (len(rows) - 1) / span, span)


def arrivals(rows: Sequence[TraceRow]) -> list[float]:
    """Each row's arrival on the trace's own clock, seconds after the first."""
    t0 = min((r.timestamp_ms for r in rows), default=0.0)
    return [(r.timestamp_ms - t0) / 1000 for r in rows]


def clocked(shared: Shared, rows: Sequence[TraceRow]) -> Shared:
    """What the replay sent, on the trace's own clock (``SentRequest.line``: its row in ``rows``)."""
    at = arrivals(rows)
    return shared.on_clock([at[s.line] for s in shared.sent])


def measure_capacity(
    layout: ServedLayout, setup: CandidateReplay, shared: Shared, req: CapacityRequest
) -> CandidateCapacity:
    """The candidate served at ``layout`` swept at ``req``'s multiples of the trace's rate."""
    lay = LayoutSweep(
        name=layout.name, base_url=redact_url(layout.base_url), capacity=Capacity(status="not_measured")
    )
    rows: list[SweepRow] = []
    model = layout.served_model or setup.model
    runner = trace_runner(
        layout, sweep_replay(setup.args), clocked(shared, setup.rows), model, setup.api_key, setup.timeout_s
    )
    sweep_steps(lay, StepPlan(req.ladder, 0, req.slo, req.seed), runner, rows)
    by_step: dict[int, dict[int, float | None]] = {}
    for r in rows:
        by_step.setdefault(r.step, {})[r.index] = r.ttft_s if r.ok else None
    return CandidateCapacity(lay, step_ttfts(lay, by_step))
