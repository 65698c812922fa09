"""What each layer of a model keeps per token, read from config.json the way vLLM reads it.

A decoder's layers differ in what they cache, and that, not the model's name, decides the KV bytes,
the KV cache groups vLLM forms and which connector can carry them:

- ``full``: full-length K and V (or MLA's latent) for every token of the sequence;
- ``sliding``: at most the last ``sliding_window`` tokens (Gemma 2/3, gpt-oss, Mistral, Qwen2);
- ``chunked``: local attention within chunks of ``attention_chunk_size`` tokens (Llama 4);
- ``state``: a fixed per-sequence state and no per-token KV (Mamba, Mamba2, gated delta-net);
- ``none``: no attention and no state (Nemotron-H's MLP and MoE layers).

The config keys, per family (transformers' config classes derive ``layer_types`` from them when a
config.json lacks it; vLLM's model files read the same): ``layer_types`` / ``layers_block_type``
(Gemma 2/3, gpt-oss, Llama 4, Qwen3-Next, Granite 4); ``sliding_window_pattern`` (older Gemma 3:
every Nth layer global, default 6); Gemma 2 and gpt-oss alternate sliding and full;
``no_rope_layers`` with ``attention_chunk_size`` (Llama 4: a RoPE layer is chunked, a NoPE layer
global, a NoPE layer every ``no_rope_layer_interval`` = 4 by default); ``full_attention_interval``
(Qwen3-Next, default 4); ``hybrid_override_pattern`` (Nemotron-H: M mamba, * attention, - MLP,
E MoE); ``attn_layer_indices`` (Bamba); ``attn_layer_period`` / ``attn_layer_offset`` (Jamba);
``use_sliding_window`` / ``max_window_layers`` (Qwen2); a bare ``sliding_window`` applies to every
layer (Mistral-7B-v0.1); Mamba, Mamba2 and FalconMamba are attention-free, every layer a state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

LayerKind = Literal["full", "sliding", "chunked", "state", "none"]

_BY_NAME: dict[str, LayerKind] = {
    "full_attention": "full",
    "attention": "full",
    "global_attention": "full",
    "hybrid": "full",  # Falcon-H1-style parallel attention + SSM: counted by its attention
    "sliding_attention": "sliding",
    "local_attention": "sliding",
    "chunked_attention": "chunked",
    "mamba": "state",
    "mamba2": "state",
    "linear_attention": "state",
    "conv": "state",  # LFM2's short convolutions keep a per-sequence state
    "mlp": "none",
    "moe": "none",
}
_PATTERN: dict[str, LayerKind] = {"M": "state", "*": "full", "-": "none", "E": "none"}
# Families without attention: every layer a Mamba mixer, no attention heads (vLLM's IsAttentionFree
# models: vllm/model_executor/models/mamba.py, mamba2.py).
ATTENTION_FREE = ("mamba", "mamba2", "falcon_mamba")


class LayerStack(BaseModel):
    """How many layers of each kind a model has, and their bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    full: int
    sliding: int = 0
    chunked: int = 0
    state: int = 0
    sliding_window: int | None = None
    attention_chunk: int | None = None
    source: str  # the config key(s) the kinds were read from

    @property
    def attention(self) -> int:
        """Layers that keep per-token KV (of any length)."""
        return self.full + self.sliding + self.chunked

    @property
    def kinds(self) -> tuple[LayerKind, ...]:
        """The kinds present, in a fixed order (each is one KV cache group type in vLLM)."""
        counts = {"full": self.full, "sliding": self.sliding, "chunked": self.chunked, "state": self.state}
        return tuple(k for k, n in counts.items() if n)  # type: ignore[misc]

    @property
    def hybrid(self) -> bool:
        """More than one kind of KV: vLLM's hybrid KV cache manager forms several groups."""
        return len(self.kinds) > 1


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _from_names(names: Sequence[Any], layers: int) -> list[LayerKind] | None:
    kinds = [_BY_NAME.get(str(n).lower()) for n in names[:layers]]
    if len(kinds) < layers or any(k is None for k in kinds):
        return None
    return [k for k in kinds if k is not None]


