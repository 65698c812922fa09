"""The plan's TTFT of a context-sized prefix on the step-level simulator (planning/predict/
tier_ttft.py): recomputed, a hit on the engine's pool and from each tier, the request alone."""

from __future__ import annotations

import pytest

from kvstack.planning.predict import ttft
from kvstack.planning.predict.plan_capacity import plan_costs
from kvstack.planning.predict.sim_layouts import sim_layouts
from kvstack.planning.predict.simulator.alone import pool_hit_ttft, recomputed_ttft, tier_hit_ttft
from kvstack.planning.predict.tier_ttft import simulated_ttft

from ..helpers import plan_for, roomy_cpu_host, snapshot

CONTEXT = 131072


def test_each_figure_is_the_simulators_and_beside_the_closed_form_it_replaces() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", None, context=CONTEXT, users=8)
    m = plan.ttft
    assert m is not None and m.step_s is not None and m.recompute_s is not None and m.hit_s is not None
    layouts = plan_costs(plan)
    assert layouts is not None
    sims, _ = sim_layouts(plan, layouts, snapshot("h100-sxm").gpus[0].memory_total_bytes)
    assert m.recompute_s == recomputed_ttft(sims[0], CONTEXT)
    assert m.hit_s == pool_hit_ttft(sims[0], CONTEXT)
    assert m.tier_s == {t.kind: tier_hit_ttft(sims[-1], k, CONTEXT) for k, t in enumerate(sims[-1].tiers)}
    # The closed form: one step's fixed part for a hit, the whole prefill for a recompute. The
    # simulator adds a step a chunk of the token budget (8,192 tokens on an H100: 16 of them), and
    # the last block recomputed under a hit.
    budget = sims[0].limits.max_num_batched_tokens
    closed = ttft.recompute_seconds(m, CONTEXT)
    assert closed is not None
    assert m.recompute_s == pytest.approx(closed + (CONTEXT // budget) * m.step_s, rel=1e-3)
    assert m.step_s < m.hit_s < 2 * m.step_s
    # An offload hit pays the connector's per-request cost, and loads the prefix's KV.
    assert m.hit_s < m.tier_s["cpu"] < m.tier_s["disk"] < m.recompute_s
    assert m.tier_s["cpu"] >= sims[-1].request_s
    assert (
        "step-level simulator" in plan.reasons["ttft"] and "16 step(s) of up to 8,192" in plan.reasons["ttft"]
    )


def test_a_tier_smaller_than_the_prefix_has_no_figure_and_the_plan_says_why() -> None:
    plan = plan_for("tight-cgroup", "llama-3.1-8b", "rag-long-doc", users=64)
    cpu = plan.tier("cpu")
    assert plan.ttft is not None and cpu is not None and cpu.tokens < plan.ttft.context_tokens
    assert "cpu" not in plan.ttft.tier_s and "disk" in plan.ttft.tier_s
    assert "cpu holds 64K tokens, less than the prefix" in plan.reasons["ttft"]


def test_a_plan_without_a_prefill_figure_keeps_its_closed_form() -> None:
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", None, context=4096, offload="lmcache-mp")
    assert plan.ttft is not None and plan.ttft.recompute_s is None
    assert simulated_ttft(plan) == plan and "ttft" not in plan.reasons
