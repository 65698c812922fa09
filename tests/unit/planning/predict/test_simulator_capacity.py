"""planning/predict/simulator/capacity.py: the sweep's SLO on the simulator and the capacity
bisected on it, against a capacity worked out by hand.

The workload: N requests one second apart on the workload's own clock, each one 64-token step
(``s = fixed + 64 x lin``) under a 64-token budget, so the engine serves one a step. At ``m`` times
the rate they arrive ``d = 1 / m`` apart; once ``d < s`` they queue, request ``k`` (from 0) waiting
for the ``k`` before it: ``TTFT_k = (k + 1) s - k d``. With TTFT <= ``slo`` asked of ``share`` of
them, the first ``ceil(share x N)`` must meet it, the last of those, ``k = K``, binding:
``(K + 1) s - K d <= slo``, so ``d >= s - (slo - s) / K`` and the capacity is ``1 / d`` at that."""

from __future__ import annotations

import math

import pytest

from kvstack.planning.predict.simulator import (
    Layout,
    SchedulerLimits,
    SimRequest,
    Slo,
    StepCosts,
    capacity,
    kept_up,
    probe,
    run_at,
    share_within,
    simulate,
)

FIXED, LIN, N = 0.01, 0.001, 10
S = FIXED + 64 * LIN
LAYOUT = Layout(
    costs=StepCosts(fixed_s=FIXED, prefill_s_per_token=LIN, decode_s_per_seq=0.0),
    limits=SchedulerLimits(max_num_batched_tokens=64, max_num_seqs=4, block_tokens=16, pool_blocks=1000),
)
WORK = [SimRequest(float(k), 64, 1, tuple(range(4 * k, 4 * k + 4)), 16) for k in range(N)]


def by_hand(slo_s: float, share: float) -> float:
    last = math.ceil(share * N) - 1  # K
    return 1 / (S - (slo_s - S) / last)


def test_queued_requests_wait_for_those_before_them() -> None:
    d = 0.05  # < S: every request waits
    res = run_at(WORK, LAYOUT, 1 / d)
    for k, r in enumerate(res.requests):
        assert r.ttft_s == pytest.approx((k + 1) * S - k * d)


@pytest.mark.parametrize(("slo_s", "share"), [(1.5 * S, 0.9), (3 * S, 0.9), (3 * S, 0.5)])
def test_capacity_brackets_the_hand_worked_figure_within_ten_percent(slo_s: float, share: float) -> None:
    slo = Slo(ttft_s=slo_s, share=share)
    found = capacity(WORK, LAYOUT, slo)
    expected = by_hand(slo_s, share)
    assert found.status == "bracketed" and found.lo is not None and found.hi is not None
    assert found.lo <= expected < found.hi
    assert (found.hi - found.lo) / found.hi <= 0.1
    assert probe(WORK, LAYOUT, slo, found.lo).meets and not probe(WORK, LAYOUT, slo, found.hi).meets
    assert found.rate_per_s == pytest.approx(found.lo * 1.0)  # the workload's own rate: 1 a second


def test_capacity_is_monotone_in_the_slo_and_the_share_in_the_load() -> None:
    tight, loose = Slo(ttft_s=1.5 * S), Slo(ttft_s=3 * S)
    lo_tight, lo_loose = capacity(WORK, LAYOUT, tight).lo, capacity(WORK, LAYOUT, loose).lo
    assert lo_tight is not None and lo_loose is not None and lo_tight < lo_loose
    shares = [share_within(run_at(WORK, LAYOUT, m), loose) for m in (1, 5, 10, 15, 20, 40)]
    assert shares == sorted(shares, reverse=True) and shares[0] == 1.0 and shares[-1] < 0.9


def test_a_layout_meeting_the_slo_at_every_rate_searched_is_above_the_range() -> None:
    found = capacity(WORK, LAYOUT, Slo(ttft_s=100.0), highest=8.0)
    assert (found.status, found.lo, found.hi) == ("above_range", 8.0, None)
    assert [p.multiplier for p in found.probes] == [1.0, 2.0, 4.0, 8.0]


def test_a_slo_below_an_idle_engines_ttft_is_below_the_range() -> None:
    found = capacity(WORK, LAYOUT, Slo(ttft_s=S / 2), lowest=0.25)
    assert (found.status, found.lo, found.hi) == ("below_range", None, 0.25)


