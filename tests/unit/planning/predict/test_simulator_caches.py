"""planning/predict/simulator/caches.py and group.py: the pool's reuse order, shared and hit blocks,
a tier's LRU, and the decoding group's counts, each worked out by hand."""

from __future__ import annotations

from kvstack.planning.predict.simulator.caches import BlockPool, ChunkTier
from kvstack.planning.predict.simulator.group import DecodeGroup
from kvstack.planning.predict.simulator.inputs import SimRequest
from kvstack.planning.predict.simulator.state import RequestState


def pool_with(capacity: int, *runs: list[int]) -> BlockPool:
    """A pool where each run of keys was held by one request, then freed."""
    pool = BlockPool(capacity)
    for keys in runs:
        pool.allocate(len(keys))
        assert pool.register(keys) == keys
        pool.release(keys, len(keys))
    return pool


def test_a_request_frees_its_tail_first_and_the_oldest_run_goes_first() -> None:
    pool = pool_with(10, [1, 2, 3], [4, 5, 6])
    assert list(pool.free.oldest()) == [3, 2, 1, 6, 5, 4]
    pool.allocate(4 + 2)  # 4 empty slots, then the two oldest cached blocks
    assert list(pool.free.oldest()) == [1, 6, 5, 4]
    assert pool.match([1, 2, 3], 3) == (1, [1])  # block 2 went: the hit stops there


def test_a_hit_block_is_held_and_skipped_when_its_run_is_reused() -> None:
    pool = pool_with(6, [1, 2, 3], [4, 5, 6])
    hit, freed = pool.match([4, 5, 9], 3)
    assert (hit, freed) == (2, [4, 5])
    pool.acquire([4, 5], freed)
    assert pool.used == 2 and list(pool.free.oldest()) == [3, 2, 1, 6]
    pool.allocate(4)  # the four free blocks go, the held 4 and 5 stay
    assert len(pool.free) == 0 and pool.match([4, 5], 2) == (2, [])
    pool.release([4, 5], 2)  # freed again, in a newer run: its old entries do not reuse them
    assert list(pool.free.oldest()) == [5, 4]


def test_a_block_refreed_in_a_newer_run_is_not_reused_from_its_old_one() -> None:
    pool = pool_with(8, [1, 2, 3])
    pool.acquire([1], [1])  # hit, then freed again: newest now
    pool.release([1], 1)
    assert list(pool.free.oldest()) == [3, 2, 1]
    pool.allocate(5 + 2)  # 5 empty slots, then 3 and 2; 1's stale entry in the first run is skipped
    assert list(pool.free.oldest()) == [1]


def test_a_shared_block_stays_held_until_its_last_holder_frees_it() -> None:
    pool = BlockPool(10)
    pool.allocate(2)
    pool.register([1, 2])  # request A holds 1, 2
    pool.acquire([1, 2], [])  # request B hits both while A runs
    pool.allocate(1)  # and takes a block of its own
    assert pool.used == 3 and pool.extra == {1: 1, 2: 1}
    pool.release([1, 2], 2)  # A done: B still holds them
    assert pool.used == 3 and len(pool.free) == 0
    pool.release([1, 2], 3)  # B done (it held one block of its own too)
    assert pool.used == 0 and list(pool.free.oldest()) == [2, 1]


def test_a_copy_computed_beside_a_cached_block_is_not_cached() -> None:
    pool = BlockPool(10)
    pool.allocate(2)
    assert pool.register([1]) == [1]
    assert pool.register([1, 2]) == [2]  # another request computed 1 too: its copy stays uncached


def test_a_tier_keeps_its_most_recent_chunks() -> None:
    tier = ChunkTier(3)
    tier.put([1, 2, 3])
    tier.touch(1)
    tier.put([4])  # 2 is the least recent
    assert list(tier.lru) == [3, 1, 4]
    tier.put([3, 5, 6])  # 3 refreshed, then 5 and 6 push out 1 and 4
    assert list(tier.lru) == [3, 5, 6]
    empty = ChunkTier(0)
    empty.put([1])
    assert 1 not in empty


def member(index: int, prompt: int, output: int, computed: int, seq: int) -> RequestState:
    r = RequestState(index, SimRequest(0.0, prompt, output, tuple(range(-(-prompt // 16))), 16), 0)
    r.computed, r.seq = computed, seq
    return r


def test_the_group_counts_blocks_kv_and_ends_from_the_clock() -> None:
    group = DecodeGroup(16)
    group.advance(5)  # clock 5
    a = member(0, 32, 10, 32, 0)  # at a block boundary now; its last token 9 steps on
    b = member(1, 40, 4, 41, 1)  # 41 computed (2 sampled): 7 tokens to a boundary, 2 to its end
    group.join(a)
    group.join(b)
    assert group.blocks_needed() == 1  # a's 33rd token starts its 3rd block
    assert group.kv_tokens() == 33 + 42
    assert group.blocks_after(8) == 1  # steps 2..8: b's token at 48 (its 7th step) starts a block
    assert group.steps_to_first_end() == 2
    assert group.advance(2) == [b]
    assert (b.computed, b.generated, b.blocks) == (43, 4, 3)
    assert group.last() is a and len(group) == 1
