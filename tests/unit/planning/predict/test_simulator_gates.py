"""planning/predict/simulator: a layout's request-level gate (tune's gated candidates): a prompt
gate sends short prompts down the plain path, a load gate recomputes a request's few tier tokens."""

from __future__ import annotations

import pytest

from kvstack.planning.predict.simulator import simulate

from .test_simulator import BPT, FIXED, LATENCY, LIN, LOAD_BW, STORE_BW, cpu_tier, layout, limits, req


def test_a_prompt_gate_keeps_shorter_prompts_off_the_offload_path_and_still_stores_them() -> None:
    lay = layout(tiers=(cpu_tier(),), lim=limits(budget=1024, pool=40), request_s=0.02)
    gated = lay.model_copy(update={"gate_prompt_tokens": 600})
    a, _, b = simulate([req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(2.0, 512, 1)], gated).requests
    # A and B are shorter than the gate: no request cost, no tier lookup (B recomputes what the tier
    # holds); A's chunks are still stored. The 640-token prompt takes the offload path.
    assert a.gated and b.gated
    assert (b.pool_hit_tokens, b.tier_hit_tokens, b.recomputed_tokens) == (0, (0,), 512)
    assert a.ttft_s == pytest.approx(FIXED + 512 * LIN + 2 * 256 * BPT / STORE_BW)
    ungated = simulate([req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(2.0, 512, 1)], lay).requests
    assert not any(r.gated for r in ungated) and ungated[2].tier_hit_tokens == (511,)
    assert ungated[1].ttft_s is not None and ungated[1].ttft_s > 0.02


def test_a_load_gate_recomputes_fewer_tier_tokens_than_it_the_lookup_paid() -> None:
    lay = layout(tiers=(cpu_tier(),), lim=limits(budget=1024, pool=40), request_s=0.02)
    reqs = [req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(2.0, 512, 1)]
    *_, b = simulate(reqs, lay.model_copy(update={"gate_load_tokens": 600})).requests
    assert b.gated and (b.tier_hit_tokens, b.recomputed_tokens) == ((0,), 512)
    assert b.ttft_s == pytest.approx(FIXED + 512 * LIN + 0.02)  # recomputed, the offload path paid
    *_, kept = simulate(reqs, lay.model_copy(update={"gate_load_tokens": 500})).requests
    assert not kept.gated and kept.tier_hit_tokens == (511,)
    assert kept.ttft_s == pytest.approx(FIXED + LIN + LATENCY + 511 * BPT / LOAD_BW + 0.02)
