"""The prediction: each candidate's TTFT from the simulation and the served engine's costs."""

from __future__ import annotations

import numpy as np
import pytest

from kvstack.tune.predict import Costs, predict
from kvstack.tune.simulate import TraceSim
from kvstack.tune.space import Candidate, Gate

from .helpers import DEMO_POOL, KIB, PLAIN, offload, sample

GIB = 1 << 30


def test_a_prediction_is_the_served_costs_request_by_request() -> None:
    trace = sample(64)
    sim = TraceSim(trace.requests, block_tokens=64, engine_block_tokens=128, engine_pool_tokens=DEMO_POOL)
    off = offload(0.015)
    costs = Costs(PLAIN, off)
    cand = Candidate("lmcache-mp", 256, GIB // 8, 0)
    got = predict(sim, cand, costs, KIB)
    s = sim.offload(256, *cand.blocks(KIB), readmit=False)
    per = [
        off.ttft(r.input_length, int(s.engine[i]), {"dram": int(s.dram[i])})
        for i, r in enumerate(trace.requests)
    ]
    assert got.mean_s == pytest.approx(np.mean(per)) and got.p90_s == pytest.approx(np.percentile(per, 90))
    assert sum(got.tokens.values()) == sum(r.input_length for r in trace.requests)
    # A prompt gate: requests shorter than it take the plain path (plain costs, engine hits only).
    gate = Gate("prompt", 1000)
    gated = predict(sim, Candidate("lmcache-mp", 256, GIB // 8, 0, gate), costs, KIB)
    mixed = [
        PLAIN.ttft(r.input_length, int(s.engine[i]), {}) if r.input_length < 1000 else per[i]
        for i, r in enumerate(trace.requests)
    ]
    assert gated.mean_s == pytest.approx(np.mean(mixed))
    assert gated.gated == sum(r.input_length < 1000 for r in trace.requests) > 0
    # A load gate (min_retrieve_tokens): fewer tier tokens than it are recomputed, the path paid.
    load = predict(sim, Candidate("lmcache", 256, GIB // 8, 0, Gate("load", 512)), costs, KIB)
    s2 = sim.offload(256, *Candidate("lmcache", 256, GIB // 8, 0).blocks(KIB), readmit=True)
    expected = [
        off.ttft(r.input_length, int(s2.engine[i]), {"dram": int(s2.dram[i]) if s2.dram[i] >= 512 else 0})
        for i, r in enumerate(trace.requests)
    ]
    assert load.mean_s == pytest.approx(np.mean(expected))
