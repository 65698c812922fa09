"""A sliding-window hybrid's tiers on CUDA are sized by what LMCache's cache server stores per chunk
(planning/stored_kv.py), from the model's own config (gpt-oss-20b: a 128-token window, 256-token
chunks), and its server gets LMCache's object groups."""

from __future__ import annotations

from kvstack.planning.dtype import dtype_bytes
from kvstack.planning.kv import chunk_size, footprint, plan_layout
from kvstack.planning.stored_kv import stored_kv
from tests.support.models import GPT_OSS_20B, LLAMA_8B

from .helpers import plan_for


def _stored_per_token(kv_dtype: str) -> float:
    """LMCache's rule, worked by hand: every full layer's whole chunk, every sliding layer's last
    min(window, chunk) tokens of it (lmcache/v1/kv_layer_groups.py:580-602)."""
    g = GPT_OSS_20B
    scale = dtype_bytes(kv_dtype, g) / g.dtype_bytes
    chunk = 256
    kept = min(g.sliding_window or 0, chunk)
    return (
        (g.full_attention_layers * chunk + g.sliding_layers * kept)
        * g.layer_kv_bytes_per_token
        * scale
        / chunk
    )


def test_gpt_oss_tiers_hold_what_lmcache_stores_not_what_vllm_allocates() -> None:
    plan = plan_for("h100-sxm", GPT_OSS_20B, "rag-long-doc")
    assert plan.transfer.connector == "lmcache-mp" and plan.cache.hybrid_manager is None
    per_token = _stored_per_token(plan.cache.kv_cache_dtype)
    layout = plan_layout(plan.platform, plan.cache.hybrid_manager, plan.cache.kv_in_flight_tokens)
    kv = footprint(
        plan.model.geometry,
        dtype_bytes(plan.cache.kv_cache_dtype, plan.model.geometry),
        1,
        plan.workload.context_tokens,
        layout,
    )
    assert per_token > kv.effective_bytes_per_token  # a window half the chunk: more than allocated
    for tier in plan.offload_tiers:
        assert tier.tokens == int(tier.size_bytes // per_token), tier.kind
    assert plan.ttft is not None and plan.ttft.bytes_per_token == per_token
    why = plan.reasons["stored_kv"]
    assert f"{per_token:,.0f} B per token" in why and "last 128" in why and "kv_layer_groups.py" in why
    assert "--separate-object-groups" in plan.reasons["object_groups"]


def test_a_dense_model_and_a_connector_storing_as_allocated_get_no_stored_figure() -> None:
    dense = plan_for("h100-sxm", LLAMA_8B, "rag-long-doc")
    assert "stored_kv" not in dense.reasons and "object_groups" not in dense.reasons
    native = plan_for("h100-sxm", GPT_OSS_20B, "rag-long-doc", offload="native")
    assert native.transfer.connector == "native" and "stored_kv" not in native.reasons


def test_a_window_as_long_as_the_chunk_stores_every_token_and_the_manager_off_stores_as_allocated() -> None:
    g = GPT_OSS_20B
    kv = footprint(g, g.dtype_bytes, 1, 131072)
    chunk, _ = chunk_size(131072)
    wide = stored_kv(g, kv, g.dtype_bytes, "lmcache-mp", "cuda", True, min(chunk, g.sliding_window or 0))
    assert wide is not None
    assert wide.bytes_per_token == g.attention_layers * g.layer_kv_bytes_per_token
    assert stored_kv(g, kv, g.dtype_bytes, "lmcache-mp", "cuda", False, chunk) is None
    assert stored_kv(g, kv, g.dtype_bytes, "lmcache-mp", "cpu", True, chunk) is None
