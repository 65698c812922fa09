"""A model's KV geometry (ModelGeometry) from its config.json: layers by kind (model/layers.py), KV
heads, MLA, sliding windows, chunked local attention, state-space layers, MoE and quantized weight
sizes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from kvstack.errors import MissingConfigKey, ModelConfigError
from kvstack.jsonvalue import JsonObject
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.model.layers import ATTENTION_FREE, StateShape, layer_stack, state_shape

Attention = Literal["mha", "gqa", "mla"]


class ModelGeometry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    source: str  # "catalog" or the local directory
    architecture: str | None = None
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    attention: Attention
    kv_lora_rank: int | None = None  # MLA only
    qk_rope_head_dim: int | None = None  # MLA only
    dtype: str = "bfloat16"  # the model's own (activation/KV) dtype
    dtype_bytes: int = 2
    kv_bytes_per_token: int  # full-attention layers, at the model's own dtype
    full_attention_layers: int
    sliding_layers: int = 0
    sliding_window: int | None = None
    sliding_kv_bytes_per_sequence: int = 0  # bounded cost of the sliding layers, model dtype
    # Chunked local attention (Llama 4): a layer keeps at most one chunk of tokens.
    chunked_layers: int = 0
    attention_chunk: int | None = None
    # State-space / linear-attention layers (Mamba, gated delta-net): a fixed state per sequence
    # (all of them together, model dtype), no per-token KV.
    state_layers: int = 0
    state: StateShape | None = None  # one state layer's shape
    attention_sinks: bool = False  # gpt-oss: a learned sink per head (changes the backend, not the KV)
    layer_kinds_source: str | None = None  # the config key(s) the layer kinds were read from
    max_context: int
    params: int  # total parameters
    active_params: int  # parameters used per token (MoE: fewer than params)
    weight_bytes_per_param: float = 2.0
    vocab_size: int | None = None
    # --- optional facts the planner uses for prefill FLOPs and reports ---
    model_type: str | None = None
    weight_dtype: str = "bfloat16"  # how the checkpoint stores weights: bfloat16, fp8, mxfp4, int4 ...
    qk_head_dim: int | None = None  # per query head, for attention FLOPs (MLA: nope + rope)
    v_head_dim: int | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    # The weight files' size as stored, when the checkpoint (or the hub's listing of it) is at hand.
    checkpoint_bytes: int | None = None
    # The engine's own answer (model/engine_spec.py): where set, the layer counts above are its, and
    # model/kv_groups.py sizes blocks and groups from it; None: the figures are kvstack's estimate.
    engine_spec: EngineKvSpec | None = None
    # The checkpoint's own dtype where the engine computes in another (``computed_in``: float32 on a
    # CPU without bf16 arithmetic); None: it computes in ``dtype``, the checkpoint's.
    checkpoint_dtype: str | None = None
    # vLLM's name for the checkpoint's quantization (its QuantizationMethods: fp8, mxfp4, modelopt_fp4,
    # compressed-tensors, awq, gptq, ...); None: unquantized.
    quant_method: str | None = None
    # What vLLM on this machine's platform refused, where the plan is for another one (a CPU host
    # planning a GPU): quoted as a note, not the verdict (serving/engine_check.py).
    local_refusal: str | None = None

    def computed_in(self, dtype: str) -> ModelGeometry:
        """The model as the engine holds it when it computes in ``dtype`` (its ``--dtype``): the KV
        and the unquantized weights at that dtype's bytes; the state's conv part follows dtype_bytes.
        The engine's own spec keeps its layer kinds, but its pages were reported at the dtype it was
        asked in: at another one the blocks are kvstack's estimate (``blocks_checked`` False)."""
        if dtype == self.dtype:
            return self
        size = COMPUTE_DTYPES[dtype]
        scale = size / self.dtype_bytes
        own = self.checkpoint_dtype or self.dtype
        out = self.model_copy()
        out.dtype, out.dtype_bytes = dtype, size
        out.kv_bytes_per_token = round(self.kv_bytes_per_token * scale)
        out.sliding_kv_bytes_per_sequence = round(self.sliding_kv_bytes_per_sequence * scale)
        out.checkpoint_dtype = None if dtype == own else own
        if self.weight_dtype in COMPUTE_DTYPES:  # unquantized weights are cast to the compute dtype
            out.weight_bytes_per_param = float(size)
        spec = self.engine_spec
        if spec is not None and spec.model_dtype != dtype and spec.blocks_checked:
            out.engine_spec = spec.unchecked()
        return out

    def with_checkpoint_bytes(self, size: int) -> ModelGeometry:
        """A shallow copy (unvalidated, as ``model_copy``) whose weight files hold ``size`` bytes."""
        out = self.model_copy()
        out.checkpoint_bytes = size
        return out

    @model_serializer(mode="wrap")
    def _drop_plain_layers(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A decoder whose every layer is full attention serializes as it did before layer kinds.
        out = handler(self)
        if isinstance(out, dict):
            for key, default in _LAYER_DEFAULTS.items():
                if key in out and out[key] == default:
                    del out[key]
        return out

    @property
    def weight_bytes(self) -> int:
        """The weights as the engine holds them: the checkpoint's size when known (cast to the
        compute dtype where the engine computes in another: ``computed_in``), else the estimate from
        the config's shapes and format."""
        if self.checkpoint_bytes is not None:
            own = self.checkpoint_dtype
            if own in COMPUTE_DTYPES and self.weight_dtype in COMPUTE_DTYPES:
                return round(self.checkpoint_bytes * self.dtype_bytes / COMPUTE_DTYPES[own])
            return self.checkpoint_bytes
        return math.ceil(self.params * self.weight_bytes_per_param)

    def state_page_bytes(self, ssm_float32: bool = False) -> int:
        """One state layer's per-sequence state in bytes: conv at the model's dtype, SSM at its cache
        dtype (float32 where the family defaults to it, or where the engine resets it)."""
        if self.state is None:
            return 0
        ssm = 4 if ssm_float32 or self.state.ssm_float32 else self.dtype_bytes
        return self.state.conv_elements * self.dtype_bytes + self.state.ssm_elements * ssm

    @property
    def state_bytes_per_sequence(self) -> int:
        """Every state layer's per-sequence state, at the model's dtype (no per-token KV)."""
        return self.state_layers * self.state_page_bytes()

    @property
    def attention_layers(self) -> int:
        """Layers that keep per-token KV: full, sliding and chunked."""
        return self.full_attention_layers + self.sliding_layers + self.chunked_layers

    @property
    def layer_kv_bytes_per_token(self) -> int:
        """One attention layer's KV per token at the model's dtype (every layer kind alike)."""
        return self.kv_heads * self.head_dim * self.dtype_bytes * (1 if self.attention == "mla" else 2)

    @property
    def kv_kinds(self) -> tuple[str, ...]:
        """The kinds of KV the layers keep, one KV cache group type each in vLLM."""
        counts = {
            "full": self.full_attention_layers,
            "sliding": self.sliding_layers,
            "chunked": self.chunked_layers,
            "state": self.state_layers,
        }
        return tuple(kind for kind, n in counts.items() if n)

    @property
    def hybrid(self) -> bool:
        """Several kinds of KV: vLLM's hybrid KV cache manager keeps each kind in its own groups."""
        return len(self.kv_kinds) > 1

    def layer_summary(self) -> str:
        """The layers by kind, in words: "15 sliding-window (512) + 3 full-attention"."""
        parts = []
        if self.sliding_layers:
            parts.append(f"{self.sliding_layers} sliding-window ({self.sliding_window})")
        if self.chunked_layers:
            parts.append(f"{self.chunked_layers} chunked-local ({self.attention_chunk})")
        if self.full_attention_layers:
            parts.append(
                f"{self.full_attention_layers} {'MLA' if self.attention == 'mla' else 'full-attention'}"
            )
        if self.state_layers:
            parts.append(f"{self.state_layers} state-space")
        return " + ".join(parts) or "no attention layers"


_LAYER_DEFAULTS: dict[str, object] = {
    "chunked_layers": 0,
    "attention_chunk": None,
    "state_layers": 0,
    "state": None,
    "attention_sinks": False,
    "layer_kinds_source": None,
    "engine_spec": None,
    "checkpoint_dtype": None,
    "quant_method": None,
    "local_refusal": None,
}

# What the engine can compute in (--dtype), in bytes per element.
COMPUTE_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4}