def _listed(cfg: Mapping[str, Any], layers: int) -> tuple[list[LayerKind], str] | None:
    """The kinds from an explicit per-layer list or pattern."""
    for key in ("layer_types", "layers_block_type"):
        names = cfg.get(key)
        if isinstance(names, list) and names:
            kinds = _from_names(names, layers)
            if kinds is not None:
                return kinds, key
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) >= layers and all(c in _PATTERN for c in pattern):
        return [_PATTERN[c] for c in pattern[:layers]], "hybrid_override_pattern"
    indices = cfg.get("attn_layer_indices")
    if isinstance(indices, list) and indices:
        attn = {i for i in indices if isinstance(i, int)}
        return [("full" if i in attn else "state") for i in range(layers)], "attn_layer_indices"
    period, offset = _int(cfg.get("attn_layer_period")), cfg.get("attn_layer_offset")
    if period is not None and isinstance(offset, int):
        jamba: list[LayerKind] = ["full" if i % period == offset else "state" for i in range(layers)]
        return jamba, "attn_layer_period/attn_layer_offset"
    return None


def _by_family(cfg: Mapping[str, Any], layers: int) -> tuple[list[LayerKind], str] | None:
    """The kinds a family's config class derives when config.json lists none."""
    model_type = str(cfg.get("model_type") or "")
    if model_type.startswith("llama4") and _int(cfg.get("attention_chunk_size")):
        rope = cfg.get("no_rope_layers")
        interval = _int(cfg.get("no_rope_layer_interval")) or 4
        if not (isinstance(rope, list) and len(rope) >= layers):
            rope = [int((i + 1) % interval != 0) for i in range(layers)]
        return [
            "chunked" if rope[i] else "full" for i in range(layers)
        ], "no_rope_layers/attention_chunk_size"
    if model_type.startswith("qwen3_next"):
        interval = _int(cfg.get("full_attention_interval")) or 4
        kinds: list[LayerKind] = ["full" if (i + 1) % interval == 0 else "state" for i in range(layers)]
        return kinds, "full_attention_interval"
    if model_type.startswith("gemma3"):
        pattern = _int(cfg.get("sliding_window_pattern")) or 6
        return ["sliding" if (i + 1) % pattern else "full" for i in range(layers)], "sliding_window_pattern"
    if model_type in ATTENTION_FREE:
        return ["state"] * layers, f"{model_type}: attention-free"
    if model_type.startswith(("gemma2", "gpt_oss")):
        return ["sliding" if (i + 1) % 2 else "full" for i in range(layers)], f"{model_type}: alternating"
    return None


def _sliding_default(cfg: Mapping[str, Any], layers: int) -> tuple[list[LayerKind], str]:
    """Configs with a window and no per-layer list: Qwen2's max_window_layers, else every layer."""
    if cfg.get("use_sliding_window") is False:
        return ["full"] * layers, "use_sliding_window: false"
    mwl = cfg.get("max_window_layers")
    if cfg.get("use_sliding_window") is True and isinstance(mwl, int) and not isinstance(mwl, bool):
        # transformers' Qwen2: layers at or above max_window_layers use the window.
        return ["sliding" if i >= mwl else "full" for i in range(layers)], "max_window_layers"
    return ["sliding"] * layers, "sliding_window (every layer)"


