"""What one KV connector is, as a typed spec: where it runs, what it carries, its tiers and how each
is sized, its knobs, how validation isolates each tier, what it needs installed.

One module per connector in this package holds its ``SPEC`` (``none``, ``lmcache``, ``lmcache_mp``,
``native``, ``hicache``); planning, validation, tune, export and preflight ask the spec instead of
testing the connector's name. The renderer of each (engine, connector) pair stays in
``kvstack/engines`` (``@register``), beside the engine it launches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from kvstack.names import Connector, Engine, Platform, TierKind

# What a validation tier step does to drop the copies above the tier it proves.
Drop = Literal[
    "gpu",  # the engine's prefix cache: reset endpoint, or overflow the pool
    "gpu_and_external",  # vLLM reset with reset_external=true: GPU + the connector's CPU tier
    "flush_all_but_storage",  # SGLang /flush_cache: GPU + HiCache host pool
    "gpu_overflow",  # overflow the GPU pool (keeps SGLang's host pool)
    "cache_server_l1",  # LMCache cache server POST /cache/clear
    "hide_disk_files",  # move the prompt's files in the disk tier aside for one request
]
ABOVE: Mapping[str, tuple[str, ...]] = {"cpu": (), "disk": ("cpu",), "remote": ("cpu", "disk")}


@dataclass(frozen=True)
class StepPlan:
    """How a validation step reaches one tier, and what it then proves."""

    tier: str  # the tier the step is for: cpu, disk, remote
    name: str  # what the step proves: tier:disk, or tier:cpu+disk when DRAM could not be dropped
    drops: tuple[Drop, ...]
    not_isolated: tuple[str, ...] = ()  # tiers above that may still have served the prompt
    why: str = ""

    @property
    def isolated(self) -> bool:
        return not self.not_isolated


def combined(tier: str, drops: tuple[Drop, ...], why: str, present: frozenset[str]) -> StepPlan:
    """A step that cannot drop the tiers above ``tier`` that are ``present``: named for them all."""
    above = tuple(t for t in ABOVE[tier] if t in present)
    if not above:
        return StepPlan(tier, f"tier:{tier}", drops)
    return StepPlan(tier, "tier:" + "+".join([*above, tier]), drops, above, why)


Isolate = Callable[[str, frozenset[str]], StepPlan]


def isolate_unknown(tier: str, present: frozenset[str]) -> StepPlan:
    """A connector kvstack cannot reach below the engine: only the GPU copy is dropped."""
    if tier == "cpu":
        return StepPlan(tier, "tier:cpu", ("gpu",))
    why = "the connector is not known (kvstack validate --offload names it), so DRAM was not emptied"
    return combined(tier, ("gpu",), why, present)


@dataclass(frozen=True)
class Reach:
    """What a connector carries on one platform, as the engine allocates it (True) or not."""

    groups: bool  # several KV cache groups (sliding/chunked beside full layers, manager on)
    state: bool  # state-space / linear-attention layers
    mla: bool  # MLA's compressed latent
    why_groups: str
    why_state: str
    why_mla: str = ""
    # Whether a model whose every attention layer slides (Mistral-7B-v0.1) gets the offload at all.
    sliding_only: bool = True
    why_sliding_only: str = ""


@dataclass(frozen=True)
class Knob:
    """One of a connector's settings tune may choose, as the installed code takes it."""

    name: str  # as the connector spells it
    default: float | None  # None: required, no default
    minimum: float  # smallest valid value (inclusive)
    integer: bool
    where: str  # file:line in the installed package
    block_multiple: bool = False  # must be a multiple of the engine's KV block


def gib(size: int) -> float:
    """A knob's GiB figure, as tune shows and sets it."""
    return round(size / 2**30, 2)


KnobValues = Callable[[int, int, int], dict[str, float]]  # (chunk tokens, DRAM bytes, disk bytes)


def no_knobs(chunk_tokens: int, dram_bytes: int, disk_bytes: int) -> dict[str, float]:
    del chunk_tokens, dram_bytes, disk_bytes
    return {}


@dataclass(frozen=True)
class Sizing:
    """How the connector's DRAM tier is sized and allocated."""

    # The DRAM figure the connector takes: "per-rank" (each TP rank its own) or "total" (one figure
    # across ranks: vLLM's --kv-offloading-size, one LMCache server for every rank).
    dram_figure: Literal["per-rank", "total"] = "per-rank"
    # A host allocation that costs more than the tier (vLLM native's /dev/shm mmap, vllm#53042).
    shm_factor: float | None = None
    # The DRAM tier must exceed the GPU pool by a GiB per rank (SGLang HiCache asserts it).
    exceeds_gpu_pool: bool = False
    # A small DRAM staging tier may sit under disk/remote tiers (HiCache's host pool cannot).
    staging: bool = True
    # Of a tier's size, the share the connector keeps filled on average (LMCache's server evicts
    # between watermark x (1 - ratio) and watermark).
    effective: float = 1.0
    # The smallest DRAM tier its launch can say, and why a smaller one cannot be served (LMCache's
    # server: --l1-size-gb rendered in 0.01 GiB steps, floored: engines.launch_basics.gib_floor).
    min_dram_bytes: int = 0
    min_dram_why: str = ""


