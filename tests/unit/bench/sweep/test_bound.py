"""bench/sweep/bound.py: the bound at a layout's knee from what its steps measured, and the plan's
predicted capacity beside the measured one (from the plan's model or a served calibration), on
figures worked out by hand."""

from __future__ import annotations

import pytest

from kvstack.bench.schema import Distribution, Summary
from kvstack.bench.sweep.bound import (
    Figures,
    in_flight,
    knee_bound,
    layout_figures,
    predicted_capacity,
    served_prediction,
    step_resources,
    step_shape,
)
from kvstack.bench.sweep.schema import Capacity, LayoutSweep, Slo, SweepStep
from kvstack.planning.predict.bound import FetchCost, LayoutCosts, predict_capacity
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from tests.support.calibration import DEMO_LMCACHE_MP, DEMO_NONE
from tests.unit.planning.helpers import plan_for, roomy_cpu_host


def _dist(value: float, n: int = 10) -> Distribution:
    return Distribution(n=n, mean=value, p50=value, p90=value, p99=value, min=value, max=value)


def step(
    load: float, meets: bool, *, ttft: float = 0.1, e2e: float = 0.5, shares: dict[str, float] | None = None
) -> SweepStep:
    """10 requests of 1,000 prompt and 10 output tokens over 2 s (5 requests/s)."""
    summary = Summary(
        requests=10,
        ok=10,
        errors=0,
        wall_s=2.0,
        requests_per_s=5.0,
        output_tokens_per_s=50.0,
        prompt_tokens=10_000,
        expected_prefix_tokens=0,
        output_tokens=100,
        ttft_s=_dist(ttft),
        e2e_s=_dist(e2e),
    )
    return SweepStep(
        step=0,
        origin="ladder",
        load=load,
        seed=0,
        complete=True,
        summary=summary,
        within_slo=10 if meets else 0,
        share_within_slo=1.0 if meets else 0.0,
        meets_slo=meets,
        prompt_token_shares=shares if shares is not None else {"recomputed": 0.5, "dram": 0.5},
    )


# 10,000 recomputed tokens/s, 1 kB a token, DRAM at 1 MB/s, a 10k-token pool.
COSTS = LayoutCosts("engine+cpu", 0.0, 1e-4, 0.0, 1000.0, 0.0, 10_000, (FetchCost("cpu", 1e6),))


def test_a_step_is_its_mean_request_and_the_levels_shares() -> None:
    shape = step_shape(step(2, True, shares={"recomputed": 0.25, "engine_cache": 0.25, "dram": 0.5}), None)
    assert shape is not None and shape.prompt_tokens == 1000 and shape.output_tokens == 10
    assert dict(shape.shares) == {"engine": 0.25, "cpu": 0.5}
    offload = step_shape(step(2, True, shares={"recomputed": 0.5, "offload": 0.5}), "disk")
    assert offload is not None and dict(offload.shares) == {"disk": 0.5}  # the plan's first tier
    unnamed = step_shape(step(2, True, shares={"recomputed": 0.5, "offload": 0.5}), None)
    assert unnamed is not None and unnamed.held_tokens == 500  # held, whichever tier
    assert in_flight(step(2, True, e2e=0.5)) == pytest.approx(2.5)  # 10 x 0.5 s over 2 s


def test_each_resource_at_what_a_step_measured() -> None:
    uses = {u.resource: u for u in step_resources(Figures(COSTS, True, None, "test"), step(2, False))}
    # 5 requests/s x 500 recomputed tokens = 2,500 tokens/s of 10,000
    assert uses["prefill"].utilisation == pytest.approx(0.25) and uses["prefill"].demand == pytest.approx(
        2500
    )
    # 5/s x 500 tokens x 1 kB = 2.5 MB/s over a 1 MB/s DRAM copy
    assert uses["cpu"].utilisation == pytest.approx(2.5) and uses["cpu"].label == "DRAM copies"
    # 2.5 requests in flight x 1,010 tokens of a 10k-token pool
    assert uses["pool"].utilisation == pytest.approx(0.2525)
    assert uses["decode"].utilisation == pytest.approx(50 * 1e-4)
    unmodelled = step_resources(Figures(COSTS, False, None, "test"), step(2, False))
    assert "decode" not in {u.resource for u in unmodelled}  # a measured prefill rate does not judge decode


def test_the_bound_is_read_at_the_lowest_failing_step() -> None:
    lay = LayoutSweep(
        name="lmcache",
        base_url="http://x",
        steps=[step(1, True), step(2, True), step(4, False)],
        capacity=Capacity(status="bracketed", load=2, highest_passing=2, lowest_failing=4),
    )
    b = knee_bound(lay, Figures(COSTS, True, None, "the plan"))
    assert b is not None and b.at_load == 4 and b.passing_load == 2
    assert b.bound is not None and b.bound.resource == "cpu" and b.passing and b.figures == "the plan"
    top = lay.model_copy(update={"capacity": Capacity(status="above_ladder", load=4, highest_passing=4)})
    b_top = knee_bound(top, Figures(COSTS, True, None, ""))
    assert (
        b_top is not None
        and b_top.at_load == 4
        and b_top.passing_load is None
        and "no step failed" in b_top.note
    )


