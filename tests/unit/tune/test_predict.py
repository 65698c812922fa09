"""The prediction: each candidate served the trace on the step-level simulator, with the served
engine's costs, as tune's replay sends it."""

from __future__ import annotations

import pytest

from kvstack.planning.predict.served_ttft import ServedCosts
from kvstack.traces.mooncake import TraceRow
from kvstack.tune.options import Objective
from kvstack.tune.predict import Costs, Sent, SimTrace, predict
from kvstack.tune.ranking import rank
from kvstack.tune.space import Candidate, Gate, Limits

from .helpers import KIB

GIB = 1 << 30
BT = 16  # the engine's block and the trace's
HIT, LINEAR, EXTRA = 0.005, 1.0e-4, 0.010  # a whole-prompt hit, a recomputed token, the offload path
PLAIN = ServedCosts(HIT, 0.0, LINEAR, 0.0, {}, "test")
COSTS = Costs(PLAIN, ServedCosts(HIT + EXTRA, 0.0, LINEAR, 0.0, {"dram": 0.0}, "test"))
LIMITS = Limits("cpu", BT, 1024, KIB, GIB, batched_tokens=2048, max_seqs=128)
NONE, OFFLOAD = Candidate("none"), Candidate("lmcache-mp", 256, GIB)


def _row(t_s: float, ids: list[int]) -> TraceRow:
    return TraceRow(t_s * 1000, len(ids) * BT, 1, ids)


def _traffic(groups: int = 40, every_s: float = 0.5) -> list[TraceRow]:
    """Each ``every_s``: one long prompt (3,968 tokens every one shares, 128 of its own), then three
    short ones of 1,024 tokens of their own. The pool (the longest prompt's 257 blocks) keeps only
    the long prefix's first 65 blocks past the short ones; a DRAM tier keeps all of it. Alone,
    three in four prompts are short and none serves them 10 ms faster (no offload path); the long
    ones cost none 0.3 s of engine time, offload 13 ms, so at this rate none cannot keep up."""
    rows, own = [], 10_000
    for g in range(groups):
        t = g * every_s
        rows.append(_row(t, [*range(248), *range(own, own + 8)]))
        own += 8
        for k in range(1, 4):
            rows.append(_row(t + k * every_s / 4, list(range(own, own + 64))))
            own += 64
    return rows


def _ranked(sent: Sent, objective: Objective = "p50", slo_s: float | None = None) -> list[str]:
    trace = SimTrace(_traffic(), block_tokens=BT, limits=LIMITS, sent=sent)
    return [p.candidate.label for p in rank(trace, [NONE, OFFLOAD], COSTS, objective, slo_s=slo_s)]


def test_one_at_a_time_a_request_costs_its_step_and_its_recompute() -> None:
    trace = SimTrace(_traffic(2), block_tokens=BT, limits=LIMITS)  # the replay's: one in flight
    none, off = trace.simulate(NONE, COSTS), trace.simulate(OFFLOAD, COSTS)
    # No decode figure: the step is the whole-prompt hit; a prompt is computed in 2,048-token steps.
    assert none.ttft[1] == pytest.approx(HIT + LINEAR * 1024)
    assert none.ttft[0] == pytest.approx(2 * HIT + LINEAR * 4096)  # two steps of the budget
    # The long prompt again: the pool kept its first 65 blocks (257 less the short prompts' 192),
    # the tier the rest of its 15 whole chunks.
    assert (none.engine[4], none.dram[4]) == (65 * BT, 0)
    assert (off.engine[4], off.dram[4]) == (65 * BT, 15 * 256 - 65 * BT)
    assert off.ttft[4] == pytest.approx(HIT + EXTRA + LINEAR * (4096 - 15 * 256))
    assert off.ttft[1] == pytest.approx(none.ttft[1] + EXTRA)  # a short prompt pays the path
    p = predict(trace, OFFLOAD, COSTS, slo_s=0.2)
    assert sum(p.tokens.values()) == int(trace.lengths.sum()) and p.tokens["dram"] > 0
    assert p.under_slo == pytest.approx(float((off.ttft <= 0.2).mean()))


def test_the_trace_s_load_ranks_what_one_request_at_a_time_does_not() -> None:
    # One at a time (the replay's concurrency): none wins the median (three in four prompts short).
    assert _ranked(Sent(1.0, 1, 1)) == ["none", OFFLOAD.label]
    # On the trace's own arrivals, as many in flight as come, none's long prompts queue every request
    # behind them: offload wins the median too. A per-request TTFT model ranks none first both times.
    assert _ranked(Sent(1.0, 1, None)) == [OFFLOAD.label, "none"]
    assert _ranked(Sent(1.0, 1, None), "goodput", slo_s=0.2) == [OFFLOAD.label, "none"]


def test_goodput_is_the_share_within_the_slo() -> None:
    trace = SimTrace(_traffic(), block_tokens=BT, limits=LIMITS, sent=Sent(1.0, 1, None))
    none, off = predict(trace, NONE, COSTS, slo_s=0.2), predict(trace, OFFLOAD, COSTS, slo_s=0.2)
    assert none.under_slo is not None and off.under_slo is not None
    assert off.under_slo > none.under_slo
    assert off.loss("goodput") == pytest.approx(1 - off.under_slo)


def test_a_gate_sends_what_it_keeps_off_down_the_plain_path() -> None:
    trace = SimTrace(_traffic(4), block_tokens=BT, limits=LIMITS)
    gated = Candidate("lmcache-mp", 256, GIB, gate=Gate("prompt", 2048))
    g, off, none = (trace.simulate(c, COSTS) for c in (gated, OFFLOAD, NONE))
    short = trace.lengths < 2048
    assert list(g.gated) == list(short)
    assert g.ttft[short] == pytest.approx(none.ttft[short])  # no offload path, as none
    assert g.ttft[~short] == pytest.approx(off.ttft[~short])  # the long ones: the tier's hits
    assert predict(trace, gated, COSTS).gated == int(short.sum())
    # A load gate: a request the tier would serve fewer tokens than it recomputes them.
    load = trace.simulate(Candidate("lmcache", 256, GIB, gate=Gate("load", 10_000)), COSTS)
    assert load.dram.sum() == 0 and load.gated[4]


def test_measured_decode_makes_the_step_and_the_rest_of_a_hit_is_outside_it() -> None:
    costs = Costs(
        ServedCosts(HIT, 0.0, LINEAR, 0.0, {}, "test", decode_fixed_s=0.002, decode_per_seq_s=1e-4),
        COSTS.default,
    )
    trace = SimTrace(_traffic(1), block_tokens=BT, limits=LIMITS)
    layout = trace.layout(NONE, costs)
    assert layout.costs.fixed_s == 0.002 and layout.costs.decode_s_per_seq == 1e-4
    assert layout.outside_s == pytest.approx(HIT - 0.002)
    # The 4,096-token prompt: two steps of 2 ms (not two whole-prompt hits) and the rest outside.
    assert trace.simulate(NONE, costs).ttft[0] == pytest.approx(HIT + 0.002 + LINEAR * 4096)
