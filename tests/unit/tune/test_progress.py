"""tune's progress bar (rendering/tune_progress.py): the candidate running, its phase, its replay's
requests, the budget's time left."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from kvstack.rendering.tune_progress import ProofView


def test_the_bar_shows_the_candidate_its_phase_requests_and_the_time_left() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    with ProofView(enabled=True, console=console) as view:
        view.begin("lmcache-mp, chunk 256, DRAM 1.0 GiB", 2, 5, 40, time.monotonic() + 125)
        view.phase("replaying the trace")
        view.row(10)
        view.end()
    text = out.getvalue()
    assert "[2/5] lmcache-mp, chunk 256, DRAM 1.0 GiB: done" in text
    assert "10/40" in text and re.search(r"2 min [45] s left of the budget", text)


def test_a_disabled_bar_prints_nothing() -> None:
    out = io.StringIO()
    with ProofView(enabled=False, console=Console(file=out, force_terminal=True)) as view:
        view.begin("none", 1, 2, 40, time.monotonic() + 60)
        view.row(3)
        view.end()
    assert out.getvalue() == ""


def test_the_row_clock_reads_the_total_when_each_answer_comes() -> None:
    """The first replay decides what it sends while it runs: a total read once, up front, would be
    0 and the phase after the last answer would never show."""
    from kvstack.tune.progress import RowClock

    class Seen:
        def __init__(self) -> None:
            self.rows: list[int] = []
            self.phases: list[str] = []

        def begin(self, label: str, index: int, total: int, requests: int, deadline: float) -> None: ...
        def phase(self, text: str) -> None:
            self.phases.append(text)

        def row(self, done: int) -> None:
            self.rows.append(done)

        def end(self) -> None: ...

    sent: list[int] = []
    ticks = iter([1.0, 2.0, 3.0])
    seen = Seen()
    clock = RowClock(seen, lambda: len(sent), lambda: next(ticks), "checking correctness")
    sent = [1, 2, 3]  # decided after the clock was made, as bench.replay.trace_bench does
    for _ in range(3):
        clock(None)
    assert seen.rows == [1, 2, 3] and seen.phases == ["checking correctness"]
    assert clock.replay_s(0.5, 9.0) == 2.5  # to the last answer, not to the end of the check
