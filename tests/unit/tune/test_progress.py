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