def layer_stack(cfg: Mapping[str, Any], layers: int, max_context: int) -> LayerStack:
    """The model's layers by kind. A window at or above the maximum context bounds nothing (full)."""
    window = _int(cfg.get("sliding_window"))
    chunk = _int(cfg.get("attention_chunk_size"))
    found = _listed(cfg, layers) or _by_family(cfg, layers)
    if found is None:
        found = _sliding_default(cfg, layers) if window else (["full"] * layers, "every layer full")
    kinds, source = found
    shared = _int(cfg.get("num_kv_shared_layers"))
    if shared:
        # Gemma 3n: the last num_kv_shared_layers layers read an earlier layer's KV and keep none
        # (vLLM skips their spec: kv_sharing_target_layer_name, v1/worker/gpu_model_runner.py).
        kinds = [*kinds[: max(0, layers - shared)], *(["none"] * min(shared, layers))]  # type: ignore[list-item]
        source = f"{source} + num_kv_shared_layers"
    counts = Counter(kinds)
    sliding, chunked = counts["sliding"], counts["chunked"]
    if sliding and (window is None or window >= max_context):
        counts["full"] += sliding
        sliding = 0
    if chunked and (chunk is None or chunk >= max_context):
        counts["full"] += chunked
        chunked = 0
    return LayerStack(
        full=counts["full"],
        sliding=sliding,
        chunked=chunked,
        state=counts["state"],
        sliding_window=window if sliding else None,
        attention_chunk=chunk if chunked else None,
        source=source,
    )


class StateShape(BaseModel):
    """One state layer's per-sequence state, in elements (vLLM's MambaStateShapeCalculator)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["mamba2", "gdn", "mamba1", "short_conv"]
    conv_elements: int  # at the model's dtype
    ssm_elements: int  # at the SSM cache dtype
    ssm_float32: bool = False  # the family's default SSM cache dtype is float32 (Nemotron-H)


def state_shape(cfg: Mapping[str, Any], hidden: int) -> StateShape:
    """Mamba2 (Granite 4, Bamba, Nemotron-H): a conv state of (d_conv - 1) x (d_inner + 2 n_groups
    d_state) and an SSM state of n_heads x head_dim x d_state; Qwen3-Next's gated delta-net: a conv
    state of (kernel - 1) x (2 k_heads k_dim + v_heads v_dim) and a state of v_heads x k_dim x v_dim;
    Mamba1 (Jamba): (d_conv - 1) x d_inner and d_inner x d_state
    (vllm/model_executor/layers/mamba/mamba_utils.py)."""

    def get(*keys: str, default: int = 0) -> int:
        for key in keys:
            value = _int(cfg.get(key))
            if value is not None:
                return value
        return default

    if get("linear_key_head_dim"):
        kd, vd = get("linear_key_head_dim"), get("linear_value_head_dim")
        kh, vh = get("linear_num_key_heads"), get("linear_num_value_heads")
        conv = (get("linear_conv_kernel_dim", default=4) - 1) * (2 * kh * kd + vh * vd)
        return StateShape(kind="gdn", conv_elements=conv, ssm_elements=vh * kd * vd)
    model_type = str(cfg.get("model_type") or "")
    d_state = get("mamba_d_state", "ssm_state_size", "state_size", default=128)
    d_conv = get("mamba_d_conv", "conv_kernel", "mamba_conv_kernel", default=4)
    # Mamba2's own config names its SSM heads as an attention config would: num_heads, head_dim.
    plain = model_type == "mamba2"
    heads = get("mamba_n_heads", "mamba_num_heads", *(("num_heads",) if plain else ()))
    if heads:
        head_dim = get("mamba_d_head", "mamba_head_dim", *(("head_dim",) if plain else ()), default=64)
        groups = get("mamba_n_groups", "n_groups", default=1)
        d_inner = heads * head_dim
        return StateShape(
            kind="mamba2",
            conv_elements=(d_conv - 1) * (d_inner + 2 * groups * d_state),
            ssm_elements=heads * head_dim * d_state,
            # vllm/model_executor/models/config.py: NemotronH's default SSM cache dtype is float32.
            ssm_float32=model_type.startswith("nemotron_h"),
        )
    # Mamba and FalconMamba: d_inner is intermediate_size (expand x hidden); Jamba: mamba_expand.
    own = get("intermediate_size") if model_type in ("mamba", "falcon_mamba") else 0
    d_inner = own or get("mamba_expand", default=2) * hidden
    return StateShape(kind="mamba1", conv_elements=(d_conv - 1) * d_inner, ssm_elements=d_inner * d_state)
