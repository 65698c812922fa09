"""Prometheus ``/metrics`` of vLLM, LMCache and SGLang: scrape, parse, compare.

Parsed with prometheus_client's own text parser. Counters are compared as before/after deltas
because the engines never reset them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kvstack.clients.client import auth_headers
from kvstack.connectors.engines import ENGINE_SPECS, SGLANG, VLLM

# vLLM V1 (vllm/v1/metrics/loggers.py, PrometheusStatLogger; labels model_name, engine).
# Counters are declared without ``_total``; the exposition adds it.
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries"
VLLM_PREFIX_HITS = "vllm:prefix_cache_hits"
VLLM_EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries"
VLLM_EXTERNAL_HITS = "vllm:external_prefix_cache_hits"  # hits served by a KV connector
VLLM_PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source"  # source=local_compute|local_cache_hit|...
# source=device|host|p2p|disk|external_unspecified (vllm/v1/metrics/cache_hit_source.py)
VLLM_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source"
VLLM_CACHE_CONFIG_INFO = "vllm:cache_config_info"  # gauge = 1, labels = CacheConfig fields
VLLM_OFFLOAD_PREFIX = "vllm:kv_offload_"  # native offload; names changed across versions
# What it serves (connectors/engines.py names them: kvstack top reads them per engine).
VLLM_PROMPT_TOKENS = VLLM.metrics.prompt_tokens  # prefill tokens, counter
VLLM_TTFT = VLLM.metrics.ttft  # histogram
VLLM_RUNNING = VLLM.metrics.running  # gauge
VLLM_WAITING = VLLM.metrics.waiting  # gauge
VLLM_KV_USAGE = VLLM.metrics.kv_usage  # gauge, 0..1
# LMCache in-process (lmcache/observability.py; labels model_name, worker_id, role, served_model_name).
LMCACHE_HIT_TOKENS = "lmcache:num_hit_tokens"
LMCACHE_STORED_TOKENS = "lmcache:num_stored_tokens"
LMCACHE_LOCAL_STORAGE_USAGE = "lmcache:local_storage_usage"  # disk bytes
LMCACHE_REMOTE_READS = "lmcache:num_remote_read_requests"
# LMCache MP server (its --http-port /metrics).
LMCACHE_MP_L1_HIT_TOKENS = "lmcache_mp_lookup_hit_l1_tokens"
LMCACHE_MP_L2_HIT_TOKENS = "lmcache_mp_lookup_hit_l2_tokens"
# Per L2 adapter (label l2_name: the adapter's type, "fs", "resp", ...).
LMCACHE_MP_L2_LOADS = "lmcache_mp_l2_load_completed_requests"
LMCACHE_MP_L2_STORES = "lmcache_mp_l2_store_completed_requests"
LMCACHE_MP_L2_USAGE = "lmcache_mp_l2_usage_bytes"
LMCACHE_MP_L2_EVICTED = "lmcache_mp_l2_evicted_objects_chunks"
LMCACHE_MP_REQUESTED_TOKENS = "lmcache_mp_lookup_requested_tokens"  # lookups (l1 + l2 + misses)
LMCACHE_MP_LOOKUPS = "lmcache_mp_lookups_requests"  # completed lookups (OTel unit "requests")
LMCACHE_MP_L1_USAGE = "lmcache_mp_l1_memory_usage_bytes"  # gauge, label backend
LMCACHE_MP_L1_USAGE_RATIO = "lmcache_mp_l1_usage_ratio"  # gauge, 0..1 of --l1-size-gb
LMCACHE_MP_L1_EVICTED = "lmcache_mp_l1_evicted_chunks"
# SGLang (python/sglang/srt/metrics/collector.py): mode=input|device_hit|host_hit|storage_hit.
SGLANG_EFFECTIVE_TOKENS = "sglang:prefill_effective_tokens"
SGLANG_CACHE_HIT_RATE = "sglang:cache_hit_rate"
SGLANG_MAX_TOTAL_TOKENS = "sglang:max_total_num_tokens"
SGLANG_PROMPT_TOKENS = SGLANG.metrics.prompt_tokens
SGLANG_TTFT = SGLANG.metrics.ttft
SGLANG_RUNNING = SGLANG.metrics.running
SGLANG_WAITING = SGLANG.metrics.waiting
SGLANG_TOKEN_USAGE = SGLANG.metrics.kv_usage  # gauge, 0..1 of the KV pool

Labels = dict[str, str]


@dataclass(frozen=True)
class Sample:
    name: str  # the sample name as exposed (counters end in _total)
    labels: Labels
    value: float


@dataclass
class MetricsSnapshot:
    """Samples of one or more scrapes; ``value`` sums the samples that match."""

    samples: list[Sample] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # URLs (or "text") this came from
    errors: list[str] = field(default_factory=list)  # scrapes that failed

    def _names(self, name: str) -> tuple[str, ...]:
        # The parser exposes a counter family "x" as sample "x_total" (and "x_created");
        # an untyped family keeps whatever name was written. Accept either spelling.
        base = name.removesuffix("_total")
        return (base, base + "_total")

    def matching(self, name: str, **labels: str) -> list[Sample]:
        names = self._names(name)
        return [
            s
            for s in self.samples
            if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def has(self, name: str, **labels: str) -> bool:
        return bool(self.matching(name, **labels))

    def get(self, name: str, **labels: str) -> float | None:
        """Sum of matching samples, or None when the server exposes no such sample."""
        found = self.matching(name, **labels)
        return sum(s.value for s in found) if found else None

    def value(self, name: str, **labels: str) -> float:
        """Sum of matching samples; 0.0 when there is none (use ``has`` to tell them apart)."""
        return self.get(name, **labels) or 0.0

    def names_with_prefix(self, prefix: str) -> list[str]:
        return sorted({s.name for s in self.samples if s.name.startswith(prefix)})

    def label_sets(self, name: str) -> list[Labels]:
        return [s.labels for s in self.matching(name)]

    def merged(self, other: MetricsSnapshot) -> MetricsSnapshot:
        return MetricsSnapshot(
            [*self.samples, *other.samples], [*self.sources, *other.sources], [*self.errors, *other.errors]
        )

    @property
    def engine(self) -> str | None:
        """``vllm`` or ``sglang`` judged by the metric namespace, None when neither shows."""
        for spec in ENGINE_SPECS.values():
            if any(s.name.startswith(spec.metrics.prefix) for s in self.samples):
                return spec.name
        return None


def parse_metrics(text: str, source: str = "text") -> MetricsSnapshot:
    """Parse Prometheus text exposition; raises ValueError on text the parser rejects."""
    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):  # creation timestamps, not values
                continue
            samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    return MetricsSnapshot(samples, [source])


def delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def series_key(sample: Sample, without: str | None = None) -> tuple[str, tuple[tuple[str, str], ...]]:
    """One time series: the family name and its whole label set (less ``without``)."""
    labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != without))
    return sample.name.removesuffix("_total"), labels


def increase(before: MetricsSnapshot, after: MetricsSnapshot, name: str, **labels: str) -> float:
    """A counter's increase as Prometheus' ``increase()`` takes it: per series (its whole label
    set), a series that went down was reset and counts from zero, then the series are summed.

    Summing first would hide one engine's (or one cache server's) reset behind another's growth.
    """
    previous: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
    for s in before.matching(name, **labels):
        previous.setdefault(series_key(s), []).append(s.value)
    total = 0.0
    for s in after.matching(name, **labels):
        olds = previous.get(series_key(s))
        old = olds.pop(0) if olds else 0.0
        total += s.value - old if s.value >= old else s.value
    return total


def _parse_or_error(url: str, status: int, text: str) -> MetricsSnapshot:
    if status != 200:
        return MetricsSnapshot([], [url], [f"{url}: HTTP {status}"])
    try:
        return parse_metrics(text, url)
    except ValueError as exc:
        return MetricsSnapshot([], [url], [f"{url}: unparsable metrics ({exc})"])


async def scrape(
    client: httpx.AsyncClient, urls: Sequence[str], api_key: str | None = None, timeout_s: float = 10.0
) -> MetricsSnapshot:
    """Scrape every URL and merge; a failing URL is recorded in ``errors``, never raised."""
    snap = MetricsSnapshot()
    for url in urls:
        try:
            resp = await client.get(url, headers=auth_headers(api_key), timeout=timeout_s)
            part = _parse_or_error(url, resp.status_code, resp.text)
        except httpx.HTTPError as exc:
            part = MetricsSnapshot([], [url], [f"{url}: {type(exc).__name__}: {exc}"])
        snap = snap.merged(part)
    return snap


def scrape_sync(urls: Iterable[str], api_key: str | None = None, timeout_s: float = 10.0) -> MetricsSnapshot:
    snap = MetricsSnapshot()
    with httpx.Client(trust_env=False) as client:
        for url in urls:
            try:
                resp = client.get(url, headers=auth_headers(api_key), timeout=timeout_s)
                part = _parse_or_error(url, resp.status_code, resp.text)
            except httpx.HTTPError as exc:
                part = MetricsSnapshot([], [url], [f"{url}: {type(exc).__name__}: {exc}"])
            snap = snap.merged(part)
    return snap
