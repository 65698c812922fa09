"""The Plan: what ``kvstack plan`` decides and what ``serve`` and ``bench`` consume."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from kvstack.connectors import SPECS, spec_of
from kvstack.model.geometry import ModelGeometry
from kvstack.names import (
    ENGINES,
    OFFLOAD_CHOICES,
    Connector,
    Engine,
    OffloadChoice,
    Platform,
    TierKind,
)
from kvstack.planning.predict.capacity_schema import PlanCapacity
from kvstack.planning.trace_schema import TraceSizing

# The connector kvstack gates per request (engines/lmcache_gate.py): the only one a plan's
# gate_prompt_tokens is served on (its spec's gate compares the prompt's length).
GATED_CONNECTOR: Connector = next(s.name for s in SPECS.values() if s.gate_kind == "prompt")

__all__ = [
    "ENGINES",
    "GATED_CONNECTOR",
    "OFFLOAD_CHOICES",
    "CacheLayout",
    "Concurrency",
    "Connector",
    "Engine",
    "FetchPath",
    "KvTransfer",
    "OffloadChoice",
    "Parallelism",
    "Plan",
    "PlannedModel",
    "Platform",
    "Tier",
    "TierKind",
    "TtftModel",
    "Workload",
]


class Tier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: TierKind
    size_bytes: int  # total across TP ranks
    size_bytes_per_rank: int
    tokens: int  # KV tokens this tier holds at the chosen dtype
    read_bw_bytes_per_s: float | None = None
    breakeven_tokens: int | None = None  # prefix length above which fetching beats recompute
    latency_s: float | None = None  # per fetch, before the bytes flow (disk seek, network round trip)
    path: str | None = None  # disk tier directory
    url: str | None = None  # remote tier URL, password redacted
    reason: str = ""

    def resized(self, *, size_bytes: int, size_bytes_per_rank: int, tokens: int, reason: str) -> Tier:
        """A shallow copy holding ``size_bytes`` (``tokens`` KV tokens), for ``reason``."""
        out = self.model_copy()
        out.size_bytes, out.size_bytes_per_rank = size_bytes, size_bytes_per_rank
        out.tokens, out.reason = tokens, reason
        return out


class Concurrency(BaseModel):
    model_config = ConfigDict(extra="forbid")

    context_tokens: int
    sessions_gpu: int  # full-context sessions the GPU pool holds at once
    sessions_all_tiers: int  # ... that all tiers together hold
    working_set_bytes: int
    # What should stay cached for returning users (planning/retention.py), and what the tiers hold
    # of it (the largest tier: they are inclusive).
    retention_target_bytes: int | None = None
    retained_bytes: int | None = None


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    context_tokens: int
    users: int = 1
    reuse: float = 1.0  # how many context-sized prefixes per user are kept warm (>= 1)
    # The retention target: a multiple of the working set, or an absolute size (at most one is set;
    # neither: planning.retention's default).
    retain_factor: float | None = None
    retain_bytes: int | None = None
    description: str = ""


class FetchPath(BaseModel):
    """How KV comes back from one tier: its bandwidth and per-fetch latency, and where they come from."""

    model_config = ConfigDict(extra="forbid")

    bw_bytes_per_s: float
    latency_s: float = 0.0
    source: str = ""


class TtftModel(BaseModel):
    """What the plan predicts time to first token from (planning/predict/ttft.py computes with it).

    Recomputing N tokens costs ``(linear x N + attn x N^2) / flops``; a prefix held by a tier costs
    ``latency + N x bytes_per_token / bw`` on top of a forward step; ``*_s`` are those figures for a
    context-sized prefix. The prefill figures are None where kvstack has no basis for them (the CPU
    platform without a calibration).
    """

    model_config = ConfigDict(extra="forbid")

    context_tokens: int
    bytes_per_token: float  # KV bytes per prompt token, all ranks, at the planned dtype
    prefill_flops_per_s: float | None = None
    linear_flops_per_token: float | None = None
    attn_flops_coeff: float | None = None
    prefill_source: str = ""
    step_s: float | None = None  # one forward step (weights read once): the floor under any hit
    step_source: str = ""
    fetch: dict[str, FetchPath] = Field(default_factory=dict)  # by tier kind, below the engine's pool
    recompute_s: float | None = None
    hit_s: float | None = None
    tier_s: dict[str, float] = Field(default_factory=dict)


class PlannedModel(BaseModel):
    """The model the engine serves, as vLLM's ``ModelConfig`` holds it: where, which revision, its
    geometry and the context the engine is started with."""

    model_config = ConfigDict(extra="forbid")

    path: str  # local directory or a repo id the engine resolves
    revision: str | None = None  # the repo id's branch, tag or commit (the engine's --revision)
    geometry: ModelGeometry
    weight_bytes: int
    max_model_len: int

    def at_revision(self, revision: str | None) -> PlannedModel:
        """A shallow copy naming ``revision`` (the engine's --revision) in place of this one's."""
        out = self.model_copy()
        out.revision = revision
        return out


class CacheLayout(BaseModel):
    """The KV cache and its tiers, as vLLM's ``CacheConfig`` (and the offload tiers below it) holds it."""

    model_config = ConfigDict(extra="forbid")

    kv_cache_dtype: str  # the engine's own value, e.g. "fp8", "fp8_e4m3", "auto"
    kv_bytes_per_token: int  # at the chosen dtype
    # Ordered fastest first. tiers[0] is the engine's own KV pool: GPU HBM ("gpu") on CUDA, host
    # memory ("cpu", VLLM_CPU_KVCACHE_SPACE) on the CPU platform. The rest are offload tiers.
    tiers: list[Tier]
    chunk_size: int
    gpu_memory_utilization: float
    # False where the engine runs without a prefix cache for this model (reasons["prefix_caching"]
    # says why): nothing is reused, so no tier is planned and validation has no warm step to prove.
    prefix_caching: bool = True
    # "off": the connector carries one full-length KV group only, so the engine runs with vLLM's
    # hybrid KV cache manager off (planning/carriage.py) and kv_bytes_per_token counts every
    # attention layer. None: the engine's default (the manager on where the model has several kinds).
    hybrid_manager: Literal["off"] | None = None
    # The tokens the engine keeps in flight (model/kv_groups.py), which bound what a sliding or
    # chunked layer holds; set only for a model that has such layers.
    kv_in_flight_tokens: int | None = None


class Parallelism(BaseModel):
    """How the engine is split over GPUs, as vLLM's ``ParallelConfig`` holds it."""

    model_config = ConfigDict(extra="forbid")

    tensor_parallel_size: int


class KvTransfer(BaseModel):
    """The connector that moves KV below the engine's pool, as vLLM's ``KVTransferConfig`` names it."""

    model_config = ConfigDict(extra="forbid")

    connector: Connector
    remote_url: str | None = None  # redacted form; the secret never enters the Plan
    # A per-request gate tune chose (lmcache-mp only: engines/lmcache_gate.py): prompts shorter
    # than this many tokens skip the offload lookup and load. None: every request is looked up.
    gate_prompt_tokens: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _gate_on_lmcache_mp(self) -> KvTransfer:
        if self.gate_prompt_tokens is not None and spec_of(self.connector).gate_kind != "prompt":
            raise ValueError(
                f"gate_prompt_tokens is served by kvstack's gate over {GATED_CONNECTOR} only, "
                f"not {self.connector}"
            )
        return self


# The plan's JSON is flat (every plan file written before the groups, and every one since): each wire
# key in its order, and the group it lives in (None: Plan's own field). "model" is the geometry.
_WIRE: tuple[tuple[str, str | None, str], ...] = (
    ("engine", None, "engine"),
    ("platform", None, "platform"),
    ("model", "model", "geometry"),
    ("model_path", "model", "path"),
    ("model_revision", "model", "revision"),
    ("kv_cache_dtype", "cache", "kv_cache_dtype"),
    ("kv_bytes_per_token", "cache", "kv_bytes_per_token"),
    ("tiers", "cache", "tiers"),
    ("connector", "transfer", "connector"),
    ("chunk_size", "cache", "chunk_size"),
    ("max_model_len", "model", "max_model_len"),
    ("tensor_parallel_size", "parallel", "tensor_parallel_size"),
    ("gpu_memory_utilization", "cache", "gpu_memory_utilization"),
    ("weight_bytes", "model", "weight_bytes"),
    ("workload", None, "workload"),
    ("concurrency", None, "concurrency"),
    ("remote_url", "transfer", "remote_url"),
    ("gpu_name", None, "gpu_name"),
    ("compute_capability", None, "compute_capability"),
    ("prefill_tokens_per_s", None, "prefill_tokens_per_s"),
    ("prefill_source", None, "prefill_source"),
    ("ttft", None, "ttft"),
    ("warnings", None, "warnings"),
    ("reasons", None, "reasons"),
    ("feasible", None, "feasible"),
    ("errors", None, "errors"),
    ("trace", None, "trace"),
    ("gate_prompt_tokens", "transfer", "gate_prompt_tokens"),
    ("hybrid_manager", "cache", "hybrid_manager"),
    ("kv_in_flight_tokens", "cache", "kv_in_flight_tokens"),
    ("prefix_caching", "cache", "prefix_caching"),
    ("capacity", None, "capacity"),
)
_GROUPED = {wire: (group, name) for wire, group, name in _WIRE if group is not None}
# Written only where set: a plan without them serializes exactly as before each existed.
_DROPPED_WHEN_NONE = ("trace", "gate_prompt_tokens", "hybrid_manager", "kv_in_flight_tokens", "capacity")


def _grouped(data: dict[str, Any]) -> dict[str, Any]:
    """A flat plan (the wire form) as Plan's groups; a grouped one as it is. A key neither form has
    stays where it is, so that ``extra="forbid"`` refuses it."""
    # Flat: "model" is the geometry, beside "model_path" and the rest; grouped: "model" holds them.
    flat_model = isinstance(data.get("model"), ModelGeometry) or any(
        wire in data for wire, (group, _) in _GROUPED.items() if group == "model" and wire != "model"
    )
    out: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key in _GROUPED and (key != "model" or flat_model):
            group, name = _GROUPED[key]
            groups.setdefault(group, {})[name] = value
        else:
            out[key] = value
    for group, fields in groups.items():
        if group in out:
            raise ValueError(f"plan: {group!r} given both grouped and as its flat keys {sorted(fields)}")
        out[group] = fields
    return out


class Plan(BaseModel):
    """What ``kvstack plan`` decided, grouped as vLLM's ``VllmConfig`` is: the model, the KV cache and
    its tiers, the parallelism, the KV transfer; the rest is the plan's own. Its JSON stays flat."""

    model_config = ConfigDict(extra="forbid")

    engine: Engine
    platform: Platform
    model: PlannedModel
    cache: CacheLayout
    parallel: Parallelism
    transfer: KvTransfer
    workload: Workload
    concurrency: Concurrency | None = None
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    prefill_tokens_per_s: float | None = None
    prefill_source: str = "estimate"  # "estimate" (peak table) or "calibrated"
    ttft: TtftModel | None = None  # predicted TTFT per tier (planning/predict/ttft.py)
    warnings: list[str] = Field(default_factory=list)
    reasons: dict[str, str] = Field(default_factory=dict)
    feasible: bool = True
    errors: list[str] = Field(default_factory=list)
    # What sized the tiers when a trace did (planning/predict/trace_sizing.py); None: the retention rule.
    trace: TraceSizing | None = None
    # plan --slo-ttft: each layout's predicted capacity and the resource bounding it
    # (planning/predict/plan_capacity.py, on the step-level simulator).
    capacity: PlanCapacity | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        return _grouped(data) if isinstance(data, dict) else data

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The groups flattened back to the wire keys, in their order.
        out = handler(self)
        if not isinstance(out, dict):
            return out
        flat: dict[str, Any] = {}
        for wire, group, name in _WIRE:
            holder = out if group is None else out.get(group)
            if isinstance(holder, dict) and name in holder:
                flat[wire] = holder[name]
        for key in _DROPPED_WHEN_NONE:
            if key in flat and flat[key] is None:
                del flat[key]
        if flat.get("prefix_caching") is True:
            del flat["prefix_caching"]
        return flat

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """As BaseModel's; an ``update`` key that is no field of Plan's (a flat key of the wire form,
        say) is refused, where BaseModel would set an attribute that nothing reads."""
        unknown = sorted(set(update or ()) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"Plan.model_copy: no such field {unknown} (the plan's fields are grouped)")
        return super().model_copy(update=update, deep=deep)

    @property
    def sized_by(self) -> str:
        """The evidence that sized the tiers: "trace" or "rule" (the retention target)."""
        return "trace" if self.trace is not None else "rule"

    def dtype_args(self) -> list[str]:
        """The engines' ``--dtype`` (vLLM's and SGLang's spelling) where the plan computes in another
        dtype than the checkpoint's (planning/compute_dtype.py); nothing where it is the checkpoint's."""
        geo = self.model.geometry
        return ["--dtype", geo.dtype] if geo.checkpoint_dtype is not None else []

    @property
    def engine_pool(self) -> Tier | None:
        """The engine's own KV pool (GPU memory, or host memory on the CPU platform)."""
        tiers = self.cache.tiers
        return tiers[0] if tiers else None

    @property
    def offloads(self) -> bool:
        """Whether a connector moves KV below the engine's pool (any but ``none``)."""
        return spec_of(self.transfer.connector).offloads

    @property
    def offload_tiers(self) -> list[Tier]:
        """The tiers a connector serves hits from, below the engine's own pool."""
        return self.cache.tiers[1:]

    def tier(self, kind: TierKind) -> Tier | None:
        """The GPU pool for "gpu"; otherwise the offload tier of that kind (never the engine's pool)."""
        if kind == "gpu":
            pool = self.engine_pool
            return pool if pool is not None and pool.kind == "gpu" else None
        return next((t for t in self.offload_tiers if t.kind == kind), None)

    def with_notes(self, *, reasons: dict[str, str] | None = None, warnings: list[str] | None = None) -> Plan:
        """A shallow copy (unvalidated, as ``model_copy``) with ``reasons`` and/or ``warnings`` in place
        of this plan's; None keeps this plan's."""
        out = self.model_copy()
        if reasons is not None:
            out.reasons = reasons
        if warnings is not None:
            out.warnings = warnings
        return out

    def with_tiers(self, tiers: list[Tier]) -> Plan:
        """A shallow copy (unvalidated, as ``model_copy``) with ``tiers`` in place of this plan's (in a
        copy of its cache group: the original plan's is left as it was)."""
        out = self.model_copy()
        out.cache = self.cache.model_copy()
        out.cache.tiers = tiers
        return out
