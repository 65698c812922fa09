"""planning/predict/bound.py: each resource's utilisation at a load, the one that binds, and a
layout's predicted capacity under the M/M/1 model (which bench/sweep/bound.py still explains a
sweep's knee with; plan --slo-ttft is the simulator's: test_plan_capacity.py), on figures worked out
by hand."""

from __future__ import annotations

import math

import pytest

from kvstack.planning.predict.bound import (
    FetchCost,
    LayoutCosts,
    RequestShape,
    binding,
    predict_capacity,
    saturation_rate,
    ttft_quantile,
    unloaded_ttft,
    utilisation,
    wait_quantile,
)

# 10,000 recomputed tokens/s, 1 kB of KV per token, a 1 GB/s disk, a 100k-token pool.
COSTS = LayoutCosts(
    name="engine+disk",
    fixed_s=0.01,
    linear_s=1e-4,
    quadratic_s=0.0,
    bytes_per_token=1000.0,
    step_s=0.01,
    pool_tokens=100_000,
    fetch=(FetchCost("disk", 1e9),),
)
# 1,000 prompt tokens, half from the disk, half recomputed; 10 output tokens.
SHAPE = RequestShape(prompt_tokens=1000, output_tokens=10, shares={"engine": 0.0, "disk": 0.5})


def _by(uses: list, name: str):  # type: ignore[no-untyped-def]
    return next(u for u in uses if u.resource == name)


def test_an_idle_request_costs_the_step_the_recompute_and_the_fetch() -> None:
    # 0.01 fixed + 500 tokens x 0.1 ms + 500 x 1 kB / 1 GB/s (0.5 ms)
    assert unloaded_ttft(COSTS, SHAPE) == pytest.approx(0.0605)


def test_each_resource_at_ten_requests_per_second() -> None:
    uses = utilisation(COSTS, SHAPE, 10.0)
    assert [u.resource for u in uses] == ["prefill", "decode", "pool", "disk"]
    prefill, decode, pool, disk = uses
    assert prefill.utilisation == pytest.approx(0.5)  # 10/s x 50 ms of recompute
    assert prefill.demand == pytest.approx(5000) and prefill.capacity == pytest.approx(10_000)
    assert decode.utilisation == pytest.approx(0.01)  # 100 tokens/s x 0.1 ms
    assert prefill.engine_busy == decode.engine_busy == pytest.approx(0.51)
    assert disk.utilisation == pytest.approx(0.005) and disk.demand == pytest.approx(5e6)
    assert disk.unit == "B/s" and disk.label == "disk read" and disk.engine_busy is None
    # in flight: 10/s x (60.5 ms + 10 x 10 ms) x 1,010 tokens, of 100k
    assert pool.utilisation == pytest.approx(10 * 0.1605 * 1010 / 100_000)
    assert binding(uses) == prefill
    assert saturation_rate(COSTS, SHAPE) == pytest.approx(1 / 0.051)


def test_a_slow_disk_binds_before_the_engine() -> None:
    slow = LayoutCosts(**{**COSTS.__dict__, "fetch": (FetchCost("disk", 1e6),)})  # 0.5 s a request
    uses = utilisation(slow, SHAPE, 1.0)
    assert _by(uses, "disk").utilisation == pytest.approx(0.5)
    assert binding(uses).resource == "disk"  # type: ignore[union-attr]
    assert saturation_rate(slow, SHAPE) == pytest.approx(2.0)


def test_the_wait_is_an_mm1_queues_at_the_quantile() -> None:
    assert wait_quantile(1.0, 0.5, 0.9) == pytest.approx(math.log(5) / 0.5)
    assert wait_quantile(1.0, 0.05, 0.9) == 0.0  # fewer than 10% of requests wait at all
    assert wait_quantile(1.0, 1.0, 0.9) == math.inf
    # the engine queue (50 ms at 51%) and the disk's (0.5 ms at 0.5%: no wait at p90)
    expected = 0.0605 + 0.05 * math.log(0.51 / 0.1) / 0.49
    assert ttft_quantile(COSTS, SHAPE, 10.0, 0.9) == pytest.approx(expected)


def test_capacity_is_where_the_predicted_p90_reaches_the_slo() -> None:
    cap = predict_capacity(COSTS, SHAPE, slo_ttft_s=0.2, quantile=0.9)
    assert cap.status == "slo" and cap.rate_per_s is not None
    assert ttft_quantile(COSTS, SHAPE, cap.rate_per_s, 0.9) == pytest.approx(0.2, rel=1e-6)
    assert cap.bound is not None and cap.bound.resource == "prefill"
    assert cap.unloaded_ttft_s == pytest.approx(0.0605)
    assert cap.saturation_rate_per_s == pytest.approx(1 / 0.051)
    assert cap.in_flight == pytest.approx(cap.rate_per_s * 0.1605)


def test_a_full_pool_caps_a_layout_whose_latency_never_queues() -> None:
    """Every token held by the engine, none recomputed: 100 ms a request, 1,000 tokens each, a
    1,000-token pool: one request in flight at 10/s fills it."""
    costs = LayoutCosts("engine", 0.1, 1e-9, 0.0, 1000.0, 0.0, 1000)
    shape = RequestShape(1000, 0, {"engine": 1.0})
    cap = predict_capacity(costs, shape, slo_ttft_s=1.0, quantile=0.9)
    assert cap.status == "saturation" and cap.rate_per_s == pytest.approx(10.0)
    assert cap.bound is not None and cap.bound.resource == "pool"
    assert cap.bound.utilisation == pytest.approx(1.0)


def test_an_slo_below_an_idle_request_has_no_capacity() -> None:
    cap = predict_capacity(COSTS, SHAPE, slo_ttft_s=0.05, quantile=0.9)
    assert cap.status == "slo_below_unloaded" and cap.rate_per_s == 0.0 and cap.bound is None
