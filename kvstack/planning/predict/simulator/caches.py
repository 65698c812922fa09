"""The simulator's caches: the engine's KV pool and an offload tier. Pure.

The pool is vLLM v1's block pool: ``capacity`` blocks, each held by the running requests that use
it (a reference count; a prefix hit on a running request's block shares it) or free. A free block
that was full when freed keeps its key and can still be hit, until it is reused: free blocks are
taken least recently freed first, and a request frees its blocks last block first, so its tail goes
before its head (``KVCacheManager.free``). ``used + len(free) <= capacity`` always holds: a new
block takes an empty slot, else evicts the oldest cached free one.

A tier is an LRU of chunk keys (planning/predict/capacity.py's hierarchy: an exact LRU of the chunks
it is asked for, fastest tier first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice, takewhile


@dataclass
class BlockPool:
    capacity: int
    used: int = 0  # blocks held by running requests (a shared block once)
    pinned: set[int] = field(default_factory=set)  # cached blocks running requests hold
    extra: dict[int, int] = field(default_factory=dict)  # holders beyond the first, where shared
    # Cached free blocks, oldest first: a plain dict (insertion-ordered, evicted from the front),
    # faster than an OrderedDict at millions of blocks.
    free: dict[int, None] = field(default_factory=dict)

    @property
    def room(self) -> int:
        """Blocks that can still be taken (empty ones and cached free ones)."""
        return self.capacity - self.used

    def holds(self, key: int) -> bool:
        return key in self.pinned or key in self.free

    def match(self, keys: Sequence[int], limit: int) -> tuple[int, list[int]]:
        """(leading blocks of ``keys[:limit]`` the pool holds, those of them that are free); walked
        in runs of free and of pinned blocks, each at C speed."""
        in_free, in_pinned = self.free.__contains__, self.pinned.__contains__
        hit = 0
        freed: list[int] = []
        while hit < limit:
            run = list(takewhile(in_free, islice(keys, hit, limit)))
            freed += run
            pinned = len(list(takewhile(in_pinned, islice(keys, hit + len(run), limit))))
            if not run and not pinned:
                break
            hit += len(run) + pinned
        return hit, freed

    def acquire(self, keys: Sequence[int], freed: Sequence[int]) -> None:
        """A request takes these cached blocks (its prefix hit), ``freed`` those of them now free."""
        free, extra = self.free, self.extra
        for key in freed:
            del free[key]
        if len(freed) < len(keys):
            taken = set(freed)
            for key in keys:
                if key not in taken:
                    extra[key] = extra.get(key, 0) + 1
        self.pinned.update(freed)
        self.used += len(freed)

    def allocate(self, blocks: int) -> None:
        """``blocks`` new blocks (the caller checked ``room``); the oldest cached free ones go."""
        self.used += blocks
        self._evict()

    def _evict(self) -> None:
        over = self.used + len(self.free) - self.capacity
        if over <= 0:
            return
        free = self.free
        if 2 * over > len(free):  # most of it: keep the rest rather than delete each
            self.free = dict.fromkeys(islice(free, over, None))
            return
        for key in list(islice(free, over)):
            del free[key]

    def register(self, keys: Sequence[int]) -> list[int]:
        """Blocks the caller holds became full under ``keys``: those the pool does not cache yet are
        cached (a copy computed beside a cached one stays uncached); returns them."""
        pinned, free = self.pinned, self.free
        if pinned.isdisjoint(keys) and free.keys().isdisjoint(keys):
            pinned.update(keys)
            return list(keys)
        new = [k for k in keys if k not in pinned and k not in free]
        pinned.update(new)
        return new

    def release(self, keys: Sequence[int], blocks: int) -> None:
        """A request frees its ``blocks`` blocks, ``keys`` the cached ones in order (last freed first:
        the tail is reused first)."""
        self.used -= blocks - len(keys)
        extra = self.extra
        shared = extra.keys() & keys if extra else ()
        if shared:  # held by another request too: one holder fewer, still pinned
            for key in shared:
                count = extra[key]
                if count == 1:
                    del extra[key]
                else:
                    extra[key] = count - 1
            keys = [k for k in keys if k not in shared]
        self.pinned.difference_update(keys)
        self.used -= len(keys)
        self.free.update(dict.fromkeys(reversed(keys)))
        self._evict()  # never, unless a caller held blocks past capacity

    def still(self, pinned: set[int], freed: set[int], miss: int | None) -> bool:
        """Whether a match that found ``pinned`` and ``freed`` and stopped at ``miss`` (None: at its
        limit) would find the same now: the waiting head's, checked at C speed each step."""
        free = self.free.keys()
        if miss is not None and (miss in self.pinned or miss in free):
            return False
        return free >= freed and self.pinned >= pinned

    def oldest_free_among(self, keys: set[int], limit: int) -> int:
        """How many free blocks are reused before the first of ``keys`` is (``limit`` at most)."""
        for position, key in enumerate(islice(self.free, limit)):
            if key in keys:
                return position
        return limit


@dataclass
class ChunkTier:
    capacity: int
    lru: OrderedDict[int, None] = field(default_factory=OrderedDict)

    def __contains__(self, key: int) -> bool:
        return key in self.lru

    def touch(self, key: int) -> None:
        if key in self.lru:
            self.lru.move_to_end(key)

    def put(self, key: int) -> None:
        """Store (or refresh) a chunk as the most recent; the least recent ones beyond capacity go."""
        lru = self.lru
        if key in lru:
            lru.move_to_end(key)
            return
        if self.capacity <= 0:
            return
        lru[key] = None
        if len(lru) > self.capacity:
            lru.popitem(last=False)
