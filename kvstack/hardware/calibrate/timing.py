"""Time budgets and timed repetitions shared by the calibration measurements.

Every measurement runs a warm-up, then repeats until it has ``max_runs`` timings or its deadline
passes, whichever is first, but always keeps at least one timing so that a tight budget still
gives a figure. GPU work is asynchronous, so each timing ends with a device synchronisation.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Deadline:
    end: float  # time.monotonic() value

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.end

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the time left from now (what a quick step leaves, the next gets)."""
        return Deadline(time.monotonic() + self.left() * fraction)


def timed_runs(
    op: Callable[[], object], sync: Callable[[], None], deadline: Deadline, max_runs: int
) -> list[float]:
    """Seconds per run of ``op`` after one untimed warm-up (allocator, kernel selection, caches)."""
    op()
    sync()
    times: list[float] = []
    while len(times) < max(1, max_runs) and (not times or not deadline.passed()):
        start = time.perf_counter()
        op()
        sync()
        times.append(time.perf_counter() - start)
    return times


def median(times: list[float]) -> float:
    return statistics.median(times)