# vLLM's dtype "auto" serves float32 checkpoints in 16-bit (its --dtype help), so the KV does too.
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2, "fp32": 2}


# DBRX keeps its attention and MoE shapes in sub-configs, under its own names; vLLM reads them
# there (vllm/model_executor/models/dbrx.py; its KV heads: DbrxModelArchConfigConvertor).
_DBRX_KEYS = {
    ("attn_config", "kv_n_heads"): "num_key_value_heads",
    ("ffn_config", "ffn_hidden_size"): "intermediate_size",
    ("ffn_config", "moe_num_experts"): "num_experts",
    ("ffn_config", "moe_top_k"): "num_experts_per_tok",
}


def _text_config(config: Mapping[str, Any]) -> JsonObject:
    """Multimodal checkpoints nest the language model under text_config / llm_config; DBRX its
    attention under attn_config and its experts under ffn_config."""
    out = dict(config)
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping) and "num_hidden_layers" in nested:
            out.update(nested)
    if out.get("model_type") == "dbrx":
        for (section, key), name in _DBRX_KEYS.items():
            nested = out.get(section)
            if isinstance(nested, Mapping) and nested.get(key) is not None:
                out[name] = nested[key]
    return out


def _int(cfg: Mapping[str, Any], source: str, *keys: str, required: bool = True) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ModelConfigError(
                f"{source}: '{key}' must be a positive integer, not {value!r}",
                hint="fix config.json or use a catalog name",
            )
        return int(value)
    if required:
        raise MissingConfigKey(
            f"{source}: config.json has no '{keys[0]}'",
            hint="point --model at a Hugging Face-style model directory (config.json of a decoder LLM)",
        )
    return None


