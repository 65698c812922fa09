"""The cross-replica step: a prefix one replica computed is a hit on another, through the shared tier.

Per round: a fresh prompt (nonce first, so no cache has seen it) goes to the first replica,
which computes it and stores its KV in the shared remote tier; after a pause for the
asynchronous store, the same prompt goes to the second replica, whose GPU cache cannot hold
it. The second replica's connector hit counters (vLLM's external prefix-cache hits, LMCache's
hit tokens) must rise: only the shared tier can have served it. With LMCache's cache servers
(one per replica) the replicas also share the disk tier's directory, which the second server
would load from first: the prompt's objects there are moved aside for the request, and the
loads of the Redis (resp) adapter must rise.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

from kvstack.clients.metrics import MetricsSnapshot
from kvstack.clients.streaming import RequestResult
from kvstack.connectors import SPECS, spec_of
from kvstack.planning.schema import Plan
from kvstack.validation.cache_server import moved_aside
from kvstack.validation.evidence import (
    Hits,
    cache_server_tier_hits,
    connector_hits,
    file_set,
    l2_stores,
    new_files,
)
from kvstack.validation.prompts import PromptBuilder
from kvstack.validation.report import StepResult, ValidationTarget
from kvstack.validation.server_api import ServerApi

P = ParamSpec("P")

STEP_NAME = "replicas:shared-tier"
STORE_SETTLE_S = 1.0  # connectors store to the remote tier after the response: let it land
Progress = Callable[[str], None]


def shared_tier_skip_reason(plan: Plan, replicas: int) -> str | None:
    """Why the step does not apply, or None when it does."""
    if replicas < 2:
        return "one replica: nothing to share with"
    # On the CPU platform only a connector with its own cache server moves KV (planning/cpu_plan.py).
    if plan.platform == "cpu" and not spec_of(plan.transfer.connector).cache_server:
        servers = " or ".join(f"--offload {s.name}" for s in SPECS.values() if s.cache_server)
        return (
            f"no offload tier on a CPU platform without LMCache's cache server ({servers}): "
            "replicas share no KV, each keeps its own prefix cache"
        )
    if plan.tier("remote") is None:
        return "no remote tier (--remote redis://...): each replica keeps its own cache"
    return None


def _failed(result: RequestResult, where: str) -> str | None:
    if result.ok and result.ttft_s is not None:
        return None
    return f"the request to {where} failed: {result.error}"


class _SharedEvidence:
    """How the second replica's hits are judged: its connector's counters, or with a cache server
    the loads of the remote tier's adapter, the shared disk directory's copy moved aside."""

    def __init__(self, engine: str, second: ValidationTarget) -> None:
        self.engine = engine
        remote = next((t for t in second.tiers if t.kind == "remote"), None)
        self.adapter = remote.adapter if remote is not None and second.cache_server_url else None
        disk = next((t for t in second.tiers if t.kind == "disk" and t.path), None)
        self.hide_from = disk.path if disk is not None and self.adapter else None

    def hits(self, before: MetricsSnapshot, after: MetricsSnapshot) -> Hits:
        if self.adapter is not None:
            return cache_server_tier_hits("remote", self.adapter, before, after)
        return connector_hits(self.engine, before, after)

    def stored(self, before: MetricsSnapshot) -> Callable[[MetricsSnapshot], bool]:
        """The first replica's store to the remote tier has landed."""
        adapter = self.adapter or ""

        def stored(snap: MetricsSnapshot) -> bool:
            return l2_stores(adapter, before, snap) > 0

        return stored

    def rose(self, before: MetricsSnapshot) -> Callable[[MetricsSnapshot], bool]:
        def rose(snap: MetricsSnapshot) -> bool:
            return self.hits(before, snap).rose

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
    judge = _SharedEvidence(engine, second)
    async with ServerApi(first, between) as s0, ServerApi(second, between) as s1:
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
            files = file_set(judge.hide_from)
            sent = await s0.scrape()
            c = await s0.send(prompt)
            if err := _failed(c, first.base_url):
                return step.with_verdict("fail", err)
            computed.append(c.ttft_s or 0.0)
            if judge.adapter is not None:
                await s0.settled(sent, judge.stored(sent), wait_s=5.0)
            else:
                await asyncio.sleep(settle_s)
            hidden = new_files(judge.hide_from, files) if judge.hide_from else []
            with moved_aside(judge.hide_from or "", hidden) as n_hidden:
                if i == 0 and judge.hide_from:
                    step.evidence.append(
                        f"{n_hidden} objects of the prompt in the shared disk tier moved aside"
                    )
                b = await s1.scrape()
                r = await s1.send(prompt)
                if err := _failed(r, second.base_url):
                    return step.with_verdict("fail", err)
                served.append(r.ttft_s or 0.0)
                a = await s1.settled(b, judge.rose(b))
            before = before or b
            after = a
    assert before is not None and after is not None
    hits = judge.hits(before, after)
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


def _run_sync(step: Callable[P, Coroutine[Any, Any, StepResult]]) -> Callable[P, StepResult]:
    def run(*args: P.args, **kwargs: P.kwargs) -> StepResult:
        return asyncio.run(step(*args, **kwargs))

    return run


# The step, run to completion from synchronous code (as `kvstack serve --replicas` validates).
shared_tier_step = _run_sync(shared_tier_step_async)
