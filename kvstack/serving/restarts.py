"""How many times a unit may be restarted: a budget per sliding time window, not per run.

A week-long serve whose cache server dies now and then must keep serving; one that dies again as
soon as it is restarted (a full disk, a bad config) must stop rather than loop. So: at most
``max_restarts`` restarts within any ``window_s`` seconds (3 within 10 minutes by default).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

MAX_RESTARTS = 3
WINDOW_S = 600.0


class RestartBudget:
    def __init__(
        self,
        max_restarts: int = MAX_RESTARTS,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_restarts, self.window_s, self.clock = max_restarts, window_s, clock
        self._times: deque[float] = deque()
        self.total = 0  # restarts over the whole run

    def _recent(self) -> int:
        now = self.clock()
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()
        return len(self._times)

    def exhausted(self) -> bool:
        """``max_restarts`` restarts already happened within the last ``window_s`` seconds."""
        return self._recent() >= self.max_restarts

    def spend(self) -> int:
        """Record a restart now; how many there were within the window, this one included."""
        self._recent()
        self._times.append(self.clock())
        self.total += 1
        return len(self._times)

    def describe(self) -> str:
        return f"{self.max_restarts} restarts within {self.window_s / 60:g} minutes"
