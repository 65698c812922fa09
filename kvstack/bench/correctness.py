"""`bench --check-correctness K`: do the cached answers give recompute's answer?

After a layout's rounds, K requests of the last round (the ones the caches serve) are generated
greedily as they are (served from whatever cache holds the prompt), and every token they generated
is then scored by a guaranteed recompute (validation/scoring.py: prompt log-probabilities with a
fresh ``cache_salt``) and judged by validation's rules (validation/correctness.py).
"""

from __future__ import annotations

from kvstack.bench.schema import CorrectnessResult
from kvstack.bench.workloads import RequestSet
from kvstack.clients.client import auth_headers, make_client
from kvstack.clients.streaming import StreamClient
from kvstack.validation.correctness import CorrectnessCheck, judge
from kvstack.validation.scoring import PositionScore, score
from kvstack.validation.thresholds import DEFAULT_TOKENS, DEFAULT_TOP_K


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
    checks: list[CorrectnessCheck] = []
    async with make_client(client.base_url, max_connections=1) as scorer:
        for req in sample:
            served = await client.completion(
                model, req.prompt, DEFAULT_TOKENS, api_key, timeout_s, extra_body={"return_token_ids": True}
            )
            if not served.ok:
                scores: list[PositionScore] | str = f"the served request failed: {served.error}"
            elif served.prompt_token_ids is None:
                scores = "the server did not return the prompt's token ids (return_token_ids)"
            else:
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
            check = judge(served, scores, DEFAULT_TOKENS)
            check.request = req.index
            checks.append(check)
    return CorrectnessResult.of(checks)
