"""The step runner of the TTFT validation pass: prove with numbers that the prefix cache and every
offload tier serve hits.

Protocol (TTFT is the time to the first streamed token with non-empty choices, as vLLM's and
SGLang's benchmark clients measure it):
  cold       unique prompts (nonce first), max_tokens=1, streamed: the recompute TTFT
  warm       the same prompts again: faster by ``min_speedup`` and the prefix-cache counters rose
  tier:KIND  per offload tier: send a fresh prompt, drop the GPU copy (reset endpoint, or
             overflow the pool), send it again: connector hit counters rose, TTFT below
             recompute, and for a disk tier bytes landed under its directory
  diagnosis  known silent failures in the engine log
Each measurement is the median over ``repeat`` fresh prompts: one noisy request on a busy
machine must not decide the verdict. Overall PASS only when every applicable step passes.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from kvstack.engines.base import LaunchSpec
from kvstack.errors import InputError
from kvstack.planning.schema import Plan
from kvstack.runtime.metrics import MetricsSnapshot
from kvstack.runtime.streaming import RequestResult
from kvstack.validation import correctness
from kvstack.validation.cache_server import CacheServer, moved_aside
from kvstack.validation.correctness import CorrectnessCheck
from kvstack.validation.diagnosis import Diagnosis, scan_log
from kvstack.validation.evidence import (
    Hits,
    cache_server_tier_hits,
    connector_hits,
    dir_state,
    file_set,
    gpu_capacity_tokens,
    l2_stores,
    lmcache_disk_bytes,
    new_files,
    prefix_hits,
)
from kvstack.validation.prediction import apply_predictions
from kvstack.validation.prompts import PromptBuilder
from kvstack.validation.remote import remote_store_state
from kvstack.validation.report import (
    StepResult,
    TierTarget,
    ValidationReport,
    ValidationTarget,
    check_target,
)
from kvstack.validation.session import ServerSession

# Endpoints that empty the GPU prefix cache and keep the offload tiers. vLLM's keeps connector
# caches unless ?reset_external=true (vllm/entrypoints/serve/dev/cache/api_router.py). SGLang's
# /flush_cache also clears HiCache's host pool (HiRadixCache.reset), so SGLang tiers are proven
# by overflowing the GPU pool instead.
RESET_PATHS = {"vllm": "/reset_prefix_cache"}
TIER_NAMES = {"cpu": "the DRAM tier", "disk": "the disk tier", "remote": "the remote tier"}
DEFAULT_PROMPT_TOKENS = 2048
Progress = Callable[[str], None]


def target_from_launch(
    spec: LaunchSpec,
    plan: Plan,
    *,
    api_key: str | None = None,
    remote_url: str | None = None,
    log_file: str | Path | None = None,
    prompt_tokens: int | None = None,
    min_speedup: float = 1.5,
) -> ValidationTarget:
    """The target for a server ``kvstack serve`` started from ``plan`` and ``spec``.

    ``remote_url`` (with credentials) lets the remote tier's step ping the store it depends on.
    """
    tiers = [
        TierTarget(
            kind=t.kind,
            path=spec.cache_dirs.get(t.kind) or t.path,
            url=remote_url if t.kind == "remote" else None,
            adapter=spec.tier_adapters.get(t.kind),
        )
        for t in plan.offload_tiers
        if t.kind in ("cpu", "disk", "remote")
    ]
    return ValidationTarget(
        base_url=spec.base_url,
        model=spec.served_model_name,
        api_key=api_key,
        engine=None if spec.engine == "vllm-router" else spec.engine,
        platform=plan.platform,
        tiers=tiers,
        reset_path=spec.reset_cache_path,
        metrics_urls=list(spec.metrics_urls),
        cache_server_url=spec.cache_server_url,
        batch_invariant=spec.server.env.get(
            "VLLM_BATCH_INVARIANT", os.environ.get("VLLM_BATCH_INVARIANT", "0")
        )
        not in ("", "0"),
        log_file=str(log_file) if log_file else None,
        prompt_tokens=prompt_tokens,
        min_speedup=min_speedup,
        secrets=list(spec.secrets),
        prediction=plan.ttft,
    )


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} s"


class _Validation:
    def __init__(self, s: ServerSession, engine: str, n_tokens: int, progress: Progress | None) -> None:
        self.session = s
        self.target = s.target
        self.engine = engine
        self.n_tokens = n_tokens
        self.progress = progress or (lambda _msg: None)
        self.builder = PromptBuilder(s.tokenize)
        self.cold_ttfts: list[float] = []
        self.checks: dict[str, list[CorrectnessCheck]] = {"warm": []}
        url = s.target.cache_server_url
        self.cache_server = CacheServer(s.client, url) if url else None

    def _moved(
        self, judge: Callable[[str, MetricsSnapshot, MetricsSnapshot], Hits], before: MetricsSnapshot
    ) -> Callable[[MetricsSnapshot], bool]:
        def moved(snap: MetricsSnapshot) -> bool:
            return judge(self.engine, before, snap).rose

        return moved

    def compare(self, recompute: RequestResult, served: RequestResult) -> CorrectnessCheck:
        return correctness.compare(recompute, served, self.target.correctness_early, self.target.noise_margin)

    def _correctness(self, step: StepResult, source: str) -> list[str]:
        """Record the step's checks; the problem when the served KV differs from recompute."""
        checks = self.checks.get(step.name, [])
        if not checks or self.target.correctness_tokens == 0:
            return []
        step.correctness = checks
        line, problem, warnings = correctness.summary(checks, source)
        step.evidence.append(line)
        step.evidence.extend(warnings)
        return [problem] if problem else []

    def _failed(self, results: list[RequestResult]) -> str | None:
        bad = [r for r in results if not r.ok]
        return f"{len(bad)} of {len(results)} requests failed: {bad[0].error}" if bad else None

    async def warmup(self) -> str | None:
        """One throw-away request: first-request costs (graph capture, caches) and calibration."""
        p = await self.builder.build(min(256, self.n_tokens))
        r = await self.session.send(p)
        if not r.ok:
            return f"the first request failed: {r.error}"
        if not p.exact and r.prompt_tokens:
            self.builder.calibrate(p.words, r.prompt_tokens)
        return None

    async def cold_warm(self) -> tuple[StepResult, StepResult]:
        cold: list[RequestResult] = []
        warm: list[RequestResult] = []
        cold_hits = 0.0
        first_b1: MetricsSnapshot | None = None
        last_b2: MetricsSnapshot | None = None
        for i in range(self.target.repeat):
            self.progress(f"cold/warm pair {i + 1}/{self.target.repeat}")
            p = await self.builder.build(self.n_tokens)
            b0 = await self.session.scrape()
            c = await self.session.send(p, generate=True)
            b1 = await self.session.scrape()
            w = await self.session.send(p, generate=True)
            b2 = await self.session.settled(b1, self._moved(prefix_hits, b1))
            cold.append(c)
            warm.append(w)
            self.checks["warm"].append(self.compare(c, w))
            cold_hits += prefix_hits(self.engine, b0, b1).tokens or 0.0
            first_b1 = first_b1 or b1
            last_b2 = b2
        assert first_b1 is not None and last_b2 is not None
        return self._judge_cold(cold, cold_hits), self._judge_warm(cold, warm, first_b1, last_b2)

    def _judge_cold(self, cold: list[RequestResult], cold_hits: float) -> StepResult:
        ttfts = [r.ttft_s for r in cold if r.ok and r.ttft_s is not None]
        self.cold_ttfts = ttfts
        step = StepResult(name="cold", verdict="pass", ttft_s=_median(ttfts), ttfts_s=ttfts)
        counted = sorted({r.prompt_tokens for r in cold if r.prompt_tokens})
        step.evidence.append(
            f"median TTFT {_s(step.ttft_s)} over {len(ttfts)} unique prompts of "
            f"{self.n_tokens} tokens ({'exact' if self.builder.tokenizer else 'estimated'}"
            + (f"; server counted {', '.join(map(str, counted))}" if counted else "")
            + ")"
        )
        if err := self._failed(cold):
            step.verdict, step.reason = "fail", err
        elif cold_hits > 0:
            step.verdict = "fail"
            step.reason = f"cold prompts hit the prefix cache ({cold_hits:.0f} tokens): not a cold start"
        else:
            step.evidence.append("prefix-cache hits during cold requests: 0 tokens")
        return step

    def _judge_warm(
        self, cold: list[RequestResult], warm: list[RequestResult], b1: MetricsSnapshot, b2: MetricsSnapshot
    ) -> StepResult:
        ttfts = [r.ttft_s for r in warm if r.ok and r.ttft_s is not None]
        step = StepResult(name="warm", verdict="pass", ttft_s=_median(ttfts), ttfts_s=ttfts)
        if err := self._failed(warm):
            step.verdict, step.reason = "fail", err
            return step
        cold_med = _median(self.cold_ttfts)
        if cold_med is None or step.ttft_s is None:
            return step.model_copy(update={"verdict": "skip", "reason": "no cold measurement to compare"})
        step.speedup = cold_med / step.ttft_s if step.ttft_s > 0 else math.inf
        step.evidence.append(f"median TTFT {_s(step.ttft_s)} vs cold {_s(cold_med)}: {step.speedup:.2f}x")
        hits = prefix_hits(self.engine, b1, b2)
        step.evidence.extend(hits.evidence)
        cached = [r.cached_tokens for r in warm if r.cached_tokens is not None]
        if cached:
            step.evidence.append(f"usage.prompt_tokens_details.cached_tokens {sum(cached)}")
        problems = self._correctness(step, "the engine's prefix cache")
        if step.correctness:
            step.evidence.append(correctness.determinism(self.target.batch_invariant))
        if step.speedup < self.target.min_speedup:
            need = f"need {self.target.min_speedup:g}x"
            problems.append(f"warm is only {step.speedup:.2f}x faster than cold ({need})")
        if hits.tokens is None and not hits.indicated and not cached:
            problems.append(
                "the server shows no prefix-cache counters at /metrics (SGLang: --enable-metrics) "
                "and no cached_tokens in its usage: the hit cannot be proven"
            )
        elif not hits.rose and not any(cached):
            problems.append("the prefix-cache hit counters did not rise")
        if problems:
            step.verdict, step.reason = "fail", "; ".join(problems)
        return step

    async def evict(self, snap: MetricsSnapshot) -> tuple[bool, str]:
        path = self.target.reset_path or RESET_PATHS.get(self.engine)
        if path is not None:
            ok, detail = await self.session.reset(path)
            if ok:
                return True, detail
        else:
            detail = f"{self.engine} has no reset endpoint that keeps the offload tiers"
        capacity = gpu_capacity_tokens(snap)
        if capacity is None:
            return False, f"cannot drop the GPU copy: {detail}, and the GPU pool size is unknown"
        # Big fillers (up to the context length) keep the request count down on a big pool.
        size = max(self.n_tokens, math.ceil(capacity * 1.2 / self.target.max_overflow_requests))
        if self.session.max_model_len:
            size = min(size, self.session.max_model_len - 8)
        need = math.ceil(capacity * 1.2 / size)
        if need > self.target.max_overflow_requests:
            return False, (
                f"cannot drop the GPU copy: {detail}, and overflowing the {capacity}-token GPU pool "
                f"would take {need} requests (limit {self.target.max_overflow_requests})"
            )
        for _ in range(need):
            filler = await self.builder.build(size)
            r = await self.session.send(filler)
            if not r.ok:
                return False, f"overflowing the GPU pool failed: {r.error}"
        return True, f"{detail}; overflowed the {capacity}-token GPU pool with {need} filler prompts instead"

    async def tier(self, tier: TierTarget) -> StepResult:
        before = await remote_store_state(tier.url) if tier.url is not None else None
        step = await self._tier_rounds(tier)
        if tier.url is None:
            return step
        # A store that went away leaves the engine serving by recompute: say so, not just "no hits".
        store = await remote_store_state(tier.url)
        step.evidence.append(store.evidence)
        if store.problem:
            step.verdict = "fail"
            step.reason = store.problem + (f"; {step.reason}" if step.reason else "")
        elif before is not None and before.keys is not None and store.keys is not None:
            step.evidence.append(
                f"remote store keys {before.keys} -> {store.keys} ({store.keys - before.keys:+d})"
            )
            # With LMCache's cache server the rounds waited for the resp adapter's stores to
            # complete, so its keys must be there; other connectors store on their own schedule.
            if self.cache_server is not None and store.keys <= before.keys and step.verdict == "pass":
                step.verdict, step.reason = "fail", "nothing new was stored in the remote store"
        return step

    def _hidden_behind(self, tier: TierTarget) -> str | None:
        """The disk tier's directory when it holds what ``tier`` must serve: the cache server loads
        from the lowest-indexed L2 adapter holding a chunk, and the disk's comes first."""
        if self.cache_server is None or tier.kind != "remote":
            return None
        disk = next((t for t in self.target.tiers if t.kind == "disk" and t.adapter and t.path), None)
        return disk.path if disk is not None else None

    async def _drop_above(self, tier: TierTarget, sent: MetricsSnapshot) -> tuple[bool, str]:
        """Make the next request reach ``tier``: the GPU copy goes, and for an L2 tier of the
        cache server, its DRAM copy (L1) too, once the store to the tier has landed."""
        details = []
        if self.cache_server is not None and tier.kind != "cpu":
            if tier.adapter is not None:
                adapter = tier.adapter
                await self.session.settled(sent, lambda snap: l2_stores(adapter, sent, snap) > 0, wait_s=5.0)
            ok, detail = await self.cache_server.clear_l1()
            if not ok:
                return False, detail
            details.append(detail)
        else:
            await asyncio.sleep(0.3)  # let asynchronous stores to the tier land
        ok, detail = await self.evict(await self.session.scrape())
        return ok, "; ".join([detail, *details])

    def _tier_moved(self, tier: TierTarget, before: MetricsSnapshot) -> Callable[[MetricsSnapshot], bool]:
        def moved(snap: MetricsSnapshot) -> bool:
            return self._tier_hits(tier, before, snap).rose

        return moved

    def _tier_hits(self, tier: TierTarget, before: MetricsSnapshot, after: MetricsSnapshot) -> Hits:
        if self.cache_server is not None:
            return cache_server_tier_hits(tier.kind, tier.adapter, before, after)
        return connector_hits(self.engine, before, after)

    async def _tier_rounds(self, tier: TierTarget) -> StepResult:
        name = f"tier:{tier.kind}"
        step = StepResult(name=name, verdict="pass")
        recompute: list[float] = []
        served: list[float] = []
        disk_before = dir_state(tier.path) if tier.kind == "disk" else None
        first: MetricsSnapshot | None = None
        last: MetricsSnapshot | None = None
        hide_from = self._hidden_behind(tier)
        for i in range(self.target.repeat):
            self.progress(f"{name}: round {i + 1}/{self.target.repeat}")
            p = await self.builder.build(self.n_tokens)
            files_before = file_set(hide_from)
            sent = await self.session.scrape()
            c = await self.session.send(p, generate=True)
            if not c.ok or c.ttft_s is None:
                return step.model_copy(update={"verdict": "fail", "reason": f"request failed: {c.error}"})
            recompute.append(c.ttft_s)
            ok, detail = await self._drop_above(tier, sent)
            if not ok:
                return step.model_copy(update={"verdict": "fail", "reason": detail})
            hidden = new_files(hide_from, files_before) if hide_from else []
            with moved_aside(hide_from or "", hidden) as n_hidden:
                if i == 0:
                    step.evidence.append(detail)
                    if hide_from:
                        step.evidence.append(
                            f"{n_hidden} objects of the prompt in the disk tier moved aside for the request"
                        )
                s0 = await self.session.scrape()
                r = await self.session.send(p, generate=True)
                s1 = await self.session.settled(s0, self._tier_moved(tier, s0))
            if not r.ok or r.ttft_s is None:
                return step.model_copy(update={"verdict": "fail", "reason": f"request failed: {r.error}"})
            served.append(r.ttft_s)
            self.checks.setdefault(name, []).append(self.compare(c, r))
            first = first or s0
            last = s1
        assert first is not None and last is not None
        hits = self._tier_hits(tier, first, last)
        return self._judge_tier(step, tier, recompute, served, hits, disk_before, last)

    def _judge_tier(
        self,
        step: StepResult,
        tier: TierTarget,
        recompute: list[float],
        served: list[float],
        hits: Hits,
        disk_before: tuple[int, int, float] | None,
        snap: MetricsSnapshot,
    ) -> StepResult:
        rec, got = _median(recompute), _median(served)
        assert rec is not None and got is not None
        step.ttft_s, step.ttfts_s = got, served
        step.speedup = rec / got if got > 0 else math.inf
        step.evidence.append(f"median TTFT after the GPU copy was dropped {_s(got)} vs recompute {_s(rec)}")
        step.evidence.extend(hits.evidence)
        if hits.by_tier:
            by_tier = ", ".join(f"{k} {v:.0f} tokens" for k, v in hits.by_tier.items())
            step.evidence.append(f"served by tier: {by_tier}")
        problems = self._correctness(step, TIER_NAMES.get(tier.kind, tier.kind))
        if hits.tokens is None:
            problems.append("the server shows no connector hit counters at /metrics")
        elif not hits.rose:
            problems.append("connector hit counters did not rise: the tier served nothing")
        if got >= rec:
            problems.append("TTFT is not below recompute")
        if tier.kind == "disk":
            problems.extend(self._disk_evidence(step, tier, disk_before, snap))
        if problems:
            step.verdict, step.reason = "fail", "; ".join(problems)
        return step

    def _disk_evidence(
        self, step: StepResult, tier: TierTarget, before: tuple[int, int, float] | None, snap: MetricsSnapshot
    ) -> list[str]:
        after = dir_state(tier.path)
        usage = lmcache_disk_bytes(snap)
        if usage is not None:
            step.evidence.append(f"lmcache:local_storage_usage {usage:.0f} bytes")
        if after is None:
            if usage:
                return []
            return [f"disk directory {tier.path or '(not given: --cache-dir)'} does not exist"]
        grown = after[0] - (before[0] if before else 0)
        changed = before is None or after[2] > before[2] or after[1] != before[1]
        step.evidence.append(
            f"disk directory {tier.path}: {after[0]} bytes in {after[1]} files ({grown:+d} bytes)"
        )
        if after[0] == 0:
            return ["nothing was written under the disk directory"]
        if not changed:
            return ["nothing new was written under the disk directory during this step"]
        return []


