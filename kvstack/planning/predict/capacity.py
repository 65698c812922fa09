"""The exact LRU capacity curve of a trace, and what each level of a cache hierarchy serves. Pure.

``plan --trace`` sizes the tiers from the curve (planning/predict/trace_sizing.py) and predicts each tier's
share with the hierarchy; the trace replay (bench/replay/predict.py) predicts with the same simulation,
tune sizes its candidates from the curve (tune/space.py). How each is counted: ``capacity_curve``,
``stack_distances``, ``simulate_hierarchy``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvstack.traces.mooncake import TraceRow

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CapacityCurve:
    """Prompt tokens served from an LRU prefix cache of every size (in trace blocks)."""

    sizes: IntArray  # ascending cache sizes (blocks) at which the hit count steps up
    hit_tokens: IntArray  # prompt tokens served at each of those sizes (cumulative)
    total_tokens: int  # every prompt token of the trace
    block_tokens: int
    block_refs: int
    distinct_blocks: int
    requests: int

    @property
    def max_hit_tokens(self) -> int:
        return int(self.hit_tokens[-1]) if len(self.hit_tokens) else 0

    @property
    def max_ratio(self) -> float:
        """The hit ratio of an unbounded cache: everything caching can give on this trace."""
        return self.max_hit_tokens / self.total_tokens if self.total_tokens else 0.0

    def tokens_at(self, blocks: int) -> int:
        """Prompt tokens served by an LRU cache of ``blocks`` blocks."""
        i = int(np.searchsorted(self.sizes, blocks, side="right"))
        return int(self.hit_tokens[i - 1]) if i > 0 else 0

    def ratio_at(self, blocks: int) -> float:
        return self.tokens_at(blocks) / self.total_tokens if self.total_tokens else 0.0

    def blocks_for(self, fraction_of_max: float) -> int:
        """The smallest cache (blocks) serving at least ``fraction_of_max`` of the unbounded hits."""
        if not len(self.sizes):
            return 0
        goal = fraction_of_max * self.max_hit_tokens
        i = int(np.searchsorted(self.hit_tokens, goal - 1e-9, side="left"))
        return int(self.sizes[min(i, len(self.sizes) - 1)])


def stack_distances(ids: IntArray) -> IntArray:
    """Each reference's LRU stack distance (1 = re-referenced at once); first uses get len(ids) + 1.

    The distances are counted offline with numpy, O(n log n): for a reuse at time t of a block last
    used at p, ``distance = t - p - #{reuse intervals (p', t') with p < p' and t' < t}``, the nested
    reuses being references in (p, t) that are not the last one of their block there. The count is a
    2-D dominance count, done level by level over a binary decomposition of the reuses sorted by t.
    """
    n = len(ids)
    cold = n + 1
    dist = np.full(n, cold, dtype=np.int64)
    if n == 0:
        return dist
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    t = np.sort(order[1:][same])  # reuse times, ascending
    prev = np.full(n, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    p = prev[t]
    m = len(t)
    if m == 0:
        return dist
    # nested[i] = #{j < i : p[j] > p[i]} (the reuses sorted by time; j < i <=> t_j < t_i), counted
    # over the binary decomposition of [0, i): at level k, the block [(i >> k) - 1 << k, i >> k << k).
    idx = np.arange(m, dtype=np.int64)
    big = np.int64(n + 1)
    at_most = np.zeros(m, dtype=np.int64)  # #{j < i : p[j] <= p[i]}
    for k in range(int(m).bit_length()):
        has = ((idx >> k) & 1).astype(bool)
        if not has.any():
            continue
        keys = np.sort((idx >> k) * big + p)
        seg = (idx[has] >> k) - 1
        at_most[has] += np.searchsorted(keys, seg * big + p[has], side="right") - seg * (1 << k)
    nested = idx - at_most
    dist[t] = t - p - nested
    return dist


def prefix_distances(ids: IntArray, request_of: IntArray) -> IntArray:
    """Stack distances made prefix-only: the running maximum along each request (``request_of``
    non-decreasing). A block hits at size C when its prefix distance is at most C."""
    dist = stack_distances(ids)
    if len(dist) == 0:
        return dist
    span = np.int64(len(ids) + 2)
    keyed = request_of.astype(np.int64) * span + dist
    out: IntArray = np.maximum.accumulate(keyed) - request_of.astype(np.int64) * span
    return out


@dataclass(frozen=True)
class _Blocks:
    ids: IntArray  # each reference's block: trace id x block_tokens + its last token's offset
    request: IntArray  # its request's index
    tokens: IntArray  # its prompt tokens
    total_tokens: int


def _blocks(requests: Sequence[TraceRow], block_tokens: int) -> _Blocks:
    counts = np.fromiter((len(r.hash_ids) for r in requests), dtype=np.int64, count=len(requests))
    lengths = np.fromiter((r.input_length for r in requests), dtype=np.int64, count=len(requests))
    total = int(counts.sum())
    ids = np.fromiter((i for r in requests for i in r.hash_ids), dtype=np.int64, count=total)
    req = np.repeat(np.arange(len(requests), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    pos = np.arange(total, dtype=np.int64) - starts[req]
    tokens = np.clip(lengths[req] - pos * block_tokens, 0, block_tokens)
    # A block is identified by its id and its last token's offset (a partial last block is the
    # prefix that ends there, as in simulate_hierarchy); blocks past the prompt hold no tokens.
    keep = tokens > 0
    keyed = ids[keep] * block_tokens + tokens[keep] - 1
    return _Blocks(keyed, req[keep], tokens[keep], int(lengths.sum()))


def capacity_curve(requests: Sequence[TraceRow], block_tokens: int = 512) -> CapacityCurve:
    """The prompt-token hit count of an LRU prefix cache at every size, in one pass.

    The curve (Mattson et al., 1970): a block reference's stack distance is the number of distinct
    blocks touched since its previous use, itself included; it hits in every LRU cache of at least that
    many blocks. One pass gives every reference's distance, hence the hit ratio at every size. An
    engine's prefix cache serves a request's blocks only while they are contiguous from its first
    block, so a block hits at size C only when it and every block before it in its request do: its
    *prefix distance* is the running maximum of the distances along the request. Every block is still
    touched (the LRU order is that of all references, hit or not), so the curve equals a block-by-block
    LRU simulation at each size. Hits are weighted by the block's prompt tokens (the last block of a
    request may be partial; tokens beyond the blocks a row lists never hit).
    """
    b = _blocks(requests, block_tokens)
    m = prefix_distances(b.ids, b.request)
    hit = m <= len(b.ids)  # never-reused prefixes (cold) hit at no size
    order = np.argsort(m[hit], kind="stable")
    sizes_all = m[hit][order]
    cum = np.cumsum(b.tokens[hit][order])
    if len(sizes_all):
        last = np.r_[sizes_all[1:] != sizes_all[:-1], True]
        sizes, hits = sizes_all[last], cum[last]
    else:
        sizes = hits = np.zeros(0, dtype=np.int64)
    return CapacityCurve(
        sizes=sizes.astype(np.int64),
        hit_tokens=hits.astype(np.int64),
        total_tokens=b.total_tokens,
        block_tokens=block_tokens,
        block_refs=len(b.ids),
        distinct_blocks=len(np.unique(b.ids)),
        requests=len(requests),
    )


@dataclass(frozen=True)
class HierarchyResult:
    """What each level served: prompt tokens in all, and per request (level-major)."""

    hit_tokens: list[int]  # per level
    total_tokens: int
    per_request: list[list[int]]  # [level][request]

    @property
    def ratios(self) -> list[float]:
        return [h / self.total_tokens if self.total_tokens else 0.0 for h in self.hit_tokens]

    @property
    def recomputed_tokens(self) -> int:
        return self.total_tokens - sum(self.hit_tokens)


def _unit_stream(
    flat_ids: IntArray,
    id_start: IntArray,
    id_count: IntArray,
    lengths: IntArray,
    reach: IntArray,
    unit: int,
    block_tokens: int,
) -> tuple[IntArray, IntArray, IntArray]:
    """(unit ids, request index, first unit index per request) of the level blocks from each
    request's ``reach`` (tokens served above) to its end."""
    first = reach // unit
    n_units = np.where(reach < lengths, -(-lengths // unit) - first, 0)
    total = int(n_units.sum())
    req = np.repeat(np.arange(len(lengths), dtype=np.int64), n_units)
    offsets = np.cumsum(n_units) - n_units
    u = first[req] + np.arange(total, dtype=np.int64) - offsets[req]
    end = np.minimum((u + 1) * unit, lengths[req])
    block = (end - 1) // block_tokens
    inside = block < id_count[req]
    # Tokens past the blocks a row lists are unknown: never served, never cached (as in the curve).
    req, end, block = req[inside], end[inside], block[inside]
    ids = flat_ids[id_start[req] + block] * block_tokens + (end - 1) % block_tokens
    return ids.astype(np.int64), req, first


def simulate_hierarchy(
    requests: Sequence[TraceRow],
    sizes_in_blocks: Sequence[int],
    *,
    inclusive: bool = True,
    block_tokens: int = 512,
    unit_tokens: Sequence[int] | None = None,
    readmit: bool = True,
) -> HierarchyResult:
    """Prompt tokens each level serves, fastest level first (level 0: the engine's pool).

    ``sizes_in_blocks[k]``: level k's capacity in its own blocks of ``unit_tokens[k]`` tokens
    (default: the trace's ``block_tokens``). Exclusive hierarchies need one block size throughout.
    ``readmit=False``: a block the offload levels serve from below level 1 is not copied back into
    the levels above it (``_without_readmission``).

    A lower level does not see the references the level above served, so each level is simulated
    on what it actually sees. How the connectors behave:

    - vLLM's prefix cache (the engine pool, level 0) evicts least-recently-used free blocks; every
      block of a request is touched (a hit is reused, a miss computed or loaded and then cached).
    - LMCache (multi-process server): L1 (DRAM) is an LRU (``--eviction-policy LRU``) that sees the
      lookups for what the engine lacked and stores what was computed; L2 adapters (``fs``, Redis)
      are written through from L1, so they are inclusive, and see what L1 missed. What L2 serves is
      not kept in L1 (0.5.6's prefetch policy frees it once read): ``readmit=False``.
    - vLLM native offload and SGLang HiCache (write_through) also store every computed block in the
      host tier: inclusive.

    Inclusive (``inclusive=True``): level k+1's references are the blocks of each request from the
    first block level k lacked onward (a prefix cache stops at its first miss); it serves the
    contiguous run it holds from there, and every block it was asked for becomes its most recent
    (loaded from below or stored after the recompute). Each level is then an LRU over its own stream,
    computed with the same one-pass distances. Exclusive (``inclusive=False``, a victim cache): a
    block lives in one level; what level k evicts moves to level k+1; a hit below level 0 moves the
    block back up. Simulated block by block.

    Block sizes: the trace's blocks are ``block_tokens`` long (512 for Mooncake; a replay may scale
    them), a level's blocks ``unit_tokens`` (vLLM's 16 on GPUs or 128 on CPU, LMCache's 256-token
    chunks). A level block is identified by the prefix it ends: the trace block holding its last token
    and that token's offset in it (trace ids are prefix ids: equal ids, equal prefixes). A level block
    straddling a trace block boundary thus changes identity with the later trace block, which is what an
    engine's chained block hash does. The approximation: the trace says nothing about tokens inside a
    block, so two requests with the same trace block ids are assumed to share every token in them, and
    capacities are counted in whole level blocks (a partial last block takes a whole one).
    """
    units = list(unit_tokens) if unit_tokens is not None else [block_tokens] * len(sizes_in_blocks)
    if len(units) != len(sizes_in_blocks):
        raise ValueError("unit_tokens needs one block size per level")
    if any(u < 1 for u in units) or any(s < 0 for s in sizes_in_blocks):
        raise ValueError("block sizes must be positive and capacities not negative")
    if not inclusive:
        if len(set(units)) > 1:
            raise ValueError("an exclusive hierarchy is simulated with one block size for all levels")
        return _exclusive(requests, list(sizes_in_blocks), block_tokens, units[0] if units else block_tokens)
    if not readmit and len(sizes_in_blocks) > 2:
        engine = simulate_hierarchy(
            requests, sizes_in_blocks[:1], block_tokens=block_tokens, unit_tokens=units[:1]
        )
        return _without_readmission(requests, engine, list(sizes_in_blocks[1:]), units[1:], block_tokens)
    lengths = np.fromiter((r.input_length for r in requests), dtype=np.int64, count=len(requests))
    counts = np.fromiter((len(r.hash_ids) for r in requests), dtype=np.int64, count=len(requests))
    flat = np.fromiter((i for r in requests for i in r.hash_ids), dtype=np.int64, count=int(counts.sum()))
    starts = np.cumsum(counts) - counts
    reach: IntArray = np.zeros(len(requests), dtype=np.int64)
    per_level: list[list[int]] = []
    for size, unit in zip(sizes_in_blocks, units, strict=True):
        ids, req, first = _unit_stream(flat, starts, counts, lengths, reach, unit, block_tokens)
        # First uses get len(ids) + 1: no cache larger than the stream holds more than it.
        hits = prefix_distances(ids, req) <= min(size, len(ids))
        n_hit = np.bincount(req[hits], minlength=len(requests)).astype(np.int64)
        new_reach: IntArray = np.where(n_hit > 0, np.minimum(lengths, (first + n_hit) * unit), reach)
        per_level.append((new_reach - reach).tolist())
        reach = new_reach
    return HierarchyResult([sum(x) for x in per_level], int(lengths.sum()), per_level)


def _without_readmission(
    requests: Sequence[TraceRow],
    engine: HierarchyResult,
    sizes: list[int],
    units: list[int],
    block_tokens: int,
) -> HierarchyResult:
    """Offload levels that do not keep what they read back from below: LMCache 0.5.6's server
    (DefaultPrefetchPolicy "retains nothing": an L2 hit is loaded into L1 as a temporary object and
    freed once read). Simulated request by request: the offload levels serve the run of blocks one of
    them holds from the request's first block (LMCache's lookup is a prefix from token 0), each block
    from the highest level holding it; the blocks past the engine's reach are touched where they were
    found (and below), none is copied up; the blocks past that run are stored in every level (L1, and
    the L2 adapters written through from it)."""
    if len(set(units)) > 1:
        raise ValueError("offload levels without readmission are simulated with one block size")
    unit = units[0]
    lrus: list[OrderedDict[int, None]] = [OrderedDict() for _ in sizes]
    per_level: list[list[int]] = [engine.per_request[0], *([0] * len(requests) for _ in sizes)]
    for i, r in enumerate(requests):
        keys = _request_units(r, unit, block_tokens)
        reach = engine.per_request[0][i]
        found: list[int] = []
        for key in keys:
            for level, lru in enumerate(lrus):
                if key in lru:
                    found.append(level)
                    break
            else:
                break
        for j, level in enumerate(found):
            end = min((j + 1) * unit, r.input_length)
            if end <= reach:
                continue
            per_level[level + 1][i] += end - max(j * unit, reach)
            for lru in lrus[level:]:
                if keys[j] in lru:
                    lru.move_to_end(keys[j])
        for key in keys[len(found) :]:
            for lru, size in zip(lrus, sizes, strict=True):
                lru[key] = None
                lru.move_to_end(key)
                if len(lru) > size:
                    lru.popitem(last=False)
    return HierarchyResult([sum(x) for x in per_level], engine.total_tokens, per_level)


def _request_units(r: TraceRow, unit: int, block_tokens: int) -> list[int]:
    out: list[int] = []
    for u in range(-(-r.input_length // unit)):
        end = min((u + 1) * unit, r.input_length)
        block = (end - 1) // block_tokens
        if block >= len(r.hash_ids):
            break
        out.append(r.hash_ids[block] * block_tokens + (end - 1) % block_tokens)
    return out


def _exclusive(
    requests: Sequence[TraceRow], sizes: list[int], block_tokens: int, unit: int
) -> HierarchyResult:
    levels: list[OrderedDict[int, None]] = [OrderedDict() for _ in sizes]
    per_level = [[0] * len(requests) for _ in sizes]
    for ri, r in enumerate(requests):
        units = _request_units(r, unit, block_tokens)
        pos = 0
        for k, level in enumerate(levels):
            start = pos
            while pos < len(units) and units[pos] in level:
                pos += 1
            per_level[k][ri] = min(r.input_length, pos * unit) - min(r.input_length, start * unit)
        for uid in units:
            _promote(levels, sizes, uid)
    return HierarchyResult([sum(x) for x in per_level], sum(r.input_length for r in requests), per_level)


def _promote(levels: list[OrderedDict[int, None]], sizes: list[int], uid: int) -> None:
    """``uid`` becomes level 0's most recent; victims move one level down (the last drops them)."""
    for level in levels[1:]:
        level.pop(uid, None)
    if not levels:
        return
    moving: int | None = uid
    levels[0].pop(uid, None)
    for k, level in enumerate(levels):
        if moving is None:
            return
        if sizes[k] <= 0:
            continue
        level[moving] = None
        level.move_to_end(moving)
        moving = level.popitem(last=False)[0] if len(level) > sizes[k] else None
