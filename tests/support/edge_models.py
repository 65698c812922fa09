"""Tiny config-only checkpoints of the families kvstack's config reader does not know (issue #49),
made from transformers' own config classes so that the keys are the family's real ones:

- ``gemma3n``: cross-layer KV sharing (``num_kv_shared_layers``; per-layer lists such as
  ``intermediate_size``);
- ``falcon-h1``: every layer runs attention and a Mamba2 mixer side by side;
- ``lfm2``: short-convolution layers beside attention;
- ``qwen2-swa``: Qwen2 with ``use_sliding_window`` and ``max_window_layers`` below the layer count,
  which vLLM refuses ("Sliding window for some but all layers is not supported").

and the key shapes kvstack's reader once refused before the engine was asked (``READER_MODELS``):

- ``bloom``: ``n_layer`` / ``n_head`` and no context key at all (ALiBi: vLLM assumes 2048);
- ``mamba``, ``mamba2``, ``falcon-mamba``: attention-free, no ``num_attention_heads`` (Mamba2 names
  its SSM heads ``num_heads`` / ``head_dim``);
- ``nemotron-h``: transformers 5's config keeps the layer count in ``layers_block_type`` only;
- ``dbrx``: ``n_layers``, ``d_model``, ``n_heads``, the KV heads under ``attn_config`` and the
  experts under ``ffn_config`` (the sub-configs with the keys databricks/dbrx-instruct's carries).

A directory gets config.json and the demo model's tokenizer files (vocab 1024), no weights: the
engine's spec probe builds the model on the meta device and the planner reads only the config.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # not tests.support.deps's: the sweep runs it without pytest
DEMO = ROOT / "profiles" / "demo"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)
EDGE_MODELS = ("gemma3n", "falcon-h1", "lfm2", "qwen2-swa")
READER_MODELS = ("bloom", "mamba", "mamba2", "falcon-mamba", "nemotron-h", "dbrx")
_COMMON: dict[str, Any] = {"vocab_size": 1024, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}


def _gemma3n() -> Any:
    from transformers import Gemma3nTextConfig

    return Gemma3nTextConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        sliding_window=128,
        layer_types=["sliding_attention"] * 2
        + ["full_attention"]
        + ["sliding_attention"] * 2
        + ["full_attention"],
        num_kv_shared_layers=3,
        hidden_size_per_layer_input=64,
        vocab_size_per_layer_input=1024,
        laurel_rank=16,
        altup_num_inputs=4,
        activation_sparsity_pattern=[0.0] * 6,
        max_position_embeddings=16384,
        architectures=["Gemma3nForCausalLM"],
        **_COMMON,
    )


def _falcon_h1() -> Any:
    from transformers import FalconH1Config

    return FalconH1Config(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        mamba_d_ssm=256,
        mamba_n_heads=8,
        mamba_d_head=32,
        mamba_n_groups=1,
        mamba_d_state=16,
        mamba_d_conv=4,
        max_position_embeddings=16384,
        architectures=["FalconH1ForCausalLM"],
        **_COMMON,
    )


def _lfm2() -> Any:
    from transformers import Lfm2Config

    return Lfm2Config(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        conv_L_cache=3,
        # vLLM's Lfm2 model reads the keys LiquidAI's checkpoints carry beside transformers' own.
        conv_dim=256,
        conv_dim_out=256,
        conv_bias=False,
        block_dim=256,
        block_ff_dim=512,
        block_multiple_of=256,
        block_ffn_dim_multiplier=1.0,
        block_auto_adjust_ff_dim=True,
        layer_types=["conv", "conv", "full_attention", "conv", "conv", "full_attention"],
        max_position_embeddings=16384,
        architectures=["Lfm2ForCausalLM"],
        **_COMMON,
    )


def _qwen2_swa() -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=128,
        max_window_layers=2,
        max_position_embeddings=16384,
        architectures=["Qwen2ForCausalLM"],
        **_COMMON,
    )


def _bloom() -> Any:
    from transformers import BloomConfig

    return BloomConfig(hidden_size=256, n_layer=4, n_head=4, architectures=["BloomForCausalLM"], **_COMMON)


def _mamba() -> Any:
    from transformers import MambaConfig

    return MambaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        state_size=16,
        time_step_rank=16,
        architectures=["MambaForCausalLM"],
        **_COMMON,
    )


def _mamba2() -> Any:
    from transformers import Mamba2Config

    return Mamba2Config(
        hidden_size=256,
        num_hidden_layers=4,
        num_heads=8,
        head_dim=64,
        n_groups=1,
        state_size=16,
        time_step_rank=16,
        architectures=["Mamba2ForCausalLM"],
        **_COMMON,
    )


def _falcon_mamba() -> Any:
    from transformers import FalconMambaConfig

    return FalconMambaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        state_size=16,
        time_step_rank=16,
        architectures=["FalconMambaForCausalLM"],
        **_COMMON,
    )


def _nemotron_h() -> Any:
    from transformers import NemotronHConfig

    return NemotronHConfig(
        hidden_size=256,
        intermediate_size=512,
        layers_block_type=["mamba", "moe", "attention", "mlp"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        mamba_num_heads=8,
        mamba_head_dim=64,
        n_groups=1,
        ssm_state_size=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        moe_shared_expert_intermediate_size=256,
        n_group=1,
        topk_group=1,
        max_position_embeddings=16384,
        architectures=["NemotronHForCausalLM"],
        **_COMMON,
    )


def _dbrx() -> Any:
    from transformers import DbrxConfig

    return DbrxConfig(
        d_model=256,
        n_heads=4,
        n_layers=4,
        max_seq_len=16384,
        attn_config={"clip_qkv": 8, "kv_n_heads": 2, "rope_theta": 500000},
        ffn_config={"ffn_hidden_size": 512, "moe_num_experts": 4, "moe_top_k": 2},
        architectures=["DbrxForCausalLM"],
        **_COMMON,
    )


# The sub-configs as a published DBRX checkpoint writes them: transformers' full dump of them
# (_name_or_path, output_attentions, ...) is what vLLM 0.32 refuses ("Found unknown kwargs").
_DBRX_SECTIONS = {
    "attn_config": ("clip_qkv", "kv_n_heads", "rope_theta"),
    "ffn_config": ("ffn_hidden_size", "moe_jitter_eps", "moe_loss_weight", "moe_num_experts", "moe_top_k"),
}

_MAKERS = {
    "gemma3n": _gemma3n,
    "falcon-h1": _falcon_h1,
    "lfm2": _lfm2,
    "qwen2-swa": _qwen2_swa,
    "bloom": _bloom,
    "mamba": _mamba,
    "mamba2": _mamba2,
    "falcon-mamba": _falcon_mamba,
    "nemotron-h": _nemotron_h,
    "dbrx": _dbrx,
}


def edge_config(name: str) -> dict[str, Any]:
    """The family's config.json as transformers writes it (bfloat16)."""
    config = _MAKERS[name]()
    config.dtype = "bfloat16"
    out: dict[str, Any] = json.loads(config.to_json_string(use_diff=False))
    if name == "dbrx":
        for section, keys in _DBRX_SECTIONS.items():
            out[section] = {k: out[section][k] for k in keys if k in out[section]}
    return out


def write_config_model(config: dict[str, Any], out: Path) -> Path:
    """``out`` with ``config`` as its config.json and the demo tokenizer: a checkpoint without
    weights (plans read the config, the probe builds the model on the meta device)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str) + "\n")
    for file in TOKENIZER_FILES:
        shutil.copy(DEMO / file, out / file)
    return out


def write_edge_model(name: str, out: Path) -> Path:
    """``out`` with the family's config.json and the demo tokenizer."""
    return write_config_model(edge_config(name), out)
