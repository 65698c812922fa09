"""What a trace says in a plan: the capacity curve, the sizes it chose, each tier's share and the
predicted TTFT with and without offload (planning/predict/trace_sizing.py fills it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CurvePoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size_bytes: int
    blocks: int
    hit_ratio: float  # prompt tokens served from an LRU prefix cache of this size / all prompt tokens
    label: str = ""  # a tier boundary ("gpu", "cpu", "disk"), "target", "max", or empty


class TierShare(BaseModel):
    """What one level serves in the hierarchy simulation (each level sees what the one above missed)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    size_bytes: int
    blocks: int
    hit_tokens: int
    hit_ratio: float
    tokens_per_s: float  # prompt tokens it serves per second of trace time (prefill saved)


class TtftSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tiers: str = ""  # the levels serving, e.g. "engine+cpu"
    p50_s: float
    p90_s: float
    mean_s: float
    recomputed_tokens: int
    prefill_busy: float  # recompute seconds / trace seconds (> 1: the engine cannot keep up)


class TraceSizing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    evidence: Literal["trace"] = "trace"
    source: str
    sample: str = ""  # how the requests were chosen (slice, session sample, block scaling)
    requests: int
    prompt_tokens: int
    duration_s: float
    block_tokens: int
    block_bytes: int  # one trace block's KV at the planned dtype
    max_ratio: float  # an unbounded cache
    target_fraction: float
    target_bytes: int  # the smallest cache reaching target_fraction of max_ratio
    target_ratio: float
    shortfall: str = ""  # what the hardware left short of the target, or empty
    curve: list[CurvePoint] = Field(default_factory=list)  # log-spaced, for plots and --json
    table: list[CurvePoint] = Field(default_factory=list)  # key sizes and tier boundaries
    inclusive: bool = True
    tiers: list[TierShare] = Field(default_factory=list)
    offload_cost_s: float
    offload_cost_source: str
    with_offload: TtftSummary | None = None
    without_offload: TtftSummary | None = None
    by_depth: list[TtftSummary] = Field(default_factory=list)  # the pool alone, then one tier more each
    offload_pays: bool | None = None  # None: no prefill figure to predict TTFT with
    verdict: str = ""
