"""What the replays say: each measured candidate, the winner by the measured objective, and where
the ranking model put two candidates in the wrong order. Pure.

The rules (issue 33, "Prove by measurement"):

- ``none`` is the baseline, measured first;
- a candidate is out when it could not be measured, when a request of its replay failed, when its
  cached answers are not recompute's (bench --check-correctness's judgement: a failed or unknown
  verdict, bench/correctness.py), or when its measured p50 or p90 is worse than none's beyond the
  noise: the 95% interval of the difference, bootstrapped over the same requests for both
  (noise.paired), lies wholly above 0;
- of the rest, the winner is the best by the measured objective among those that beat none on it
  beyond the noise (the interval wholly on the better side); when none does, the answer is ``none``
  (less memory, fewer moving parts), and the verdict says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvstack.bench.schema import CorrectnessResult
from kvstack.tune import results
from kvstack.tune.capacity_curve import CandidateCapacity
from kvstack.tune.knobs import BASELINE, offloads
from kvstack.tune.noise import Interval, Stat, Stats, better, paired, worse


@dataclass(frozen=True)
class MeasuredCandidate:
    """One candidate's replay: what the model predicted for the requests sent, what they measured."""

    label: str
    rank: int  # the model's rank over the whole trace (1 = best)
    connector: str
    knobs: dict[str, float] = field(default_factory=dict)
    predicted: dict[str, float | None] = field(default_factory=dict)  # p50_s, p90_s, mean_s, goodput
    predicted_tokens: dict[str, int] = field(default_factory=dict)
    stats: Stats | None = None  # None: nothing answered
    ttfts: list[float | None] = field(default_factory=list)  # per request sent, in order (None: failed)
    requests: int = 0
    ok: int = 0
    measured_tokens: dict[str, float] = field(default_factory=dict)
    # LMCache's server's completed lookups over the replay (None: no server counted any), and the
    # requests sent whose prompt its prompt gate kept off the offload path (None: no prompt gate).
    lookups: int | None = None
    below_gate: int | None = None
    correctness: CorrectnessResult | None = None
    wall_s: dict[str, float] = field(default_factory=dict)  # start, replay, check, total
    run_dir: str | None = None
    error: str | None = None  # why it could not be measured
    capacity: CandidateCapacity | None = None  # --objective capacity: its sweep on the trace

    @property
    def baseline(self) -> bool:
        return not offloads(self.connector)

    @property
    def replayed(self) -> bool:
        """Its replay gave figures: it was served and answered (what the comparisons need)."""
        return self.stats is not None and not self.error

    @property
    def correct(self) -> bool:
        c = self.correctness
        return c is not None and c.checked > 0 and c.failed == 0 and c.unknown == 0

    def correctness_problem(self) -> str:
        c = self.correctness
        if c is None or c.checked == 0:
            return "no cached answer was checked"
        if c.failed == 0 and c.unknown == 0:
            return ""
        head = f"{c.failed} of {c.checked} cached answers differ from recompute, {c.unknown} not checked"
        bad = c.first_problem()
        if bad is None:
            return head
        what = "differs from recompute" if bad.verdict == "fail" else "could not be checked"
        return f"{head}; request {bad.request} {what}: {bad.detail}"

    def document(self) -> results.MeasuredRow:
        """results.json's record of it (``measured.candidates``)."""
        predicted_p50 = self.predicted.get("p50_s")
        ratio = self.stats.p50.value / predicted_p50 if self.stats is not None and predicted_p50 else None
        extra = {} if self.capacity is None else {"capacity": self.capacity.document()}
        return results.MeasuredRow(
            **extra,
            label=self.label,
            rank=self.rank,
            connector=self.connector,
            knobs=self.knobs,
            predicted=results.Predicted(**self.predicted),
            predicted_tokens=self.predicted_tokens,
            measured=self.stats.document() if self.stats is not None else None,
            measured_over_predicted_p50=ratio,
            ttft_s=self.ttfts,
            requests=self.requests,
            ok=self.ok,
            measured_tokens=self.measured_tokens,
            lookups=self.lookups,
            below_gate=self.below_gate,
            correctness=self.correctness,
            correct=self.correct,
            wall_s=self.wall_s,
            run_dir=self.run_dir,
            error=self.error,
        )

    @classmethod
    def of(cls, doc: results.MeasuredRow) -> MeasuredCandidate:
        """What ``document`` wrote, back."""
        return cls(
            label=doc.label,
            rank=doc.rank,
            connector=doc.connector,
            knobs=dict(doc.knobs),
            predicted=doc.predicted.model_dump(exclude_unset=True),
            predicted_tokens=dict(doc.predicted_tokens),
            stats=Stats.of(doc.measured) if doc.measured is not None else None,
            ttfts=list(doc.ttft_s),
            requests=doc.requests,
            ok=doc.ok,
            measured_tokens=dict(doc.measured_tokens),
            lookups=doc.lookups,
            below_gate=doc.below_gate,
            correctness=doc.correctness,
            wall_s=dict(doc.wall_s),
            run_dir=doc.run_dir,
            error=doc.error,
            capacity=None if doc.capacity is None else CandidateCapacity.of(doc.capacity),
        )