# The model's context length, first found; after kvstack's own keys, the rest of the keys vLLM reads
# (vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key): Kimi
# Linear's model_max_length, Step 3's max_seq_len.
_MAX_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_seq_length",
    "seq_len",
)


# vLLM's max_model_len where config.json has none of the keys (vllm/config/model.py
# _get_and_verify_max_len: "Assuming the model's maximum length is 2048"): Bloom, Mamba.
DEFAULT_MAX_CONTEXT = 2048


def _max_context(cfg: Mapping[str, Any], source: str) -> int:
    value = _int(cfg, source, *_MAX_CONTEXT_KEYS, required=False)
    return DEFAULT_MAX_CONTEXT if value is None else value


_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")  # DBRX, MPT: n_layers


def _layers(cfg: Mapping[str, Any], source: str) -> int:
    """The layer count; where no key has it, the per-layer list's length (transformers 5's
    Nemotron-H keeps only ``layers_block_type``)."""
    value = _int(cfg, source, *_LAYER_KEYS, required=False)
    if value is not None:
        return value
    listed = cfg.get("layers_block_type")
    if isinstance(listed, list) and listed:
        return len(listed)
    value = _int(cfg, source, *_LAYER_KEYS)
    assert value is not None
    return value


_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")


def _heads(cfg: Mapping[str, Any], source: str) -> int:
    """The attention heads; 0 for an attention-free family, which has none."""
    value = _int(cfg, source, *_HEAD_KEYS, required=cfg.get("model_type") not in ATTENTION_FREE)
    return value or 0


