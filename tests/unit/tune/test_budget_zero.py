"""`tune --budget 0`: the choice is the simulator's alone, after the calibration (no engine)."""

from __future__ import annotations

from pathlib import Path

from kvstack.bench.replay.served_calibration import served_calibration_from
from kvstack.planning.predict.trace_sizing import OFFLOAD_REQUEST_COST_S
from kvstack.tune.predict import Costs, Sent, SimTrace, predict
from kvstack.tune.tune import read_basis

from .helpers import options, read, tune


def test_budget_0_picks_the_simulator_s_best_as_the_replay_would_send_the_trace(tmp_path: Path) -> None:
    o = options(tmp_path, 128, budget="0", knob=[])
    run = tune(o)
    assert run.proof is None and run.result.winner is run.result.ranked[0]
    assert o.calibration is not None
    cal = served_calibration_from(o.calibration)
    costs = Costs(cal.plain, cal.offload_costs(OFFLOAD_REQUEST_COST_S, {}))
    # The trace served as the replay sends it: one request at a time, outputs cut as asked.
    basis = read_basis(o, read(o))
    sim = SimTrace(
        basis.requests, block_tokens=basis.block_tokens, limits=run.result.limits,
        sent=Sent(o.time_scale, o.max_output_tokens, 1),
    )  # fmt: skip
    for p in run.result.ranked[:5]:
        again = predict(sim, p.candidate, costs)
        assert (again.p50_s, again.p90_s, again.tokens) == (p.p50_s, p.p90_s, p.tokens)
    best = min(run.result.ranked, key=lambda p: p.p50_s)
    assert run.result.winner.p50_s <= best.p50_s * 1.01
