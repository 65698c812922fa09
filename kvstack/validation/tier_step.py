"""A tier step: a fresh prompt, every copy above the tier dropped, the prompt again.

Per round: send a new prompt (its recompute), drop what the step plan says (validation/isolation.py),
send it again and read the tier's counters around that one request. The step passes when, in every
round, the tier's hit tokens cover the prompt (its full chunks less one), the median TTFT beats its
own recompute by ``min_tier_speedup`` and is below the cold step's median, a disk tier's directory
holds bytes written during the step, and every served token passes the correctness gate.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from kvstack.clients.metrics import MetricsSnapshot
from kvstack.clients.reset import SGLANG_FLUSH_PATH
from kvstack.validation.cache_server import moved_aside
from kvstack.validation.evidence import (
    Hits,
    cache_server_tier_hits,
    connector_hits,
    dir_state,
    file_set,
    l2_stores,
    lmcache_disk_bytes,
    new_files,
)
from kvstack.validation.isolation import StepPlan, chunk_tokens, covering_tokens
from kvstack.validation.remote import remote_store_state
from kvstack.validation.report import StepResult, TierTarget
from kvstack.validation.steps import Served, Validation, median, secs

TIER_NAMES = {"cpu": "the DRAM tier", "disk": "the disk tier", "remote": "the remote tier"}
# Stores to a tier are asynchronous; where no counter says they landed, wait this long.
STORE_GRACE_S = 0.5
LOADED_STORE_GRACE_S = 1.5


async def tier_step(v: Validation, tier: TierTarget, plan: StepPlan) -> StepResult:
    before = await remote_store_state(tier.url) if tier.url is not None else None
    step = await _rounds(v, tier, plan)
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
        if v.cache_server is not None and store.keys <= before.keys and step.verdict == "pass":
            step.verdict, step.reason = "fail", "nothing new was stored in the remote store"
    return step


def tier_hits(
    v: Validation, tier: TierTarget, plan: StepPlan, before: MetricsSnapshot, after: MetricsSnapshot
) -> float | None:
    """Tokens the step's tier (or tiers, for a step that could not isolate one) served."""
    hits = _hits(v, tier, before, after)
    if hits.tokens is None:
        return None
    if plan.isolated and tier.kind in hits.by_tier:
        return hits.by_tier[tier.kind]
    return hits.tokens


def _hits(v: Validation, tier: TierTarget, before: MetricsSnapshot, after: MetricsSnapshot) -> Hits:
    if v.cache_server is not None:
        return cache_server_tier_hits(tier.kind, tier.adapter, before, after)
    return connector_hits(v.engine, before, after)


def _hidden_behind(v: Validation, plan: StepPlan) -> str | None:
    if "hide_disk_files" not in plan.drops:
        return None
    disk = next((t for t in v.target.tiers if t.kind == "disk" and t.path), None)
    return disk.path if disk is not None else None


async def _drop_above(
    v: Validation, tier: TierTarget, plan: StepPlan, sent: MetricsSnapshot
) -> tuple[bool, str]:
    """Carry out the plan's drops, in order; the evidence line, or why it could not."""
    details = []
    for drop in plan.drops:
        if drop == "cache_server_l1":
            assert v.cache_server is not None
            if tier.adapter is not None:

                def stored(snap: MetricsSnapshot, adapter: str = tier.adapter) -> bool:
                    return l2_stores(adapter, sent, snap) > 0

                await v.api.settled(sent, stored, wait_s=5.0)
                if (
                    v.target.concurrency > 1
                ):  # the load's stores moved the counter too: let this prompt's land
                    await asyncio.sleep(LOADED_STORE_GRACE_S)
            ok, detail = await v.cache_server.clear_l1()
        elif drop == "gpu":
            await asyncio.sleep(STORE_GRACE_S if v.cache_server is None else 0)
            ok, detail = await v.evict(await v.api.scrape())
        elif drop == "gpu_and_external":
            await asyncio.sleep(STORE_GRACE_S)
            ok, detail = await v.evict(await v.api.scrape(), external=True)
            if ok:
                detail += " and the connector's CPU tier (reset_external=true; its secondary tiers are kept)"
        elif drop == "gpu_overflow":
            ok, detail = await v.evict(await v.api.scrape(), overflow_only=True)
        elif drop == "flush_all_but_storage":
            await asyncio.sleep(STORE_GRACE_S)
            ok, detail = await v.api.reset(v.target.reset_path or SGLANG_FLUSH_PATH)
            if ok:
                detail += " and HiCache's host pool (its storage backend is kept)"
        else:  # hide_disk_files: done around the request itself
            continue
        if not ok:
            return False, detail
        details.append(detail)
    return True, "; ".join(details)