def _moe(cfg: Mapping[str, Any]) -> tuple[int | None, int | None]:
    experts = next(
        (cfg[k] for k in ("n_routed_experts", "num_experts", "num_local_experts") if cfg.get(k)), None
    )
    per_tok = next(
        (cfg[k] for k in ("num_experts_per_tok", "experts_per_token", "moe_topk") if cfg.get(k)), None
    )
    if isinstance(experts, int) and experts > 1:
        return experts, int(per_tok) if isinstance(per_tok, int) else 1
    return None, None


class _Shapes(TypedDict):
    """The attention and vocabulary shapes ``geometry_from_config`` reads once and both
    ``_estimate_params`` and ModelGeometry take (ModelGeometry's field names)."""

    layers: int
    hidden_size: int
    heads: int
    vocab_size: int | None
    attention: Attention
    kv_heads: int
    head_dim: int
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    qk_head_dim: int
    v_head_dim: int
    num_experts: int | None
    experts_per_token: int | None


def _estimate_params(cfg: Mapping[str, Any], geo: _Shapes) -> tuple[int, int, int, int]:
    """(total, active, expert, embedding) parameters from the config's shapes (biases and norms ignored)."""
    hidden, layers, heads = geo["hidden_size"], geo["layers"], geo["heads"]
    vocab = geo["vocab_size"] or 0
    embedding = vocab * hidden * (1 if cfg.get("tie_word_embeddings") is True else 2)
    if geo["attention"] == "mla":
        qk, v, rope, kv_rank = (
            geo["qk_head_dim"],
            geo["v_head_dim"],
            geo["qk_rope_head_dim"],
            geo["kv_lora_rank"],
        )
        assert rope is not None and kv_rank is not None  # set together with attention="mla"
        q_rank = cfg.get("q_lora_rank")
        q = hidden * q_rank + q_rank * heads * qk if isinstance(q_rank, int) else hidden * heads * qk
        attn = q + hidden * (kv_rank + rope) + kv_rank * heads * (qk - rope + v) + heads * v * hidden
    else:
        hd, kvh = geo["head_dim"], geo["kv_heads"]
        attn = 2 * hidden * heads * hd + 2 * hidden * kvh * hd
    # An attention-free family's mixer (in and out projections of expand x hidden) is costed as an MLP.
    expand = cfg.get("expand") if cfg.get("model_type") in ATTENTION_FREE else None
    inter = cfg.get("intermediate_size") or (expand if isinstance(expand, int) else 4) * hidden
    if isinstance(inter, list):  # Gemma 3n: one per layer
        inter = max((int(x) for x in inter if isinstance(x, int | float)), default=4 * hidden)
    experts, per_tok = geo["num_experts"], geo["experts_per_token"]
    dense_mlp = 3 * hidden * int(inter)
    if experts is None or per_tok is None:  # _moe gives both or neither
        total = embedding + layers * (attn + dense_mlp)
        return total, total, 0, embedding
    expert_size = 3 * hidden * int(cfg.get("moe_intermediate_size") or inter)
    shared = int(cfg.get("n_shared_experts") or 0) * expert_size
    if cfg.get("shared_expert_intermediate_size"):
        shared = 3 * hidden * int(cfg["shared_expert_intermediate_size"])
    dense_layers = int(cfg.get("first_k_dense_replace") or 0) + len(cfg.get("mlp_only_layers") or [])
    moe_layers = max(0, layers - dense_layers)
    expert_params = moe_layers * experts * expert_size
    total = embedding + layers * attn + dense_layers * dense_mlp + moe_layers * (shared + hidden * experts)
    total += expert_params
    active = total - moe_layers * (experts - per_tok) * expert_size
    return total, active, expert_params, embedding