def test_a_rejected_request_is_outside_the_slo_and_tpot_counts_where_asked() -> None:
    lim = SchedulerLimits(max_num_batched_tokens=64, max_num_seqs=4, block_tokens=16, pool_blocks=4)
    lay = Layout(costs=LAYOUT.costs, limits=lim)
    work = [SimRequest(0.0, 64, 1, (0, 1, 2, 3), 16), SimRequest(5.0, 200, 1, tuple(range(10, 23)), 16)]
    res = simulate(work, lay)
    assert share_within(res, Slo(ttft_s=1.0)) == 0.5  # the 200-token one cannot fit 4 blocks
    decoding = Layout(costs=LAYOUT.costs.model_copy(update={"decode_s_per_seq": 0.05}), limits=LAYOUT.limits)
    res = simulate([SimRequest(0.0, 64, 3, (0, 1, 2, 3), 16)], decoding)  # TPOT = fixed + 0.05
    assert share_within(res, Slo(ttft_s=1.0, tpot_s=0.07)) == 1.0
    assert share_within(res, Slo(ttft_s=1.0, tpot_s=0.05)) == 0.0


def test_warmups_are_not_counted_and_the_rate_is_the_counted_requests() -> None:
    """Two 640-token warm-ups first (ten steps each: 740 ms alone, over a 300 ms SLO), then the ten a
    second apart: counted, 10 of 12 meet it (under 90%); left out, the ten's own verdicts decide, at
    their own rate."""
    warm = [SimRequest(k * 5.0, 640, 1, tuple(range(9000 + 40 * k, 9040 + 40 * k)), 16) for k in range(2)]
    work = warm + [SimRequest(r.arrival_s + 20.0, r.prompt_tokens, 1, r.prefix_ids, 16) for r in WORK]
    slo = Slo(ttft_s=0.3, share=0.9)
    counted = probe(work, LAYOUT, slo, 1.0)
    assert counted.share_within == pytest.approx(10 / 12) and not counted.meets
    assert probe(work, LAYOUT, slo, 1.0, warmup=2).meets
    search = capacity(work, LAYOUT, slo, warmup=2)
    assert search.base_rate_per_s == pytest.approx(1.0)  # the ten, a second apart


def test_an_engine_that_does_not_keep_up_fails_the_load() -> None:
    """At 100 requests/s the ten queue: the last is done 10 s - 9 d after its arrival, d = 10 ms."""
    d = 0.01
    result = run_at(WORK, LAYOUT, 1 / d)
    drain = N * S - (N - 1) * d
    assert max(r.finish_s for r in result.requests if r.finish_s is not None) - 9.0 * d == pytest.approx(
        drain
    )
    assert kept_up(result, 0.0, drain + 1e-9) and not kept_up(result, 0.0, drain - 1e-6)
    assert kept_up(result, (drain - 0.001) / (9 * d), 0.001 + 1e-9)
    loose = Slo(ttft_s=10.0, share=0.9)
    assert probe(WORK, LAYOUT, loose, 1 / d).meets
    held = probe(WORK, LAYOUT, loose, 1 / d, keep_up=0.25, drain_s=0.0)
    assert not held.meets and not held.kept_up


def test_a_closed_loops_capacity_is_the_most_clients_meeting_the_slo() -> None:
    # c clients: the engine serves one a step, so a request waits for the c - 1 sent before it:
    # TTFT c x S at most. Under TTFT <= 3.5 S, 3 clients meet it and 4 do not.
    slo = Slo(ttft_s=3.5 * S, share=1.0)
    assert max(r.ttft_s or 0.0 for r in run_at(WORK, LAYOUT, 4, closed=True).requests) == pytest.approx(4 * S)
    search = capacity(WORK, LAYOUT, slo, closed=True)
    assert (search.status, search.lo, search.hi, search.base_rate_per_s) == ("bracketed", 3, 4, 1.0)
    assert [p.multiplier for p in search.probes] == [1, 2, 4, 3]
    assert capacity(WORK, LAYOUT, Slo(ttft_s=0.5 * S), closed=True).status == "below_range"
