"""`bench --check-correctness K`: do the cached answers give recompute's answer?

Rounds workloads: after a layout's rounds, K requests of the last round (the ones the caches serve)
are generated greedily as they are (served from whatever cache holds the prompt), as many side by
side as the workload's concurrency, so each is served with the others in flight. A trace replay
(``bench --trace``): K of the replayed answers themselves, those the caches served most of (the
replay asked them for their token ids and log-probabilities as it sent them). Either way every token
they generated is then scored by a guaranteed recompute in the engine's own request
(validation/scoring.py: vLLM's prompt log-probabilities under a fresh ``cache_salt``, SGLang's
``/generate`` from position 0) and judged by validation's rules (validation/correctness.py
``judge``, ``summary`` for the evidence line) against a noise floor measured here the way validation
measures it (validation/noise.py): the same K prompts made fresh (led by a fresh nonce; a trace's
token prompts get a fresh first block), so no cache holds any block of them, are answered and scored
the same way. A failed answer is judged again beside the recompute's own answer to its prompt, as
validation's are (``beside_recompute``).
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

import httpx

from kvstack.bench.schema import CorrectnessResult, RequestRow
from kvstack.bench.workloads import RequestSet
from kvstack.clients.client import auth_headers, make_client
from kvstack.clients.metrics import MetricsSnapshot
from kvstack.clients.streaming import RequestResult, StreamClient
from kvstack.planning.schema import Plan
from kvstack.validation.correctness import CorrectnessCheck, beside_recompute, judge, summary
from kvstack.validation.noise import NoiseFloor, measure
from kvstack.validation.prompts import new_nonce
from kvstack.validation.scoring import (
    CHECKED_EXTRA_BODY,
    CHECKED_LOGPROBS,
    PositionScore,
    recompute_answer,
    score,
)
from kvstack.validation.thresholds import DEFAULT_NOISE_CEILING, DEFAULT_TOKENS, DEFAULT_TOP_K

NOISE_METHOD = "the checked prompts led by a fresh nonce (nothing cached), answered and scored by a recompute"
TRACE_NOISE_METHOD = (
    "the checked prompts with a fresh first block (nothing cached), answered and scored by a recompute"
)

Scored = tuple[RequestResult, list[PositionScore] | str]


def engine_of(plan: Plan | None, snapshot: MetricsSnapshot | None) -> str:
    """The engine to score with: the plan's when kvstack serves the layout, else the one its
    /metrics show (validation's rule), else vLLM."""
    if plan is not None:
        return str(plan.engine)
    return (snapshot.engine if snapshot is not None else None) or "vllm"


@dataclass(frozen=True)
class Judge:
    """Answers and scores on one server: the recompute in the engine's own request."""

    client: StreamClient
    scorer: httpx.AsyncClient
    engine: str
    model: str
    api_key: str | None
    timeout_s: float

    async def scored(self, served: RequestResult, prompt_ids: list[int] | None) -> Scored:
        """``served`` and recompute's scores of its tokens (or why they could not be had)."""
        if not served.ok:
            return served, f"the served request failed: {served.error}"
        ids = served.prompt_token_ids or prompt_ids
        if not ids:
            return served, "the server did not return the prompt's token ids (return_token_ids)"
        scores = await score(
            self.scorer,
            self.client.base_url,
            auth_headers(self.api_key),
            self.engine,
            self.model,
            ids,
            served.token_ids,
            DEFAULT_TOP_K,
        )
        return served, scores

    async def answer(self, prompt: str | list[int], tokens: int) -> Scored:
        """A greedy answer to ``prompt`` with its token ids and log-probabilities, then scored."""
        served = await self.client.completion(
            self.model,
            prompt,
            tokens,
            self.api_key,
            self.timeout_s,
            extra_body=CHECKED_EXTRA_BODY,
            logprobs=CHECKED_LOGPROBS,
        )
        return await self.scored(served, prompt if isinstance(prompt, list) else None)

    async def beside_recompute(
        self, check: CorrectnessCheck, prompt_ids: list[int] | None
    ) -> CorrectnessCheck:
        """A failed check judged beside the recompute's own answer to its prompt, asked for now by a
        request that reads no cache and scored the same way (validation/correctness.py)."""
        if check.verdict != "fail" or not prompt_ids:
            return check
        headers = auth_headers(self.api_key)
        base = self.client.base_url
        own = await recompute_answer(
            self.scorer, base, headers, self.engine, self.model, prompt_ids, check.asked
        )
        scores = (await self.scored(own, prompt_ids))[1] if not isinstance(own, str) else own
        return beside_recompute(check, own, scores, DEFAULT_NOISE_CEILING)

    async def judged_again(
        self, result: CorrectnessResult, prompts: Sequence[list[int] | None], source: str
    ) -> CorrectnessResult:
        """``result`` with each failed check judged beside its recompute's own answer."""
        if not result.failed:
            return result
        checks = [await self.beside_recompute(c, ids) for c, ids in zip(result.checks, prompts, strict=True)]
        return CorrectnessResult.of(checks, result.noise_floor, summary(checks, source)[0])


def verdicts(
    requests: Sequence[int],
    asked: Sequence[int],
    cached: Sequence[Scored],
    fresh: list[Scored],
    method: str,
    source: str,
) -> CorrectnessResult:
    """The cached answers judged against the noise floor the fresh ones measure."""
    noise = measure(fresh, method) if fresh else NoiseFloor(method=method)
    checks: list[CorrectnessCheck] = []
    for request, n, (served, scores) in zip(requests, asked, cached, strict=True):
        check = judge(served, scores, n, noise)
        check.request = request
        checks.append(check)
    return CorrectnessResult.of(checks, noise, summary(checks, source)[0] if checks else "")


async def side_by_side(jobs: Sequence[Awaitable[Scored]], in_flight: int) -> list[Scored]:
    """The jobs with up to ``in_flight`` at once, in order: answers served beside each other, as the
    workload sends them (each one's scoring follows its answer)."""
    gate = asyncio.Semaphore(max(1, in_flight))

    async def one(job: Awaitable[Scored]) -> Scored:
        async with gate:
            return await job

    return list(await asyncio.gather(*(one(j) for j in jobs)))


async def check_correctness(
    client: StreamClient,
    workload: RequestSet,
    model: str,
    api_key: str | None,
    timeout_s: float,
    k: int,
    engine: str = "vllm",
    in_flight: int = 1,
) -> CorrectnessResult:
    """K requests of the last round asked again, ``in_flight`` at a time (the workload's concurrency),
    and as many fresh twins the same way for the noise floor."""
    last = max((r.round for r in workload.requests), default=0)
    sample = [r for r in workload.requests if r.round == last][:k]
    async with make_client(client.base_url, max_connections=max(1, in_flight)) as scorer:
        judge_ = Judge(client, scorer, engine, model, api_key, timeout_s)
        cached = await side_by_side([judge_.answer(req.prompt, DEFAULT_TOKENS) for req in sample], in_flight)
        used: set[str] = set()
        twins = []
        for req in sample:
            nonce = new_nonce(avoid=used)
            used.add(nonce.split("-")[0])
            twins.append(f"{nonce} {req.prompt}")
        fresh = await side_by_side([judge_.answer(p, DEFAULT_TOKENS) for p in twins], in_flight)
        source = "the layout's caches"
        indices = [r.index for r in sample]
        result = verdicts(indices, [DEFAULT_TOKENS] * len(sample), cached, fresh, NOISE_METHOD, source)
        result = await judge_.judged_again(result, [served.prompt_token_ids for served, _ in cached], source)
    result.in_flight = min(max(1, in_flight), len(sample)) if sample else 1
    return result


@dataclass(frozen=True)
class Answer:
    """One replayed answer to judge: the request, its prompt's token ids, what came back, and the
    tokens it asked for."""

    request: int
    prompt_ids: list[int]
    served: RequestResult
    asked: int


def fresh_lead(prompt: list[int], pool: Sequence[int], lead: int) -> list[int]:
    """``prompt`` with its first ``lead`` tokens drawn fresh from ``pool``: the same length, and no
    prefix cache holds any block of it (every block hash chains from the first)."""
    rng = random.Random(secrets.randbits(64))
    n = min(lead, len(prompt))
    return [rng.choice(pool) for _ in range(n)] + prompt[n:]


async def check_replayed(
    base_url: str,
    api_key: str | None,
    engine: str,
    model: str,
    answers: Sequence[Answer],
    pool: Sequence[int],
    lead: int,
    timeout_s: float,
    source: str,
) -> CorrectnessResult:
    """bench --trace: the replayed ``answers`` judged against the floor their fresh-led twins give."""
    async with (
        StreamClient(base_url, 1) as client,
        make_client(base_url, max_connections=1) as scorer,
    ):
        judge_ = Judge(client, scorer, engine, model, api_key, timeout_s)
        cached = [await judge_.scored(a.served, a.prompt_ids) for a in answers]
        fresh = [await judge_.answer(fresh_lead(a.prompt_ids, pool, lead), a.asked) for a in answers]
        requests, asked = [a.request for a in answers], [a.asked for a in answers]
        result = verdicts(requests, asked, cached, fresh, TRACE_NOISE_METHOD, source)
        return await judge_.judged_again(result, [a.prompt_ids for a in answers], source)


def cached_first(rows: Sequence[RequestRow], k: int) -> list[RequestRow]:
    """The ``k`` successful rows the caches served most of: the offload tiers' tokens first, then
    the engine cache's, then (rows without per-request sources) what an unbounded cache would hold."""

    def key(r: RequestRow) -> tuple[float, float, int, int]:
        offloaded = sum(x or 0.0 for x in (r.dram_tokens, r.disk_tokens, r.remote_tokens, r.offload_tokens))
        return (-offloaded, -(r.engine_cache_tokens or 0.0), -r.expected_prefix_tokens, r.index)

    return sorted((r for r in rows if r.ok), key=key)[:k]
