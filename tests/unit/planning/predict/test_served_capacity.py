"""planning/predict/served_capacity.py: ``plan --slo-ttft``'s capacity from costs measured on the served
engine (the demo's recorded calibration), on the CPU platform the FLOP model has no figure for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvstack.planning.predict.capacity_schema import CapacityAsk, LayoutCosts
from kvstack.planning.predict.plan_capacity import plan_capacity
from kvstack.planning.predict.served_capacity import served_costs
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.planning.predict.sim_layouts import FREE_BW_BYTES_PER_S, sim_layouts
from kvstack.planning.schema import Plan
from tests.support.calibration import DEMO_LMCACHE_MP, DEMO_NONE
from tests.unit.planning.helpers import plan_for, roomy_cpu_host
from tests.unit.planning.test_plan_trace import _fixture, _plan

SOURCE = "kvstack bench --trace demo.jsonl, 2026-11-28 07:00 UTC"


def _calibration(offload: dict | None = DEMO_LMCACHE_MP) -> ServedCalibration:
    found = [("none", False, ServedCosts.from_dict(DEMO_NONE))]
    if offload is not None:
        found.append(("lmcache-mp", True, ServedCosts.from_dict(offload)))
    cal = ServedCalibration.first_of(found, SOURCE)
    assert cal is not None
    return cal


@pytest.fixture(scope="module")
def cpu_plan() -> Plan:
    """An 8B model on the CPU platform with LMCache's tiers: no prefill figure in FLOPs."""
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", context=8192, offload="lmcache-mp")
    assert plan.platform == "cpu" and len(plan.offload_tiers) == 2
    return plan


def test_without_a_calibration_the_cpu_plan_predicts_nothing(cpu_plan: Plan) -> None:
    cap = plan_capacity(cpu_plan, CapacityAsk(slo_ttft_s=5.0))
    assert cap.layouts == [] and cap.costs_from == "" and "no prefill figure" in cap.note


def test_the_layouts_take_the_measured_costs(cpu_plan: Plan) -> None:
    costed = served_costs(cpu_plan, _calibration(), prompt_tokens=8192)
    assert costed is not None
    layouts, why = costed
    assert [c.name for c in layouts] == ["engine", "engine+cpu", "engine+cpu+disk"]
    # What serves each layout's prompts, carried by its costs (a request's shape takes its shares).
    assert [c.levels for c in layouts] == [("engine",), ("engine", "cpu"), ("engine", "cpu", "disk")]
    plain, cpu, disk = layouts
    assert plain.fixed_s == pytest.approx(0.0511) and cpu.fixed_s == pytest.approx(0.0661)
    assert plain.linear_s == pytest.approx(1.03e-4) and plain.quadratic_s == pytest.approx(3.4e-8)
    assert plain.fetch == () and plain.pool_tokens == cpu_plan.cache.tiers[0].tokens
    # The DRAM fetch, 3.8 us a token, as a bandwidth; the disk has no figure: taken at DRAM's.
    bpt = cpu.bytes_per_token
    assert [f.kind for f in disk.fetch] == ["cpu", "disk"]
    assert all(f.bw_bytes_per_s == pytest.approx(bpt / 3.8e-6) for f in disk.fetch)
    assert "measured: 3.8 us a token fetched" in cpu.fetch[0].source
    # No decode step on this platform: a whole-prompt hit's (41 ms) stands for it, and says so.
    assert plain.step_s == pytest.approx(0.0411)
    assert why.startswith(f"costs measured on the served engine ({SOURCE}): none for the pool alone")
    assert "lmcache-mp for the offload layouts" in why and "whole-prompt hit's 41 ms" in why


def idle_ttft(c: LayoutCosts, prompt: int, held: int, fetched: dict[str, int]) -> float:
    """A lone request's TTFT on ``c``: its fixed cost, the recompute of what no cache holds, each
    tier's fetch of what it serves."""
    recompute = c.linear_s * (prompt - held) + c.quadratic_s * (prompt**2 - held**2)
    paths = {f.kind: f for f in c.fetch}
    fetch = sum(
        n * c.bytes_per_token / paths[k].bw_bytes_per_s + paths[k].latency_s for k, n in fetched.items()
    )
    return c.fixed_s + recompute + fetch


def test_an_idle_request_costs_what_the_trace_verdict_predicts(cpu_plan: Plan) -> None:
    """The mapped costs give a lone request ServedCosts.ttft's TTFT for the same request."""
    cal = _calibration()
    layouts, _ = served_costs(cpu_plan, cal, prompt_tokens=4000) or ([], "")
    assert idle_ttft(layouts[0], 4000, 1000, {}) == pytest.approx(cal.plain.ttft(4000, 1000, {}))
    offload = cal.offload_costs(0, {})
    assert idle_ttft(layouts[1], 4000, 3000, {"cpu": 2000}) == pytest.approx(
        offload.ttft(4000, 1000, {"dram": 2000})
    )


