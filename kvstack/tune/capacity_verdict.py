"""--objective capacity, the verdict: the candidate that sustains the highest multiple of the trace's
rate within the SLO, never worse than ``none``. Pure.

The rules (verdict.py's, with capacity as the objective):

- a candidate is out for what puts it out of any tune (not measured, a failed request, wrong KV,
  p50 or p90 worse than none's beyond the noise on the replay: ``verdict.exclusion``), when its
  capacity was not measured, and when at the trace's own load (the sweep's 1x step) its p50 or p90
  is worse than none's beyond the noise (paired over the same requests, as the replay's);
- of the rest, a candidate beats none when it sustains a higher multiple than none's capacity (the
  ladder is the same for every candidate, and a step passes or fails: capacity is a rung, not a
  figure with noise); the winner is the highest (ties: the lower p50 at 1x), provided that at its
  own capacity it is no worse than none at that load either (else it is out, and the next is
  tried);
- when none beats none, the answer is ``none``, and the verdict says why (a candidate whose capacity
  is above the ladder as none's is cannot be told apart from it: raise --sweep-multiples).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstack.tune.capacity_curve import CandidateCapacity
from kvstack.tune.knobs import BASELINE
from kvstack.tune.noise import Interval, Stat, paired, worse
from kvstack.tune.verdict import (
    Inversion,
    MeasuredCandidate,
    Verdict,
    difference,
    exclusion,
    fmt_diff,
)

STATS: tuple[Stat, ...] = ("p50", "p90")


def step_difference(a: CandidateCapacity, b: CandidateCapacity, load: float, stat: Stat) -> Interval | None:
    """``stat`` of ``a``'s step at ``load`` minus ``b``'s, on the requests both answered."""
    sa, sb = a.step(load), b.step(load)
    if sa is None or sb is None:
        return None
    both = [(x, y) for x, y in zip(sa[1], sb[1], strict=False) if x is not None and y is not None]
    if not both:
        return None
    return paired([x for x, _ in both], [y for _, y in both], stat, None)


def worse_at(c: CandidateCapacity, base: CandidateCapacity, load: float) -> tuple[str, dict[str, Interval]]:
    """Why ``c`` is worse than none at ``load`` ("" when it is not), and the paired differences."""
    diffs: dict[str, Interval] = {}
    for stat in STATS:
        d = step_difference(c, base, load, stat)
        if d is None:
            return f"no complete step at {load:g}x to compare with none's", diffs
        diffs[f"{stat}@{load:g}x"] = d
        if worse(d):
            return (
                f"its {stat} at {load:g}x is worse than none's beyond the noise: {fmt_diff(stat, d)}",
                diffs,
            )  # type: ignore[arg-type]
    return "", diffs


def _p50_at_1x(c: MeasuredCandidate) -> float:
    assert c.capacity is not None
    got = c.capacity.step(1.0)
    return (
        got[0].summary.ttft_s.p50 if got is not None and got[0].summary.ttft_s is not None else float("inf")
    )


def _out(c: MeasuredCandidate, base: MeasuredCandidate, versus: dict[str, dict[str, Interval]]) -> str:
    """Why ``c`` is out before capacities are compared ("" when it is not)."""
    diffs: dict[str, Interval] = {}
    if c.replayed:
        diffs = {s: d for s in STATS if (d := difference(c, base, s, None)) is not None}
    versus[c.label] = dict(diffs)
    why = exclusion(c, diffs)
    if why:
        return why
    if c.capacity is None:
        return "its capacity was not measured"
    assert base.capacity is not None
    why, at_1x = worse_at(c.capacity, base.capacity, 1.0)
    versus[c.label].update(at_1x)
    return f"at the trace's own load: {why}" if why else ""


def capacity_inversions(measured: Sequence[MeasuredCandidate]) -> list[Inversion]:
    """Every pair the model ranked one way and the sweeps put the other way (a higher capacity)."""
    done = sorted((c for c in measured if c.capacity is not None), key=lambda c: c.rank)
    out = []
    for i, above in enumerate(done):
        for below in done[i + 1 :]:
            assert above.capacity is not None and below.capacity is not None
            if below.capacity.value > above.capacity.value:
                out.append(Inversion(above.label, below.label, beyond_noise=True))
    return out


def decide_capacity(measured: Sequence[MeasuredCandidate]) -> Verdict:
    """The measured winner by capacity (``none`` unless a candidate sustains more) and why."""
    base = next((c for c in measured if c.baseline), None)
    if base is None or base.stats is None or base.capacity is None:
        raise ValueError("the baseline (none) was not measured with its capacity")
    excluded: dict[str, str] = {}
    versus: dict[str, dict[str, Interval]] = {}
    eligible = []
    for c in measured:
        if c.baseline:
            continue
        why = _out(c, base, versus)
        if why:
            excluded[c.label] = why
        else:
            eligible.append(c)
    mine = base.capacity
    found = capacity_inversions(measured)
    beat = [c for c in eligible if c.capacity is not None and c.capacity.value > mine.value]
    for c in sorted(beat, key=lambda c: (-c.capacity.value if c.capacity else 0.0, _p50_at_1x(c))):
        assert c.capacity is not None
        load = c.capacity.value
        why, at_cap = worse_at(c.capacity, mine, load)
        versus[c.label].update(at_cap)
        if why:
            excluded[c.label] = f"at its capacity: {why}"
            continue
        more = " or more (above the ladder)" if c.capacity.above_ladder else ""
        checked = c.correctness.checked if c.correctness is not None else 0
        text = (
            f"{c.label}: sustains {load:g}x the trace's rate{more} within the SLO against none's "
            f"{_capacity_text(mine)}; p50 and p90 no worse than none's beyond the noise at 1x and at "
            f"{load:g}x, and its cached answers are recompute's ({checked} checked)"
        )
        return Verdict(c.label, text, excluded, found, versus)
    kept = [c for c in eligible if c.label not in excluded]
    return Verdict(BASELINE, _why_none(measured, kept, excluded, mine), excluded, found, versus)


def _capacity_text(cap: CandidateCapacity) -> str:
    if cap.sweep.capacity.status == "below_first_step":
        return "none (its lowest step already fails)"
    return f"{cap.value:g}x" + (" (above the ladder)" if cap.above_ladder else "")


def _why_none(
    measured: Sequence[MeasuredCandidate],
    eligible: list[MeasuredCandidate],
    excluded: dict[str, str],
    mine: CandidateCapacity,
) -> str:
    others = [c for c in measured if not c.baseline]
    if not others:
        return "none: no other candidate was measured within the budget"
    if eligible:
        best = max(eligible, key=lambda c: c.capacity.value if c.capacity else 0.0)
        assert best.capacity is not None
        tail = "; raise --sweep-multiples to tell them apart" if mine.above_ladder else ""
        return (
            f"none: no candidate sustained more than its capacity, {_capacity_text(mine)} (the best, "
            f"{best.label}: {_capacity_text(best.capacity)}){tail}"
        )
    first = min(others, key=lambda c: c.rank)
    return (
        f"none: every other candidate measured is out ({len(excluded)}); the model's best of them, "
        f"{first.label}: {excluded[first.label]}"
    )
