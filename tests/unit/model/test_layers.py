"""Layer kinds read from config.json the way each family's config class and vLLM read them."""

from __future__ import annotations

from typing import Any

import pytest

from kvstack.model.geometry import geometry_from_config
from kvstack.model.layers import layer_stack, state_shape


def _stack(cfg: dict[str, Any], layers: int, max_context: int = 32768) -> tuple[int, int, int, int]:
    s = layer_stack(cfg, layers, max_context)
    return s.full, s.sliding, s.chunked, s.state


GEMMA3_270M: dict[str, Any] = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "num_hidden_layers": 18,
    "hidden_size": 640,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "sliding_window": 512,
    "max_position_embeddings": 32768,
    "vocab_size": 262144,
    "intermediate_size": 2048,
    "torch_dtype": "bfloat16",
}

# A Mamba2 hybrid (Granite 4): one attention layer among three state layers.
GRANITE4: dict[str, Any] = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16384,
    "vocab_size": 1024,
    "layer_types": ["mamba", "attention", "mamba", "mamba"],
    "mamba_n_heads": 8,
    "mamba_d_head": 32,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_n_groups": 1,
}


@pytest.mark.parametrize(
    ("cfg", "layers", "want"),
    [
        # Gemma 3 without layer_types: every 6th layer global (transformers' sliding_window_pattern).
        ({"model_type": "gemma3_text", "sliding_window": 512}, 18, (3, 15, 0, 0)),
        ({"model_type": "gemma3_text", "sliding_window": 512, "sliding_window_pattern": 2}, 4, (2, 2, 0, 0)),
        # Gemma 2 and gpt-oss alternate, sliding first.
        ({"model_type": "gemma2", "sliding_window": 4096}, 4, (2, 2, 0, 0)),
        ({"model_type": "gpt_oss", "sliding_window": 128}, 24, (12, 12, 0, 0)),
        # An explicit list wins over the family's default.
        (
            {"model_type": "gemma3_text", "sliding_window": 512, "layer_types": ["full_attention"] * 4},
            4,
            (4, 0, 0, 0),
        ),
        # Llama 4: a RoPE layer is chunked, a NoPE layer (every 4th by default) global.
        ({"model_type": "llama4_text", "attention_chunk_size": 8192}, 8, (2, 0, 6, 0)),
        (
            {"model_type": "llama4_text", "attention_chunk_size": 8192, "no_rope_layers": [1, 0]},
            2,
            (1, 0, 1, 0),
        ),
        # Qwen3-Next: a full-attention layer every full_attention_interval, gated delta-net between.
        ({"model_type": "qwen3_next"}, 8, (2, 0, 0, 6)),
        # Granite 4 (legacy names), Nemotron-H's pattern, Bamba's indices, Jamba's period.
        ({"layer_types": ["mamba", "mamba", "attention", "mamba"]}, 4, (1, 0, 0, 3)),
        ({"hybrid_override_pattern": "M-M*-E"}, 6, (1, 0, 0, 2)),
        ({"attn_layer_indices": [1]}, 3, (1, 0, 0, 2)),
        ({"attn_layer_period": 4, "attn_layer_offset": 2}, 8, (2, 0, 0, 6)),
        # Qwen2: the window off, or from max_window_layers up; Mistral: every layer.
        ({"sliding_window": 4096, "use_sliding_window": False}, 4, (4, 0, 0, 0)),
        ({"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 3}, 4, (3, 1, 0, 0)),
        ({"sliding_window": 4096}, 4, (0, 4, 0, 0)),
        # A window at or above the context bounds nothing.
        ({"model_type": "gemma3_text", "sliding_window": 65536}, 6, (6, 0, 0, 0)),
    ],
)
def test_layer_kinds_by_family(cfg: dict[str, Any], layers: int, want: tuple[int, int, int, int]) -> None:
    assert _stack(cfg, layers) == want


def test_gemma3_270m_geometry() -> None:
    geo = geometry_from_config(GEMMA3_270M, "gemma3-270m", "test")
    assert (geo.full_attention_layers, geo.sliding_layers, geo.sliding_window) == (3, 15, 512)
    assert geo.layer_kv_bytes_per_token == 2 * 256 * 2  # K and V, one KV head of 256, bf16
    assert geo.kv_bytes_per_token == 3 * 1024  # the global layers only
    assert geo.hybrid and geo.kv_kinds == ("full", "sliding")
    assert geo.layer_summary() == "15 sliding-window (512) + 3 full-attention"
    assert geo.layer_kinds_source == "sliding_window_pattern"


def test_state_layers_keep_no_per_token_kv() -> None:
    geo = geometry_from_config(GRANITE4, "granite", "test")
    assert (geo.full_attention_layers, geo.state_layers) == (1, 3)
    assert geo.kv_bytes_per_token == 2 * 2 * 64 * 2  # one attention layer
    conv = (4 - 1) * (8 * 32 + 2 * 1 * 16)
    assert geo.state_bytes_per_sequence == 3 * (conv + 8 * 32 * 16) * 2
    assert geo.state_page_bytes(ssm_float32=True) == conv * 2 + 8 * 32 * 16 * 4
    gdn = {"linear_key_head_dim": 16, "linear_value_head_dim": 32, "linear_num_key_heads": 2}
    gdn |= {"linear_num_value_heads": 4, "linear_conv_kernel_dim": 4}
    shape = state_shape(gdn, 256)
    assert (shape.kind, shape.conv_elements, shape.ssm_elements) == (
        "gdn",
        3 * (2 * 2 * 16 + 4 * 32),
        4 * 16 * 32,
    )
    nemotron = state_shape({"model_type": "nemotron_h", "mamba_num_heads": 8, "ssm_state_size": 64}, 256)
    assert nemotron.kind == "mamba2" and nemotron.ssm_float32


def test_plain_decoder_serializes_as_before() -> None:
    """A decoder whose every layer is full attention carries none of the new fields in its JSON."""
    plain = dict(GEMMA3_270M, model_type="llama", sliding_window=None)
    dumped = geometry_from_config(plain, "x", "test").model_dump()
    for key in ("chunked_layers", "state_layers", "attention_sinks", "layer_kinds_source"):
        assert key not in dumped