@dataclass(frozen=True)
class TransferOverlap:
    """Which of its tiers' transfers run beside the engine's forward step rather than inside it (the
    step-level simulator, planning/predict/simulator: a step lasts ``max(compute, overlapped
    transfers)``, the blocking ones added to it)."""

    loads: frozenset[TierKind] = frozenset()  # tiers whose loads overlap the step's compute
    stores: frozenset[TierKind] = frozenset()  # tiers whose stores do
    # A request whose prefix an overlapped tier loads waits for its own load before it computes
    # (vLLM's WAITING_FOR_REMOTE_KVS: the load runs beside other requests' steps, not its own);
    # False: the load is layer by layer under its own forward step (SGLang HiCache).
    load_waits: bool = False
    source: str = ""  # where the connector's code says so


@dataclass(frozen=True)
class ConnectorSpec:
    name: Connector
    title: str  # what the plan's reason calls it
    engines: tuple[Engine, ...]  # the engines that run it
    platforms: frozenset[Platform]  # where it moves KV (elsewhere refused or ignored)
    tiers: frozenset[TierKind]  # the offload tiers it can serve (cpu, disk, remote)
    reason: str  # the plan's reason for it
    # (platform) -> what it carries there; a platform missing here: every model as allocated.
    reach: Mapping[Platform, Reach] = field(default_factory=dict)
    # --offload auto's order of preference per (engine, platform): lower first; missing: never auto.
    auto_rank: Mapping[tuple[Engine, Platform], int] = field(default_factory=dict)
    remote_backend: str = ""  # what serves its remote tier ("": none)
    # The remote URL schemes its backend takes (empty: every form kvstack accepts), and whether a
    # database index other than 0 is refused.
    remote_schemes: frozenset[str] = frozenset()
    remote_db0_only: bool = False
    readmits_lower_hits: bool = True  # a block served from disk or remote is copied back into DRAM
    overlap: TransferOverlap = TransferOverlap()  # none: every transfer inside the step
    package: str | None = None  # the Python package the engine imports for it
    package_title: str = ""  # that package as its project spells it
    # How `kvstack export` deploys it (kvstack/export). The --format values that can: every other
    # format refuses its plans, naming the connectors that have it.
    exports: frozenset[str] = frozenset()
    # (engine) -> the engine image that ships it, where that engine's own image does not.
    images: Mapping[Engine, str] = field(default_factory=dict)
    # LMCache's mode it is: "in-process" (LMCacheConnectorV1 in every worker, settings as LMCACHE_*
    # variables) or "mp" (its cache server); LMCache#3927 calls them non-MP and MP mode. An export
    # whose platform runs no LMCache server beside the engine runs the in-process mode.
    lmcache_mode: Literal["", "in-process", "mp"] = ""
    # The engine's own flags that turn it on, where the engine builds it in (its sizes are flags of
    # their own): vLLM's --kv-offloading-backend native, SGLang's --enable-hierarchical-cache.
    builtin_flags: tuple[str, ...] = ()
    sizing: Sizing = Sizing()
    default_chunk_tokens: int = 256  # the unit a tier stores and hits in, when the plan does not say
    isolate: Isolate = isolate_unknown
    knobs: tuple[Knob, ...] = ()
    knob_values: KnobValues = no_knobs
    gate: str = ""  # the request-level gate knob it has, if any
    # What its gate compares: "prompt" (the prompt's length: no lookup below it) or "load" (the
    # tokens a hit would load: looked up, not loaded below it).
    gate_kind: Literal["prompt", "load", ""] = ""
    tune_platforms: frozenset[Platform] = frozenset()  # where tune may choose it
    tune_chunk_is_block: bool = False  # its chunk is the engine's block (no chunk knob)
    # Whether tune sizes a disk tier under its DRAM one (where its tiers have one).
    tune_disk: bool = True
    # Where tune lists it among the connectors it ranks (lower first; candidates the ranking cannot
    # tell apart keep this order: tune/predict.py).
    tune_order: int = 0
    # The platforms where tune reads each tier's hardware bound off a plan made for it
    # (tune/limits.py most_plan): the connector whose tiers the rest of kvstack sizes there.
    tune_limits: frozenset[Platform] = frozenset()
    cache_server: bool = False  # it runs as its own server process beside the engine
    # Runs on the CPU platform without moving anything (LMCache in-process: degraded mode).
    degraded_on_cpu: str = ""
    deprecated: str = ""  # upstream's deprecation of it, quoted where the plan uses it
    # (platform) -> the tokens of a sliding-window layer it stores per chunk, from (window, chunk);
    # a platform missing here: it stores what the engine allocates.
    sliding_stored: Mapping[Platform, Callable[[int, int], int]] = field(default_factory=dict)
    # (platform) -> the cache server's flag that keeps each sliding-window size in an object group
    # of its own, for a hybrid with the engine's hybrid KV cache manager on.
    object_groups_flag: Mapping[Platform, str] = field(default_factory=dict)

    @property
    def offloads(self) -> bool:
        return bool(self.tiers)

    @property
    def remote(self) -> bool:
        return bool(self.remote_backend)

    def runs(self, engine: str, platform: str) -> bool:
        return engine in self.engines and platform in self.platforms
