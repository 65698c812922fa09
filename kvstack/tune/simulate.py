"""What each candidate's tiers serve of a trace, request by request, fast enough to rank dozens.

planning/predict/capacity.py's hierarchy, organised for many candidates over one trace:

- the engine's pool is the same for every candidate: simulated once (its block, its size);
- a connector's chunk fixes the offload levels' blocks: a request's whole chunks only (LMCache and
  vLLM's offload store complete chunks: lmcache_mp_metadata.py:301, ``save_unfull_chunk`` False),
  each identified by the prefix it ends, as in capacity.py;
- below the engine, an inclusive LRU's stack distances do not depend on its size: one pass per
  chunk gives the DRAM tier at every size, one per (chunk, DRAM size) the tier below it when a
  lower hit is copied back up (``readmit``);
- LMCache's server keeps in DRAM nothing it read from disk (``readmit=False``): simulated request
  by request as capacity.py's ``_without_readmission`` does, on the chunk keys computed once.

Results are cached by (chunk, sizes), so candidates that differ in their gate or in nothing the
simulation sees cost nothing more.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvstack.planning.predict.capacity import prefix_distances, simulate_hierarchy
from kvstack.traces.mooncake import TraceRow

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SimulatedSources:
    """Prompt tokens of each request (arrays over the trace's requests) by where the simulation
    serves them: the engine's pool, DRAM, disk."""

    engine: IntArray
    dram: IntArray
    disk: IntArray


@dataclass(frozen=True)
class _Chunks:
    ids: IntArray  # every whole chunk of every request, request-major, from token 0
    req: IntArray
    bounds: IntArray  # request i's chunks are ids[bounds[i]:bounds[i + 1]]
    whole: IntArray  # tokens in each request's whole chunks


class TraceSim:
    """One trace, one engine pool; the offload levels of any candidate on demand."""

    def __init__(
        self,
        requests: Sequence[TraceRow],
        *,
        block_tokens: int,
        engine_block_tokens: int,
        engine_pool_tokens: int,
    ) -> None:
        self.block_tokens = block_tokens
        n = len(requests)
        self.lengths: IntArray = np.fromiter((r.input_length for r in requests), dtype=np.int64, count=n)
        counts = np.fromiter((len(r.hash_ids) for r in requests), dtype=np.int64, count=n)
        self._flat: IntArray = np.fromiter(
            (i for r in requests for i in r.hash_ids), dtype=np.int64, count=int(counts.sum())
        )
        self._starts: IntArray = np.cumsum(counts) - counts
        self._counts = counts
        pool = engine_pool_tokens // engine_block_tokens
        engine = simulate_hierarchy(
            requests, [pool], block_tokens=block_tokens, unit_tokens=[engine_block_tokens]
        )
        self.engine: IntArray = np.array(engine.per_request[0], dtype=np.int64)
        self._zero: IntArray = np.zeros(n, dtype=np.int64)
        self._chunks: dict[int, _Chunks] = {}
        self._keys: dict[int, list[list[int]]] = {}
        self._dist: dict[tuple[int, int], tuple[IntArray, IntArray, IntArray]] = {}
        self._done: dict[tuple[int, int, int, bool], SimulatedSources] = {}

    @property
    def requests(self) -> int:
        return len(self.lengths)

    def engine_only(self) -> SimulatedSources:
        return SimulatedSources(self.engine, self._zero, self._zero)

    def chunks(self, chunk: int) -> _Chunks:
        found = self._chunks.get(chunk)
        if found is not None:
            return found
        bt = self.block_tokens
        # Whole chunks whose last token lies in a block the row lists (tokens past them are unknown).
        n_units = np.minimum(self.lengths // chunk, self._counts * bt // chunk)
        req = np.repeat(np.arange(len(n_units), dtype=np.int64), n_units)
        offsets = np.cumsum(n_units) - n_units
        u = np.arange(int(n_units.sum()), dtype=np.int64) - offsets[req]
        last = (u + 1) * chunk - 1
        ids = self._flat[self._starts[req] + last // bt] * bt + last % bt
        bounds = np.concatenate([offsets, [len(ids)]]).astype(np.int64)
        out = _Chunks(ids.astype(np.int64), req, bounds, n_units * chunk)
        self._chunks[chunk] = out
        return out

    def _level(
        self, chunk: int, reach: IntArray, key: tuple[int, int]
    ) -> tuple[IntArray, IntArray, IntArray]:
        """(prefix distances, request, first chunk) of the stream a level below ``reach`` sees."""
        found = self._dist.get(key)
        if found is not None:
            return found
        c = self.chunks(chunk)
        first = reach // chunk
        keep = (np.arange(len(c.ids), dtype=np.int64) - c.bounds[c.req]) >= first[c.req]
        ids, req = c.ids[keep], c.req[keep]
        out = (prefix_distances(ids, req), req, first)
        self._dist[key] = out
        return out

    def _served(self, chunk: int, reach: IntArray, key: tuple[int, int], blocks: int) -> IntArray:
        """Tokens an inclusive LRU level of ``blocks`` chunks serves below ``reach``."""
        if blocks <= 0:
            return self._zero
        dist, req, first = self._level(chunk, reach, key)
        hits = dist <= min(blocks, len(dist))
        n_hit = np.bincount(req[hits], minlength=self.requests).astype(np.int64)
        whole = self.chunks(chunk).whole
        got: IntArray = np.where(
            n_hit > 0, np.maximum(0, np.minimum(whole, (first + n_hit) * chunk) - reach), 0
        )
        return got

    def offload(self, chunk: int, dram_blocks: int, disk_blocks: int, *, readmit: bool) -> SimulatedSources:
        """What a DRAM tier of ``dram_blocks`` chunks and a disk tier of ``disk_blocks`` serve below
        the engine's pool."""
        key = (chunk, dram_blocks, disk_blocks, readmit or disk_blocks <= 0)
        found = self._done.get(key)
        if found is not None:
            return found
        if disk_blocks > 0 and not readmit:
            out = self._without_readmission(chunk, dram_blocks, disk_blocks)
        else:
            dram = self._served(chunk, self.engine, (chunk, -1), dram_blocks)
            disk = self._served(chunk, self.engine + dram, (chunk, dram_blocks), disk_blocks)
            out = SimulatedSources(self.engine, dram, disk)
        self._done[key] = out
        return out

    def _keys_of(self, chunk: int) -> list[list[int]]:
        found = self._keys.get(chunk)
        if found is None:
            c = self.chunks(chunk)
            flat, b = c.ids.tolist(), c.bounds.tolist()
            found = [flat[b[i] : b[i + 1]] for i in range(self.requests)]
            self._keys[chunk] = found
        return found

    def _without_readmission(self, chunk: int, dram_blocks: int, disk_blocks: int) -> SimulatedSources:
        """capacity.py's ``_without_readmission`` for two levels: the run of chunks DRAM or disk
        holds from the first, each from the higher level holding it; what the engine holds is not
        touched; a DRAM hit touches both levels, a disk hit the disk only (nothing copied up); the
        chunks past the run are stored in both."""
        keys = self._keys_of(chunk)
        l1: OrderedDict[int, None] = OrderedDict()
        l2: OrderedDict[int, None] = OrderedDict()
        dram = [0] * self.requests
        disk = [0] * self.requests
        reach_all = self.engine.tolist()
        for i, ks in enumerate(keys):
            reach = reach_all[i]
            j = 0
            for k in ks:
                if k in l1:
                    top = True
                elif k in l2:
                    top = False
                else:
                    break
                end = (j + 1) * chunk
                if end > reach:
                    got = end - max(j * chunk, reach)
                    if top:
                        dram[i] += got
                        l1.move_to_end(k)
                        if k in l2:
                            l2.move_to_end(k)
                    else:
                        disk[i] += got
                        l2.move_to_end(k)
                j += 1
            for k in ks[j:]:
                l1[k] = None
                l1.move_to_end(k)
                if len(l1) > dram_blocks:
                    l1.popitem(last=False)
                l2[k] = None
                l2.move_to_end(k)
                if len(l2) > disk_blocks:
                    l2.popitem(last=False)
        return SimulatedSources(self.engine, np.array(dram, dtype=np.int64), np.array(disk, dtype=np.int64))
