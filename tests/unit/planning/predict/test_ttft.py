"""Predicted TTFT (kvstack/planning/predict/ttft.py): recompute, a hit, each tier's fetch."""

from __future__ import annotations

import pytest

from kvstack.planning.predict import ttft
from kvstack.planning.predict.breakeven import PrefillModel
from kvstack.planning.schema import FetchPath, TtftModel

from ..helpers import plan_for, roomy_cpu_host

GIB = 1 << 30


def test_the_closed_form_predicts_each_tier_for_a_context_sized_prefix() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", None, context=131072, users=8)
    assert plan.ttft is not None
    # The closed form the simulator's figures replace in the plan (tier_ttft.py), from the same inputs.
    m = ttft.ttft_model(
        131072, plan.ttft.bytes_per_token, plan.offload_tiers,
        prefill=_prefill(plan.ttft), step=(plan.ttft.step_s or 0.0, plan.ttft.step_source),
    )  # fmt: skip
    assert m.context_tokens == 131072
    session = 131072 * m.bytes_per_token
    assert session == pytest.approx(8 * GIB)  # fp8, 64 KiB per token
    cpu, disk = plan.tier("cpu"), plan.tier("disk")
    assert cpu is not None and disk is not None and m.step_s is not None
    # A hit reads the weights once: 15 GiB at 3.35 TB/s.
    assert m.hit_s == pytest.approx(plan.model.weight_bytes / 3.35e12)
    assert m.tier_s["cpu"] == pytest.approx(m.step_s + session / (cpu.read_bw_bytes_per_s or 0))
    assert m.tier_s["disk"] == pytest.approx(m.step_s + ttft_latency(disk.latency_s) + session / 3.2e9)
    assert m.recompute_s is not None
    assert m.hit_s < m.tier_s["cpu"] < m.tier_s["disk"] < m.recompute_s
    # The same figure the plan's prefill rate gives.
    assert m.recompute_s == pytest.approx(131072 / (plan.prefill_tokens_per_s or 1), rel=1e-3)


def _prefill(m: TtftModel) -> PrefillModel:
    assert m.prefill_flops_per_s and m.linear_flops_per_token and m.attn_flops_coeff is not None
    return PrefillModel(m.prefill_flops_per_s, m.linear_flops_per_token, m.attn_flops_coeff, m.prefill_source)


def ttft_latency(latency: float | None) -> float:
    return latency or 0.0


def test_a_cpu_plan_predicts_fetches_but_not_recompute() -> None:
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", None, context=4096, offload="lmcache-mp")
    m = plan.ttft
    assert m is not None and m.recompute_s is None and m.step_s is None
    assert "cpu" in m.fetch and m.fetch["cpu"].bw_bytes_per_s == ttft.CPU_PLATFORM_L1_BW
    assert "assumed" in m.fetch["cpu"].source


MODEL = TtftModel(
    context_tokens=4096,
    bytes_per_token=1024.0,
    prefill_flops_per_s=1e12,
    linear_flops_per_token=2e9,
    attn_flops_coeff=1e4,
    step_s=0.005,
    fetch={"disk": FetchPath(bw_bytes_per_s=1e9, latency_s=1e-3)},
)


def test_predictions_are_anchored_on_the_measured_hit() -> None:
    # Cold: the hit plus (linear x N + attn x N^2) / flops.
    cold = ttft.predicted(MODEL, "cold", 2048, anchor=0.05)
    assert cold == pytest.approx(0.05 + (2e9 * 2048 + 1e4 * 2048**2) / 1e12)
    # A tier: the hit plus the latency plus the prompt's KV over the tier's bandwidth.
    assert ttft.predicted(MODEL, "tier:disk", 2048, anchor=0.05) == pytest.approx(
        0.05 + 1e-3 + 2048 * 1024 / 1e9
    )
    # Without a measured hit the plan's forward step stands in.
    assert ttft.predicted(MODEL, "tier:disk", 2048, anchor=None) == pytest.approx(
        0.005 + 1e-3 + 2048 * 1024 / 1e9
    )
    assert ttft.predicted(MODEL, "tier:remote", 2048, anchor=0.05) is None  # no such tier
    no_prefill = MODEL.model_copy(update={"prefill_flops_per_s": None})
    assert ttft.predicted(no_prefill, "cold", 2048, anchor=0.05) is None