@dataclass(frozen=True)
class Inversion:
    """The model ranked ``above`` over ``below``, and ``below`` measured better on the objective."""

    above: str
    below: str
    beyond_noise: bool

    def document(self) -> results.Inversion:
        return results.Inversion(
            model_ranked_higher=self.above, measured_better=self.below, beyond_noise=self.beyond_noise
        )


@dataclass(frozen=True)
class Verdict:
    winner: str
    why: str
    excluded: dict[str, str]  # label -> why it is out
    inversions: list[Inversion]
    versus_none: dict[str, dict[str, Interval]] = field(default_factory=dict)  # label -> stat -> paired diff

    def document(self) -> results.Verdict:
        return results.Verdict(
            winner=self.winner,
            why=self.why,
            excluded=self.excluded,
            inversions=[i.document() for i in self.inversions],
            versus_none={
                label: {stat: iv.document() for stat, iv in diffs.items()}
                for label, diffs in self.versus_none.items()
            },
        )


def _higher_is_better(stat: Stat) -> bool:
    return stat == "goodput"


def fmt_figure(stat: Stat, iv: Interval) -> str:
    if stat == "goodput":
        return f"{iv.value * 100:.1f}% +- {iv.noise * 100:.1f}"
    return f"{iv.value * 1000:,.1f} ms +- {iv.noise * 1000:,.1f}"


def fmt_diff(stat: Stat, iv: Interval) -> str:
    """A paired difference: ``+22.7 ms (95% interval +19.0 to +26.1 ms)``."""
    if stat == "goodput":
        return f"{iv.value * 100:+.1f} points (95% interval {iv.low * 100:+.1f} to {iv.high * 100:+.1f})"
    return f"{iv.value * 1000:+,.1f} ms (95% interval {iv.low * 1000:+,.1f} to {iv.high * 1000:+,.1f} ms)"


def _figure(c: MeasuredCandidate, stat: Stat) -> Interval:
    assert c.stats is not None
    got = c.stats.get(stat)
    if got is None:
        raise ValueError(f"{c.label} has no measured {stat} (goodput needs an SLO)")
    return got


def _pairs(a: MeasuredCandidate, b: MeasuredCandidate) -> tuple[list[float], list[float]]:
    """The two candidates' TTFTs of the requests both answered, in the order sent."""
    both = [(x, y) for x, y in zip(a.ttfts, b.ttfts, strict=False) if x is not None and y is not None]
    return [x for x, _ in both], [y for _, y in both]


def difference(
    a: MeasuredCandidate, b: MeasuredCandidate, stat: Stat, slo_s: float | None
) -> Interval | None:
    """``stat`` of ``a`` minus ``b``'s on the requests both answered, with its paired noise."""
    x, y = _pairs(a, b)
    return paired(x, y, stat, slo_s) if x else None


