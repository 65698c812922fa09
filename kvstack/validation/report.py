"""What the validation pass is pointed at and what it reports (JSON first; tables render from it)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from kvstack import __version__
from kvstack.clients.client import check_http_url
from kvstack.errors import InputError, PathError
from kvstack.fsutil import atomic_write
from kvstack.planning.engine_kv import KvExpectation
from kvstack.planning.schema import Engine, Platform, TtftModel
from kvstack.validation.correctness import CorrectnessCheck
from kvstack.validation.diagnosis import Diagnosis
from kvstack.validation.load import LoadReport
from kvstack.validation.noise import NoiseFloor
from kvstack.validation.thresholds import (
    DEFAULT_MIN_SPEEDUP,
    DEFAULT_MIN_TIER_SPEEDUP,
    DEFAULT_NOISE_CEILING,
    DEFAULT_TOKENS,
    DEFAULT_TOP_K,
)

Verdict = Literal["pass", "fail", "skip"]

TierKindName = Literal["cpu", "disk", "remote"]


class TierTarget(BaseModel):
    kind: TierKindName
    path: str | None = None  # the disk tier's directory
    # The LMCache cache server's L2 adapter that holds this tier ("fs" for disk, "resp" for Redis).
    adapter: str | None = None
    # The remote tier's store, credentials included: pinged so that a failing tier names the store.
    url: str | None = Field(default=None, repr=False, exclude=True)


class ValidationTarget(BaseModel):
    base_url: str
    model: str | None = None  # None: the first model /v1/models lists
    api_key: str | None = Field(default=None, repr=False, exclude=True)
    engine: Engine | None = None  # None: judged from /metrics
    platform: Platform | None = None
    tiers: list[TierTarget] = Field(default_factory=list)
    reset_path: str | None = None  # None: the engine's default
    metrics_urls: list[str] = Field(default_factory=list)  # empty: BASE/metrics
    # LMCache's cache server HTTP API: its L1 is emptied to prove the L2 tiers, its health checked.
    cache_server_url: str | None = None
    # The connector behind the tiers (lmcache-mp, lmcache, native, hicache): decides how each tier
    # step drops the copies above its tier (validation/isolation.py). None: not known.
    connector: str | None = None
    chunk_tokens: int | None = None  # the unit the tiers store in; None: the connector's default
    log_file: str | None = None
    prompt_tokens: int | None = None  # None: 4096, capped by the model's max length
    min_speedup: float = DEFAULT_MIN_SPEEDUP  # warm over cold
    min_tier_speedup: float = DEFAULT_MIN_TIER_SPEEDUP  # each tier step over its own recompute
    repeat: int = 3
    timeout_s: float = 300.0
    max_overflow_requests: int = 64
    # The correctness gate (validation/correctness.py): each cached request's greedy tokens scored
    # by a recompute and judged against the noise floor measured on the cold answers; 0 turns it off.
    correctness_tokens: int = DEFAULT_TOKENS
    noise_ceiling: float = DEFAULT_NOISE_CEILING  # the gate never exceeds this, whatever the floor
    top_k: int = DEFAULT_TOP_K  # recompute's candidates returned per position
    batch_invariant: bool | None = None  # VLLM_BATCH_INVARIANT in the engine's environment; None: unknown
    secrets: list[str] = Field(default_factory=list, repr=False, exclude=True)
    prediction: TtftModel | None = None  # the plan's TTFT model: steps get measured vs predicted
    # What the plan says the engine's KV pool holds (validation/kv_size.py): checked against the
    # engine's own log line when both are known.
    kv_expectation: KvExpectation | None = None
    # The plan's word that the engine keeps no prefix cache for this model (Plan.prefix_caching):
    # the warm step has nothing to prove and is skipped with this reason.
    no_prefix_cache: str | None = None
    # Requests in flight while the steps are judged, the judged one included (validation/load.py):
    # 1 judges on a quiet server; N keeps N-1 load streams running throughout.
    concurrency: int = 1


class StepResult(BaseModel):
    name: str
    verdict: Verdict
    reason: str = ""
    ttft_s: float | None = None  # median
    speedup: float | None = None
    evidence: list[str] = Field(default_factory=list)
    ttfts_s: list[float] = Field(default_factory=list)  # each measurement
    correctness: list[CorrectnessCheck] = Field(default_factory=list)  # cached vs recomputed tokens
    # The plan's prediction for this step (validation/prediction.py) and how it was made.
    predicted_ttft_s: float | None = None
    prediction: str = ""
    warnings: list[str] = Field(default_factory=list)  # worth a look, not a failure

    def with_verdict(self, verdict: Verdict, reason: str) -> StepResult:
        """A shallow copy judged ``verdict`` for ``reason``; its lists are this step's own."""
        out = self.model_copy()
        out.verdict, out.reason = verdict, reason
        return out


# What a report records of its target: the server and the thresholds its steps were judged by.
JUDGED_BY = (
    "base_url", "min_speedup", "repeat", "min_tier_speedup", "correctness_tokens", "noise_ceiling", "top_k",
    "no_prefix_cache",
)  # fmt: skip


