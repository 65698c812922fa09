"""`bench --check-correctness K`: do the cached answers give recompute's answer?

After a layout's rounds, K requests of the last round (the ones the caches serve) are generated
greedily as they are (served from whatever cache holds the prompt), and every token they generated
is then scored by a guaranteed recompute (validation/scoring.py: prompt log-probabilities with a
fresh ``cache_salt``) and judged by validation's rules (validation/correctness.py) against a noise
floor measured here the way validation measures it (validation/noise.py): the same K prompts led by
a fresh nonce (so no cache holds any block of them) are answered and scored the same way.
"""

from __future__ import annotations

from kvstack.bench.schema import CorrectnessResult
from kvstack.bench.workloads import RequestSet
from kvstack.clients.client import auth_headers, make_client
from kvstack.clients.streaming import RequestResult, StreamClient
from kvstack.validation.correctness import CorrectnessCheck, judge
from kvstack.validation.noise import NoiseFloor, measure
from kvstack.validation.prompts import new_nonce
from kvstack.validation.scoring import PositionScore, score
from kvstack.validation.thresholds import DEFAULT_TOKENS, DEFAULT_TOP_K

NOISE_METHOD = "the checked prompts led by a fresh nonce (nothing cached), answered and scored by a recompute"


async def check_correctness(
    client: StreamClient,
    workload: RequestSet,
    model: str,
    api_key: str | None,
    timeout_s: float,
    k: int,
    engine: str = "vllm",
) -> CorrectnessResult:
    last = max((r.round for r in workload.requests), default=0)
    sample = [r for r in workload.requests if r.round == last][:k]
    async with make_client(client.base_url, max_connections=1) as scorer:

        async def answer(prompt: str) -> tuple[RequestResult, list[PositionScore] | str]:
            served = await client.completion(
                model,
                prompt,
                DEFAULT_TOKENS,
                api_key,
                timeout_s,
                extra_body={"return_token_ids": True},
                logprobs=1,
            )
            if not served.ok:
                return served, f"the served request failed: {served.error}"
            if served.prompt_token_ids is None:
                return served, "the server did not return the prompt's token ids (return_token_ids)"
            scores = await score(
                scorer,
                client.base_url,
                auth_headers(api_key),
                engine,
                model,
                served.prompt_token_ids,
                served.token_ids,
                DEFAULT_TOP_K,
            )
            return served, scores

        cached = [await answer(req.prompt) for req in sample]
        used: set[str] = set()
        fresh = []
        for req in sample:
            nonce = new_nonce(avoid=used)
            used.add(nonce.split("-")[0])
            fresh.append(await answer(f"{nonce} {req.prompt}"))
        noise = measure(fresh, NOISE_METHOD) if sample else NoiseFloor(method=NOISE_METHOD)
    checks: list[CorrectnessCheck] = []
    for req, (served, scores) in zip(sample, cached, strict=True):
        check = judge(served, scores, DEFAULT_TOKENS, noise)
        check.request = req.index
        checks.append(check)
    return CorrectnessResult.of(checks, noise)
