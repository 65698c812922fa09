"""What a connector stores of a hybrid model's KV, where that differs from what the engine allocates.

vLLM's hybrid KV cache manager holds a sliding-window layer at its window per request; LMCache's
cache server (LMCache-driven transfer, CUDA) stores, per chunk, each full-attention layer's whole
chunk and each sliding-window layer's last ``min(window, chunk)`` tokens (the connector's spec:
``ConnectorSpec.sliding_stored``). A tier of such a connector is sized, and its tokens counted, by
what the connector stores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvstack.connectors import spec_of
from kvstack.model.geometry import ModelGeometry
from kvstack.names import Platform
from kvstack.planning.kv import KvFootprint, rank_share
from kvstack.units import fmt_tokens


@dataclass(frozen=True)
class StoredKv:
    kv: KvFootprint  # the footprint the connector's tiers hold: session bytes as it stores them
    bytes_per_token: float  # stored bytes per context token, all ranks
    ratio: float  # stored / allocated per context token
    reason: str


def stored_kv(
    model: ModelGeometry,
    kv: KvFootprint,
    dtype_bytes: float,
    connector: str,
    platform: Platform,
    hybrid_manager: bool,
    chunk: int,
) -> StoredKv | None:
    """The connector's stored footprint for ``model``, or None where it stores what the engine
    allocates (no sliding layers, the manager off, or a connector that stores blocks as allocated)."""
    per_chunk = spec_of(connector).sliding_stored.get(platform)
    window = model.sliding_window
    if per_chunk is None or not hybrid_manager or not model.sliding_layers or not window:
        return None
    if model.chunked_layers or model.state_layers or chunk <= 0:
        return None  # what LMCache stores for those groups is not modelled here
    scale = dtype_bytes / model.dtype_bytes
    layer = model.layer_kv_bytes_per_token * scale
    full = model.kv_bytes_per_token * scale
    kept = per_chunk(window, chunk)
    stored = full + model.sliding_layers * layer * kept / chunk
    allocated = kv.effective_bytes_per_token
    share = rank_share(model, kv.tp)
    footprint = KvFootprint(
        bytes_per_token=kv.bytes_per_token,
        bytes_per_token_per_rank=kv.bytes_per_token_per_rank,
        session_bytes_per_rank=max(1, math.ceil(stored * share * kv.context)),
        tp=kv.tp,
        context=kv.context,
    )
    ratio = stored / allocated if allocated else 1.0
    spec = spec_of(connector)
    reason = (
        f"{spec.name} stores per {chunk}-token chunk each full-attention layer's {chunk} tokens and each "
        f"of the {model.sliding_layers} sliding-window layers' last {kept} (window {window}; "
        f"lmcache/v1/kv_layer_groups.py:580-602): {stored:,.0f} B per token against the "
        f"{allocated:,.0f} B the engine allocates at {fmt_tokens(kv.context)} tokens ({ratio:.2f}x), so "
        "its tiers are sized and counted by the stored bytes"
    )
    return StoredKv(footprint, stored, ratio, reason)


def object_groups_flag(model: ModelGeometry, connector: str, platform: Platform, hybrid_manager: bool) -> str:
    """The cache server's flag that gives each sliding-window size (and a state-space group) an
    object group of its own, where the connector has one on ``platform`` and the model has such
    groups beside its full-attention layers with the manager on; "" where none applies."""
    flag = spec_of(connector).object_groups_flag.get(platform, "")
    if not flag or not hybrid_manager or not (model.sliding_layers or model.state_layers):
        return ""
    return flag