async def _rounds(v: Validation, tier: TierTarget, plan: StepPlan) -> StepResult:
    step = StepResult(name=plan.name, verdict="pass")
    if not plan.isolated:
        step.warnings.append(
            f"not isolated: {', '.join(plan.not_isolated)} may have served the prompt ({plan.why})"
        )
    served: list[Served] = []
    per_round: list[float | None] = []
    evidence: list[str] = []
    disk_before = dir_state(tier.path) if tier.kind == "disk" else None
    hide_from = _hidden_behind(v, plan)
    need = covering_tokens(v.n_tokens, chunk_tokens(v.target.connector, v.target.chunk_tokens))
    last: MetricsSnapshot | None = None
    for i in range(v.target.repeat):
        v.progress(f"{plan.name}: round {i + 1}/{v.target.repeat}")
        p = await v.builder.build(v.n_tokens)
        files_before = file_set(hide_from)
        sent = await v.api.scrape()
        c = await v.api.send(p, generate=True)
        if not c.ok or c.ttft_s is None:
            return step.with_verdict("fail", f"request failed: {c.error}")
        ok, detail = await _drop_above(v, tier, plan, sent)
        if not ok:
            return step.with_verdict("fail", detail)
        hidden = new_files(hide_from, files_before) if hide_from else []
        with moved_aside(hide_from or "", hidden) as n_hidden:
            if i == 0:
                step.evidence.append(detail)
                if hide_from:
                    step.evidence.append(
                        f"{n_hidden} objects of the prompt in the disk tier moved aside for the request"
                    )
            s0 = await v.api.scrape()
            r = await v.api.send(p, generate=True)

            def covered(snap: MetricsSnapshot, s0: MetricsSnapshot = s0) -> bool:
                return (tier_hits(v, tier, plan, s0, snap) or 0.0) >= need

            s1 = await v.api.settled(s0, covered)
        if not r.ok or r.ttft_s is None:
            return step.with_verdict("fail", f"request failed: {r.error}")
        served.append(Served(p, c, r))
        per_round.append(tier_hits(v, tier, plan, s0, s1))
        hits = _hits(v, tier, s0, s1)
        evidence = evidence or hits.evidence + (
            [f"served by tier: {', '.join(f'{k} {x:.0f} tokens' for k, x in hits.by_tier.items())}"]
            if hits.by_tier
            else []
        )
        last = s1
    assert last is not None
    step.evidence.extend(evidence)
    problems = judge_tier(
        step,
        served,
        per_round,
        TierRule(need, chunk_tokens(v.target.connector, v.target.chunk_tokens), v.target.min_tier_speedup),
        v.n_tokens,
        v.cold_median,
    )
    if tier.kind == "disk":
        problems += _disk_evidence(step, tier, disk_before, last)
    problems += await v.correctness(step, served, TIER_NAMES.get(tier.kind, tier.kind))
    if problems:
        step.verdict, step.reason = "fail", "; ".join(problems)
    return step


@dataclass(frozen=True)
class TierRule:
    need: int  # hit tokens per round that cover the prompt
    chunk: int
    min_speedup: float


def judge_tier(
    step: StepResult,
    served: list[Served],
    per_round: list[float | None],
    rule: TierRule,
    n_tokens: int,
    cold: float | None,
) -> list[str]:
    """Pure: the step's figures into ``step``, and every problem with them."""
    need, want = rule.need, rule.min_speedup
    recompute = [s.recompute.ttft_s for s in served if s.recompute.ttft_s is not None]
    got_all = [s.served.ttft_s for s in served if s.served.ttft_s is not None]
    rec, got = median(recompute), median(got_all)
    assert rec is not None and got is not None
    step.ttft_s, step.ttfts_s = got, got_all
    # Each round's served request against the recompute of the same prompt seconds before it: a
    # slow spell on a busy machine slows both, and the median of the rounds' ratios is the figure.
    ratios = [
        (s.recompute.ttft_s / s.served.ttft_s) if s.served.ttft_s > 0 else math.inf
        for s in served
        if s.recompute.ttft_s is not None and s.served.ttft_s is not None
    ]
    step.speedup = median(ratios) or 0.0
    step.evidence.append(
        f"median TTFT after the copies above were dropped {secs(got)} vs recompute {secs(rec)}; "
        f"median of the rounds' recompute/served ratios {step.speedup:.2f}x "
        f"(need {want:g}x, and below cold's {secs(cold)})"
    )
    problems = []
    if all(h is None for h in per_round):
        problems.append("the server shows no connector hit counters at /metrics")
    else:
        figures = ", ".join("n/a" if h is None else f"{h:.0f}" for h in per_round)
        step.evidence.append(
            f"tier hit tokens per round: {figures} of {n_tokens} (need >= {need}: the prompt's full "
            f"{rule.chunk}-token chunks less one)"
        )
        short = [h or 0.0 for h in per_round if h is None or h < need]
        if not any(per_round):
            problems.append("connector hit counters did not rise: the tier served nothing")
        elif short:
            problems.append(
                f"the tier served {min(short):.0f} of {n_tokens} prompt tokens in a round (need >= {need})"
            )
    if step.speedup < want:
        problems.append(f"{step.name} is only {step.speedup:.2f}x faster than its recompute (need {want:g}x)")
    if got >= rec:
        problems.append("TTFT is not below recompute")
    if cold is not None and got >= cold:
        problems.append(f"TTFT is not below the cold step's ({secs(cold)})")
    return problems


def _disk_evidence(
    step: StepResult, tier: TierTarget, before: tuple[int, int, float] | None, snap: MetricsSnapshot
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
