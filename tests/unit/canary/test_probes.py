"""The probe pool: which planted probe is asked again, and which are kept when the pool is full."""

from __future__ import annotations

from kvstack.canary.probes import Probe, ProbePool
from kvstack.validation.prompts import Prompt, new_nonce, prompt_text


def probe(planted_at: float) -> Probe:
    nonce = new_nonce()
    return Probe(Prompt(nonce, prompt_text(nonce, 24), 32), planted_at)


def pool_of(*planted: float, size: int = 8) -> tuple[ProbePool, list[Probe]]:
    pool = ProbePool(size)
    probes = [probe(t) for t in planted]
    for p in probes:
        pool.add(p)
    return pool, probes


def test_a_probe_is_named_by_its_nonce() -> None:
    p = probe(0.0)
    assert p.name == p.prompt.nonce and p.name in p.prompt.text


def test_the_youngest_and_the_oldest_are_asked_in_turn() -> None:
    pool, (p0, p1, p2, p3, p4) = pool_of(0.0, 1.0, 2.0, 3.0, 4.0)
    taken = [pool.take(100.0, 10.0) for _ in range(5)]
    assert taken == [p4, p0, p3, p1, p2]
    assert len(pool) == 0 and pool.take(100.0, 10.0) is None


def test_only_probes_planted_at_least_the_minimum_age_ago_are_asked() -> None:
    pool, (old, middle, fresh) = pool_of(0.0, 5.0, 9.0)
    assert pool.take(10.0, 3.0) is middle  # the youngest old enough, not the 1-second-old one
    assert pool.take(10.0, 3.0) is old
    assert pool.take(10.0, 3.0) is None  # the fresh one waits
    assert len(pool) == 1
    assert pool.take(12.0, 3.0) is fresh  # once it is old enough


def test_nothing_old_enough_takes_nothing_and_keeps_the_turn() -> None:
    pool, (p0, _, p2) = pool_of(10.0, 11.0, 12.0)
    assert pool.take(12.0, 5.0) is None and len(pool) == 3
    # The first real pick is still the youngest: a None answer did not use a turn.
    assert pool.take(30.0, 5.0) is p2
    assert pool.take(30.0, 5.0) is p0


def test_an_asked_probe_is_retired() -> None:
    pool, probes = pool_of(0.0, 1.0, 2.0, 3.0)
    seen = []
    while (p := pool.take(50.0, 1.0)) is not None:
        assert p not in pool.probes
        seen.append(p)
    assert sorted(seen, key=lambda p: p.planted_at) == probes  # each asked exactly once


def test_a_full_pool_keeps_its_oldest_and_its_youngest() -> None:
    pool, probes = pool_of(*[float(t) for t in range(20)], size=5)
    assert len(pool) == 5
    assert pool.probes[0] is probes[0]  # the oldest: most likely only on disk or remote by now
    assert pool.probes[-1] is probes[-1]  # the youngest: most likely still in DRAM
    ages = [p.planted_at for p in pool.probes]
    assert ages == sorted(ages)  # still oldest first


def test_every_add_past_the_size_drops_one_probe_from_the_middle() -> None:
    pool, probes = pool_of(0.0, 1.0, 2.0, 3.0, size=4)
    newest = probe(4.0)
    pool.add(newest)
    assert len(pool) == 4
    assert pool.probes[0] is probes[0] and pool.probes[-1] is newest
    (dropped,) = [p for p in probes if p not in pool.probes]
    assert dropped not in (probes[0], probes[-1])


def test_a_pool_holds_at_least_two() -> None:
    for size in (0, 1, 2):
        pool, probes = pool_of(0.0, 1.0, 2.0, size=size)
        assert pool.probes == [probes[0], probes[-1]]
