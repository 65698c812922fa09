"""Capacity from a layout's steps and the bracketing search's next load: pure, table-tested."""

from __future__ import annotations

import pytest

from kvstack.bench.sweep.schema import Capacity
from kvstack.bench.sweep.search import capacity_of, next_probe


@pytest.mark.parametrize(
    ("points", "capacity"),
    [
        ([], Capacity(status="not_measured")),
        ([(1, True), (2, True), (4, True)], Capacity(status="above_ladder", load=4, highest_passing=4)),
        ([(1, False), (2, False)], Capacity(status="below_first_step", lowest_failing=1)),
        (
            [(8, False), (1, True), (4, False), (2, True)],  # any order: sorted by load
            Capacity(status="bracketed", load=2, highest_passing=2, lowest_failing=4),
        ),
        (
            # A pass above the lowest failure is noise (or a server that recovered): noted, not capacity.
            [(1, True), (2, False), (4, True), (8, False)],
            Capacity(
                status="bracketed", load=1, highest_passing=1, lowest_failing=2, passing_above_failure=[4]
            ),
        ),
        (
            [(1, False), (2, True)],
            Capacity(status="below_first_step", lowest_failing=1, passing_above_failure=[2]),
        ),
    ],
)
def test_capacity_of(points: list[tuple[float, bool]], capacity: Capacity) -> None:
    assert capacity_of(points) == capacity


def _bracket(lo: float, hi: float) -> Capacity:
    return Capacity(status="bracketed", load=lo, highest_passing=lo, lowest_failing=hi)


@pytest.mark.parametrize(
    ("kind", "capacity", "probe"),
    [
        ("concurrency", _bracket(2, 8), 5),
        ("concurrency", _bracket(2, 4), 3),
        ("concurrency", _bracket(2, 3), None),  # no whole concurrency between
        ("rate", _bracket(1, 2), 1.5),
        ("rate", _bracket(1.5, 2), 1.75),
        ("rate", _bracket(1.96, 2), None),  # within 5% of the upper end: close enough
        ("rate", Capacity(status="above_ladder", load=4, highest_passing=4), None),
        ("concurrency", Capacity(status="below_first_step", lowest_failing=1), None),
        ("rate", Capacity(status="not_measured"), None),
    ],
)
def test_next_probe(kind: str, capacity: Capacity, probe: float | None) -> None:
    assert next_probe(kind, capacity) == probe  # type: ignore[arg-type]


def test_bisecting_converges_on_the_knee() -> None:
    """A server that meets the SLO up to 5 in flight: ladder 1,2,4,8, then 6 and 5 close the bracket."""
    steps = [(c, c <= 5) for c in (1.0, 2.0, 4.0, 8.0)]
    tried = []
    while (probe := next_probe("concurrency", capacity_of(steps))) is not None:
        tried.append(probe)
        steps.append((probe, probe <= 5))
    assert tried == [6, 5]
    assert capacity_of(steps) == _bracket(5, 6)