def _diagnosis_step(target: ValidationTarget, diagnoses: list[Diagnosis]) -> StepResult:
    if target.log_file is None:
        return StepResult(name="diagnosis", verdict="skip", reason="no engine log given (--log)")
    errors = [d for d in diagnoses if d.severity == "error"]
    evidence = [f"{d.name}: {d.explanation} ({d.count}x, first at line {d.first_line})" for d in diagnoses]
    if errors:
        return StepResult(
            name="diagnosis",
            verdict="fail",
            reason="the engine log shows: " + ", ".join(d.name for d in errors),
            evidence=evidence,
        )
    clean = [f"no known silent failure in {target.log_file}"]
    return StepResult(name="diagnosis", verdict="pass", evidence=evidence or clean)


def _no_tier_reason(target: ValidationTarget) -> str:
    if target.platform == "cpu":
        return "no offload tier on a CPU platform"
    return "no offload tier to check (none in the plan, or none given with --tier/--cache-dir)"


async def run_validation_async(
    target: ValidationTarget,
    on_progress: Progress | None = None,
    between: Callable[[], None] | None = None,
) -> ValidationReport:
    """Run the pass. Raises InputError subclasses for bad targets; server failures become verdicts.

    ``between`` runs before every request; ``kvstack serve`` passes a check that raises when the
    engine died, so a crash is reported as such rather than as a slow tier.
    """
    check_target(target)
    t0 = time.monotonic()
    s = ServerSession(target, between)
    try:
        await s.discover()
        first = await s.scrape()
        engine = target.engine or first.engine or "vllm"
        limit = (s.max_model_len - 8) if s.max_model_len else None
        n = target.prompt_tokens or min(DEFAULT_PROMPT_TOKENS, limit or DEFAULT_PROMPT_TOKENS)
        if limit is not None and n > limit:
            raise InputError(
                f"--prompt-tokens {n} does not fit the model's context ({s.max_model_len} tokens)",
                hint=f"use --prompt-tokens {limit} or less",
            )
        v = _Validation(s, engine, n, on_progress)
        report = ValidationReport(
            base_url=target.base_url,
            model=s.model,
            engine=engine,
            prompt_tokens=n,
            prompt_tokens_exact=False,
            min_speedup=target.min_speedup,
            repeat=target.repeat,
        )
        if first.errors and not first.samples:
            v.progress(f"metrics unavailable: {first.errors[0]}")
        # An engine whose cache server died still answers /health and hangs every request.
        down = await v.cache_server.problem() if v.cache_server is not None else None
        v.progress("warm-up request")
        if down is not None:
            report.steps.append(StepResult(name="cold", verdict="fail", reason=down))
        elif err := await v.warmup():
            report.steps.append(StepResult(name="cold", verdict="fail", reason=err))
        else:
            cold, warm = await v.cold_warm()
            report.steps += [cold, warm]
            if cold.verdict != "pass":
                report.steps += [
                    StepResult(name=f"tier:{t.kind}", verdict="skip", reason="the cold step failed")
                    for t in target.tiers
                ]
            elif not target.tiers:
                report.steps.append(StepResult(name="tier", verdict="skip", reason=_no_tier_reason(target)))
            else:
                for tier in target.tiers:
                    report.steps.append(await v.tier(tier))
        report.prompt_tokens_exact = v.builder.tokenizer is not None
        apply_predictions(report, target.prediction)
        if target.log_file is not None:
            report.diagnoses = scan_log(Path(target.log_file), target.secrets)
        diag = _diagnosis_step(target, report.diagnoses)
        report.steps.append(diag)
        if diag.verdict == "fail":
            for step in report.steps:
                if step.name.startswith("tier") and step.verdict == "fail":
                    step.reason += f" (likely cause: {diag.reason.removeprefix('the engine log shows: ')})"
        report.overall = (
            "PASS"
            if all(st.verdict != "fail" for st in report.steps)
            and any(st.name == "warm" and st.verdict == "pass" for st in report.steps)
            else "FAIL"
        )
        report.duration_s = round(time.monotonic() - t0, 3)
        return report
    finally:
        await s.aclose()


def run_validation(
    target: ValidationTarget, on_progress: Progress | None = None, between: Callable[[], None] | None = None
) -> ValidationReport:
    return asyncio.run(run_validation_async(target, on_progress, between))
