"""The simulator's caches: the engine's KV pool and an offload tier. Pure.

The pool is vLLM v1's block pool: ``capacity`` blocks, each held by the running requests that use
it (a reference count; a prefix hit on a running request's block shares it) or free. A free block
that was full when freed keeps its key and can still be hit, until it is reused: free blocks are
taken least recently freed first, and a request frees its blocks last block first, so its tail goes
before its head (``KVCacheManager.free``). ``used + len(free) <= capacity`` always holds: a new
block takes an empty slot, else evicts the oldest cached free one.

The free blocks are kept as the runs they were freed in (a request's, tail first), oldest run
first, with each block's run: reusing a block takes it off the oldest run's end, a hit takes it out
of its run (its entry left there, stale, skipped when reached). Blocks come and go by the million;
this keeps the common cases (a run freed, blocks reused from one run) to C-speed slices.

A tier is an LRU of chunk keys (planning/predict/capacity.py's hierarchy: an exact LRU of the chunks
it is asked for, fastest tier first).
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, repeat, takewhile


@dataclass
class FreeBlocks:
    """The cached free blocks, in the order they are reused."""

    where: dict[int, int] = field(default_factory=dict)  # key -> the run it is free in
    runs: deque[tuple[int, list[int]]] = field(
        default_factory=deque
    )  # oldest first; each reused from its end
    stale: dict[int, int] = field(default_factory=dict)  # run -> its entries hit since (no longer free there)
    runs_made: int = 0

    def __len__(self) -> int:
        return len(self.where)

    def __contains__(self, key: int) -> bool:
        return key in self.where

    def add(self, keys: Sequence[int]) -> None:
        """Blocks freed together, in block order: the last is reused first."""
        if not keys:
            return
        run = self.runs_made
        self.runs_made += 1
        self.where.update(zip(keys, repeat(run)))
        self.runs.append((run, list(keys)))

    def take(self, keys: Sequence[int]) -> None:
        """Free blocks hit: they are held again (their runs' entries go stale)."""
        stale = self.stale
        for run, count in Counter(map(self.where.pop, keys)).items():
            stale[run] = stale.get(run, 0) + count

    def reuse(self, n: int) -> None:
        """The ``n`` oldest free blocks are reused: their keys go."""
        where, runs, stale = self.where, self.runs, self.stale
        while n > 0:
            run, keys = runs[0]
            gone = keys[-n:]
            del keys[-n:]
            if stale.get(run):  # entries hit since: not free here any more, skipped
                live = list(compress(gone, map(run.__eq__, map(where.get, gone, repeat(-1)))))
                stale[run] -= len(gone) - len(live)
                gone = live
            deque(map(where.__delitem__, gone), maxlen=0)
            n -= len(gone)
            if not keys:
                runs.popleft()
                stale.pop(run, None)

    def oldest(self) -> Iterator[int]:
        """The free blocks, the next reused first."""
        where = self.where
        for run, keys in self.runs:
            for key in reversed(keys):
                if where.get(key) == run:
                    yield key


@dataclass
class BlockPool:
    capacity: int
    used: int = 0  # blocks held by running requests (a shared block once)
    pinned: set[int] = field(default_factory=set)  # cached blocks running requests hold
    extra: dict[int, int] = field(default_factory=dict)  # holders beyond the first, where shared
    free: FreeBlocks = field(default_factory=FreeBlocks)  # cached, free, reused oldest first

    @property
    def room(self) -> int:
        """Blocks that can still be taken (empty ones and cached free ones)."""
        return self.capacity - self.used

    def match(self, keys: Sequence[int], limit: int) -> tuple[int, list[int]]:
        """(leading blocks of ``keys[:limit]`` the pool holds, those of them that are free); walked
        in runs of free and of pinned blocks, each at C speed."""
        in_free, in_pinned = self.free.where.__contains__, self.pinned.__contains__
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
        extra = self.extra
        self.free.take(freed)
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
        if over > 0:
            self.free.reuse(over)

    def register(self, keys: Sequence[int]) -> list[int]:
        """Blocks the caller holds became full under ``keys``: those the pool does not cache yet are
        cached (a copy computed beside a cached one stays uncached); returns them."""
        pinned, free = self.pinned, self.free.where
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
        self.free.add(keys)
        self._evict()  # never, unless a caller held blocks past capacity

    def oldest_free_among(self, keys: set[int], limit: int) -> int:
        """How many free blocks are reused before the first of ``keys`` is (``limit`` at most)."""
        for position, key in enumerate(islice(self.free.oldest(), limit)):
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

    def put(self, keys: Sequence[int]) -> None:
        """Store (or refresh) chunks as the most recent, in order; the least recent ones beyond
        capacity go."""
        if self.capacity <= 0:
            return
        lru = self.lru
        for key in keys:
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
        for _ in range(len(lru) - self.capacity):
            lru.popitem(last=False)
