"""The one-pass LRU capacity curve and the hierarchy split against block-by-block LRU simulations."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstack.planning.predict.capacity import (
    capacity_curve,
    prefix_distances,
    simulate_hierarchy,
    stack_distances,
)
from kvstack.traces.mooncake import TraceRow, read_trace

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "conversation_1in40.jsonl"
B = 4  # tokens per trace block in the generated traces


def _req(ids: list[int], tokens: int | None = None) -> TraceRow:
    return TraceRow(0.0, tokens if tokens is not None else len(ids) * B, 1, ids)


@st.composite
def traces(draw: st.DrawFn, alphabet: int = 8) -> list[TraceRow]:
    out = []
    for _ in range(draw(st.integers(1, 25))):
        ids = draw(st.lists(st.integers(0, alphabet), min_size=1, max_size=6))
        # The last block may be partial; sometimes the prompt runs past the listed blocks.
        tokens = draw(st.integers((len(ids) - 1) * B + 1, len(ids) * B + 3))
        out.append(_req(ids, tokens))
    return out


def _lru_prefix_hits(requests: list[TraceRow], size: int) -> int:
    """Block-by-block LRU of ``size`` blocks; a block counts while the request's blocks hit in a row.
    A block is its id and its token count (a partial last block is a prefix of its own)."""
    cache: OrderedDict[tuple[int, int], None] = OrderedDict()
    hits = 0
    for r in requests:
        prefix = True
        for i, block_id in enumerate(r.hash_ids):
            tokens = max(0, min(B, r.input_length - i * B))
            if tokens == 0:
                break
            block = (block_id, tokens)
            prefix = prefix and block in cache
            hits += tokens if prefix else 0
            cache[block] = None
            cache.move_to_end(block)
            if len(cache) > size:
                cache.popitem(last=False)
    return hits


@settings(max_examples=200, deadline=None)
@given(traces())
def test_curve_equals_brute_force_lru_at_every_size(requests: list[TraceRow]) -> None:
    curve = capacity_curve(requests, block_tokens=B)
    distinct = sum(len(r.hash_ids) for r in requests)
    for size in range(1, distinct + 2):
        assert curve.tokens_at(size) == _lru_prefix_hits(requests, size), size
    assert curve.tokens_at(0) == 0
    assert curve.total_tokens == sum(r.input_length for r in requests)


def _brute_distances(ids: list[int]) -> list[int]:
    stack: list[int] = []
    out = []
    for x in ids:
        if x in stack:
            out.append(len(stack) - stack.index(x))
            stack.remove(x)
        else:
            out.append(len(ids) + 1)
        stack.append(x)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=80))
def test_stack_distances_equal_a_list_stack(ids: list[int]) -> None:
    got = stack_distances(np.array(ids, dtype=np.int64)).tolist()
    assert got == _brute_distances(ids)


def test_prefix_only_a_block_after_a_miss_does_not_hit() -> None:
    # Block 2 was used just before, but the request's first block (9) is new: an engine's prefix
    # cache serves nothing of it, so the re-used block counts at no size.
    requests = [_req([1, 2]), _req([9, 2])]
    curve = capacity_curve(requests, block_tokens=B)
    assert curve.max_hit_tokens == 0
    d = prefix_distances(np.array([1, 2, 9, 2]), np.array([0, 0, 1, 1])).tolist()
    assert d[3] == 5  # cold (n + 1), inherited from the first block
    # Same second block behind a shared first block: both hit once the cache holds two blocks.
    curve = capacity_curve([_req([1, 2]), _req([1, 2])], block_tokens=B)
    assert curve.tokens_at(1) == 0 and curve.tokens_at(2) == 2 * B


def test_partial_last_block_counts_its_own_tokens() -> None:
    # 10 tokens over 3 blocks of 4: the last block holds 2; a repeat serves all 10.
    curve = capacity_curve([_req([1, 2, 3], 10), _req([1, 2, 3], 10)], block_tokens=B)
    assert curve.max_hit_tokens == 10
    assert curve.total_tokens == 20
    # Tokens past the listed blocks are prompt tokens that never hit.
    curve = capacity_curve([_req([1], 7), _req([1], 7)], block_tokens=B)
    assert (curve.max_hit_tokens, curve.total_tokens) == (4, 14)


def test_blocks_for_finds_the_smallest_size_reaching_a_share() -> None:
    curve = capacity_curve(read_trace(FIXTURE).requests)
    size = curve.blocks_for(0.95)
    assert curve.tokens_at(size) >= 0.95 * curve.max_hit_tokens > curve.tokens_at(size - 1)
    assert curve.blocks_for(1.0) == int(curve.sizes[-1])


def test_fixture_slice_figures() -> None:
    # The 1-in-40 session sample of the conversation trace (tests/fixtures/traces/README.md).
    curve = capacity_curve(read_trace(FIXTURE).requests)
    assert (curve.requests, curve.block_refs, curve.distinct_blocks) == (342, 8449, 5000)
    assert round(curve.max_ratio, 3) == 0.416


def _cascade(requests: list[TraceRow], sizes: list[int], units: list[int]) -> list[int]:
    """Inclusive hierarchy, unit by unit: each level walks the request from where the levels
    above stopped, serves its contiguous run, and every unit it was asked for becomes its newest."""
    levels: list[OrderedDict[tuple[int, int], None]] = [OrderedDict() for _ in sizes]
    served = [0] * len(sizes)
    for r in requests:
        reach = 0
        for k, (size, unit) in enumerate(zip(sizes, units, strict=True)):
            first = reach // unit
            run, hit_end, hitting = [], reach, True
            for u in range(first, -(-r.input_length // unit)):
                end = min((u + 1) * unit, r.input_length)
                block = (end - 1) // B
                if block >= len(r.hash_ids):
                    break  # tokens past the listed blocks: never cached
                key = (r.hash_ids[block], (end - 1) % B)
                run.append(key)
                hitting = hitting and size > 0 and key in levels[k]
                if hitting:
                    hit_end = end
            if reach >= r.input_length:
                run = []
            for key in run:
                levels[k][key] = None
                levels[k].move_to_end(key)
                if len(levels[k]) > size:
                    levels[k].popitem(last=False)
            served[k] += hit_end - reach
            reach = hit_end
    return served


@settings(max_examples=150, deadline=None)
@given(
    traces(),
    st.lists(st.integers(0, 6), min_size=1, max_size=3),
    st.lists(st.sampled_from([1, 2, 4, 8]), min_size=3, max_size=3),
)
def test_inclusive_hierarchy_equals_a_unit_by_unit_cascade(
    requests: list[TraceRow], sizes: list[int], units: list[int]
) -> None:
    units = units[: len(sizes)]
    got = simulate_hierarchy(requests, sizes, block_tokens=B, unit_tokens=units)
    assert got.hit_tokens == _cascade(requests, sizes, units)
    assert got.recomputed_tokens == got.total_tokens - sum(got.hit_tokens) >= 0
    assert [sum(x) for x in got.per_request] == got.hit_tokens


@settings(max_examples=100, deadline=None)
@given(traces(), st.integers(1, 10))
def test_one_level_is_the_curve(requests: list[TraceRow], size: int) -> None:
    curve = capacity_curve(requests, block_tokens=B)
    for inclusive in (True, False):
        got = simulate_hierarchy(requests, [size], block_tokens=B, inclusive=inclusive)
        assert got.hit_tokens == [curve.tokens_at(size)]


@settings(max_examples=100, deadline=None)
@given(traces(), st.integers(1, 6), st.integers(1, 6))
def test_exclusive_levels_hold_no_more_than_one_lru_of_their_sum(
    requests: list[TraceRow], a: int, b: int
) -> None:
    got = simulate_hierarchy(requests, [a, b], block_tokens=B, inclusive=False)
    assert sum(got.hit_tokens) <= capacity_curve(requests, block_tokens=B).tokens_at(a + b)


def test_exclusive_keeps_what_the_engine_evicted_inclusive_does_not() -> None:
    requests = [_req([1]), _req([2]), _req([1])]
    # Exclusive: block 1, evicted from the 1-block engine pool by block 2, waits in level 1.
    assert simulate_hierarchy(requests, [1, 1], block_tokens=B, inclusive=False).hit_tokens == [0, B]
    # Inclusive: level 1 saw 1 then 2 (both missed above) and holds only 2.
    assert simulate_hierarchy(requests, [1, 1], block_tokens=B).hit_tokens == [0, 0]
    assert simulate_hierarchy(requests, [1, 2], block_tokens=B).hit_tokens == [0, B]


def test_smaller_engine_blocks_of_a_scaled_trace() -> None:
    # Two 8-token trace blocks served by 4-token engine blocks: a repeat is served whole by level 0,
    # and a level of 16-token chunks (one partial) serves the same repeat when level 0 is empty.
    requests = [_req([1, 2], 14), _req([1, 2], 14)]
    assert simulate_hierarchy(requests, [4], block_tokens=8, unit_tokens=[4]).hit_tokens == [14]
    assert simulate_hierarchy(requests, [0, 1], block_tokens=8, unit_tokens=[4, 16]).hit_tokens == [0, 14]


def test_without_readmission_an_l2_hit_is_not_copied_back_into_l1() -> None:
    a, b = _req([1]), _req([2])
    requests = [a, b, a, b]
    # With readmission the third request's block comes back into the 1-block L1 and pushes the
    # second one out, so the fourth is served from L2 as well.
    assert simulate_hierarchy(requests, [0, 1, 10], block_tokens=B).hit_tokens == [0, 0, 2 * B]
    # LMCache's server frees what it read from L2: L1 still holds the second block for the fourth.
    got = simulate_hierarchy(requests, [0, 1, 10], block_tokens=B, readmit=False)
    assert got.hit_tokens == [0, B, B]
    assert got.per_request == [[0, 0, 0, 0], [0, 0, 0, B], [0, 0, B, 0]]


@settings(max_examples=150, deadline=None)
@given(traces(), st.integers(0, 6), st.integers(0, 6))
def test_without_readmission_the_same_tokens_are_served_over_an_unbounded_bottom_level(
    requests: list[TraceRow], l1: int, engine: int
) -> None:
    # Every block first seen is stored in the unbounded bottom level either way, so the offload
    # levels together reach the same prefix; only which level serves it differs.
    sizes = [engine, l1, 10_000]
    with_, without = (
        simulate_hierarchy(requests, sizes, block_tokens=B, readmit=readmit) for readmit in (True, False)
    )
    assert without.hit_tokens[0] == with_.hit_tokens[0]
    if engine == 0:
        assert sum(without.hit_tokens) == sum(with_.hit_tokens)
    assert [sum(x) for x in without.per_request] == without.hit_tokens
    assert without.recomputed_tokens >= 0
