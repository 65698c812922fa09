"""Where prompt tokens came from, by tier: recomputed, the engine's own cache, DRAM, disk, remote.

One function for ``bench`` (per layout, over a run) and ``top`` (per server, over a window), so
both say the same thing from the same counters. The input is a counter-delta accessor, so the
numbers may come from any two scrapes.

The engine's own counters give the split between recomputed, engine-cache and offloaded tokens
(vLLM ``prompt_tokens_by_source``, SGLang ``prefill_effective_tokens``); which tier an offloaded
token came from is then read, best first, from vLLM's ``prompt_tokens_cached_by_source`` (native
offload: host, disk) or from LMCache's cache server: its L1 (DRAM) and L2 hit tokens, and the L2
part split over its adapters (``fs`` = disk, ``resp`` = remote) by their completed loads. LMCache
counts lookups, which the scheduler may repeat for a waiting request, so its figures give the
proportions and the engine's external-token count the total. Offloaded tokens no counter places
are reported as ``offload``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvstack.clients import metrics as m

RECOMPUTED = "recomputed"
ENGINE_CACHE = "engine_cache"
DRAM = "dram"
DISK = "disk"
REMOTE = "remote"
OFFLOAD = "offload"  # offloaded, but no counter says which tier
SOURCES: tuple[str, ...] = (RECOMPUTED, ENGINE_CACHE, DRAM, DISK, REMOTE, OFFLOAD)
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


def _split(total: float, weights: dict[str, float]) -> dict[str, float]:
    """``total`` shared out in proportion to ``weights`` (all of it to OFFLOAD when they are zero)."""
    weight = sum(w for w in weights.values() if w > 0)
    if weight <= 0:
        return {OFFLOAD: total}
    return {k: total * w / weight for k, w in weights.items() if w > 0}


def _add(out: dict[str, float], part: dict[str, float]) -> None:
    for key, value in part.items():
        out[key] = out.get(key, 0.0) + value


def offload_weights(delta: Delta, label_values: LabelValues) -> dict[str, float]:
    """Per tier, the share of LMCache cache-server hits it served (empty: no such counters moved)."""
    l1 = delta(m.LMCACHE_MP_L1_HIT_TOKENS) or 0.0
    l2 = delta(m.LMCACHE_MP_L2_HIT_TOKENS) or 0.0
    weights: dict[str, float] = {}
    if l1 > 0:
        weights[DRAM] = l1
    if l2 > 0:
        loads = {
            name: delta(m.LMCACHE_MP_L2_LOADS, l2_name=name) or 0.0
            for name in label_values(m.LMCACHE_MP_L2_LOADS, "l2_name")
        }
        _add(weights, _split(l2, {adapter_tier(k): v for k, v in loads.items()}))
    return weights


def prompt_tokens_by_source(delta: Delta, label_values: LabelValues) -> dict[str, float]:
    """Prompt tokens per source (keys from SOURCES, zero ones left out); empty when nothing is known."""
    out: dict[str, float] = {}
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
            cached = {
                _VLLM_CACHED_TIERS[s]: delta(m.VLLM_CACHED_BY_SOURCE, source=s) or 0.0
                for s in label_values(m.VLLM_CACHED_BY_SOURCE, "source")
                if s in _VLLM_CACHED_TIERS
            }
            weights = offload_weights(delta, label_values) or cached
            _add(out, _split(external, weights))
    elif label_values(m.SGLANG_EFFECTIVE_TOKENS, "mode"):
        for mode in label_values(m.SGLANG_EFFECTIVE_TOKENS, "mode"):
            tokens = delta(m.SGLANG_EFFECTIVE_TOKENS, mode=mode) or 0.0
            _add(out, {_SGLANG_MODES.get(mode, OFFLOAD): tokens})
    return {k: out[k] for k in SOURCES if k in out and (out[k] > 0 or k in (RECOMPUTED, ENGINE_CACHE))}


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


def by_source(before: m.MetricsSnapshot, after: m.MetricsSnapshot) -> dict[str, float]:
    return prompt_tokens_by_source(*snapshot_accessors(before, after))
