"""planning/predict/plan_capacity.py: ``plan --slo-ttft`` on the step-level simulator: a layout's
capacity is the simulator's bisection, worked out by hand where the workload allows; what bounds it
is read off the run at the capacity; the synthetic workload has the plan's shape."""

from __future__ import annotations

import math

import pytest

from kvstack.planning.predict.capacity_schema import CapacityAsk
from kvstack.planning.predict.plan_capacity import (
    HIGHEST,
    KEEP_UP,
    SYNTHETIC_REQUESTS,
    SimWorkload,
    cold_s,
    held_tokens,
    layout_capacity,
    plan_capacity,
    plan_costs,
    residence_s,
    resources_at,
    synthetic_prompt,
    synthetic_workload,
)
from kvstack.planning.predict.sim_layouts import sim_layouts
from kvstack.planning.predict.simulator import (
    Layout,
    SchedulerLimits,
    SimRequest,
    Slo,
    StepCosts,
    TierSpec,
    capacity,
    simulate,
    synthetic,
)
from tests.unit.planning.helpers import plan_for, roomy_cpu_host

# Ten 64-token prompts a second apart, one 64-token step each (test_simulator_capacity.py's): at
# ``1 / d`` requests/s request k waits for the k before it, TTFT_k = (k + 1) s - k d.
FIXED, LIN, N = 0.01, 0.001, 10
S = FIXED + 64 * LIN
PLAIN = Layout(
    costs=StepCosts(fixed_s=FIXED, prefill_s_per_token=LIN, decode_s_per_seq=0.0),
    limits=SchedulerLimits(max_num_batched_tokens=64, max_num_seqs=4, block_tokens=16, pool_blocks=1000),
)
WORK = [SimRequest(float(k), 64, 1, tuple(range(4 * k, 4 * k + 4)), 16) for k in range(N)]


def test_a_plain_layouts_capacity_is_the_simulators_bisection_and_the_hand_figure() -> None:
    ask = CapacityAsk(slo_ttft_s=0.3, output_tokens=1)
    lay = layout_capacity(SimWorkload(WORK, "ten"), PLAIN, ask)
    drain = residence_s(PLAIN, WORK)
    assert drain == pytest.approx(FIXED + 1 * FIXED)  # a step, then one decode step (no decode cost)
    search = capacity(WORK, PLAIN, Slo(ttft_s=0.3, share=0.9), tolerance=0.1, lowest=1 / HIGHEST,
                      highest=HIGHEST, keep_up=KEEP_UP, drain_s=drain)  # fmt: skip
    assert search.lo is not None and search.hi is not None
    assert lay.status == "slo" and lay.rate_per_s == pytest.approx(search.lo * search.base_rate_per_s)
    assert lay.failing_rate_per_s == pytest.approx(search.hi * search.base_rate_per_s)
    # By hand: the ninth request (k = 8) must meet the SLO, (K + 1) s - K d <= slo; and the engine
    # must keep up: the last, k = 9, done (10 s - 9 d after its arrival) within KEEP_UP of the span
    # 9 d plus one residence. The stricter gives the capacity.
    k = math.ceil(0.9 * N) - 1
    d_slo = S - (0.3 - S) / k
    d_keep = (N * S - drain) / (N - 1 + KEEP_UP * (N - 1))
    hand = 1 / max(d_slo, d_keep)
    assert search.lo <= hand <= search.hi  # within the 10% bracket
    assert lay.rate_per_s <= hand and (hand - lay.rate_per_s) / hand <= 0.1 + 1e-9
    # The TTFTs at half and 0.9 of it, and the run at it: the engine alone, prefill and steps.
    assert [t.of_capacity for t in lay.ttft_at] == [0.5, 0.9]
    # Both at least a step apart (1 / S = 13.5/s): no request waits, each TTFT one step.
    assert lay.rate_per_s * 0.9 <= 1 / S + 1e-9
    for t in lay.ttft_at:
        assert t.ttft_p50_s == pytest.approx(S) and t.ttft_p90_s == pytest.approx(S)
    assert lay.bound is not None and lay.bound.resource in ("prefill", "step")
    assert lay.preemptions == 0 and lay.shares == {"engine": 0.0, "recomputed": 1.0}


