"""The Plan: what ``kvstack plan`` decides and what ``serve`` and ``bench`` consume."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvstack.models import ModelGeometry

Engine = Literal["vllm", "sglang"]
Connector = Literal["none", "lmcache", "lmcache-mp", "native", "hicache"]
OffloadChoice = Literal["auto", "lmcache", "lmcache-mp", "native", "hicache", "none"]
TierKind = Literal["gpu", "cpu", "disk", "remote"]
Platform = Literal["cuda", "cpu"]

ENGINES: tuple[str, ...] = ("vllm", "sglang")
OFFLOAD_CHOICES: tuple[str, ...] = ("auto", "lmcache", "lmcache-mp", "native", "hicache", "none")


class Tier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: TierKind
    size_bytes: int  # total across TP ranks
    size_bytes_per_rank: int
    tokens: int  # KV tokens this tier holds at the chosen dtype
    read_bw_bytes_per_s: float | None = None
    breakeven_tokens: int | None = None  # prefix length above which fetching beats recompute
    path: str | None = None  # disk tier directory
    url: str | None = None  # remote tier URL, password redacted
    reason: str = ""


class Concurrency(BaseModel):
    model_config = ConfigDict(extra="forbid")

    context_tokens: int
    sessions_gpu: int  # full-context sessions the GPU pool holds at once
    sessions_all_tiers: int  # ... that all tiers together hold
    working_set_bytes: int


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    context_tokens: int
    users: int = 1
    reuse: float = 1.0  # how many context-sized prefixes per user are kept warm (>= 1)
    description: str = ""


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: Engine
    platform: Platform
    model: ModelGeometry
    model_path: str  # local directory or a repo id the engine resolves
    kv_cache_dtype: str  # the engine's own value, e.g. "fp8", "fp8_e4m3", "auto"
    kv_bytes_per_token: int  # at the chosen dtype
    tiers: list[Tier]  # ordered fastest first; tiers[0] is the GPU pool when there is a GPU
    connector: Connector
    chunk_size: int
    max_model_len: int
    tensor_parallel_size: int
    gpu_memory_utilization: float
    weight_bytes: int
    workload: Workload
    concurrency: Concurrency | None = None
    remote_url: str | None = None  # redacted form; the secret never enters the Plan
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    prefill_tokens_per_s: float | None = None
    prefill_source: str = "estimate"  # "estimate" (peak table) or "calibrated"
    warnings: list[str] = Field(default_factory=list)
    reasons: dict[str, str] = Field(default_factory=dict)
    feasible: bool = True
    errors: list[str] = Field(default_factory=list)

    def tier(self, kind: TierKind) -> Tier | None:
        return next((t for t in self.tiers if t.kind == kind), None)

    @property
    def offload_tiers(self) -> list[Tier]:
        return [t for t in self.tiers if t.kind != "gpu"]