def _ct_scheme(weights: Mapping[str, Any]) -> tuple[str, float] | None:
    """(weight dtype, bytes per param) of one compressed-tensors weight scheme."""
    bits, raw_group = weights.get("num_bits"), weights.get("group_size")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 0 < bits < 16:
        return None
    is_float = weights.get("type") == "float"
    # Channel or tensor scales (no group) add next to nothing.
    group = 0
    if isinstance(raw_group, int) and not isinstance(raw_group, bool) and raw_group > 0:
        group = raw_group
    if is_float and bits == 4:
        # NVFP4: an FP8 scale per 16 values; MXFP4: an 8-bit scale per 32.
        name = {16: "nvfp4", 32: "mxfp4"}.get(group, "fp4")
        return name, (4 + (8 / group if group else 0)) / 8
    scale = 16 / group if group else 0  # a 16-bit scale per group
    return f"{'fp' if is_float else 'int'}{bits}", (bits + scale) / 8


def _compressed_tensors(quant: Mapping[str, Any]) -> tuple[str, float] | None:
    """llm-compressor's format: the widest weight scheme of its config_groups (ignored layers: 16 bit)."""
    groups = quant.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    schemes = [
        _ct_scheme(g["weights"])
        for g in groups.values()
        if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
    ]
    found = [s for s in schemes if s is not None]
    return max(found, key=lambda s: s[1]) if found else None


def vllm_quant_method(cfg: Mapping[str, Any]) -> str | None:
    """vLLM's name for the checkpoint's quantization: the config's quant_method, where ModelOpt's is
    resolved by its quant_algo as vLLM's ``override_quantization_method`` does
    (vllm/model_executor/layers/quantization/modelopt.py: FP8 -> modelopt, NVFP4 -> modelopt_fp4,
    MXFP8 -> modelopt_mxfp8, MIXED_PRECISION -> modelopt_mixed)."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    method = str(quant.get("quant_method", "")).lower() or None
    if method == "modelopt":
        algo = str(quant.get("quant_algo", "")).upper()
        for key, name in (
            ("NVFP4", "modelopt_fp4"),
            ("MXFP8", "modelopt_mxfp8"),
            ("MIXED", "modelopt_mixed"),
        ):
            if key in algo:
                return name
    return method


def _weight_format(cfg: Mapping[str, Any], dtype_bytes: int) -> tuple[str, float, float]:
    """(weight dtype, bytes per expert param, bytes per other linear param) from quantization_config."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, Mapping):
        return ("bfloat16" if dtype_bytes == 2 else "float16"), float(dtype_bytes), float(dtype_bytes)
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":
        # gpt-oss: MoE experts in MXFP4 (4-bit values + one 8-bit scale per 32 = 4.25 bits), the rest bf16.
        return "mxfp4", 4.25 / 8, 2.0
    if method == "compressed-tensors":
        found = _compressed_tensors(quant)
        if found is not None:
            return found[0], found[1], found[1]
    if method == "modelopt":
        algo = str(quant.get("quant_algo", "")).upper()
        if "NVFP4" in algo:
            return "nvfp4", 4.5 / 8, 4.5 / 8  # 4-bit values + one FP8 scale per 16
        if "FP8" in algo:
            return "fp8", 1.0, 1.0
    if method == "bitsandbytes":
        if quant.get("load_in_4bit") is True:
            name = str(quant.get("bnb_4bit_quant_type") or "int4")
            return name, 4 / 8 * 1.03, 4 / 8 * 1.03
        if quant.get("load_in_8bit") is True:
            return "int8", 1.0, 1.0
    if "fp8" in method:
        return "fp8", 1.0, 1.0
    bits = quant.get("bits") or quant.get("w_bit")  # GPTQ, AWQ (w_bit in older AutoAWQ configs)
    if isinstance(bits, int) and 0 < bits < 16:
        return f"int{bits}", bits / 8 * 1.03, bits / 8 * 1.03  # ~3% for group scales and zeros
    return method or "quantized", 1.0, 1.0


