"""The cache sizes the running servers report, as a hierarchy the replay's prediction simulates.

- The engine's pool: vLLM's ``vllm:cache_config_info`` (``num_gpu_blocks`` x ``block_size``; the
  CPU backend reports its pool there too), SGLang's ``sglang:max_total_num_tokens``.
- LMCache's cache server (``GET /status``, lmcache 0.5.6): L1's ``memory_total_bytes`` and its
  eviction's ``trigger_watermark`` / ``eviction_ratio``; each L2 adapter's
  ``total_capacity_bytes`` under ``l2_eviction_controller``; ``chunk_size``.
- The disk cap kvstack enforces (the plan's disk tier) when kvstack serves the layout.

LMCache evicts in steps: once a level passes ``watermark`` of its size it drops the least recently
used ``ratio`` of its objects, so it holds between ``watermark x (1 - ratio)`` and ``watermark`` of
its size; the simulation gives it the middle of that range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvstack.bench.replay import results
from kvstack.clients.lmcache_status import Eviction, LMCacheStatus
from kvstack.clients.metrics import SGLANG_MAX_TOTAL_TOKENS, VLLM_CACHE_CONFIG_INFO, MetricsSnapshot

# LMCache 0.5.6's server loads an L2 hit into L1 as a temporary object and frees it once read
# (storage_controllers/prefetch_policy.py, DefaultPrefetchPolicy.plan_l1_retention: "Retain
# nothing"), so what disk serves is not in DRAM afterwards. Measured: with L1 at 64 MiB a replay
# simulated with re-admission was off by 12 points on DRAM (31.5% vs 19.4% measured), without it
# by 1.6 (README, "bench --trace").
LMCACHE_READMIT_NOTE = (
    "LMCache keeps in L1 nothing it reads back from L2 (its prefetch policy retains nothing): "
    "simulated without re-admission"
)


@dataclass(frozen=True)
class Level:
    """One cache level as simulated: capacity in its own blocks of ``unit_tokens``."""

    tier: str  # engine_cache, dram, disk, remote (clients/token_sources.py names)
    unit_tokens: int
    nominal_blocks: int  # what the server reports
    blocks: int  # what the simulation uses (LMCache's eviction steps taken into account)
    source: str

    def document(self) -> results.Level:
        return results.Level(
            tier=self.tier,
            unit_tokens=self.unit_tokens,
            nominal_blocks=self.nominal_blocks,
            blocks=self.blocks,
            tokens=self.blocks * self.unit_tokens,
            source=self.source,
        )


@dataclass(frozen=True)
class Hierarchy:
    levels: list[Level] = field(default_factory=list)
    inclusive: bool = True
    notes: list[str] = field(default_factory=list)
    readmit: bool = True  # a block served from below is copied back into the levels above

    def document(self) -> results.Hierarchy:
        return results.Hierarchy(
            inclusive=self.inclusive,
            readmit=self.readmit,
            levels=[lv.document() for lv in self.levels],
            notes=self.notes,
        )


def _int(labels: dict[str, str], key: str) -> int | None:
    raw = labels.get(key, "")
    return int(raw) if raw.isdigit() else None


def engine_level(snap: MetricsSnapshot) -> Level | None:
    for labels in snap.label_sets(VLLM_CACHE_CONFIG_INFO):
        blocks, size = _int(labels, "num_gpu_blocks"), _int(labels, "block_size")
        if blocks and size:
            return Level(
                "engine_cache", size, blocks, blocks, f"{VLLM_CACHE_CONFIG_INFO} num_gpu_blocks x block_size"
            )
    tokens = snap.get(SGLANG_MAX_TOTAL_TOKENS)
    if tokens:
        return Level("engine_cache", 1, int(tokens), int(tokens), SGLANG_MAX_TOTAL_TOKENS)
    return None


def _effective(blocks: int, watermark: float, ratio: float) -> int:
    return max(1, int(blocks * watermark * (1 - ratio / 2)))


def lmcache_levels(
    status: LMCacheStatus, bytes_per_token: int, adapters: dict[str, str], disk_cap_bytes: int | None
) -> tuple[list[Level], list[str]]:
    """L1 and the L2 adapters (``adapters``: tier -> adapter type) of one cache server."""
    chunk = status.chunk_size or 256
    chunk_bytes = chunk * bytes_per_token
    levels: list[Level] = []
    notes: list[str] = []
    if status.l1_total_bytes > 0:
        w, r = status.l1_eviction.watermark, status.l1_eviction.ratio
        nominal = status.l1_total_bytes // chunk_bytes
        levels.append(
            Level("dram", chunk, nominal, _effective(nominal, w, r), "LMCache /status L1 memory_total_bytes")
        )
        notes.append(
            f"LMCache L1 evicts {r:.0%} of its objects past {w:.0%}: simulated at {w * (1 - r / 2):.0%}"
        )
    for tier in ("disk", "remote"):
        if tier not in adapters:
            continue
        cap = disk_cap_bytes if tier == "disk" and disk_cap_bytes else None
        source = "kvstack's disk cap (the plan's disk tier)"
        declared = status.first_capacity() if tier == "disk" else None
        if cap is None:
            if declared is None:
                levels.append(Level(tier, chunk, 1 << 40, 1 << 40, "no capacity declared: unbounded"))
                continue
            cap, source = declared.capacity_bytes, "LMCache /status L2 total_capacity_bytes"
        nominal = cap // chunk_bytes
        evict = declared.eviction if declared is not None else Eviction()
        levels.append(Level(tier, chunk, nominal, _effective(nominal, evict.watermark, evict.ratio), source))
    return levels, notes


def lmcache_hierarchy(engine: Level | None, lm: list[Level], notes: list[str]) -> Hierarchy:
    """The engine's pool above LMCache's levels: inclusive (L2 written through from L1), and with
    an L2 below L1, without re-admission (``LMCACHE_READMIT_NOTE``)."""
    levels = ([engine] if engine is not None else []) + lm
    readmit = engine is None or len(lm) < 2
    return Hierarchy(
        levels=levels,
        inclusive=True,
        notes=notes + ([] if readmit else [LMCACHE_READMIT_NOTE]),
        readmit=readmit,
    )
