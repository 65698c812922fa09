"""--objective capacity's verdict: the candidate that sustains the highest multiple of the trace's rate,
never one worse than none at the trace's own load (1x) or at its own capacity, and none when no
candidate sustains more than none does."""

from __future__ import annotations

import numpy as np

from kvstack.bench.schema import CorrectnessResult, Distribution, Summary
from kvstack.bench.sweep.schema import Capacity, LayoutSweep, SweepStep
from kvstack.bench.sweep.search import capacity_of
from kvstack.tune.capacity_curve import CandidateCapacity
from kvstack.tune.capacity_verdict import decide_capacity
from kvstack.tune.noise import measure
from kvstack.tune.results import CapacityRow
from kvstack.tune.verdict import MeasuredCandidate

RNG = np.random.default_rng(11)
N = 120
BASE = RNG.uniform(0.02, 0.08, N)  # none's TTFTs on the replay, one in flight
OK = CorrectnessResult(checked=4, passed=4, failed=0, unknown=0)
LADDER = (0.5, 1.0, 2.0, 4.0)


def _summary(ttfts: list[float]) -> Summary:
    a = np.array(ttfts)
    d = Distribution(n=len(a), mean=float(a.mean()), p50=float(np.percentile(a, 50)),
                     p90=float(np.percentile(a, 90)), p99=float(np.percentile(a, 99)), min=float(a.min()),
                     max=float(a.max()))  # fmt: skip
    return Summary(requests=len(a), ok=len(a), errors=0, wall_s=1.0, requests_per_s=len(a),
                   output_tokens_per_s=1.0, prompt_tokens=0, expected_prefix_tokens=0, output_tokens=len(a),
                   ttft_s=d)  # fmt: skip


def curve(label: str, by_load: dict[float, np.ndarray], slo_s: float = 0.2) -> CandidateCapacity:
    """A sweep whose step at each load measured ``by_load[load]`` (a step passes with 90% within)."""
    steps, ttfts = [], []
    for i, load in enumerate(LADDER):
        t = [float(x) for x in by_load[load]]
        share = sum(x <= slo_s for x in t) / len(t)
        steps.append(SweepStep(step=i, origin="ladder", load=load, seed=i, complete=True, summary=_summary(t),
                               within_slo=round(share * len(t)), share_within_slo=share,
                               meets_slo=share >= 0.9))  # fmt: skip
        ttfts.append(list(t))
    sweep = LayoutSweep(
        name=label, base_url="http://x", steps=steps, capacity=Capacity(status="not_measured")
    )
    sweep.capacity = capacity_of([(s.load, s.meets_slo) for s in steps])
    return CandidateCapacity(sweep, ttfts)  # type: ignore[arg-type]


def candidate(label: str, rank: int, replay: np.ndarray, cap: CandidateCapacity | None) -> MeasuredCandidate:
    values = [float(t) for t in replay]
    return MeasuredCandidate(label=label, rank=rank, connector="none" if label == "none" else "lmcache-mp",
                             stats=measure(values, None), ttfts=values, requests=N, ok=N, correctness=OK,
                             capacity=cap)  # fmt: skip


def loads(fast: float, slow: float, knee: float) -> dict[float, np.ndarray]:
    """TTFTs at each load: ``fast`` x BASE up to ``knee``, ``slow`` x beyond (past the SLO)."""
    return {k: BASE * (fast if k <= knee else slow) + RNG.normal(0, 0.001, N) for k in LADDER}


def test_the_candidate_that_sustains_more_of_the_trace_rate_wins() -> None:
    none = candidate("none", 3, BASE, curve("none", loads(1.0, 6.0, 1.0)))
    a = candidate("a", 1, BASE * 0.8, curve("a", loads(0.8, 6.0, 2.0)))
    v = decide_capacity([none, a])
    assert none.capacity is not None and none.capacity.value == 1.0
    assert a.capacity is not None and a.capacity.value == 2.0
    assert v.winner == "a" and v.excluded == {}
    assert v.why.startswith("a: sustains 2x the trace's rate within the SLO against none's 1x")
    assert v.versus_none["a"]["p50@1x"].high < 0 and v.versus_none["a"]["p90@2x"].high < 0


def test_a_candidate_worse_than_none_at_the_traces_own_load_is_out_whatever_its_capacity() -> None:
    none = candidate("none", 3, BASE, curve("none", loads(1.0, 6.0, 1.0)))
    by_load = loads(0.5, 6.0, 4.0)
    by_load[1.0] = BASE * 1.5  # within the SLO at 1x, but half again slower than none there
    a = candidate("a", 1, BASE * 0.9, curve("a", by_load))
    v = decide_capacity([none, a])
    assert v.winner == "none"
    assert v.excluded["a"].startswith("at the trace's own load: its p50 at 1x is worse than none's")


def test_a_candidate_worse_than_none_at_its_own_capacity_is_out() -> None:
    # At 4x none fails the SLO on its slowest fifth but serves the rest fast; the candidate passes at
    # 4x, every request slower than none's median: more capacity, but worse than none at that load.
    by_none = loads(1.0, 1.0, 4.0)
    by_none[4.0] = np.where(np.arange(N) % 5 == 0, 0.5, BASE * 0.5)
    none = candidate("none", 3, BASE, curve("none", by_none))
    by_a = loads(0.9, 0.9, 4.0)
    by_a[4.0] = BASE * 2.5  # 50-200 ms: within the SLO
    a = candidate("a", 1, BASE * 0.9, curve("a", by_a))
    assert none.capacity is not None and none.capacity.value == 2.0
    assert a.capacity is not None and a.capacity.above_ladder
    v = decide_capacity([none, a])
    assert v.winner == "none"
    assert v.excluded["a"].startswith("at its capacity: its p50 at 4x is worse than none's")


def test_none_is_kept_when_nothing_sustains_more() -> None:
    none = candidate("none", 2, BASE, curve("none", loads(1.0, 6.0, 4.0)))
    a = candidate("a", 1, BASE * 0.9, curve("a", loads(0.9, 6.0, 4.0)))
    v = decide_capacity([none, a])
    assert v.winner == "none" and v.excluded == {}
    assert "no candidate sustained more than its capacity, 4x (above the ladder)" in v.why
    assert "raise --sweep-multiples" in v.why


def test_a_capacity_comes_back_from_results_json_unchanged() -> None:
    cap = curve("a", loads(0.8, 6.0, 2.0))
    back = CandidateCapacity.of(CapacityRow.model_validate_json(cap.document().model_dump_json()))
    assert back == cap
    m = candidate("a", 1, BASE, cap)
    assert MeasuredCandidate.of(m.document()) == m
