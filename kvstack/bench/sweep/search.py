"""Pure: a layout's capacity from its steps, and the next load a bracketing search tries."""

from __future__ import annotations

from collections.abc import Sequence

from kvstack.bench.sweep.ladder import LoadKind
from kvstack.bench.sweep.schema import Capacity

MIN_RATE_GAP = 0.05  # a rate bracket narrower than this share of its upper end is bisected no further


def capacity_of(points: Sequence[tuple[float, bool]]) -> Capacity:
    """``(load, met the SLO)`` per completed step -> the highest passing load below the lowest
    failing one, with its bracket; a step that passed above a failure is noted, never capacity."""
    pts = sorted(points)
    if not pts:
        return Capacity(status="not_measured")
    failing = [load for load, ok in pts if not ok]
    if not failing:
        top = pts[-1][0]
        return Capacity(status="above_ladder", load=top, highest_passing=top)
    lowest_failing = failing[0]
    below = [load for load, ok in pts if ok and load < lowest_failing]
    above = sorted({load for load, ok in pts if ok and load > lowest_failing})
    if not below:
        return Capacity(status="below_first_step", lowest_failing=lowest_failing, passing_above_failure=above)
    return Capacity(
        status="bracketed",
        load=below[-1],
        highest_passing=below[-1],
        lowest_failing=lowest_failing,
        passing_above_failure=above,
    )


def next_probe(kind: LoadKind, capacity: Capacity) -> float | None:
    """The load between the bracket's ends (None: nothing to bisect, or nothing left between them)."""
    lo, hi = capacity.highest_passing, capacity.lowest_failing
    if capacity.status != "bracketed" or lo is None or hi is None:
        return None
    if kind == "concurrency":
        mid = float((int(lo) + int(hi)) // 2)
        return mid if lo < mid < hi else None
    if (hi - lo) / hi < MIN_RATE_GAP:
        return None
    return round((lo + hi) / 2, 4)