class ValidationReport(BaseModel):
    kvstack_version: str = __version__
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    base_url: str
    model: str
    engine: str
    prompt_tokens: int
    prompt_tokens_exact: bool
    min_speedup: float
    repeat: int
    min_tier_speedup: float = DEFAULT_MIN_TIER_SPEEDUP
    correctness_tokens: int = DEFAULT_TOKENS  # 0: the gate was off
    noise_ceiling: float = DEFAULT_NOISE_CEILING
    top_k: int = DEFAULT_TOP_K
    no_prefix_cache: str | None = None  # the engine keeps no prefix cache for this model: why
    # The engine's own numeric noise on this model, measured on the cold answers, and the gate set from it.
    noise_floor: NoiseFloor | None = None
    load: LoadReport | None = None  # the requests in flight the verdict was taken under (--concurrency)
    steps: list[StepResult] = Field(default_factory=list)
    diagnoses: list[Diagnosis] = Field(default_factory=list)
    overall: Literal["PASS", "FAIL"] = "FAIL"
    duration_s: float = 0.0

    @classmethod
    def of(cls, target: ValidationTarget, *, model: str, engine: str, prompt_tokens: int) -> ValidationReport:
        """An empty report on ``target``, with the thresholds it is judged by as the target sets them."""
        judged_by = {name: getattr(target, name) for name in JUDGED_BY}
        return cls(
            model=model, engine=engine, prompt_tokens=prompt_tokens, prompt_tokens_exact=False, **judged_by
        )

    def step(self, name: str) -> StepResult | None:
        return next((s for s in self.steps if s.name == name), None)

    def decide(self) -> None:
        """The one verdict: PASS when no step failed and the warm step passed (steps may be added
        after the pass, e.g. serve's shared-tier step across replicas: decide again then)."""
        warm = any(
            st.name == "warm" and (st.verdict == "pass" or (st.verdict == "skip" and self.no_prefix_cache))
            for st in self.steps
        )
        self.overall = "PASS" if warm and all(st.verdict != "fail" for st in self.steps) else "FAIL"

    def thresholds(self) -> str:
        """Every threshold the verdict applied, for the summary line."""
        if not self.correctness_tokens:
            gate = "correctness gate OFF (--correctness-tokens 0)"
        elif self.noise_floor is not None and self.noise_floor.threshold is not None:
            gate = (
                f"correctness: {self.correctness_tokens} tokens, typical disagreement with recompute "
                f"<= {self.noise_floor.threshold:.3f} nats (measured floor {self.noise_floor.floor:.3f})"
            )
        else:
            gate = f"correctness: {self.correctness_tokens} tokens, noise floor not measured"
        load = f"; {self.load.concurrency} requests in flight" if self.load is not None else ""
        return (
            f"{self.prompt_tokens}-token prompts, {self.repeat} rounds{load}; "
            f"warm >= {self.min_speedup:g}x cold, "
            f"each tier >= {self.min_tier_speedup:g}x its recompute and below cold; {gate}"
        )

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def write_report(report: ValidationReport, path: Path) -> None:
    atomic_write(path, report.to_json() + "\n", mode=0o600)


def check_target(target: ValidationTarget) -> None:
    """Input errors (exit 2) before any request is sent."""
    check_http_url(target.base_url, "--url")
    if target.cache_server_url is not None:
        check_http_url(target.cache_server_url, "--lmcache", "http://127.0.0.1:8002")
    if target.prompt_tokens is not None and target.prompt_tokens < 64:
        raise InputError(
            f"--prompt-tokens must be at least 64, not {target.prompt_tokens}",
            hint="use several KV blocks/chunks, e.g. --prompt-tokens 2048",
        )
    if not math.isfinite(target.min_speedup) or target.min_speedup < 1.0:
        raise InputError(
            f"--min-speedup must be a number >= 1.0, not {target.min_speedup}", hint="e.g. --min-speedup 1.5"
        )
    if not math.isfinite(target.min_tier_speedup) or target.min_tier_speedup < 1.0:
        raise InputError(
            f"--min-tier-speedup must be a number >= 1.0, not {target.min_tier_speedup}",
            hint="e.g. --min-tier-speedup 1.2",
        )
    if not 1 <= target.top_k <= 20:
        raise InputError(f"--top-k must be between 1 and 20, not {target.top_k}", hint="e.g. --top-k 5")
    if target.chunk_tokens is not None and target.chunk_tokens < 1:
        raise InputError(
            f"--chunk-tokens must be a positive number of tokens, not {target.chunk_tokens}",
            hint="e.g. --chunk-tokens 256 (LMCache's chunk size)",
        )
    if not 0 <= target.correctness_tokens <= 256:
        raise InputError(
            f"--correctness-tokens must be between 0 (off) and 256, not {target.correctness_tokens}",
            hint="e.g. --correctness-tokens 16",
        )
    if not math.isfinite(target.noise_ceiling) or not 0 < target.noise_ceiling <= 5:
        raise InputError(
            f"--noise-ceiling must be a number of nats above 0 and at most 5, not {target.noise_ceiling}",
            hint=f"e.g. --noise-ceiling {DEFAULT_NOISE_CEILING:g}",
        )
    if not 1 <= target.repeat <= 50:
        raise InputError(f"--repeat must be between 1 and 50, not {target.repeat}", hint="e.g. --repeat 3")
    if target.log_file is not None and not Path(target.log_file).is_file():
        raise PathError(
            f"engine log {target.log_file} does not exist", hint="pass the server's log file with --log"
        )
