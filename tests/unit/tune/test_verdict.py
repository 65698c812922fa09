"""The verdict on the candidates measured: none unless a candidate beats it beyond the noise, never
one whose p50 or p90 is worse than none's beyond the noise, never one that serves wrong KV; and
where the model ranked two candidates in the wrong order."""

from __future__ import annotations

import numpy as np
import pytest

from kvstack.bench.schema import CorrectnessResult
from kvstack.tune.noise import measure
from kvstack.tune.verdict import MeasuredCandidate, decide, inversions

RNG = np.random.default_rng(7)
N = 200
# none: every request's own TTFT, 20-200 ms across the trace, with ~1 ms of jitter.
BASE = RNG.uniform(0.02, 0.2, N)
OK = CorrectnessResult(checked=4, passed=4, failed=0, unknown=0)


def candidate(label: str, rank: int, ttfts: np.ndarray, **kw: object) -> MeasuredCandidate:
    values = [float(t) for t in ttfts]
    fields: dict[str, object] = {
        "label": label,
        "rank": rank,
        "connector": "none" if label == "none" else "lmcache-mp",
        "stats": measure(values, kw.pop("slo_s", None)),  # type: ignore[arg-type]
        "ttfts": values,
        "requests": N,
        "ok": N,
        "correctness": OK,
    }
    fields.update(kw)
    return MeasuredCandidate(**fields)  # type: ignore[arg-type]


def jitter() -> np.ndarray:
    return RNG.normal(0, 0.001, N)


def test_a_candidate_better_at_the_median_but_worse_at_the_tail_is_never_picked() -> None:
    none = candidate("none", 5, BASE + jitter())
    # Offload: 10 ms off every request, but the longest tenth pay 80 ms more (a slow tier).
    slow_tail = np.where(np.percentile(BASE, 85) < BASE, 0.08, -0.01)
    tail = candidate("a", 1, BASE + slow_tail + jitter())
    v = decide([none, tail], "p50")
    assert v.winner == "none"
    assert v.excluded["a"].startswith("measured p90 is worse than none's beyond the noise: +")
    assert v.versus_none["a"]["p50"].high < 0 < v.versus_none["a"]["p90"].low
    assert "every other candidate measured is out (1)" in v.why and "p90" in v.why


def test_none_is_kept_when_no_candidate_beats_it_beyond_the_noise() -> None:
    none = candidate("none", 2, BASE + jitter())
    same = candidate("a", 1, BASE + RNG.normal(0, 0.02, N))  # no better, only noisier
    v = decide([none, same], "p50")
    assert v.winner == "none" and v.excluded == {}
    assert v.why.startswith("none: no candidate beat its measured p50") and "(the best, a," in v.why


def test_the_winner_is_the_best_by_the_objective_of_those_that_beat_none() -> None:
    none = candidate("none", 3, BASE + jitter())
    fast = candidate("a", 1, BASE * 0.5 + jitter())
    faster_median = candidate("b", 2, BASE * 0.4 + jitter())
    v = decide([none, fast, faster_median], "p50")
    assert none.stats is not None and faster_median.stats is not None
    factor = none.stats.p50.value / faster_median.stats.p50.value
    assert v.winner == "b" and v.why.startswith("b: measured p50 ") and f"({factor:.2f}x; -" in v.why
    # The model ranked a above b, and b measured better beyond the noise: said so.
    (inv,) = [i for i in v.inversions if i.above == "a"]
    assert (inv.above, inv.below, inv.beyond_noise) == ("a", "b", True)
    assert all(i.below != "none" for i in inversions([none, fast, faster_median], "p50", None))


def test_wrong_kv_failed_requests_and_an_engine_that_did_not_start_are_out_whatever_their_speed() -> None:
    none = candidate("none", 4, BASE + jitter())
    wrong = CorrectnessResult(checked=4, passed=3, failed=1, unknown=0)
    fast = BASE * 0.3 + jitter()
    cands = [
        none,
        candidate("wrong", 1, fast, correctness=wrong),
        candidate(
            "unchecked", 2, fast, correctness=CorrectnessResult(checked=0, passed=0, failed=0, unknown=0)
        ),
        candidate("flaky", 3, fast, ok=N - 3),
        MeasuredCandidate("dead", 5, "lmcache-mp", error="lmcache-server exited with code 1"),
    ]
    v = decide(cands, "p50")
    assert v.winner == "none"
    assert v.excluded["wrong"].startswith("serves wrong KV: 1 of 4 cached answers differ from recompute")
    assert v.excluded["unchecked"] == "serves wrong KV: no cached answer was checked"
    assert v.excluded["flaky"] == f"3 of {N} requests of its replay failed"
    assert v.excluded["dead"] == "not measured: lmcache-server exited with code 1"


def test_goodput_counts_the_requests_within_the_slo_higher_is_better() -> None:
    slo = 0.1
    none = candidate("none", 2, BASE + jitter(), slo_s=slo)
    more = candidate("a", 1, np.minimum(BASE, 0.099) + 0 * jitter(), slo_s=slo)
    v = decide([none, more], "goodput", slo)
    assert v.winner == "a" and "measured goodput 100.0%" in v.why
    with pytest.raises(ValueError, match="not measured"):
        decide([more], "p50")
