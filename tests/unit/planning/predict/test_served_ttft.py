"""The TTFT model on costs measured against the served engine (planning/predict/served_ttft.py)."""

from __future__ import annotations

import pytest

from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts, fit_costs, percentiles


def test_the_fit_recovers_the_costs_it_was_made_from() -> None:
    hit, miss, lin, quad = 0.020, 0.015, 2e-5, 3e-9
    misses = [(n, hit + miss + lin * n + quad * n * n) for n in (512, 1024, 2048, 4096) for _ in range(2)]
    fetched = [("dram", 4096, hit + miss + 4096 * 1e-6)]
    costs = fit_costs([hit, hit * 1.1, hit * 0.9], misses, fetched)
    assert costs.hit_s == pytest.approx(hit)
    assert costs.miss_s == pytest.approx(miss, rel=1e-6)
    assert costs.linear_s == pytest.approx(lin, rel=1e-6)
    assert costs.quadratic_s == pytest.approx(quad, rel=1e-6)
    assert costs.fetch_s["dram"] == pytest.approx(1e-6, rel=1e-6)


def test_no_fitted_term_is_negative() -> None:
    # A miss that costs less at 4096 tokens than a straight line says (noise): no negative term.
    misses = [(512, 0.05), (1024, 0.06), (2048, 0.09), (4096, 0.12)]
    costs = fit_costs([0.02], misses)
    assert min(costs.miss_s, costs.linear_s, costs.quadratic_s) >= 0
    assert costs.ttft(4096, 0, {}) == pytest.approx(0.12, rel=0.15)


def test_held_tokens_are_not_recomputed_and_fetches_cost_per_tier() -> None:
    c = ServedCosts(hit_s=0.01, miss_s=0.005, linear_s=1e-5, quadratic_s=0.0, fetch_s={"dram": 1e-6})
    assert c.ttft(1000, 1000, {}) == pytest.approx(0.015)
    assert c.ttft(1000, 0, {}) == pytest.approx(0.015 + 0.01)
    assert c.ttft(1000, 200, {"dram": 800}) == pytest.approx(0.015 + 800e-6)
    assert c.ttft(1000, 0, {"disk": 1000}) == pytest.approx(0.015)  # no disk figure: no fetch cost


def test_percentiles() -> None:
    assert percentiles([]) == {"p50_s": None, "p90_s": None}
    got = percentiles([float(i) for i in range(1, 11)])
    assert got["p50_s"] == pytest.approx(5.5) and got["p90_s"] == pytest.approx(9.1)


def test_the_vectorised_prediction_is_the_per_request_one() -> None:
    import numpy as np

    c = ServedCosts(hit_s=0.02, miss_s=0.004, linear_s=1e-4, quadratic_s=3e-9, fetch_s={"dram": 4e-6})
    lengths = np.array([512.0, 4096.0, 9000.0])
    engine, dram = np.array([0.0, 1024.0, 512.0]), np.array([0.0, 2048.0, 8488.0])
    ttft, recompute = c.predict(lengths, engine + dram, dram * c.fetch_s["dram"])
    for i in range(3):
        expected = c.ttft(int(lengths[i]), int(engine[i]), {"dram": int(dram[i])})
        assert ttft[i] == pytest.approx(expected)
    assert recompute[2] == pytest.approx(0.0) and recompute[0] > 0


def test_costs_round_trip_and_bad_figures_are_refused() -> None:
    c = ServedCosts(0.02, 0.004, 1e-4, 3e-9, {"dram": 4e-6}, "measured")
    assert ServedCosts.from_dict(c.to_dict()) == c
    bad = {**c.to_dict(), "miss_s": -0.5}
    with pytest.raises(ValueError, match="not negative"):
        ServedCosts.from_dict(bad)
    with pytest.raises(KeyError):
        ServedCosts.from_dict({"hit_s": 0.01})


def test_a_tier_without_its_own_fetch_figure_is_taken_at_drams() -> None:
    c = ServedCosts(0.02, 0.0, 0.0, 0.0, {"dram": 4e-6})
    assert c.fetch_per_token("cpu") == c.fetch_per_token("disk") == 4e-6
    assert ServedCosts(0.02, 0.0, 0.0, 0.0).fetch_per_token("disk") is None


def test_without_a_measured_offload_layout_the_plain_one_pays_the_given_cost() -> None:
    from kvstack.planning.predict.served_ttft import ServedCalibration

    plain = ServedCosts(0.02, 0.004, 1e-4, 0.0)
    cal = ServedCalibration(plain)
    off = cal.offload_costs(0.015, {"dram": 1e-6})
    assert off.fixed_s == pytest.approx(plain.fixed_s + 0.015) and off.fetch_s == {"dram": 1e-6}
    measured = ServedCosts(0.03, 0.004, 1e-4, 0.0, {"dram": 2e-6})
    assert ServedCalibration(plain, measured, offload_layout="lmcache-mp").offload_costs(9.0, {}) is measured