def test_what_bounds_it_is_read_off_the_run() -> None:
    """One request alone: the prefill, decode and steps are its own, by hand."""
    costs = StepCosts(fixed_s=0.002, prefill_s_per_token=1e-4, prefill_attn_s_per_token2=1e-9,
                      decode_s_per_seq=5e-4, decode_s_per_kv_token=1e-7)  # fmt: skip
    layout = Layout(costs=costs, limits=PLAIN.limits.model_copy(update={"max_num_batched_tokens": 1024}))
    req = SimRequest(0.0, 512, 9, tuple(range(32)), 16)
    result = simulate([req], layout)
    uses = {u.resource: u for u in resources_at(result, layout)}
    dur = result.duration_s
    assert uses["prefill"].utilisation == pytest.approx(costs.prefill_s(0, 512) / dur)
    kv = sum(512 + j for j in range(1, 9))  # each decode step attends to the prompt and what came out
    assert uses["decode"].utilisation == pytest.approx((8 * 5e-4 + 1e-7 * kv) / dur, rel=0.02)
    assert uses["step"].utilisation == pytest.approx(9 * 0.002 / dur)  # one prefill step, 8 decodes
    parts = sum(uses[k].utilisation for k in ("prefill", "decode", "step"))
    assert parts == pytest.approx(result.busy_fraction, rel=0.02)
    assert all(uses[k].engine_busy == result.busy_fraction for k in ("prefill", "decode", "step"))
    assert uses["pool"].utilisation < 1 and uses["pool"].capacity == 1000 * 16


def _warm_workload(prefixes: int, prompt: int, rate: float) -> SimWorkload:
    """``prefixes`` prompts warmed first (alone), then requests each wholly one of them."""
    measured = synthetic(requests=120, rate_per_s=rate, prompt_tokens=prompt, output_tokens=1,
                         shared_prefix_share=1.0, prefix_groups=prefixes, id_tokens=64, seed=3)  # fmt: skip
    n = prompt // 64
    gap = 1e4
    warm = [SimRequest(g * gap, n * 64, 1, tuple(range(g * n, (g + 1) * n)), 64) for g in range(prefixes)]
    start = (prefixes + 1) * gap
    shifted = [SimRequest(start + r.arrival_s, r.prompt_tokens, 1, r.prefix_ids, 64) for r in measured]
    return SimWorkload([*warm, *shifted], "warm", warmup=prefixes)


def test_a_tier_serving_the_hits_raises_a_prefill_bound_capacity() -> None:
    """Prefill dominates (long prompts, no decode); the pool holds one prefix of eight, the DRAM tier
    all of them at a fast link: its layout serves the hits the pool misses, and sustains more."""
    costs = StepCosts(fixed_s=0.001, prefill_s_per_token=1e-4, decode_s_per_seq=0.0)
    limits = SchedulerLimits(max_num_batched_tokens=4096, max_num_seqs=64, block_tokens=16, pool_blocks=80)
    dram = TierSpec(kind="cpu", capacity_chunks=8 * 1024 // 64, chunk_tokens=64, bytes_per_token=1e3,
                    load_bw_bytes_per_s=1e11, store_bw_bytes_per_s=1e11)  # fmt: skip
    engine = Layout(name="engine", costs=costs, limits=limits)
    deeper = Layout(name="engine+cpu", costs=costs, limits=limits, tiers=(dram,))
    work = _warm_workload(8, 1024, 2.0)
    ask = CapacityAsk(slo_ttft_s=0.5, output_tokens=1)
    alone, tiered = layout_capacity(work, engine, ask), layout_capacity(work, deeper, ask)
    assert alone.rate_per_s and tiered.rate_per_s and tiered.rate_per_s > alone.rate_per_s
    assert alone.bound is not None and alone.bound.resource == "prefill"
    assert tiered.shares["cpu"] > 0.5 > alone.shares.get("engine", 0.0)