def test_without_a_plan_the_prefill_rate_is_the_lowest_steps() -> None:
    """The lowest step recomputes 500 tokens a request in a TTFT p50 of 100 ms: 5,000 tokens/s."""
    steps = [step(1, True, ttft=0.1), step(2, False, ttft=0.4)]
    figures = layout_figures("server", None, steps)
    assert figures is not None and not figures.modelled
    assert figures.costs.linear_s == pytest.approx(1 / 5000) and "measured" in figures.source
    uses = step_resources(figures, steps[1])
    assert [u.resource for u in uses] == ["prefill"]  # no plan: no tier, no pool
    assert uses[0].utilisation == pytest.approx(2500 / 5000)


def test_the_plans_prediction_beside_the_measured_capacity() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", context=8192)
    lay = LayoutSweep(
        name="none",
        base_url="http://x",
        steps=[step(1, True), step(2, False)],
        capacity=Capacity(status="bracketed", load=1, highest_passing=1, lowest_failing=2),
    )
    pred = predicted_capacity(lay, plan, "rate", Slo(ttft_s=0.5), None)
    assert pred is not None and pred.rate_per_s is not None and pred.load == pred.rate_per_s
    assert pred.measured_load == 1 and pred.ratio == pytest.approx(pred.load)
    in_trace = predicted_capacity(lay, plan, "trace_rate", Slo(ttft_s=0.5), 2.0)
    assert in_trace is not None and in_trace.load == pytest.approx(pred.rate_per_s / 2)
    tpot_only = predicted_capacity(lay, plan, "rate", Slo(tpot_s=0.05), None)
    assert tpot_only is not None and tpot_only.load is None and "TTFT only" in tpot_only.note
    assert predicted_capacity(lay, None, "rate", Slo(ttft_s=0.5), None) is None


def test_a_served_calibrations_prediction_beside_the_measured_capacity() -> None:
    """On the CPU platform the plan has no prefill figure; the demo's recorded calibration predicts
    the capacity for the workload as the lowest step sent it, in x the trace's rate."""
    found = [
        ("none", False, ServedCosts.from_dict(DEMO_NONE)),
        ("lmcache-mp", True, ServedCosts.from_dict(DEMO_LMCACHE_MP)),
    ]
    cal = ServedCalibration.first_of(found, "the demo's calibration")
    assert cal is not None
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", context=8192, offload="lmcache-mp")
    assert predicted_capacity(_lay([step(1, True)]), plan, "rate", Slo(ttft_s=0.5), None).status == "no_costs"  # type: ignore[union-attr]
    lay = _lay([step(1, True), step(2, False)])
    pred = served_prediction(lay, plan, cal, "trace_rate", Slo(ttft_s=0.5), 2.0)
    assert pred.note.startswith("costs measured on the served engine (the demo's calibration)")
    assert pred.rate_per_s is not None and pred.load == pytest.approx(pred.rate_per_s / 2)
    assert pred.measured_load == 1 and pred.ratio == pytest.approx(pred.load)
    assert pred.bound is not None and pred.bound.resource == "prefill"
    # By hand: LMCache's path (66.1 ms a request), 500 tokens recomputed, 500 fetched at 3.8 us each.
    bpt = plan.ttft.bytes_per_token  # type: ignore[union-attr]
    by_hand = LayoutCosts(
        "engine+cpu", 0.0661, 1.03e-4, 3.4e-8, bpt, 0.0411, plan.cache.tiers[0].tokens,
        (FetchCost("cpu", bpt / 3.8e-6), FetchCost("disk", bpt / 3.8e-6)),
    )  # fmt: skip
    shape = step_shape(lay.steps[0], "cpu")
    assert shape is not None
    expected = predict_capacity(by_hand, shape, 0.5, 0.9)
    assert pred.rate_per_s == pytest.approx(expected.rate_per_s)
    # The pool alone (the plan's tiers cut to it) pays the plain path: more capacity on no hits.
    plain = _lay([step(1, True, shares={"recomputed": 1.0})])
    alone = served_prediction(
        plain, plan.with_tiers(plan.cache.tiers[:1]), cal, "rate", Slo(ttft_s=0.5), None
    )
    offload = served_prediction(plain, plan, cal, "rate", Slo(ttft_s=0.5), None)
    assert alone.rate_per_s is not None and offload.rate_per_s is not None
    assert alone.rate_per_s > offload.rate_per_s
    assert served_prediction(lay, plan, cal, "rate", Slo(tpot_s=0.05), None).status == "no_costs"


def _lay(steps: list[SweepStep]) -> LayoutSweep:
    return LayoutSweep(
        name="lmcache-mp",
        base_url="http://x",
        steps=steps,
        capacity=Capacity(status="bracketed", load=1, highest_passing=1, lowest_failing=2),
    )
