from __future__ import annotations

import time

from kvstack.hardware.calibrate.timing import Deadline, median, timed_runs


def test_share_gives_a_fraction_of_what_is_left() -> None:
    outer = Deadline.after(10.0)
    inner = outer.share(0.25)
    assert 2.0 < inner.left() <= 2.5
    assert not inner.passed()
    assert Deadline(time.monotonic() - 1).left() == 0.0


def test_timed_runs_warms_up_then_stops_at_max_runs() -> None:
    calls: list[int] = []
    syncs: list[int] = []
    times = timed_runs(lambda: calls.append(1), lambda: syncs.append(1), Deadline.after(60), max_runs=4)
    assert len(times) == 4
    assert len(calls) == 5 and len(syncs) == 5  # one warm-up, each run synchronised
    assert all(t >= 0 for t in times)


def test_a_spent_deadline_still_gives_one_timing() -> None:
    calls: list[int] = []
    times = timed_runs(lambda: calls.append(1), lambda: None, Deadline(time.monotonic() - 1), max_runs=10)
    assert len(times) == 1 and len(calls) == 2


def test_runs_stop_at_the_deadline() -> None:
    start = time.monotonic()
    times = timed_runs(lambda: time.sleep(0.01), lambda: None, Deadline.after(0.1), max_runs=1000)
    assert 1 <= len(times) < 20
    assert time.monotonic() - start < 0.5
    assert median([3.0, 1.0, 2.0]) == 2.0