def test_an_slo_below_a_cold_prefill_has_no_capacity() -> None:
    ask = CapacityAsk(slo_ttft_s=0.05, output_tokens=1)
    lay = layout_capacity(SimWorkload(WORK, "ten"), PLAIN, ask)  # a request alone takes 74 ms
    assert lay.status == "slo_below_unloaded" and lay.rate_per_s == 0.0
    assert lay.unloaded_ttft_s == pytest.approx(S)


def test_the_synthetic_workload_is_the_plans_warm_set() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", "rag-long-doc", context=8192, users=16, offload="lmcache-mp")
    ask = CapacityAsk(slo_ttft_s=1.0, output_tokens=32)
    layouts, _ = sim_layouts(plan, plan_costs(plan) or [])
    work = synthetic_workload(plan, ask, layouts)
    prompt = synthetic_prompt(plan, ask)
    assert prompt == min(plan.workload.context_tokens, plan.model.max_model_len - 32)
    groups = round(plan.workload.users * plan.workload.reuse)
    chunk = plan.cache.chunk_size
    shared = prompt // chunk * chunk
    # Warm-ups: the last prefixes the largest cache holds, each alone, whole chunks of its prefix.
    expected = min(groups, max(held_tokens(lay) for lay in layouts) // shared + 1)
    assert work.warmup == expected and len(work.measured) == SYNTHETIC_REQUESTS
    warm = work.requests[: work.warmup]
    gap = 2 * HIGHEST * max(cold_s(lay, prompt) for lay in layouts)
    assert [r.arrival_s for r in warm] == pytest.approx([g * gap for g in range(len(warm))])
    assert all(r.prompt_tokens == shared and r.output_tokens == 1 for r in warm)
    assert min(r.arrival_s for r in work.measured) > warm[-1].arrival_s + gap
    assert all(r.prompt_tokens == prompt and r.output_tokens == 32 for r in work.measured)
    # Each measured prompt is wholly one prefix: its leading ids are one group's, as a warm-up's.
    n = shared // chunk
    firsts = {r.prefix_ids[0] for r in work.measured}
    assert firsts <= {g * n for g in range(groups)} and len(firsts) > 1
    assert all(r.prefix_ids[:n] == tuple(range(r.prefix_ids[0], r.prefix_ids[0] + n)) for r in work.measured)
    assert f"one of {groups} shared prefix(es)" in work.describe


def test_the_plan_predicts_each_depth_and_names_its_bound() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", "rag-long-doc", context=8192, users=16)
    cap = plan_capacity(plan, CapacityAsk(slo_ttft_s=2.0, output_tokens=16), device_bytes=80 << 30)
    assert cap.layouts[0].layout == "engine" and len(cap.layouts) == len(plan.cache.tiers)
    assert cap.requests == SYNTHETIC_REQUESTS and not cap.traced and cap.base_rate_per_s
    assert cap.costs_from.startswith("the plan's TTFT model") and "8,192 tokens a step" in cap.limits_from
    for lay in cap.layouts:
        assert lay.status in ("slo", "above_range", "slo_below_unloaded")
        if lay.rate_per_s:
            assert lay.bound is not None and lay.resources and len(lay.ttft_at) == 2


def test_each_depth_carries_the_levels_it_has() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", "rag-long-doc", users=64)
    kinds = [t.kind for t in plan.offload_tiers]
    costed = plan_costs(plan)
    assert costed is not None
    assert [c.levels for c in costed] == [("engine", *kinds[:k]) for k in range(len(kinds) + 1)]
    assert [len(c.fetch) for c in costed] == list(range(len(kinds) + 1))


def test_a_plan_without_a_prefill_figure_says_so() -> None:
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", context=8192)
    cap = plan_capacity(plan, CapacityAsk(slo_ttft_s=1.0))
    assert cap.layouts == [] and "no prefill figure" in cap.note
