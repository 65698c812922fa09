"""The cold and warm steps, and what every step shares: dropping the GPU copy, correctness.

Each measurement is the median over ``repeat`` fresh prompts: one noisy request on a busy machine
must not decide the verdict. Counters are read per round, around the one request being judged, so
requests of other rounds (and the correctness gate's scoring requests) never count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from kvstack.clients.metrics import MetricsSnapshot
from kvstack.clients.reset import RESET_PATHS
from kvstack.clients.streaming import RequestResult
from kvstack.connectors.engines import ENGINE_SPECS
from kvstack.validation import correctness
from kvstack.validation.cache_server import CacheServer
from kvstack.validation.correctness import CorrectnessCheck
from kvstack.validation.evidence import Hits, gpu_block_tokens, gpu_capacity_tokens, prefix_hits
from kvstack.validation.isolation import covering_tokens
from kvstack.validation.noise import NoiseFloor, measure
from kvstack.validation.prompts import Prompt, PromptBuilder
from kvstack.validation.report import StepResult
from kvstack.validation.server_api import ServerApi

Progress = Callable[[str], None]
# Where the engine does not report its KV block size, the warm rule assumes the coarsest unit a
# prefix cache matches in (LMCache's chunk, vLLM's largest block size): full 256-token units less one.
UNKNOWN_BLOCK_TOKENS = 256


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} s"


@dataclass
class Served:
    """A request served from the cache under test, with the recompute of the same prompt."""

    prompt: Prompt
    recompute: RequestResult
    served: RequestResult


class Validation:
    """One pass's state: the server API, the prompt builder, the cold figures every step compares to."""

    def __init__(self, s: ServerApi, engine: str, n_tokens: int, progress: Progress | None) -> None:
        self.api = s
        self.target = s.target
        self.engine = engine
        self.n_tokens = n_tokens
        self.progress = progress or (lambda _msg: None)
        self.builder = PromptBuilder(s.tokenize)
        self.cold_ttfts: list[float] = []
        self.noise: NoiseFloor | None = None  # measured on the cold answers before any cache is judged
        url = s.target.cache_server_url
        self.cache_server = CacheServer(s.client, url) if url else None

    @property
    def cold_median(self) -> float | None:
        return median(self.cold_ttfts)

    def failed(self, results: list[RequestResult]) -> str | None:
        bad = [r for r in results if not r.ok]
        return f"{len(bad)} of {len(results)} requests failed: {bad[0].error}" if bad else None

    async def warmup(self) -> str | None:
        """One throw-away request: first-request costs (graph capture, caches) and calibration."""
        self.progress("warm-up request")
        p = await self.builder.build(min(256, self.n_tokens))
        r = await self.api.send(p)
        if not r.ok:
            return f"the first request failed: {r.error}"
        if not p.exact and r.prompt_tokens:
            self.builder.calibrate(p.words, r.prompt_tokens)
        return None

    async def measure_noise(self, cold: list[Served]) -> NoiseFloor:
        """The engine's own noise: the cold answers (nothing cached could serve them) scored by the
        same recompute that judges every cached answer."""
        samples = []
        for i, item in enumerate(cold):
            self.progress(f"noise floor: scoring cold answer {i + 1}/{len(cold)}")
            samples.append((item.served, await self.api.score(item.prompt, item.served, self.engine)))
        method = "cold answers (fresh prompts, decoded by the engine) scored by a recompute prefill"
        return measure(samples, method, self.target.noise_ceiling)

    async def correctness(self, step: StepResult, served: list[Served], source: str) -> list[str]:
        """Score every served request by a recompute, record the checks; the problem, if any."""
        if self.target.correctness_tokens == 0:
            step.evidence.append(
                "correctness gate off (--correctness-tokens 0): the answers were not checked"
            )
            return []
        noise = self.noise or NoiseFloor(method="not measured", detail="the cold step measured no floor")
        checks: list[CorrectnessCheck] = []
        for i, item in enumerate(served):
            self.progress(f"{step.name}: scoring served tokens {i + 1}/{len(served)}")
            scores = await self.api.score(item.prompt, item.served, self.engine)
            check = correctness.judge(
                item.served, scores, self.target.correctness_tokens, noise, item.recompute
            )
            if check.verdict == "fail":
                self.progress(f"{step.name}: the recompute's own answer {i + 1}/{len(served)}")
                own, own_scores = await self.api.recompute_scored(item.prompt, self.engine)
                check = correctness.beside_recompute(check, own, own_scores, noise.ceiling)
            checks.append(check)
        step.correctness = checks
        line, problem = correctness.summary(checks, source)
        step.evidence.append(line)
        return [problem] if problem else []

    def _prefix_rose(self, before: MetricsSnapshot) -> Callable[[MetricsSnapshot], bool]:
        def rose(snap: MetricsSnapshot) -> bool:
            return prefix_hits(self.engine, before, snap).rose

        return rose

    async def cold_warm(self) -> tuple[StepResult, StepResult]:
        cold: list[RequestResult] = []
        served: list[Served] = []
        cold_hits = 0.0
        warm_hits: list[Hits] = []
        block: int | None = None
        for i in range(self.target.repeat):
            self.progress(f"cold/warm pair {i + 1}/{self.target.repeat}")
            p = await self.builder.build(self.n_tokens)
            b0 = await self.api.scrape()
            c = await self.api.send(p, generate=True)
            b1 = await self.api.scrape()
            w = await self.api.send(p, generate=True)
            b2 = await self.api.settled(b1, self._prefix_rose(b1))
            cold.append(c)
            served.append(Served(p, c, w))
            cold_hits += prefix_hits(self.engine, b0, b1).tokens or 0.0
            warm_hits.append(prefix_hits(self.engine, b1, b2))
            block = block or gpu_block_tokens(b2)
        cold_step = self.judge_cold(cold, cold_hits)
        warm_step = self.judge_warm(served, warm_hits, block)
        if self.target.correctness_tokens and not self.failed(cold):
            answers = [Served(s.prompt, s.recompute, s.recompute) for s in served]
            self.noise = await self.measure_noise(answers)
            cold_step.evidence.append(self.noise.line())
        if warm_step.verdict != "skip" and not self.failed([s.served for s in served]):
            problems = await self.correctness(warm_step, served, "the engine's prefix cache")
            if warm_step.correctness:
                warm_step.evidence.append(correctness.determinism(self.target.batch_invariant))
            if problems:
                warm_step.reason = "; ".join(filter(None, [warm_step.reason, *problems]))
                warm_step.verdict = "fail"
        return cold_step, warm_step

    def judge_cold(self, cold: list[RequestResult], cold_hits: float) -> StepResult:
        ttfts = [r.ttft_s for r in cold if r.ok and r.ttft_s is not None]
        self.cold_ttfts = ttfts
        step = StepResult(name="cold", verdict="pass", ttft_s=median(ttfts), ttfts_s=ttfts)
        counted = sorted({r.prompt_tokens for r in cold if r.prompt_tokens})
        step.evidence.append(
            f"median TTFT {secs(step.ttft_s)} over {len(ttfts)} unique prompts of "
            f"{self.n_tokens} tokens ({'exact' if self.builder.tokenizer else 'estimated'}"
            + (f"; server counted {', '.join(map(str, counted))}" if counted else "")
            + ")"
        )
        if err := self.failed(cold):
            step.verdict, step.reason = "fail", err
        elif cold_hits > 0:
            step.verdict = "fail"
            step.reason = f"cold prompts hit the prefix cache ({cold_hits:.0f} tokens): not a cold start"
        else:
            step.evidence.append("prefix-cache hits during cold requests: 0 tokens")
        return step

    def judge_warm(self, served: list[Served], hits: list[Hits], block: int | None) -> StepResult:
        warm = [s.served for s in served]
        ttfts = [r.ttft_s for r in warm if r.ok and r.ttft_s is not None]
        step = StepResult(name="warm", verdict="pass", ttft_s=median(ttfts), ttfts_s=ttfts)
        if err := self.failed(warm):
            step.verdict, step.reason = "fail", err
            return step
        if self.target.no_prefix_cache:
            step.verdict = "skip"
            step.reason = (
                f"the engine keeps no prefix cache for this model (the plan: {self.target.no_prefix_cache})"
            )
            return step
        cold_med = self.cold_median
        if cold_med is None or step.ttft_s is None:
            return step.with_verdict("skip", "no cold measurement to compare")
        step.speedup = cold_med / step.ttft_s if step.ttft_s > 0 else math.inf
        need = self.target.min_speedup
        step.evidence.append(
            f"median TTFT {secs(step.ttft_s)} vs cold {secs(cold_med)}: {step.speedup:.2f}x (need {need:g}x)"
        )
        step.evidence.extend(hits[0].evidence if hits else [])
        cached = [r.cached_tokens for r in warm if r.cached_tokens is not None]
        if cached:
            step.evidence.append(f"usage.prompt_tokens_details.cached_tokens {sum(cached)}")
        problems = []
        if step.speedup < need:
            problems.append(f"warm is only {step.speedup:.2f}x faster than cold (need {need:g}x)")
        problems += self._warm_coverage(step, hits, warm, block)
        if problems:
            step.verdict, step.reason = "fail", "; ".join(problems)
        return step

    def _warm_coverage(
        self, step: StepResult, hits: list[Hits], warm: list[RequestResult], block: int | None
    ) -> list[str]:
        """Each round's warm request must have been served by the prefix cache, its full blocks less one.

        A round's count is the engine's own per-request figure where it reports one
        (``usage.prompt_tokens_details.cached_tokens``), else the counters' delta around the request.
        A hit-rate gauge is no count (an absolute ratio over the server's life), and an unknown block
        size is no licence to accept a one-token hit: the rule then assumes the coarsest unit.
        """
        counted: list[float | None] = []
        for i, h in enumerate(hits):
            own = warm[i].cached_tokens if i < len(warm) else None
            counted.append(float(own) if own is not None else h.tokens)
        if all(c is None for c in counted):
            what = (
                "only a hit-rate gauge moved (a ratio over the server's life, not this request's count)"
                if any(h.indicated for h in hits)
                else "the server shows no prefix-cache counters at /metrics (SGLang: --enable-metrics)"
            )
            return [f"the warm hit cannot be proven: {what}, and no cached_tokens in its usage"]
        unit = block or UNKNOWN_BLOCK_TOKENS
        need = covering_tokens(self.n_tokens, unit)
        figures = ", ".join("n/a" if c is None else f"{c:.0f}" for c in counted)
        rule = (
            f"the prompt's full {block}-token blocks less one"
            if block
            else f"the block size is not reported: the prompt's full {unit}-token units less one"
        )
        step.evidence.append(f"prefix-cache hit tokens per round: {figures} (need >= {need}: {rule})")
        short = [c for c in counted if c is None or c < need]
        if not short:
            return []
        if any(c is None for c in short):
            return [f"the warm hit of a round could not be counted (per round: {figures}; need >= {need})"]
        worst = min(c for c in short if c is not None)
        return [
            f"the prefix cache served {worst:.0f} of {self.n_tokens} prompt tokens in a round "
            f"(need >= {need})"
        ]

    async def evict(
        self, snap: MetricsSnapshot, external: bool = False, overflow_only: bool = False
    ) -> tuple[bool, str]:
        """Drop the GPU copy: the reset endpoint (``external``: the connector's CPU tier too), or
        overflow the pool with filler prompts."""
        detail = "the GPU pool is overflowed on purpose (a reset would also empty the tier above)"
        if not overflow_only:
            path = self.target.reset_path or RESET_PATHS.get(self.engine)
            if path is not None:
                if external:
                    path += ("&" if "?" in path else "?") + "reset_external=true"
                own = ENGINE_SPECS.get(self.engine)
                running = own.reset_running_query if own is not None else ""
                if self.target.concurrency > 1 and running:
                    # vLLM refuses a reset while requests hold blocks, and the load always has some
                    # running: they are preempted and recomputed (Scheduler.reset_prefix_cache).
                    path += ("&" if "?" in path else "?") + running
                ok, detail = await self.api.reset(path)
                if ok or external:
                    return ok, detail
            else:
                detail = f"{self.engine} has no reset endpoint that keeps the offload tiers"
        capacity = gpu_capacity_tokens(snap)
        if capacity is None:
            return False, f"cannot drop the GPU copy: {detail}, and the GPU pool size is unknown"
        # Big fillers (up to the context length) keep the request count down on a big pool.
        size = max(self.n_tokens, math.ceil(capacity * 1.2 / self.target.max_overflow_requests))
        if self.api.max_model_len:
            size = min(size, self.api.max_model_len - 8)
        need = math.ceil(capacity * 1.2 / size)
        if need > self.target.max_overflow_requests:
            return False, (
                f"cannot drop the GPU copy: {detail}, and overflowing the {capacity}-token GPU pool "
                f"would take {need} requests (limit {self.target.max_overflow_requests})"
            )
        for _ in range(need):
            filler = await self.builder.build(size)
            r = await self.api.send(filler)
            if not r.ok:
                return False, f"overflowing the GPU pool failed: {r.error}"
        return True, f"{detail}; overflowed the {capacity}-token GPU pool with {need} filler prompts instead"