def exclusion(c: MeasuredCandidate, diffs: dict[str, Interval]) -> str:
    if c.error:
        return f"not measured: {c.error}"
    if c.stats is None:
        return "no request of its replay was answered"
    if c.ok < c.requests:
        return f"{c.requests - c.ok} of {c.requests} requests of its replay failed"
    if not c.correct:
        return f"serves wrong KV: {c.correctness_problem()}"
    for stat in ("p50", "p90"):
        diff = diffs.get(stat)
        if diff is not None and worse(diff):
            return f"measured {stat} is worse than none's beyond the noise: {fmt_diff(stat, diff)}"  # type: ignore[arg-type]
    return ""


def inversions(
    measured: Sequence[MeasuredCandidate], objective: Stat, slo_s: float | None
) -> list[Inversion]:
    """Every pair the model ranked one way and the replays measured the other way."""
    done = sorted((c for c in measured if c.replayed), key=lambda c: c.rank)
    hib = _higher_is_better(objective)
    out = []
    for i, above in enumerate(done):
        for below in done[i + 1 :]:
            a, b = _figure(above, objective), _figure(below, objective)
            if (b.value > a.value) if hib else (b.value < a.value):
                diff = difference(below, above, objective, slo_s)
                out.append(Inversion(above.label, below.label, diff is not None and better(diff, hib)))
    return out


def decide(measured: Sequence[MeasuredCandidate], objective: Stat, slo_s: float | None = None) -> Verdict:
    """The measured winner (``none`` unless a candidate beats it beyond the noise) and why."""
    base = next((c for c in measured if c.baseline), None)
    if base is None or base.stats is None:
        raise ValueError("the baseline (none) was not measured")
    hib = _higher_is_better(objective)
    excluded: dict[str, str] = {}
    eligible: list[MeasuredCandidate] = []
    versus: dict[str, dict[str, Interval]] = {}
    for c in measured:
        if c.baseline:
            continue
        diffs: dict[str, Interval] = {}
        if c.replayed:
            for stat in dict.fromkeys(("p50", "p90", objective)):
                d = difference(c, base, stat, slo_s)  # type: ignore[arg-type]
                if d is not None:
                    diffs[stat] = d
            versus[c.label] = diffs
        why = exclusion(c, diffs)
        if why:
            excluded[c.label] = why
        else:
            eligible.append(c)
    mine = _figure(base, objective)
    beat = [c for c in eligible if objective in versus[c.label] and better(versus[c.label][objective], hib)]
    found = inversions(measured, objective, slo_s)

    def value(c: MeasuredCandidate) -> float:
        v = _figure(c, objective).value
        return -v if hib else v

    if beat:
        win = min(beat, key=value)
        w = _figure(win, objective)
        factor = (w.value / mine.value if hib else mine.value / w.value) if w.value and mine.value else 0.0
        checked = win.correctness.checked if win.correctness is not None else 0
        diff = fmt_diff(objective, versus[win.label][objective])
        why = (
            f"{win.label}: measured {objective} {fmt_figure(objective, w)} against none's "
            f"{fmt_figure(objective, mine)} ({factor:.2f}x; {diff} on the same requests), p50 and p90 "
            f"no worse than none's beyond the noise, and its cached answers are recompute's ({checked} "
            "checked)"
        )
        return Verdict(win.label, why, excluded, found, versus)
    others = [c for c in measured if not c.baseline]
    if not others:
        why = "none: no other candidate was measured within the budget"
    elif eligible:
        best = min(eligible, key=value)
        gap = versus[best.label].get(objective)
        why = (
            f"none: no candidate beat its measured {objective} {fmt_figure(objective, mine)} beyond the "
            f"noise (the best, {best.label}, measured {fmt_figure(objective, _figure(best, objective))}"
            + (f": {fmt_diff(objective, gap)} on the same requests)" if gap is not None else ")")
        )
    else:
        first = min(others, key=lambda c: c.rank)
        why = (
            f"none: every other candidate measured is out ({len(excluded)}); the model's best of them, "
            f"{first.label}: {excluded[first.label]}"
        )
    return Verdict(BASELINE, why, excluded, found, versus)
