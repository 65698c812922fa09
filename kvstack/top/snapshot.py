"""The shape of one `kvstack top` window: what ``--once --json`` prints and what the live view draws.

Window figures (``*_per_s``, percentiles, ``hit_ratio``) come from the change between two scrapes
``window_s`` apart; ``*_total`` figures are the counters since the server started.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "kvstack.top/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceShare(_Model):
    tokens: float  # prompt tokens from this source in the window
    share: float | None  # of all prompt tokens in the window
    per_s: float


class ServerView(_Model):
    url: str
    up: bool
    error: str | None = None
    engine: str | None = None  # "vllm" | "sglang", judged from the metric names
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # the engine's own KV pool, 0..1
    requests: float | None = None  # first tokens in the window (the TTFT histogram's count)
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    prompt_tokens: float | None = None
    prompt_tokens_per_s: float | None = None
    sources: dict[str, SourceShare] = Field(default_factory=dict)  # keys: clients.token_sources.SOURCES
    # Sources whose figure is derived, not read off the tier's own counter: how (token_sources).
    derived: dict[str, str] = Field(default_factory=dict)


class AdapterView(_Model):
    """One LMCache L2 adapter (``l2_name``): fs = the disk tier, resp = the remote tier."""

    name: str
    tier: str
    loads: float | None = None  # completed load requests in the window
    loads_total: float | None = None
    stores: float | None = None
    stores_total: float | None = None
    usage_bytes: float | None = None
    evicted_chunks: float | None = None


class LmcacheView(_Model):
    url: str
    up: bool
    error: str | None = None
    lookup_tokens: float | None = None  # tokens looked up in the window (chunk-aligned)
    l1_hit_tokens: float | None = None
    l1_hit_tokens_per_s: float | None = None
    l1_hit_tokens_total: float | None = None
    l2_hit_tokens: float | None = None
    l2_hit_tokens_per_s: float | None = None
    l2_hit_tokens_total: float | None = None
    hit_ratio: float | None = None  # (l1 + l2) / lookup tokens in the window
    l1_usage_bytes: float | None = None
    l1_size_bytes: float | None = None
    l1_evicted_chunks: float | None = None
    adapters: list[AdapterView] = Field(default_factory=list)


class RemoteView(_Model):
    url: str  # password masked
    up: bool
    error: str | None = None
    used_memory_bytes: int | None = None
    maxmemory_bytes: int | None = None
    keys: int | None = None
    evicted_keys: int | None = None  # in the window
    evicted_keys_total: int | None = None
    hit_ratio: float | None = None  # keyspace hits / (hits + misses) in the window
    hit_ratio_total: float | None = None
    live_layouts: dict[str, list[str]] | None = None  # KV fingerprint -> the engines writing it now


class DiskView(_Model):
    path: str
    bytes: int | None = None
    files: int | None = None
    partial: bool = False
    free_bytes: int | None = None
    error: str | None = None


class FallbackView(_Model):
    """What ``kvstack serve`` did about wrong KV (canary.json's ``fallback``)."""

    at: float  # unix time
    action: str  # fallback | stop | warn (canary.defaults.ON_WRONG_KV)
    served_from: str  # where the failed check's answer came from (canary.state.SERVED_FROM)
    detail: str
    tiers_off: list[str] = Field(default_factory=list)  # offload tiers serving no longer reads
    restarted: int = 0


class CanaryView(_Model):
    """The run's canary (its canary.json, read at the window's end)."""

    status: str  # starting | waiting | watching | fallback | stopped
    waiting_for: str = ""  # why no check is due, while waiting
    summary: str  # CanaryState.summary(): checks by where they were served and their verdicts
    checks: int
    failed: int
    gate_nats: float | None = None
    last_pass_at: float | None = None
    seconds_since_pass: float | None = None  # at the window's end
    prefill_share: float | None = None  # of the prompt tokens the engine computed since it started
    budget: float
    share_line: str  # the cost in words
    on_wrong_kv: str
    interval_s: float
    updated_at: float  # when the canary last wrote its state
    metrics_url: str | None = None
    last_fail_at: float | None = None
    last_fail_served_from: str | None = None
    last_fail_detail: str | None = None
    fallback: FallbackView | None = None

    @property
    def offload_off(self) -> bool:
        """Serving turned the offload tiers off (the fallback restarted the engines without them)."""
        return self.status == "fallback" or (self.fallback is not None and bool(self.fallback.tiers_off))


class CapacityView(_Model):
    """The live load against the capacity a sweep measured for the served layout (top/capacity.py)."""

    source: str
    layout: str
    kind: str  # concurrency | rate | trace_rate
    status: str
    capacity: str  # in words: "2x the trace's rate = 6.6 requests/s", "c=4", "at least ..."
    rate_per_s: float | None = None  # a rate capacity, requests/s
    concurrency: float | None = None  # a concurrency capacity, requests in flight
    slo: str
    live_per_s: float | None = None  # requests served per second in the window, every server
    live_in_flight: float | None = None  # requests running at the window's end, every server
    used: float | None = None  # live / capacity


class TopSnapshot(_Model):
    schema_: str = Field(default=SCHEMA, alias="schema")
    time: float  # wall clock of the window's end
    window_s: float
    run_dir: str | None = None
    servers: list[ServerView] = Field(default_factory=list)
    lmcache: list[LmcacheView] = Field(default_factory=list)  # one per cache server (replica)
    remote: RemoteView | None = None
    disk: DiskView | None = None
    canary: CanaryView | None = None  # a run dir with a canary.json only
    capacity: CapacityView | None = None  # --capacity, or the capacity the tune behind --tuned measured
    warnings: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)
