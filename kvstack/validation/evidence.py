"""What the engines' counters say about a request: prefix-cache hits, connector (tier) hits.

Pure functions over two MetricsSnapshots taken around the request(s). Several counters often
count the same tokens (vLLM's external hits and LMCache's hit tokens): the evidence lists each
one that moved, the token figure is the largest of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kvstack.clients import metrics as m
from kvstack.clients.metrics import MetricsSnapshot
from kvstack.connectors.engines import ENGINE_SPECS


@dataclass
class Hits:
    tokens: float | None  # None: the server exposes none of the counters
    evidence: list[str] = field(default_factory=list)
    by_tier: dict[str, float] = field(default_factory=dict)  # where the engine says which tier served
    indicated: bool = False  # a ratio (not a count) shows a hit

    @property
    def rose(self) -> bool:
        return bool(self.tokens is not None and self.tokens > 0) or self.indicated


def _fmt(name: str, labels: dict[str, str], value: float) -> str:
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    shown = f"{name}{{{lab}}}" if lab else name
    return f"{shown} {value:+.0f}"


def _collect(
    before: MetricsSnapshot, after: MetricsSnapshot, counters: list[tuple[str, dict[str, str]]]
) -> Hits:
    values: list[float] = []
    evidence: list[str] = []
    for name, labels in counters:
        if not after.has(name, **labels):
            continue
        d = m.delta(before, after, name, **labels)
        values.append(d)
        evidence.append(_fmt(name, labels, d))
    return Hits(max(values) if values else None, evidence)


def _one_counter(engine: str) -> bool:
    """Whether ``engine`` counts every hit on one counter by mode (SGLang's prefill_effective_tokens:
    device_hit, host_hit, storage_hit) rather than its own hits apart from the connector's (vLLM's,
    the counters read for an engine kvstack has no spec for)."""
    spec = ENGINE_SPECS.get(engine)
    return spec is not None and not spec.separate_external_hits


def prefix_hits(engine: str, before: MetricsSnapshot, after: MetricsSnapshot) -> Hits:
    """Tokens the engine's own (GPU) prefix cache served."""
    if _one_counter(engine):
        hits = _collect(before, after, [(m.SGLANG_EFFECTIVE_TOKENS, {"mode": "device_hit"})])
        rate = after.get(m.SGLANG_CACHE_HIT_RATE)
        if rate is not None:
            hits.evidence.append(f"{m.SGLANG_CACHE_HIT_RATE} {rate:.2f}")
            hits.indicated = hits.tokens is None and rate > 0
        return hits
    return _collect(
        before,
        after,
        [(m.VLLM_PREFIX_HITS, {}), (m.VLLM_PROMPT_TOKENS_BY_SOURCE, {"source": "local_cache_hit"})],
    )


def connector_hits(engine: str, before: MetricsSnapshot, after: MetricsSnapshot) -> Hits:
    """Tokens an offload tier (KV connector, HiCache) served, with the tier when it is named."""
    if _one_counter(engine):
        hits = _collect(
            before,
            after,
            [
                (m.SGLANG_EFFECTIVE_TOKENS, {"mode": "host_hit"}),
                (m.SGLANG_EFFECTIVE_TOKENS, {"mode": "storage_hit"}),
            ],
        )
        host = m.delta(before, after, m.SGLANG_EFFECTIVE_TOKENS, mode="host_hit")
        storage = m.delta(before, after, m.SGLANG_EFFECTIVE_TOKENS, mode="storage_hit")
        if hits.tokens is not None:
            hits.tokens = host + storage
            hits.by_tier = {"cpu": host, "disk": storage}
        return hits
    hits = _collect(
        before,
        after,
        [
            (m.VLLM_EXTERNAL_HITS, {}),
            (m.VLLM_PROMPT_TOKENS_BY_SOURCE, {"source": "external_kv_transfer"}),
            (m.LMCACHE_HIT_TOKENS, {}),
            (m.LMCACHE_MP_L1_HIT_TOKENS, {}),
            (m.LMCACHE_MP_L2_HIT_TOKENS, {}),
        ],
    )
    # vllm/v1/metrics/cache_hit_source.py: device|host|p2p|disk|external_unspecified
    for source, tier in (("host", "cpu"), ("disk", "disk"), ("p2p", "remote"), ("external_unspecified", "")):
        if after.has(m.VLLM_CACHED_BY_SOURCE, source=source):
            d = m.delta(before, after, m.VLLM_CACHED_BY_SOURCE, source=source)
            if d:
                hits.evidence.append(_fmt(m.VLLM_CACHED_BY_SOURCE, {"source": source}, d))
                if tier:
                    hits.by_tier[tier] = hits.by_tier.get(tier, 0.0) + d
    for name in after.names_with_prefix(m.VLLM_OFFLOAD_PREFIX):
        if name.endswith("_total"):  # native offload counters: names vary by version, show them
            d = m.delta(before, after, name)
            if d:
                hits.evidence.append(_fmt(name, {}, d))
    if after.has(m.LMCACHE_REMOTE_READS):
        d = m.delta(before, after, m.LMCACHE_REMOTE_READS)
        hits.evidence.append(_fmt(m.LMCACHE_REMOTE_READS, {}, d))
        hits.by_tier["remote"] = d
    return hits


