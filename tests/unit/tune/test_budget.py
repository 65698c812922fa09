"""How long one candidate takes, before it starts, and the budget's refusal."""

from __future__ import annotations

import pytest

from kvstack.errors import InputError
from kvstack.tune.budget import (
    ENGINE_START_S,
    Estimate,
    check_budget,
    first_estimate,
    fmt_duration,
    measured_estimate,
    parse_duration,
    replay_seconds,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("90s", 90), ("1h", 3600), ("1h30m", 5400), ("1.5h", 5400), ("45", 45), ("0", 0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "m30", "-5m", "30m later"])
def test_a_bad_duration_names_the_flag(text: str) -> None:
    with pytest.raises(InputError, match=r"--budget .* is not a duration"):
        parse_duration(text)


def test_one_request_in_flight_waits_for_its_arrival_or_the_last_one() -> None:
    # Back to back: the sum; spread out: the last arrival plus its own time.
    assert replay_seconds([1.0, 1.0], [1, 1], [0.0, 0.0], 0.1) == 2.0
    assert replay_seconds([1.0, 1.0], [3, 1], [0.0, 10.0], 0.5) == 11.0


def test_the_first_estimate_before_anything_ran_then_the_slowest_measured() -> None:
    first = first_estimate([0.1] * 10, [1] * 10, [0.0] * 10, 0.2, check_k=2, check_tokens=16)
    assert first.start_s == ENGINE_START_S and first.replay_s == pytest.approx(1.0)
    assert first.check_s > 2 * 3 * 0.2 and first.source == "estimated"
    walls = [("none", {"start": 60, "replay": 30, "check": 5, "total": 95}), ("x", {"start": 1})]
    got = measured_estimate([*walls, ("y", {"start": 90, "replay": 40, "check": 6, "total": 136})])
    assert got == Estimate(90, 40, 6, "y")
    assert measured_estimate([("x", {"start": 1})]) is None


def test_a_budget_too_small_says_how_long_one_takes_here() -> None:
    one = Estimate(80, 100, 20, "estimated")
    check_budget(400, one, 2, 300)  # none and one candidate fit
    with pytest.raises(InputError) as info:
        check_budget(300, one, 2, 300)
    assert info.value.message == (
        "--budget 5 min is too small for one candidate: one takes about 3 min 20 s here (engine start "
        "~1 min 20 s, replay of 300 requests ~1 min 40 s, correctness check ~20 s), none and one "
        "candidate 6 min 40 s"
    )
    assert "--budget 8m" in (info.value.hint or "") and "--budget 0" in (info.value.hint or "")
    measured = Estimate(50, 30, 5, "none")
    with pytest.raises(InputError, match=r"\(.*, as none took\), one candidate 1 min 25 s"):
        check_budget(60, measured, 1, 300)
    assert fmt_duration(59.6) == "1 min" and fmt_duration(3725) == "1 h 2 min"
