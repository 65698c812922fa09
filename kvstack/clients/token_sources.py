"""Where prompt tokens came from, by tier: recomputed, the engine's own cache, DRAM, disk, remote.

The one rule for ``bench`` (per request, per layout) and ``top`` (per server, over a window), so
each says the same thing from the same counters. The input is a counter-delta accessor, so the
numbers may come from any two scrapes.

The engine's own counters give the split between recomputed, engine-cache and offloaded tokens
(vLLM ``prompt_tokens_by_source``, SGLang ``prefill_effective_tokens``). Each offload tier's share
is then read from that tier's own counter, best first:

- vLLM's ``prompt_tokens_cached_by_source`` (native offload): host = DRAM, disk, p2p = remote.
- LMCache's cache server. Its lookup covers the whole prompt: L1 (DRAM) is credited with the
  prefix its own chunks serve, L2 with however far it extends that prefix
  (lmcache/v1/multiprocess/modules/lookup.py), so L1's count includes the prefix the engine held
  itself. The L2 tiers are ``lookup_hit_l2`` less any part of it the engine held, split over the
  L2 adapters by their completed loads (``fs`` = disk, ``resp`` = remote); DRAM is ``lookup_hit_l1``
  less the engine's own hits. Only a window of one request can take the engine's part off L1's
  count (it is per request); over several requests DRAM is what the L2 tiers leave of the offloaded
  tokens, and ``derived`` says so.

What no counter places is ``offload`` (tier unknown), never silently another tier's; where the
tiers' own counters place more than the engine loaded, the sources add up to more than the prompt,
so a split that does not hold shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvstack.clients import metrics as m

RECOMPUTED = "recomputed"
ENGINE_CACHE = "engine_cache"
DRAM = "dram"
DISK = "disk"
REMOTE = "remote"
OFFLOAD = "offload"  # offloaded, but no counter says which tier
SOURCES: tuple[str, ...] = (RECOMPUTED, ENGINE_CACHE, DRAM, DISK, REMOTE, OFFLOAD)
# The cache's sources from the nearest down, recomputation last: how a prompt's tokens stack up
# (plots, predictions).
CACHE_ORDER: tuple[str, ...] = (ENGINE_CACHE, DRAM, DISK, REMOTE, OFFLOAD, RECOMPUTED)
LABELS: dict[str, str] = {
    RECOMPUTED: "recomputed",
    ENGINE_CACHE: "engine cache",
    DRAM: "DRAM tier",
    DISK: "disk tier",
    REMOTE: "remote tier",
    OFFLOAD: "offload (tier unknown)",
}
# LMCache's L2 adapter types (its metrics' l2_name) and the tier each one is.
ADAPTER_TIERS: dict[str, str] = {"fs": DISK, "fs_native": DISK, "resp": REMOTE, "redis": REMOTE}
# vllm/v1/metrics/cache_hit_source.py: which tier supplied a cached token.
_VLLM_CACHED_TIERS: dict[str, str] = {"host": DRAM, "disk": DISK, "p2p": REMOTE}
# SGLang HiCache (python/sglang/srt/metrics/collector.py): host = DRAM, storage = its L3 backend.
_SGLANG_MODES: dict[str, str] = {
    "input": RECOMPUTED,
    "device_hit": ENGINE_CACHE,
    "host_hit": DRAM,
    "storage_hit": DISK,
}

# delta(name, **labels): the counter's change, None where neither scrape exposes it.
Delta = Callable[..., float | None]
# label_values(name, label): the values the label takes in either scrape.
LabelValues = Callable[[str, str], Sequence[str]]


def adapter_tier(l2_name: str) -> str:
    return ADAPTER_TIERS.get(l2_name, OFFLOAD)


@dataclass(frozen=True)
class MeasuredSources:
    """Prompt tokens per source (keys from SOURCES) as the servers' counters measured them and, for
    each figure not read off its own counter, how it was had (results.json's ``derived``)."""

    tokens: dict[str, float] = field(default_factory=dict)
    derived: dict[str, str] = field(default_factory=dict)


DERIVED_DRAM = (
    "the offloaded tokens less the L2 tiers': LMCache's L1 count includes the prefix the engine held "
    "itself, which only a window of one request can take off"
)
DERIVED_ADAPTERS = "LMCache's L2 hits split over its L2 adapters by their completed loads"
DERIVED_UNPLACED = "offloaded tokens that no tier's counter placed"


def _split(total: float, weights: dict[str, float]) -> dict[str, float]:
    """``total`` shared out in proportion to ``weights`` (all of it to OFFLOAD when they are zero)."""
    weight = sum(w for w in weights.values() if w > 0)
    if weight <= 0:
        return {OFFLOAD: total}
    return {k: total * w / weight for k, w in weights.items() if w > 0}


def _add(out: dict[str, float], part: dict[str, float]) -> None:
    for key, value in part.items():
        out[key] = out.get(key, 0.0) + value


def _lmcache(
    delta: Delta, label_values: LabelValues, external: float, engine: float, one_request: bool
) -> MeasuredSources | None:
    """The offloaded tokens by LMCache tier (see the module doc); None where its counters did not move."""
    l1 = delta(m.LMCACHE_MP_L1_HIT_TOKENS) or 0.0
    l2 = delta(m.LMCACHE_MP_L2_HIT_TOKENS) or 0.0
    if l1 <= 0 and l2 <= 0:
        return None
    out: dict[str, float] = {}
    derived: dict[str, str] = {}
    if one_request:
        # The lookup's prefix: L1 serves [0, l1), L2 [l1, l1 + l2), the engine held [0, engine).
        below = max(0.0, l2 - max(0.0, engine - l1))
        dram = max(0.0, l1 - engine)
    else:
        below = min(external, l2)
        dram = external - below
        derived[DRAM] = DERIVED_DRAM
    if below > 0:
        loads = {
            name: delta(m.LMCACHE_MP_L2_LOADS, l2_name=name) or 0.0
            for name in label_values(m.LMCACHE_MP_L2_LOADS, "l2_name")
        }
        weights: dict[str, float] = {}
        _add(weights, {adapter_tier(k): v for k, v in loads.items() if v > 0})
        part = _split(below, weights)
        _add(out, part)
        if len(part) > 1:
            derived.update(dict.fromkeys(part, DERIVED_ADAPTERS))
    if dram > 0:
        out[DRAM] = out.get(DRAM, 0.0) + dram
    unplaced = external - sum(out.values())
    if unplaced > 0.5:  # tokens are whole: a fraction is the adapters' proportional split
        out[OFFLOAD] = out.get(OFFLOAD, 0.0) + unplaced
        derived[OFFLOAD] = DERIVED_UNPLACED
    return MeasuredSources(out, derived)


def _vllm_cached(delta: Delta, label_values: LabelValues, external: float) -> MeasuredSources:
    """Native offload: vLLM counts each tier's tokens itself; the rest is offload (tier unknown)."""
    out: dict[str, float] = {}
    for s in label_values(m.VLLM_CACHED_BY_SOURCE, "source"):
        if s in _VLLM_CACHED_TIERS:
            _add(out, {_VLLM_CACHED_TIERS[s]: delta(m.VLLM_CACHED_BY_SOURCE, source=s) or 0.0})
    unplaced = external - sum(out.values())
    derived: dict[str, str] = {}
    if unplaced > 0.5:
        out[OFFLOAD] = out.get(OFFLOAD, 0.0) + unplaced
        derived[OFFLOAD] = DERIVED_UNPLACED
    return MeasuredSources(out, derived)


def split(delta: Delta, label_values: LabelValues, one_request: bool = False) -> MeasuredSources:
    """Prompt tokens per source (zero ones left out) over the window the accessors span; empty
    when nothing is known. ``one_request``: the window holds exactly one request (bench --trace
    with one in flight), so LMCache's L1 count can be cleared of the engine's own prefix."""
    out: dict[str, float] = {}
    derived: dict[str, str] = {}
    if label_values(m.VLLM_PROMPT_TOKENS_BY_SOURCE, "source"):
        src = m.VLLM_PROMPT_TOKENS_BY_SOURCE
        out[RECOMPUTED] = delta(src, source="local_compute") or 0.0
        out[ENGINE_CACHE] = delta(src, source="local_cache_hit") or 0.0
        external = sum(
            delta(src, source=s) or 0.0
            for s in label_values(src, "source")
            if s not in ("local_compute", "local_cache_hit")
        )
        if external > 0:
            tiers = _lmcache(delta, label_values, external, out[ENGINE_CACHE], one_request)
            if tiers is None:
                tiers = _vllm_cached(delta, label_values, external)
            _add(out, tiers.tokens)
            derived.update(tiers.derived)
    elif label_values(m.SGLANG_EFFECTIVE_TOKENS, "mode"):
        for mode in label_values(m.SGLANG_EFFECTIVE_TOKENS, "mode"):
            tokens = delta(m.SGLANG_EFFECTIVE_TOKENS, mode=mode) or 0.0
            _add(out, {_SGLANG_MODES.get(mode, OFFLOAD): tokens})
    kept = {k: out[k] for k in SOURCES if k in out and (out[k] > 0 or k in (RECOMPUTED, ENGINE_CACHE))}
    return MeasuredSources(kept, {k: v for k, v in derived.items() if k in kept})


def prompt_tokens_by_source(
    delta: Delta, label_values: LabelValues, one_request: bool = False
) -> dict[str, float]:
    """Prompt tokens per source (keys from SOURCES, zero ones left out); empty when nothing is known."""
    return split(delta, label_values, one_request).tokens


def snapshot_accessors(before: m.MetricsSnapshot, after: m.MetricsSnapshot) -> tuple[Delta, LabelValues]:
    """The two accessors over a pair of scrapes (a series that was reset reads as its new value)."""

    def delta(name: str, **labels: str) -> float | None:
        if not (after.has(name, **labels) or before.has(name, **labels)):
            return None
        return m.increase(before, after, name, **labels)

    def label_values(name: str, label: str) -> list[str]:
        seen = {ls.get(label) for ls in [*before.label_sets(name), *after.label_sets(name)]}
        return sorted(v for v in seen if v)

    return delta, label_values


def sources(
    before: m.MetricsSnapshot, after: m.MetricsSnapshot, one_request: bool = False
) -> MeasuredSources:
    return split(*snapshot_accessors(before, after), one_request=one_request)


def by_source(
    before: m.MetricsSnapshot, after: m.MetricsSnapshot, one_request: bool = False
) -> dict[str, float]:
    return sources(before, after, one_request).tokens
