"""KV bytes at a chosen dtype and tensor-parallel size: per token, per rank, per session."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import (
    CPU_ENGINE,
    GPU_BLOCK_SIZE,
    EngineKvParams,
    promotes_local_layers,
    request_kv_bytes,
)
from kvstack.units import fmt_tokens


@dataclass(frozen=True)
class KvLayout:
    """How the engine will hold the model's KV: its hybrid KV cache manager on or off, and the
    block and batch settings that bound sliding and chunked layers (model/kv_groups.py)."""

    hybrid_manager: bool = True
    engine: EngineKvParams = CPU_ENGINE


@dataclass(frozen=True)
class KvFootprint:
    """How much KV one token and one full-context session cost at a dtype and TP size."""

    bytes_per_token: int  # layers that keep full length in this layout, whole model (the plan's)
    bytes_per_token_per_rank: float  # the same, one TP rank
    session_bytes_per_rank: int  # one session at ``context``: as the engine holds it (blocks, windows)
    tp: int
    context: int

    @property
    def session_bytes(self) -> int:
        """One session across all ranks: what every tier (sharded or replicated per rank) stores."""
        return self.session_bytes_per_rank * self.tp

    @property
    def effective_bytes_per_token(self) -> float:
        """Bytes per context token, with the sliding layers' bounded cost spread over the context."""
        return self.session_bytes / self.context

    def tokens(self, size_bytes: int) -> int:
        return int(size_bytes // self.effective_bytes_per_token) if self.effective_bytes_per_token else 0

    def sessions(self, size_bytes: int) -> int:
        return size_bytes // self.session_bytes if self.session_bytes else 0


def rank_share(model: ModelGeometry, tp: int) -> float:
    """Fraction of the model's KV that one TP rank holds.

    GQA/MHA shard KV heads over ranks; with more ranks than KV heads vLLM replicates each head
    (tp / kv_heads copies). MLA's latent is shared by all heads, so every rank holds all of it.
    """
    if model.attention == "mla":
        return 1.0
    if not model.kv_heads:  # attention-free (Mamba): the state's heads and channels shard over ranks
        return 1.0 / tp
    return max(1.0 / tp, 1.0 / model.kv_heads)


def plan_layout(
    platform: str, hybrid_manager: str | None, in_flight_tokens: int | None, prefix_caching: bool = True
) -> KvLayout:
    """The layout a plan was sized with, from its fields (Plan.hybrid_manager, kv_in_flight_tokens,
    prefix_caching)."""
    block = CPU_ENGINE.block_size if platform == "cpu" else GPU_BLOCK_SIZE
    engine = EngineKvParams(
        block, in_flight_tokens or CPU_ENGINE.in_flight_tokens, prefix_caching=prefix_caching
    )
    return KvLayout(hybrid_manager=hybrid_manager != "off", engine=engine)


def bounded_layers(model: ModelGeometry) -> bool:
    """Whether the model has layers the tokens in flight bound (sliding or chunked)."""
    return bool(model.sliding_layers or model.chunked_layers)


def full_length_bytes_per_token(model: ModelGeometry, hybrid_manager: bool) -> int:
    """KV bytes per token of the layers that keep every token, at the model's dtype: the full
    attention layers, or every attention layer once the hybrid manager is off."""
    if promotes_local_layers(model, hybrid_manager):
        return model.attention_layers * model.layer_kv_bytes_per_token
    return model.kv_bytes_per_token


def footprint(
    model: ModelGeometry, dtype_bytes: float, tp: int, context: int, layout: KvLayout | None = None
) -> KvFootprint:
    layout = layout or KvLayout()
    scale = dtype_bytes / model.dtype_bytes
    share = rank_share(model, tp)
    full = full_length_bytes_per_token(model, layout.hybrid_manager) * scale
    session = request_kv_bytes(
        model, context, layout.engine, hybrid_manager=layout.hybrid_manager, dtype_bytes=dtype_bytes
    )
    return KvFootprint(
        bytes_per_token=math.ceil(full),
        bytes_per_token_per_rank=full * share,
        session_bytes_per_rank=max(1, math.ceil(session * share)),
        tp=tp,
        context=context,
    )


LONG_CONTEXT = 128 * 1024


def chunk_size(context: int) -> tuple[int, str]:
    """LMCache's chunk: 256 tokens, 512 above 128K so that long prompts move fewer, larger chunks."""
    if context > LONG_CONTEXT:
        return 512, f"512 tokens: contexts above 128K ({fmt_tokens(context)}) move fewer, larger chunks"
    return 256, "256 tokens, LMCache's default chunk"
