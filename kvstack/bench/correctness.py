"""`bench --check-correctness K`: do the cached answers equal recompute's?

After a layout's rounds, K requests of the last round (the ones the caches serve) are generated
greedily twice: as they are (served from whatever cache holds the prompt) and with a fresh
``cache_salt`` (vLLM keys every cached block, and LMCache every chunk, by it: nothing cached
matches, the prompt is recomputed). The two are compared by validation's rules.
"""

from __future__ import annotations

import uuid

from kvstack.bench.schema import CorrectnessResult
from kvstack.bench.workloads import Workload
from kvstack.runtime.streaming import StreamClient
from kvstack.validation.correctness import DEFAULT_TOKENS, TOP_LOGPROBS, compare


async def check_correctness(
    client: StreamClient, workload: Workload, model: str, api_key: str | None, timeout_s: float, k: int
) -> CorrectnessResult:
    last = max((r.round for r in workload.requests), default=0)
    sample = [r for r in workload.requests if r.round == last][:k]
    checks = []
    for req in sample:
        served = await client.completion(
            model, req.prompt, DEFAULT_TOKENS, api_key, timeout_s, logprobs=TOP_LOGPROBS
        )
        salt = {"cache_salt": f"kvstack-recompute-{uuid.uuid4().hex}"}
        recompute = await client.completion(
            model, req.prompt, DEFAULT_TOKENS, api_key, timeout_s, extra_body=salt, logprobs=TOP_LOGPROBS
        )
        if not (served.ok and recompute.ok):
            error = served.error or recompute.error
            checks.append(
                compare(recompute, served).model_copy(update={"verdict": "unknown", "detail": str(error)})
            )
            continue
        checks.append(compare(recompute, served))
    return CorrectnessResult.of(checks)
