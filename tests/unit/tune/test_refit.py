"""The ranking model refit from replays: the costs a replay's per-request TTFTs imply, recovered."""

from __future__ import annotations

import numpy as np
import pytest

from kvstack.planning.predict.served_ttft import ServedCosts
from kvstack.tune.predict import Costs, SimTrace, predict
from kvstack.tune.refit import Replayed, refit
from kvstack.tune.space import Candidate, Limits

from .helpers import KIB, PLAIN, offload, sample

GIB = 1 << 30
# What the "engine" really costs (not what the calibration said): none 20 ms a request and 80 us a
# token recomputed; LMCache's path 4 ms a request and 1.5 ms a chunk more, 3 us a tier token.
FIXED, LINEAR = 0.020, 8.0e-5
EXTRA, PER_CHUNK, FETCH = 0.004, 0.0015, 3.0e-6


def _sim() -> SimTrace:
    trace = sample(32)
    return SimTrace(trace.requests, block_tokens=32, limits=Limits("cpu", 16, 2048, KIB, GIB))


def _measured(sim: SimTrace, c: Candidate, seed: int) -> list[float | None]:
    """TTFTs as a replay would measure them: the true costs, 1 ms of noise, a few requests queued
    a second behind others, two not answered."""
    s = sim.simulate(c, CALIBRATED)
    n = sim.lengths.astype(np.float64)
    held = np.minimum(s.engine + s.dram + s.disk, sim.lengths).astype(np.float64)
    t = FIXED + LINEAR * (n - held)
    if c.offloads:
        t += EXTRA + PER_CHUNK * np.ceil(n / c.chunk_tokens) + FETCH * (s.dram + s.disk)
    rng = np.random.default_rng(seed)
    t = t + rng.normal(0, 0.001, len(t))
    t[rng.choice(len(t), 4, replace=False)] += 1.0
    out: list[float | None] = [float(x) for x in t]
    out[3] = out[7] = None
    return out


def _lmcache(chunk: int) -> Candidate:
    return Candidate("lmcache-mp", chunk_tokens=chunk, dram_bytes=GIB)


CALIBRATED = Costs(PLAIN, offload(0.040))  # the calibration: slower on every term


def test_none_s_replay_gives_the_plain_path_its_measured_costs() -> None:
    sim = _sim()
    none = Candidate("none")
    got = refit(CALIBRATED, sim, [Replayed(none, _measured(sim, none, 1))])
    assert got.plain.fixed_s == pytest.approx(FIXED, abs=0.001)
    assert got.plain.linear_s == pytest.approx(LINEAR, rel=0.05)
    assert got.plain.quadratic_s < 1e-9
    # A connector not measured yet keeps its calibrated extra cost (40 ms) over the refit plain path.
    assert got.of("lmcache-mp").fixed_s - got.plain.fixed_s == pytest.approx(0.040)
    assert got.of("lmcache-mp").linear_s == got.plain.linear_s


def test_two_chunk_sizes_separate_the_per_chunk_cost_from_the_per_request_one() -> None:
    sim = _sim()
    replays = [
        Replayed(c, _measured(sim, c, i))
        for i, c in enumerate([Candidate("none"), _lmcache(128), _lmcache(512)])
    ]
    got = refit(CALIBRATED, sim, replays).of("lmcache-mp")
    assert got.chunk_s == pytest.approx(PER_CHUNK, rel=0.1)
    assert got.miss_s == pytest.approx(EXTRA, abs=0.0015)
    # The refit model predicts a chunk size it never measured.
    truth = Costs(
        ServedCosts(FIXED, 0.0, LINEAR, 0.0),
        ServedCosts(FIXED, EXTRA, LINEAR, 0.0, {"dram": FETCH}, chunk_s=PER_CHUNK),
    )
    c = _lmcache(256)
    want = predict(sim, c, truth).p50_s
    assert predict(sim, c, refit(CALIBRATED, sim, replays)).p50_s == pytest.approx(want, rel=0.05)
    assert predict(sim, c, CALIBRATED).p50_s > 1.5 * want  # what the calibration alone said


def test_one_chunk_size_puts_its_chunks_cost_into_the_per_request_one() -> None:
    sim = _sim()
    replays = [Replayed(c, _measured(sim, c, i)) for i, c in enumerate([Candidate("none"), _lmcache(256)])]
    got = refit(CALIBRATED, sim, replays).of("lmcache-mp")
    assert got.chunk_s == 0.0
    chunks = float(np.median(np.ceil(sim.lengths / 256)))
    assert got.miss_s == pytest.approx(EXTRA + PER_CHUNK * chunks, rel=0.35)


def test_too_few_answers_leave_the_calibration_as_it_was() -> None:
    sim = _sim()
    none = Candidate("none")
    ttfts: list[float | None] = [None] * sim.n
    ttfts[:3] = [0.1, 0.1, 0.1]
    got = refit(CALIBRATED, sim, [Replayed(none, ttfts)])
    assert got.plain == CALIBRATED.plain