def test_what_a_request_pays_beyond_the_step_is_outside_the_engine(cpu_plan: Plan) -> None:
    """The pool-alone layout's fixed cost less the step is every layout's time outside the engine;
    an offload layout's path charges only the rest."""
    layouts, _ = served_costs(cpu_plan, _calibration(), prompt_tokens=4000) or ([], "")
    sims, _ = sim_layouts(cpu_plan, layouts)
    outside = layouts[0].fixed_s - layouts[0].step_s
    assert outside > 0 and all(s.outside_s == pytest.approx(outside) for s in sims)
    assert sims[0].request_s == 0
    assert sims[1].request_s == pytest.approx(layouts[1].fixed_s - layouts[1].step_s - outside)


def test_a_measured_decode_is_the_simulators_step_and_sequence_cost(cpu_plan: Plan) -> None:
    cal = _calibration()
    measured = replace(cal, plain=replace(cal.plain, decode_fixed_s=0.03, decode_per_seq_s=0.002))
    layouts, why = served_costs(cpu_plan, measured, prompt_tokens=4000) or ([], "")
    assert all(c.step_s == 0.03 and c.decode_seq_s == 0.002 for c in layouts)
    assert "decode step measured: 30 ms + 2 ms a sequence" in why
    (plain, *_), _ = served_costs(cpu_plan, cal, prompt_tokens=4000) or ([], "")
    assert plain.decode_seq_s is None  # not measured: the simulator takes linear_s


def test_the_plan_predicts_each_layouts_capacity_from_the_calibration() -> None:
    """The conversation trace sizes an 8B model's tiers on a roomy CPU host; its requests, at their
    own prompt lengths, replayed on the simulator with the measured costs: the DRAM tier serves what
    the pool misses, so the offload layout sustains at least as much, and recompute bounds the pool
    alone."""
    cal = _calibration()
    trace = _fixture(served=cal)
    plan = _plan(roomy_cpu_host(256), trace, users=1, offload="lmcache-mp")
    ask = CapacityAsk(slo_ttft_s=30.0, output_tokens=16)
    cap = plan_capacity(plan, ask, cal, trace)
    assert cap.costs_from.startswith("costs measured on the served engine") and cap.traced
    assert cap.shares_from.startswith(f"the trace {trace.source}: its first {len(trace.requests):,} requests")
    assert cap.requests > 0 and cap.base_rate_per_s == pytest.approx(
        (cap.requests - 1) * 1000 / (trace.requests[-1].timestamp_ms - trace.requests[0].timestamp_ms),
        rel=0.05,
    )
    assert [lay.layout for lay in cap.layouts] == ["engine", "engine+cpu", "engine+cpu+disk"]
    for lay in cap.layouts:
        assert lay.status == "slo" and lay.rate_per_s and lay.rate_per_s > 0
        assert lay.bound is not None and lay.in_flight is not None and lay.in_flight > 0
        assert lay.ttft_at_capacity_s is not None and lay.ttft_at_capacity_s <= 30.0
    engine, cpu = cap.layouts[0], cap.layouts[1]
    assert engine.bound is not None and engine.bound.resource == "prefill"
    assert "measured: 103 us a token recomputed" in engine.bound.source
    assert cpu.shares.get("cpu", 0.0) > 0 and cpu.rate_per_s >= engine.rate_per_s  # type: ignore[operator]
    # An SLO below an idle request's TTFT (over 5 s at 12K tokens here) leaves no capacity.
    tight = plan_capacity(plan, CapacityAsk(slo_ttft_s=1.0), cal, trace)
    assert {lay.status for lay in tight.layouts} == {"slo_below_unloaded"}


def test_without_a_measured_offload_layout_the_plans_offload_cost_is_charged(cpu_plan: Plan) -> None:
    layouts, why = served_costs(cpu_plan, _calibration(offload=None), prompt_tokens=8192) or ([], "")
    assert layouts[1].fixed_s == pytest.approx(0.0511 + 0.015)  # the default 15 ms a request
    assert "none plus the plan's offload cost (15 ms)" in why
    # No fetch figure at all: the plan's paths for the tiers.
    assert [f.source for f in layouts[-1].fetch] == [
        p.source
        for p in (cpu_plan.ttft.fetch[k] for k in ("cpu", "disk"))  # type: ignore[union-attr]
    ]


def test_a_tier_measured_free_keeps_its_share(cpu_plan: Plan) -> None:
    """A DRAM tier measured at no cost a token has no fetch path: the simulator serves its hits free."""
    free = {**DEMO_LMCACHE_MP, "fetch_s_per_token": {"dram": 0.0}}
    layouts, _ = served_costs(cpu_plan, _calibration(free), prompt_tokens=8192) or ([], "")
    assert layouts[1].fetch == () and layouts[1].levels == ("engine", "cpu")
    sims, _ = sim_layouts(cpu_plan, layouts)
    (tier,) = sims[1].tiers
    assert tier.kind == "cpu" and tier.load_bw_bytes_per_s == FREE_BW_BYTES_PER_S
    assert tier.capacity_chunks == cpu_plan.offload_tiers[0].tokens // tier.chunk_tokens
