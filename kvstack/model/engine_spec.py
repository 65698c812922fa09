"""The engine's own answer about a model's KV: the spec each layer reports and the groups vLLM forms.

kvstack/engines/vllm_kv_spec.py asks the installed vLLM (in a subprocess, never imported here) and
parses its answer into ``EngineKvSpec``. Where it answered, the planner takes the layers, bytes per
token, state pages, block sizes and groups from it (``apply_engine_spec``, and model/kv_groups.py's
block math); where it did not (no vLLM for the engine, another engine, a catalog model), kvstack's
own config reader is the labelled estimate.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SpecKind = Literal["full", "mla", "sliding", "chunked", "state"]


class SpecGroup(BaseModel):
    """One KV cache group as vLLM forms it (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: str  # SpecKind, or the spec class's name for a kind kvstack does not know
    spec_type: str
    layer_names: tuple[str, ...]
    block_size: int
    page_size_bytes: int
    blocks_per_request: int  # at the probe's max_model_len
    bytes_per_token: int = 0  # one layer's KV per token (attention kinds)
    dtype: str | None = None
    sliding_window: int | None = None
    attention_chunk: int | None = None
    state_shapes: tuple[tuple[int, ...], ...] | None = None
    state_dtypes: tuple[str, ...] | None = None
    mamba_type: str | None = None

    @property
    def layers(self) -> int:
        return len(self.layer_names)


class SpecLayout(BaseModel):
    """The groups with vLLM's hybrid KV cache manager on or off, or the engine's reason it refuses."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ok: bool
    reason: str | None = None
    groups: tuple[SpecGroup, ...] = ()
    bytes_per_block: int = 0  # one block of the shared pool, every group's layers
    blocks_per_request: int = 0

    def layers(self, *kinds: str) -> int:
        return sum(g.layers for g in self.groups if g.kind in kinds)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.kind for g in self.groups))


class EngineKvSpec(BaseModel):
    """What the installed vLLM said about the model (the probe's JSON)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    vllm_version: str
    ok: bool
    stage: str | None = None  # where it refused: "config", "model" (or "probe": the probe itself failed)
    reason: str | None = None
    platform: str = (
        "cpu"  # vLLM's platform where it was asked (its device_type): its block sizes are that one's
    )
    architecture: str | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    model_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool = True
    # The engine's prefix caching where no flag sets it (vLLM's model config: off for Mamba1);
    # None in an answer recorded before the probe asked.
    default_prefix_caching: bool | None = None
    shared_layers: dict[str, str] = Field(default_factory=dict)  # layer -> the layer whose KV it reads
    manager_on: SpecLayout | None = None
    manager_off: SpecLayout | None = None
    # False where the plan is for another platform than the probe's (vLLM's CPU platform): the layer
    # kinds are the engine's, the block sizes and pages kvstack's estimate for that platform.
    blocks_checked: bool = True

    @property
    def refused(self) -> bool:
        """The engine itself refuses the model (its config or its model class raised)."""
        return not self.ok and self.stage in ("config", "model")

    def layout(self, hybrid_manager: bool) -> SpecLayout | None:
        return self.manager_on if hybrid_manager else self.manager_off

    def source(self) -> str:
        return f"vLLM {self.vllm_version}'s KV cache spec"

    def unchecked(self) -> EngineKvSpec:
        """A copy whose block sizes are kvstack's estimate (``blocks_checked`` False)."""
        return EngineKvSpec(
            vllm_version=self.vllm_version,
            ok=self.ok,
            stage=self.stage,
            reason=self.reason,
            platform=self.platform,
            architecture=self.architecture,
            max_model_len=self.max_model_len,
            kv_cache_dtype=self.kv_cache_dtype,
            model_dtype=self.model_dtype,
            max_num_batched_tokens=self.max_num_batched_tokens,
            prefix_caching=self.prefix_caching,
            default_prefix_caching=self.default_prefix_caching,
            shared_layers=self.shared_layers,
            manager_on=self.manager_on,
            manager_off=self.manager_off,
            blocks_checked=False,
        )


def _tokens_held(group: SpecGroup, tokens: int, in_flight: int) -> int:
    """Blocks one request of ``tokens`` takes in ``group`` (vllm/v1/kv_cache_interface.py
    max_memory_usage_bytes, per spec type)."""
    block = group.block_size
    if group.kind == "sliding" and group.sliding_window:
        return math.ceil(min(group.sliding_window - 1 + in_flight, tokens) / block) + 1
    if group.kind == "chunked" and group.attention_chunk:
        return math.ceil(min(group.attention_chunk + in_flight, tokens) / block)
    return math.ceil(tokens / block)


def spec_blocks_per_request(
    layout: SpecLayout, tokens: int, in_flight: int, *, prefix_caching: bool, probed_prefix_caching: bool
) -> int:
    """Blocks of the shared pool one request of ``tokens`` tokens takes over every group; a state
    group's blocks are the engine's own (one a request when prefix caching is off)."""
    total = 0
    for group in layout.groups:
        if group.kind == "state":
            same_mode = prefix_caching == probed_prefix_caching
            total += group.blocks_per_request if same_mode or prefix_caching else 1
        else:
            total += _tokens_held(group, tokens, in_flight)
    return total


def spec_block_bytes(layout: SpecLayout, scale: float) -> float:
    """One block of the shared pool; ``scale`` is the KV dtype's bytes over the probed dtype's
    (a state group's page does not follow the KV dtype, so the scale applies without one)."""
    if any(g.kind == "state" for g in layout.groups):
        return float(layout.bytes_per_block)
    return layout.bytes_per_block * scale