def cache_server_tier_hits(
    kind: str, adapter: str | None, before: MetricsSnapshot, after: MetricsSnapshot
) -> Hits:
    """Tokens one tier of LMCache's cache server served: L1 hits for the DRAM tier; for an L2 tier
    (disk, remote), L2 hits AND loads completed by that tier's adapter (another adapter holding
    the same chunks would serve them otherwise)."""
    engine = _collect(before, after, [(m.VLLM_EXTERNAL_HITS, {})])
    if kind == "cpu":
        hits = _collect(before, after, [(m.LMCACHE_MP_L1_HIT_TOKENS, {})])
    else:
        hits = _collect(before, after, [(m.LMCACHE_MP_L2_HIT_TOKENS, {})])
        if adapter is not None and hits.tokens:
            loads = m.delta(before, after, m.LMCACHE_MP_L2_LOADS, l2_name=adapter)
            hits.evidence.append(_fmt(m.LMCACHE_MP_L2_LOADS, {"l2_name": adapter}, loads))
            if loads <= 0:
                hits.tokens = 0.0  # the L2 hits came from another adapter, not this tier's
    hits.evidence += engine.evidence
    if hits.tokens:
        hits.by_tier[kind] = hits.tokens
    return hits


def l2_stores(adapter: str, before: MetricsSnapshot, after: MetricsSnapshot) -> float:
    return m.delta(before, after, m.LMCACHE_MP_L2_STORES, l2_name=adapter)


def gpu_capacity_tokens(snap: MetricsSnapshot) -> int | None:
    """Tokens the GPU KV pool holds, from vllm:cache_config_info or sglang:max_total_num_tokens."""
    for labels in snap.label_sets(m.VLLM_CACHE_CONFIG_INFO):
        try:
            return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
        except (KeyError, ValueError):
            continue
    total = snap.get(m.SGLANG_MAX_TOTAL_TOKENS)
    return int(total) if total else None


def gpu_block_tokens(snap: MetricsSnapshot) -> int | None:
    """Tokens per block of the engine's own prefix cache (vLLM's vllm:cache_config_info)."""
    for labels in snap.label_sets(m.VLLM_CACHE_CONFIG_INFO):
        try:
            return int(labels["block_size"])
        except (KeyError, ValueError):
            continue
    return None


def lmcache_disk_bytes(snap: MetricsSnapshot) -> float | None:
    return snap.get(m.LMCACHE_LOCAL_STORAGE_USAGE)


def dir_state(path: str | None) -> tuple[int, int, float] | None:
    """(bytes, files, newest mtime) under ``path``; bounded so a huge cache stays quick."""
    if not path or not os.path.isdir(path):
        return None
    total = files = 0
    newest = 0.0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
            files += 1
            newest = max(newest, st.st_mtime)
            if files >= 200_000:
                return total, files, newest
    return total, files, newest


def new_files(path: str, before: set[str]) -> list[str]:
    """Files under ``path`` that are not in ``before`` (relative paths)."""
    return sorted(file_set(path) - before)


def file_set(path: str | None) -> set[str]:
    if not path or not os.path.isdir(path):
        return set()
    return {
        os.path.relpath(os.path.join(root, name), path)
        for root, _dirs, names in os.walk(path)
        for name in names
    }
