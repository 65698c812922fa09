"""The cross-replica step: a prefix one replica computed is a hit on another, through the shared tier.

Per round: a fresh prompt (nonce first, so no cache has seen it) goes to the first replica,
which computes it and stores its KV in the shared remote tier; after a pause for the
asynchronous store, the same prompt goes to the second replica, whose GPU cache cannot hold
it. The second replica's connector hit counters (vLLM's external prefix-cache hits, LMCache's
hit tokens) must rise: only the shared tier can have served it.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable

from kvstack.planning.schema import Plan
from kvstack.runtime.metrics import MetricsSnapshot
from kvstack.runtime.streaming import RequestResult
from kvstack.validation.evidence import connector_hits
from kvstack.validation.prompts import PromptBuilder
from kvstack.validation.report import StepResult, ValidationTarget
from kvstack.validation.session import ServerSession

STEP_NAME = "replicas:shared-tier"
STORE_SETTLE_S = 1.0  # connectors store to the remote tier after the response: let it land
Progress = Callable[[str], None]


def shared_tier_skip_reason(plan: Plan, replicas: int) -> str | None:
    """Why the step does not apply, or None when it does."""
    if replicas < 2:
        return "one replica: nothing to share with"
    if plan.platform == "cpu":
        return (
            "no offload tier on a CPU platform (LMCache has no CPU connector): "
            "replicas share no KV, each keeps its own prefix cache"
        )
    if plan.tier("remote") is None:
        return "no remote tier (--remote redis://...): each replica keeps its own cache"
    return None


def _failed(result: RequestResult, where: str) -> str | None:
    if result.ok and result.ttft_s is not None:
        return None
    return f"the request to {where} failed: {result.error}"


def _rose(engine: str, before: MetricsSnapshot) -> Callable[[MetricsSnapshot], bool]:
    def rose(snap: MetricsSnapshot) -> bool:
        return connector_hits(engine, before, snap).rose

    return rose


async def shared_tier_step_async(
    first: ValidationTarget,
    second: ValidationTarget,
    engine: str,
    prompt_tokens: int,
    on_progress: Progress | None = None,
    between: Callable[[], None] | None = None,
    settle_s: float = STORE_SETTLE_S,
) -> StepResult:
    """Send each prompt to ``first``, then ``second``; pass when ``second`` shows connector hits."""
    progress = on_progress or (lambda _m: None)
    step = StepResult(name=STEP_NAME, verdict="pass")
    async with ServerSession(first, between) as s0, ServerSession(second, between) as s1:
        await s0.discover()
        await s1.discover()
        builder = PromptBuilder(s0.tokenize)
        computed: list[float] = []
        served: list[float] = []
        before: MetricsSnapshot | None = None
        after: MetricsSnapshot | None = None
        for i in range(first.repeat):
            progress(f"{STEP_NAME}: round {i + 1}/{first.repeat}")
            prompt = await builder.build(prompt_tokens)
            c = await s0.send(prompt)
            if err := _failed(c, first.base_url):
                return step.model_copy(update={"verdict": "fail", "reason": err})
            computed.append(c.ttft_s or 0.0)
            await asyncio.sleep(settle_s)
            b = await s1.scrape()
            r = await s1.send(prompt)
            if err := _failed(r, second.base_url):
                return step.model_copy(update={"verdict": "fail", "reason": err})
            served.append(r.ttft_s or 0.0)
            a = await s1.settled(b, _rose(engine, b))
            before = before or b
            after = a
    assert before is not None and after is not None
    hits = connector_hits(engine, before, after)
    step.ttft_s, step.ttfts_s = statistics.median(served), served
    step.evidence.append(
        f"median TTFT on {second.base_url} {step.ttft_s:.3f} s for prompts {first.base_url} computed "
        f"in {statistics.median(computed):.3f} s"
    )
    step.evidence.extend(f"{second.base_url}: {e}" for e in hits.evidence)
    if hits.tokens is None:
        step.verdict = "fail"
        step.reason = f"{second.base_url} shows no connector hit counters at /metrics"
    elif not hits.rose:
        step.verdict = "fail"
        step.reason = (
            f"{second.base_url} served none of the prompts {first.base_url} computed from the shared "
            "tier: its connector hit counters did not rise"
        )
    return step


def shared_tier_step(
    first: ValidationTarget,
    second: ValidationTarget,
    engine: str,
    prompt_tokens: int,
    on_progress: Progress | None = None,
    between: Callable[[], None] | None = None,
    settle_s: float = STORE_SETTLE_S,
) -> StepResult:
    return asyncio.run(
        shared_tier_step_async(first, second, engine, prompt_tokens, on_progress, between, settle_s)
    )
