"""Model geometries the tests build plans from (facts as in shared/REFERENCE.md).

The bundled demo model (profiles/demo/config.json: 2 layers, 2 KV heads, head_dim 64, bf16 ->
1 KiB/token), Llama-3.1-8B (32 x 8 x 128 -> 128 KiB/token bf16) and DeepSeek-V3
(MLA: 61 x (512 + 64) x 2 B = 70,272 B/token).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvstack.model.geometry import ModelGeometry, geometry_from_config

GIB = 1 << 30


def _dense_llama(*, layers: int, kv_heads: int, head_dim: int, params: int, **facts: Any) -> ModelGeometry:
    """A dense LlamaForCausalLM (GQA, every layer full attention, all parameters active) whose bf16
    KV cache holds K and V of every layer: 2 x layers x kv_heads x head_dim x 2 bytes a token."""
    return ModelGeometry(
        architecture="LlamaForCausalLM",
        attention="gqa",
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * 2,
        full_attention_layers=layers,
        params=params,
        active_params=params,
        **facts,
    )


DEMO = _dense_llama(
    name="kvstack-demo",
    source="/opt/kvstack/profiles/demo",
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=64,
    hidden_size=256,
    max_context=16384,
    params=2_000_000,
    vocab_size=1024,
)
LLAMA_8B = _dense_llama(
    name="Llama-3.1-8B-Instruct",
    source="catalog",
    layers=32,
    heads=32,
    kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    max_context=131072,
    params=8_030_000_000,
)
DEEPSEEK_V3 = ModelGeometry(
    name="DeepSeek-V3",
    source="catalog",
    architecture="DeepseekV3ForCausalLM",
    layers=61,
    heads=128,
    kv_heads=128,
    head_dim=128,
    hidden_size=7168,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    kv_bytes_per_token=61 * (512 + 64) * 2,
    full_attention_layers=61,
    max_context=131072,
    params=671_000_000_000,
    active_params=37_000_000_000,
)
# openai/gpt-oss-20b's own config.json (tests/fixtures/configs): 24 layers alternating a 128-token
# sliding window and full attention, 8 KV heads x 64, bf16.
GPT_OSS_20B = geometry_from_config(
    json.loads((Path(__file__).parents[1] / "fixtures" / "configs" / "gpt-oss-20b.json").read_text()),
    "gpt-oss-20b",
    "openai/gpt-oss-20b",
)
