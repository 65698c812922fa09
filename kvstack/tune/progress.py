"""What a tune reports while it measures, as serving reports through ServeEvents: the candidate (or
calibration layout) running, its phase, its replay's requests. tune prints nothing itself; the
terminal's live bar is rendering/tune_progress.py, and tests pass nothing."""

from __future__ import annotations

from typing import Protocol


class View(Protocol):
    def begin(self, label: str, index: int, total: int, requests: int, deadline: float) -> None:
        """``label`` starts: the ``index``-th of ``total``, ``requests`` to replay, the budget ending
        at ``deadline`` (time.monotonic)."""

    def phase(self, text: str) -> None: ...
    def row(self, done: int) -> None: ...
    def end(self) -> None: ...
