"""A measured candidate's TTFT figures with their noise, and two candidates' difference with its
noise: moving-block bootstraps over the replay's requests. Pure.

Why one replay and a bootstrap, not repeats: every candidate's replay must start from cold caches
(the engine's pool and every tier empty, as the simulation starts), so a repeat is a fresh engine:
50-110 s of start on this 2-core machine before a replay of minutes, which would halve the
candidates a 30-minute budget measures. The replay's own requests are the repeats: resampling them
with replacement shows how far p50, p90, mean and goodput move with the requests drawn.

The resampling is stratified in time: each window of ~sqrt(n) consecutive requests is replaced by as
many drawn from that window. A replay is not a bag of exchangeable requests: a trace progresses (a
session's later turns are longer and reuse more), the same in every candidate's replay and in any
rerun, so a draw must keep that progression; a plain or block bootstrap moves the mix of early and
late turns and measures that instead (the figures: docs/measurements.md, "Why tune's bootstrap is
stratified"). Drift slower than the whole replay is not in it.

Every candidate replays the same requests in the same order, so two candidates are compared on the
same draws (``paired``): the interval of the difference of their figures is what "worse than none
beyond the noise" is judged on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from kvstack.tune import results

Stat = Literal["p50", "p90", "mean", "goodput"]
CONFIDENCE = 0.95
RESAMPLES = 2000
METHOD = (
    f"95% interval of {RESAMPLES} bootstrap draws over the replay's requests, stratified in time (each "
    "window of ~sqrt(n) consecutive requests redrawn from itself); comparisons with none on the same "
    "draws (paired); one replay per candidate, each from cold caches"
)


@dataclass(frozen=True)
class Interval:
    """A figure and its bootstrap interval."""

    value: float
    low: float
    high: float

    @property
    def noise(self) -> float:
        """Half the interval's width: the figure is ``value`` +- ``noise``."""
        return (self.high - self.low) / 2

    def document(self) -> results.Interval:
        return results.Interval(value=self.value, low=self.low, high=self.high, noise=self.noise)

    @classmethod
    def of(cls, doc: results.Interval) -> Interval:
        return cls(doc.value, doc.low, doc.high)


@dataclass(frozen=True)
class Stats:
    """TTFT p50, p90 and mean (seconds) and goodput (share of requests within the SLO), measured."""

    n: int
    block: int  # requests per bootstrap window
    p50: Interval
    p90: Interval
    mean: Interval
    goodput: Interval | None = None

    def get(self, stat: Stat) -> Interval | None:
        return {"p50": self.p50, "p90": self.p90, "mean": self.mean, "goodput": self.goodput}[stat]

    def document(self) -> results.MeasuredStats:
        return results.MeasuredStats(
            n=self.n,
            block=self.block,
            p50=self.p50.document(),
            p90=self.p90.document(),
            mean=self.mean.document(),
            goodput=self.goodput.document() if self.goodput is not None else None,
        )

    @classmethod
    def of(cls, doc: results.MeasuredStats) -> Stats:
        good = doc.goodput
        return cls(
            n=doc.n,
            block=doc.block,
            p50=Interval.of(doc.p50),
            p90=Interval.of(doc.p90),
            mean=Interval.of(doc.mean),
            goodput=Interval.of(good) if good is not None else None,
        )


def block_length(n: int) -> int:
    return max(1, math.ceil(math.sqrt(n)))


def _resampled(x: npt.NDArray[np.float64], resamples: int, seed: int) -> npt.NDArray[np.float64]:
    """``resamples`` rows of ``len(x)`` values: each window of ``block_length`` consecutive values
    replaced by as many drawn from it with replacement."""
    n = len(x)
    size = min(block_length(n), n)
    pos = np.arange(n)
    start = pos // size * size
    width = np.minimum(start + size, n) - start
    rng = np.random.default_rng(seed)
    idx = start + (rng.random((resamples, n)) * width).astype(np.int64)
    out: npt.NDArray[np.float64] = x[idx]
    return out


def _interval(value: float, draws: npt.NDArray[np.float64]) -> Interval:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    # The percentile interval of a skewed statistic need not hold the figure itself; widen it to.
    return Interval(value, min(float(low), value), max(float(high), value))


def measure(
    ttfts: Sequence[float], slo_s: float | None = None, *, resamples: int = RESAMPLES, seed: int = 0
) -> Stats:
    """The figures of ``ttfts`` (seconds, in the order the requests were sent) with their noise."""
    x = np.asarray(ttfts, dtype=np.float64)
    if not len(x):
        raise ValueError("no TTFT to measure")
    draws = _resampled(x, resamples, seed)
    p50, p90 = np.percentile(x, [50, 90])
    d50, d90 = np.percentile(draws, [50, 90], axis=1)
    goodput = None
    if slo_s is not None:
        goodput = _interval(float((x <= slo_s).mean()), (draws <= slo_s).mean(axis=1))
    return Stats(
        n=len(x),
        block=min(block_length(len(x)), len(x)),
        p50=_interval(float(p50), d50),
        p90=_interval(float(p90), d90),
        mean=_interval(float(x.mean()), draws.mean(axis=1)),
        goodput=goodput,
    )


def _stat(draws: npt.NDArray[np.float64], stat: Stat, slo_s: float | None) -> npt.NDArray[np.float64]:
    """``stat`` of each row of ``draws`` (goodput: the share within ``slo_s``)."""
    if stat == "goodput":
        if slo_s is None:
            raise ValueError("goodput needs an SLO")
        out: npt.NDArray[np.float64] = (draws <= slo_s).mean(axis=-1)
        return out
    if stat == "mean":
        mean: npt.NDArray[np.float64] = draws.mean(axis=-1)
        return mean
    q: npt.NDArray[np.float64] = np.percentile(draws, 50 if stat == "p50" else 90, axis=-1)
    return q


def paired(
    a: Sequence[float],
    b: Sequence[float],
    stat: Stat,
    slo_s: float | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``stat`` of ``a`` minus ``stat`` of ``b``, the two measured on the same requests (element i of
    each: request i, in the order sent), with the interval of a bootstrap that draws the same
    requests (the same blocks) for both."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) != len(y) or not len(x):
        raise ValueError("paired figures need the same requests, at least one")
    both = np.stack([x, y], axis=1)  # resample rows: each request with its two figures
    draws = _resampled_rows(both, resamples, seed)
    diff = _stat(draws[:, :, 0], stat, slo_s) - _stat(draws[:, :, 1], stat, slo_s)
    value = float(_stat(x[None, :], stat, slo_s)[0] - _stat(y[None, :], stat, slo_s)[0])
    return _interval(value, diff)


def _resampled_rows(rows: npt.NDArray[np.float64], resamples: int, seed: int) -> npt.NDArray[np.float64]:
    """``_resampled`` for rows of several figures: (resamples, n, figures)."""
    n = len(rows)
    index = _resampled(np.arange(n, dtype=np.float64), resamples, seed).astype(np.int64)
    out: npt.NDArray[np.float64] = rows[index]
    return out


def worse(diff: Interval, higher_is_better: bool = False) -> bool:
    """A paired difference (``paired``: mine minus theirs) says mine is worse beyond the noise: its
    whole interval is on the worse side of 0."""
    return diff.high < 0 if higher_is_better else diff.low > 0


def better(diff: Interval, higher_is_better: bool = False) -> bool:
    """A paired difference says mine is better beyond the noise."""
    return diff.low > 0 if higher_is_better else diff.high < 0
