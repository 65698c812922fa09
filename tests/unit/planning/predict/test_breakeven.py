"""Break-even prefix length between fetching from a tier and recomputing
(kvstack/planning/predict/breakeven.py)."""

from __future__ import annotations

import pytest

from kvstack.hardware.gpu_specs import gpu_spec
from kvstack.planning.predict.breakeven import PEAK_FRACTION, breakeven_tokens, prefill_model

from ..helpers import catalog_model

H100 = gpu_spec("NVIDIA H100 80GB HBM3", (9, 0))


def test_prefill_flops_follow_the_stated_formula() -> None:
    llama = catalog_model("llama-3.1-8b")
    pm = prefill_model(llama, H100, tp=2)
    assert pm.flops_per_s == pytest.approx(989e12 * PEAK_FRACTION * 2)
    assert pm.linear_flops_per_token == pytest.approx(2 * llama.active_params)
    # per layer and earlier token: 2 x heads x (qk + v) FLOPs; summed over N tokens ~ heads x 256 x 32 x N^2
    assert pm.attn_flops_coeff == 32 * 256 * 32
    n = 8192
    assert pm.recompute_seconds(n) == pytest.approx(
        (2 * llama.active_params * n + 32 * 256 * 32 * n * n) / pm.flops_per_s
    )
    assert "0.4" in pm.source and "estimate" in pm.source


def test_moe_uses_active_params_and_calibration_replaces_the_peak() -> None:
    ds = catalog_model("deepseek-v3")
    pm = prefill_model(ds, H100, tp=8, effective_flops=500e12)
    assert pm.linear_flops_per_token == pytest.approx(2 * 37e9)
    assert pm.flops_per_s == pytest.approx(4000e12)
    assert pm.source.startswith("calibrated")


def test_breakeven_is_where_fetch_and_recompute_cost_the_same() -> None:
    llama = catalog_model("llama-3.1-8b")
    pm = prefill_model(llama, H100, tp=1)
    bpt, bw = 131072.0, 1.0e9  # bf16 KV from a 1 GB/s disk
    n = breakeven_tokens(pm, bpt, bw)
    assert n is not None and n > 10_000
    fetch = lambda k: k * bpt / bw  # noqa: E731
    assert fetch(n) <= pm.recompute_seconds(n) * 1.0001
    assert fetch(n - 100) > pm.recompute_seconds(n - 100)


def test_fast_tier_always_wins_and_latency_moves_the_line() -> None:
    pm = prefill_model(catalog_model("llama-3.1-70b"), H100, tp=4)
    assert breakeven_tokens(pm, 163840.0, 200e9) == 0
    with_latency = breakeven_tokens(pm, 163840.0, 200e9, latency_s=1e-3)
    assert with_latency is not None and with_latency > 0
    assert breakeven_tokens(pm, 163840.0, 200e9, latency_s=1e-2) > with_latency  # type: ignore[operator]


def test_never_without_full_attention_when_fetching_is_slower() -> None:
    mistral = catalog_model("mistral-7b")  # all layers sliding: recompute is linear in N
    pm = prefill_model(mistral, H100, tp=1)
    assert pm.attn_flops_coeff == 0
    assert breakeven_tokens(pm, 131072.0, 1e6) is None
    assert breakeven_tokens(pm, 16384.0, 50e9) == 0
    assert breakeven_tokens(pm, 16384.0, 0.0) is None
