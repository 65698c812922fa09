"""What a tune reports while it measures, as serving reports through ServeEvents: the candidate (or
calibration layout) running, its phase, its replay's requests. tune prints nothing itself; the
terminal's live bar is rendering/tune_progress.py, and tests pass nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class View(Protocol):
    def begin(self, label: str, index: int, total: int, requests: int, deadline: float) -> None:
        """``label`` starts: the ``index``-th of ``total``, ``requests`` to replay, the budget ending
        at ``deadline`` (time.monotonic)."""

    def phase(self, text: str) -> None: ...
    def row(self, done: int) -> None: ...
    def end(self) -> None: ...


class RowClock:
    """A replay's ``on_row``: counts its answers for the view (then names the phase that follows the
    last one) and keeps when the last came, which splits the replay's wall time from what follows."""

    def __init__(
        self, view: View | None, total: Callable[[], int], clock: Callable[[], float], then: str | None
    ) -> None:
        self.view, self.total, self.clock, self.then = view, total, clock, then
        self.counted = 0
        self.last = 0.0

    def __call__(self, _row: object) -> None:
        self.counted += 1
        self.last = self.clock()
        if self.view is not None:
            self.view.row(self.counted)
            # the total read at each row: the first replay decides what is sent while it runs
            if self.counted == self.total() and self.then:
                self.view.phase(self.then)

    def replay_s(self, ready: float, done: float) -> float:
        """Seconds from ``ready`` to the last answer (to ``done`` when none came)."""
        return max(ready, self.last or done) - ready