def geometry_from_config(config: Mapping[str, Any], name: str, source: str) -> ModelGeometry:
    """KV geometry from a Hugging Face config.json (dict). Raises ModelConfigError naming the field."""
    if not isinstance(config, Mapping):
        raise ModelConfigError(f"{source}: config.json must be a JSON object", hint="fix config.json")
    cfg = _text_config(config)
    layers = _layers(cfg, source)
    hidden = _int(cfg, source, "hidden_size", "n_embd", "d_model")
    heads = _heads(cfg, source)
    assert hidden is not None
    kv_heads = _int(cfg, source, "num_key_value_heads", "num_kv_heads", required=False) or heads
    head_dim = (_int(cfg, source, "head_dim", required=False) or hidden // heads) if heads else 0
    raw_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").removeprefix("torch.")
    if raw_dtype not in _DTYPE_BYTES:
        raise ModelConfigError(
            f"{source}: unsupported torch_dtype {raw_dtype!r}", hint="expected bfloat16, float16 or float32"
        )
    dtype = "float16" if raw_dtype in ("float16", "half") else "bfloat16"
    dtype_bytes = _DTYPE_BYTES[raw_dtype]
    max_context = _max_context(cfg, source)
    vocab = cfg.get("vocab_size")
    num_experts, experts_per_token = _moe(cfg)
    kv_rank = _int(cfg, source, "kv_lora_rank", required=False)
    if kv_rank is not None:
        rope = _int(cfg, source, "qk_rope_head_dim", required=False) or 64
        nope = _int(cfg, source, "qk_nope_head_dim", required=False) or 128
        v_dim = _int(cfg, source, "v_head_dim", required=False) or nope
        # MLA caches one latent per layer and token: kv_lora_rank + the decoupled RoPE key (no factor 2).
        attention: Attention = "mla"
        kv_heads, head_dim, qk_head_dim, v_head_dim = 1, kv_rank + rope, nope + rope, v_dim
        rope_dim: int | None = rope
        per_layer_token = (kv_rank + rope) * dtype_bytes
    else:
        attention = "mha" if kv_heads == heads else "gqa"
        qk_head_dim = v_head_dim = head_dim
        rope_dim = None
        per_layer_token = 2 * kv_heads * head_dim * dtype_bytes
    geo = _Shapes(
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else None,
        attention=attention,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_lora_rank=kv_rank,
        qk_rope_head_dim=rope_dim,
        qk_head_dim=qk_head_dim,
        v_head_dim=v_head_dim,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
    )
    stack = layer_stack(cfg, layers, max_context)
    window, chunk = stack.sliding_window, stack.attention_chunk
    total, active, expert_params, embedding = _estimate_params(cfg, geo)
    weight_dtype, expert_bytes, linear_bytes = _weight_format(cfg, dtype_bytes)
    weight_bytes = expert_params * expert_bytes + (total - expert_params - embedding) * linear_bytes
    weight_bytes += embedding * dtype_bytes  # embeddings and lm_head stay in 16 bit in every format above
    architectures = cfg.get("architectures")
    return ModelGeometry(
        name=name,
        source=source,
        architecture=architectures[0] if isinstance(architectures, list) and architectures else None,
        dtype=dtype,
        dtype_bytes=dtype_bytes,
        kv_bytes_per_token=stack.full * per_layer_token,
        full_attention_layers=stack.full,
        sliding_layers=stack.sliding,
        sliding_window=window,
        sliding_kv_bytes_per_sequence=stack.sliding * per_layer_token * (window or 0),
        chunked_layers=stack.chunked,
        attention_chunk=chunk,
        state_layers=stack.state,
        state=state_shape(cfg, hidden) if stack.state else None,
        attention_sinks=cfg.get("model_type") == "gpt_oss",
        layer_kinds_source=stack.source if stack.hybrid or stack.sliding else None,
        max_context=max_context,
        params=total,
        active_params=active,
        weight_bytes_per_param=weight_bytes / total if total else float(dtype_bytes),
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
        weight_dtype=weight_dtype,
        quant_method=vllm_quant_method(cfg),
        **geo,
    )
