"""The restart budget counts restarts within a sliding window (a clock the test moves)."""

from __future__ import annotations

from kvstack.serving.restarts import RestartBudget


def test_three_within_ten_minutes_then_room_again_as_they_age() -> None:
    now = [0.0]
    budget = RestartBudget(max_restarts=3, window_s=600.0, clock=lambda: now[0])
    for expected in (1, 2, 3):
        assert not budget.exhausted()
        assert budget.spend() == expected
        now[0] += 60.0
    assert budget.exhausted()  # 3 within the last 3 minutes
    now[0] = 600.0  # the first (at 0 s) has aged out
    assert not budget.exhausted() and budget.spend() == 3
    assert budget.total == 4 and budget.describe() == "3 restarts within 10 minutes"
