"""planning/predict/simulator/alone.py: one request alone, recomputed, a pool hit and a tier hit,
each figure worked out by hand from the inputs."""

from __future__ import annotations

import pytest

from kvstack.planning.predict.simulator import Layout, SchedulerLimits, StepCosts, TierSpec
from kvstack.planning.predict.simulator.alone import pool_hit_ttft, recomputed_ttft, tier_hit_ttft

FIXED, LIN = 0.01, 0.001  # a step, a prefill token (seconds)
BT, CHUNK, BUDGET = 16, 64, 128
BPT, BW = 1000.0, 1e6  # bytes a token, a tier's bandwidth (a token loads in 1 ms)
OUTSIDE, REQUEST = 0.002, 0.005


def tier(kind: str, chunks: int, latency_s: float = 0.0) -> TierSpec:
    return TierSpec(
        kind=kind,  # type: ignore[arg-type]
        capacity_chunks=chunks, chunk_tokens=CHUNK, bytes_per_token=BPT,
        load_bw_bytes_per_s=BW, load_latency_s=latency_s, store_bw_bytes_per_s=1e18,
    )  # fmt: skip


LAYOUT = Layout(
    costs=StepCosts(fixed_s=FIXED, prefill_s_per_token=LIN, decode_s_per_seq=0.0),
    limits=SchedulerLimits(max_num_batched_tokens=BUDGET, max_num_seqs=4, block_tokens=BT, pool_blocks=1000),
    tiers=(tier("cpu", 100), tier("disk", 100, latency_s=0.003)),
    request_s=REQUEST,
    outside_s=OUTSIDE,
)


def test_a_recomputed_prompt_takes_a_step_a_budget_of_its_tokens() -> None:
    # 300 tokens in steps of 128: three steps, every token computed, the offload path's cost paid once.
    assert recomputed_ttft(LAYOUT, 300) == pytest.approx(OUTSIDE + 3 * FIXED + 300 * LIN + REQUEST)


def test_a_pool_hit_recomputes_its_last_block_only() -> None:
    # 320 tokens, 20 whole blocks: the last token is computed, so its block is (vLLM's rule); no tier
    # and no offload cost on the pool alone.
    assert pool_hit_ttft(LAYOUT, 320) == pytest.approx(OUTSIDE + FIXED + BT * LIN)


def test_a_tier_hit_loads_its_whole_chunks_and_recomputes_the_rest() -> None:
    # 300 tokens: 4 whole chunks (256 tokens) from the tier, 44 recomputed, in one step.
    cpu = tier_hit_ttft(LAYOUT, 0, 300)
    assert cpu == pytest.approx(OUTSIDE + FIXED + REQUEST + 256 * BPT / BW + 44 * LIN)
    disk = tier_hit_ttft(LAYOUT, 1, 300)  # the disk alone: its latency on top
    assert disk == pytest.approx(cpu + 0.003)  # type: ignore[operator]


def test_a_prompt_the_pool_cannot_hold_has_no_figure() -> None:
    small = LAYOUT.model_copy(update={"limits": LAYOUT.limits.model_copy(update={"pool_blocks": 4})})
    assert recomputed_ttft(small, 300) is None and pool_hit_ttft(small, 300) is None
