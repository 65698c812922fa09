"""The shape of a bench result: results.json is a dump of ``BenchResult``, the source of truth.

Tables, CSV and plots are rendered from these models (after a round trip through JSON when a
report is re-read), never from the runner's internal state.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kvstack.jsonvalue import JsonObject
from kvstack.validation.correctness import CorrectnessCheck
from kvstack.validation.noise import NoiseFloor

SCHEMA = "kvstack.bench/1"


class RequestRow(BaseModel):
    """One request as measured; failures are rows too (ok false, error says why)."""

    model_config = ConfigDict(extra="forbid")

    layout: str
    id: str
    index: int
    round: int
    turn: int | None = None
    group: str
    prompt_tokens: int  # what the workload built (special tokens excluded)
    expected_prefix_tokens: int  # what a perfect cache holds when the request's round starts
    ok: bool
    status: int | None = None
    error: str | None = None
    start_s: float  # seconds since the layout's first request
    ttft_s: float | None = None
    tpot_s: float | None = None  # mean time per output token after the first
    e2e_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)
    server_prompt_tokens: int | None = None  # from the usage event (includes BOS)
    output_tokens: int = 0
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens when reported
    # Trace replays (one request in flight): where this request's prompt tokens came from, from the
    # counters' change over it (bench/replay/replay.py); None otherwise.
    recomputed_tokens: float | None = None
    engine_cache_tokens: float | None = None
    dram_tokens: float | None = None
    disk_tokens: float | None = None
    remote_tokens: float | None = None
    offload_tokens: float | None = None  # offloaded, tier unknown


class Distribution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float


class Summary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: int
    ok: int
    errors: int
    wall_s: float
    requests_per_s: float  # completed (ok) requests over the wall time
    output_tokens_per_s: float
    prompt_tokens: int
    expected_prefix_tokens: int
    output_tokens: int
    ttft_s: Distribution | None = None
    tpot_s: Distribution | None = None
    itl_s: Distribution | None = None
    e2e_s: Distribution | None = None
    error_kinds: dict[str, int] = Field(default_factory=dict)

    @property
    def ideal_hit_rate(self) -> float | None:
        """Share of prompt tokens a perfect cache could have served."""
        return self.expected_prefix_tokens / self.prompt_tokens if self.prompt_tokens else None


class CacheStats(BaseModel):
    """Server counters as before/after deltas; None where the server does not expose the counter."""

    model_config = ConfigDict(extra="forbid")

    engine: str | None = None
    token_hit_rate: float | None = None  # prompt tokens not recomputed / prompt tokens
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    prefix_hit_rate: float | None = None
    external_queries: float | None = None
    external_hits: float | None = None
    external_hit_rate: float | None = None
    prompt_tokens_by_source: dict[str, float] = Field(default_factory=dict)
    cached_tokens_by_source: dict[str, float] = Field(default_factory=dict)
    lmcache_requested_tokens: float | None = None
    lmcache_hit_tokens: float | None = None
    lmcache_hit_rate: float | None = None
    lmcache_stored_tokens: float | None = None
    lmcache_remote_reads: float | None = None
    lmcache_mp_requested_tokens: float | None = None
    lmcache_mp_lookups: float | None = None  # completed lookups (one per request looked up)
    lmcache_mp_hit_tokens: float | None = None
    lmcache_mp_l1_hit_tokens: float | None = None
    lmcache_mp_l2_hit_tokens: float | None = None
    lmcache_mp_l2_loads: dict[str, float] = Field(default_factory=dict)  # per L2 adapter (l2_name)
    # Prompt tokens by where they came from: recomputed, engine_cache, dram, disk, remote, offload
    # (clients/token_sources.py; the same figures `kvstack top` shows). The prompt_sources plot.
    tokens_by_source: dict[str, float] = Field(default_factory=dict)
    # The figures of tokens_by_source not read off their tier's own counter, and how they were had.
    tokens_by_source_derived: dict[str, str] = Field(default_factory=dict)
    sglang_tokens_by_mode: dict[str, float] = Field(default_factory=dict)
    scrape_errors: list[str] = Field(default_factory=list)


class RoundResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    round: int
    label: str
    summary: Summary
    cache: CacheStats


class CorrectnessResult(BaseModel):
    """`--check-correctness`: every token of K cached requests judged by a recompute."""

    model_config = ConfigDict(extra="forbid")

    checked: int
    passed: int
    failed: int
    unknown: int
    checks: list[CorrectnessCheck] = Field(default_factory=list)
    noise_floor: NoiseFloor | None = None  # measured on the same prompts led by a fresh nonce
    summary: str = ""  # validation's evidence line for these checks (validation/correctness.py)
    in_flight: int = 1  # requests the checked answers were served with (sent side by side)

    @classmethod
    def of(
        cls, checks: list[CorrectnessCheck], noise: NoiseFloor | None = None, summary: str = ""
    ) -> CorrectnessResult:
        def count(v: str) -> int:
            return sum(c.verdict == v for c in checks)

        return cls(
            checked=len(checks),
            passed=count("pass"),
            failed=count("fail"),
            unknown=count("unknown"),
            checks=checks,
            noise_floor=noise,
            summary=summary,
        )

    def first_problem(self) -> CorrectnessCheck | None:
        return next((c for c in self.checks if c.verdict != "pass"), None)


class LayoutResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    base_url: str
    metrics_urls: list[str]
    started_at: float  # wall clock (time.time)
    complete: bool  # False when the run was cut short (interrupt, engine died)
    aborted: str | None = None  # why it was cut short
    summary: Summary
    cache: CacheStats
    rounds: list[RoundResult] = Field(default_factory=list)
    correctness: CorrectnessResult | None = None


class BenchResult(BaseModel):
    schema_: str = Field(default=SCHEMA, alias="schema")
    config: JsonObject
    environment: JsonObject
    workload: JsonObject
    layouts: list[LayoutResult]
    requests: list[RequestRow]
    # A trace replay (bench --trace): the slice sent and, per layout, predicted vs measured hit
    # ratios per tier (bench/replay/predict.py).
    trace: JsonObject | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
