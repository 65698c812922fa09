"""Predicted TTFT per request sent, from the calibrated costs and the simulated sources."""

from __future__ import annotations

import pytest

from kvstack.bench.trace_calibrate import predicted_ttft, summary
from kvstack.planning.served_ttft import ServedCosts


def test_each_request_is_predicted_from_its_own_sources() -> None:
    costs = ServedCosts(hit_s=0.01, miss_s=0.0, linear_s=1e-5, quadratic_s=0.0, fetch_s={"dram": 2e-6})
    per_request = {"engine_cache": [0, 512, 0], "dram": [0, 0, 512], "disk": [0, 0, 256]}
    got = predicted_ttft(costs, [1024, 1024, 1024], per_request)
    assert got[0] == pytest.approx(0.01 + 1024e-5)
    assert got[1] == pytest.approx(0.01 + 512e-5)
    # The disk tier, without a figure of its own, is fetched at DRAM's cost.
    assert got[2] == pytest.approx(0.01 + 256e-5 + 768 * 2e-6)


def test_the_summary_sets_measured_against_predicted() -> None:
    costs = ServedCosts(hit_s=0.01, miss_s=0.0, linear_s=0.0, quadratic_s=0.0)
    out = summary(costs, [0.1] * 10, [0.2] * 10)
    assert out["measured_over_predicted"] == {"p50_s": pytest.approx(2.0), "p90_s": pytest.approx(2.0)}
    assert out["calibration"]["hit_s"] == 0.01


def test_calibration_covers_the_context_up_to_8192_tokens() -> None:
    from kvstack.bench.trace_calibrate import calibration_lengths

    assert calibration_lengths(16382) == [512, 1024, 2048, 4096, 8192]  # the demo's 16K context
    assert calibration_lengths(8190) == [512, 1024, 2048, 4096]
    assert calibration_lengths(300) == [300]