def test_an_offload_path_pays_its_per_chunk_cost_for_each_whole_chunk_only() -> None:
    import numpy as np

    from kvstack.planning.predict.served_ttft import ServedCalibration
    from kvstack.planning.predict.trace_ttft import served_depth

    c = ServedCosts(0.02, 0.0, 0.0, 0.0, {"dram": 0.0}, chunk_s=0.002)
    assert ServedCosts.from_dict(c.to_dict()) == c
    assert c.ttft(1000, 0, {}, chunks=3) == pytest.approx(0.026)
    lengths = np.array([100.0, 1000.0, 4096.0])
    got, _ = c.predict(lengths, lengths, np.zeros(3), np.floor(lengths / 1024))
    assert list(got) == pytest.approx([0.02, 0.02, 0.028])  # shorter than a chunk: nothing moved
    # The plan's TTFT with offload (its chunk) pays it; the engine's pool alone does not.
    plain = ServedCosts(0.02, 0.0, 0.0, 0.0)
    levels = np.array([[0.0, 0.0, 0.0], [100.0, 1000.0, 4096.0]])
    kw = {"cost_s": 0.0, "fetch_fallback": {}, "duration_s": 10.0}
    depth = served_depth(
        ["engine", "cpu"], lengths, levels, ServedCalibration(plain, c), chunk_tokens=1024, **kw
    )
    assert depth[0].mean_s == pytest.approx(0.02)
    assert depth[1].mean_s == pytest.approx(0.02 + 0.002 * 4 / 3)


def test_decode_figures_round_trip_and_a_calibration_without_them_still_loads() -> None:
    import json
    from pathlib import Path

    from kvstack.planning.predict.served_ttft import ServedCalibration

    c = ServedCosts(
        0.02, 0.004, 1e-4, 3e-9, {"dram": 4e-6}, "measured", decode_fixed_s=0.002, decode_per_seq_s=6e-5
    )
    assert ServedCosts.from_dict(c.to_dict()) == c
    assert c.decode_step_s(8) == pytest.approx(0.002 + 8 * 6e-5)
    with pytest.raises(ValueError, match="not negative"):
        ServedCosts.from_dict({**c.to_dict(), "decode_per_seq_s": -1e-5})
    # A tune run's served-ttft costs, written before decode was measured: they load, decode None.
    fixture = Path(__file__).resolve().parents[3] / "fixtures" / "results" / "tune-1a1c99d.json"
    layouts = json.loads(fixture.read_text())["calibration"]["layouts"]
    old = {name: ServedCosts.from_dict(entry["calibration"]) for name, entry in layouts.items()}
    assert set(old) == {"none", "lmcache-mp"}
    for costs in old.values():
        assert (
            costs.decode_fixed_s is None and costs.decode_per_seq_s is None and costs.decode_step_s(4) is None
        )
        assert "decode_fixed_s" not in costs.to_dict()  # written back as it was read
    cal = ServedCalibration(old["none"], old["lmcache-mp"], "none", "lmcache-mp")
    assert cal.decode_fixed_s is None and cal.decode_per_seq_s is None
    # The plain layout's decode figures, carried to an offload layout priced from them.
    cal = ServedCalibration(c)
    assert (cal.decode_fixed_s, cal.decode_per_seq_s) == (0.002, 6e-5)
    assert cal.offload_costs(0.015, {}).decode_step_s(1) == pytest.approx(0.002 + 6e-5)


def _costs(hit_s: float = 0.040, **decode: float) -> ServedCosts:
    """A request's fixed cost of ``hit_s`` + 10 ms, with the decode figures given."""
    return ServedCosts(hit_s=hit_s, miss_s=0.010, linear_s=1e-4, quadratic_s=0.0, **decode)  # type: ignore[arg-type]


def test_the_forward_step_is_the_measured_decode_step_else_the_plans_else_the_whole_prompt_hit() -> None:
    measured = _costs(decode_fixed_s=0.030, decode_per_seq_s=0.002)
    step = measured.forward_step(planned_s=0.5)  # a measured decode step wins over the plan's
    assert (step.fixed_s, step.per_seq_s) == (0.030, 0.002)
    assert step.outside_s == pytest.approx(0.020)  # HTTP and scheduling: the fixed cost less the step
    # A decode step measured over the request's whole fixed cost (noise) is held to it: none outside.
    slow = _costs(decode_fixed_s=0.070, decode_per_seq_s=0.0)
    assert (slow.forward_step().fixed_s, slow.forward_step().outside_s) == (pytest.approx(0.050), 0.0)
    unmeasured = _costs()
    planned = unmeasured.forward_step(planned_s=0.025)
    assert (planned.fixed_s, planned.per_seq_s, planned.how) == (0.025, None, "the plan's forward step")
    assert planned.outside_s == pytest.approx(0.025)
    hit = unmeasured.forward_step()  # no decode and no plan: the whole-prompt hit, an upper bound
    assert (hit.fixed_s, hit.outside_s, hit.per_seq_s) == (0.040, 0.010, None)
    assert "no decode step measured" in hit.how


def test_a_calibration_takes_decode_from_the_offload_layout_when_the_plain_one_has_none() -> None:
    plain, offload = _costs(), _costs(hit_s=0.050, decode_fixed_s=0.030, decode_per_seq_s=0.001)
    step = ServedCalibration(plain=plain, offload=offload, offload_layout="lmcache-mp").forward_step()
    # the offload layout's decode step, the plain layout's fixed cost around it
    assert (step.fixed_s, step.per_seq_s, step.outside_s) == (0.030, 0.001, pytest.approx(0.020))
