"""Bench arithmetic: percentiles, throughput, and cache hit rates from server counter deltas."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypedDict

from kvstack.bench.schema import CacheStats, Distribution, RequestRow, Summary
from kvstack.clients import metrics as m
from kvstack.clients import token_sources
from kvstack.clients.metrics import MetricsSnapshot
from kvstack.clients.streaming import RequestResult

# LMCache in-process counters (lmcache/observability.py, LMCStatsMonitor's prometheus logger).
LMCACHE_REQUESTED_TOKENS = "lmcache:num_requested_tokens"
# LMCache MP server, OTel counters exported as Prometheus
# (lmcache/v1/mp_observability/subscribers/metrics/lookup.py: l1 + l2 == hit).
LMCACHE_MP_REQUESTED_TOKENS = m.LMCACHE_MP_REQUESTED_TOKENS
LMCACHE_MP_HIT_TOKENS = "lmcache_mp_lookup_hit_tokens"
VLLM_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
VLLM_CACHED_SOURCES = ("device", "host", "disk", "p2p", "external_unspecified")
SGLANG_MODES = ("input", "device_hit", "host_hit", "storage_hit")  # input = computed tokens


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, not {q}")
    s = sorted(values)
    rank = (len(s) - 1) * q / 100
    lo = math.floor(rank)
    hi = math.ceil(rank)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def distribution(values: Iterable[float | None]) -> Distribution | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    return Distribution(
        n=len(vals),
        mean=math.fsum(vals) / len(vals),
        p50=percentile(vals, 50),
        p90=percentile(vals, 90),
        p99=percentile(vals, 99),
        min=vals[0],
        max=vals[-1],
    )


def _error_kind(error: str) -> str:
    """Group messages that differ only in details (ports, counts) under their first words."""
    head = error.split(":", 1)[0]
    return head if len(head) <= 60 else head[:57] + "..."


def wall_time(rows: Sequence[RequestRow]) -> float:
    """From the first request's start to the last one's end (its stream read to the end): what
    ``vllm bench serve`` takes as its benchmark duration (serve.py, benchmark: from before the first
    request is sent to after every request's stream has ended)."""
    if not rows:
        return 0.0
    start = min(r.start_s for r in rows)
    end = max(r.start_s + (r.e2e_s or 0.0) for r in rows)
    return max(0.0, end - start)


def summarize(rows: Sequence[RequestRow], wall_s: float | None = None) -> Summary:
    """Latency distributions and throughput; ``wall_s`` defaults to the rows' own span."""
    wall = wall_time(rows) if wall_s is None else wall_s
    ok = [r for r in rows if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    errors = Counter(_error_kind(r.error or "unknown") for r in rows if not r.ok)
    return Summary(
        requests=len(rows),
        ok=len(ok),
        errors=len(rows) - len(ok),
        wall_s=wall,
        requests_per_s=len(ok) / wall if wall > 0 else 0.0,
        output_tokens_per_s=out_tokens / wall if wall > 0 else 0.0,
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        expected_prefix_tokens=sum(r.expected_prefix_tokens for r in rows),
        output_tokens=out_tokens,
        ttft_s=distribution(r.ttft_s for r in ok),
        tpot_s=distribution(r.tpot_s for r in ok),
        itl_s=distribution(x for r in ok for x in r.itl_s),
        e2e_s=distribution(r.e2e_s for r in ok),
        error_kinds=dict(errors.most_common()),
    )


def tpot(last_token_s: float | None, ttft_s: float | None, output_tokens: int) -> float | None:
    """Mean time per output token after the first: from the first content event to the last one,
    over the tokens after the first. vLLM's bench definition (vllm/benchmarks/serve.py,
    calculate_metrics: ``(latency - ttft) / (output_len - 1)``, its ``latency`` ending at the last
    content event, lib/endpoint_request_func.py), not the end of the stream: the usage event and
    ``[DONE]`` that follow the last token are no decode time."""
    if last_token_s is None or ttft_s is None or output_tokens < 2:
        return None
    return (last_token_s - ttft_s) / (output_tokens - 1)


def last_token_s(res: RequestResult) -> float | None:
    """Seconds from the send to the last content event: the TTFT plus every later gap."""
    if res.ttft_s is None:
        return None
    return res.ttft_s + math.fsum(res.itl_s)


class Measured(TypedDict):
    """A RequestRow's measured fields (``measured``)."""

    ok: bool
    status: int | None
    error: str | None
    start_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_s: list[float]
    server_prompt_tokens: int | None
    output_tokens: int
    cached_tokens: int | None


def measured(res: RequestResult, started_at: float) -> Measured:
    """A RequestRow's measured fields, from one request's result (``started_at``: the layout's
    first request, on the same clock)."""
    return {
        "ok": res.ok,
        "status": res.status,
        "error": res.error,
        "start_s": max(0.0, res.start_time - started_at),
        "ttft_s": res.ttft_s,
        "tpot_s": tpot(last_token_s(res), res.ttft_s, res.output_tokens) if res.ok else None,
        "e2e_s": res.e2e_s,
        "itl_s": res.itl_s,
        "server_prompt_tokens": res.prompt_tokens,
        "output_tokens": res.output_tokens,
        "cached_tokens": res.cached_tokens,
    }


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


class _Delta:
    """Counter deltas between two scrapes; None where neither scrape exposes the counter."""

    def __init__(self, before: MetricsSnapshot, after: MetricsSnapshot) -> None:
        self.before = before
        self.after = after

    def __call__(self, name: str, **labels: str) -> float | None:
        if not (self.after.has(name, **labels) or self.before.has(name, **labels)):
            return None
        return m.delta(self.before, self.after, name, **labels)

    def by_label(self, name: str, label: str, values: Sequence[str]) -> dict[str, float]:
        seen = {ls.get(label) for ls in [*self.after.label_sets(name), *self.before.label_sets(name)]}
        ordered = [v for v in values if v in seen] + sorted(v for v in seen if v and v not in values)
        return {v: m.delta(self.before, self.after, name, **{label: v}) for v in ordered}


def cache_stats(before: MetricsSnapshot, after: MetricsSnapshot) -> CacheStats:
    """Hit rates of vLLM, LMCache and SGLang from the change of their counters over a run."""
    d = _Delta(before, after)
    stats = CacheStats(engine=after.engine or before.engine, scrape_errors=[*before.errors, *after.errors])
    # vLLM V1 (vllm/v1/metrics/loggers.py): queries/hits count tokens; external = KV connector.
    stats.prefix_queries = d(m.VLLM_PREFIX_QUERIES)
    stats.prefix_hits = d(m.VLLM_PREFIX_HITS)
    stats.prefix_hit_rate = _ratio(stats.prefix_hits, stats.prefix_queries)
    stats.external_queries = d(m.VLLM_EXTERNAL_QUERIES)
    stats.external_hits = d(m.VLLM_EXTERNAL_HITS)
    stats.external_hit_rate = _ratio(stats.external_hits, stats.external_queries)
    stats.prompt_tokens_by_source = d.by_label(m.VLLM_PROMPT_TOKENS_BY_SOURCE, "source", VLLM_SOURCES)
    # vllm/v1/metrics/cache_hit_source.py: which tier supplied the hit; sums to hits + external hits.
    stats.cached_tokens_by_source = d.by_label(m.VLLM_CACHED_BY_SOURCE, "source", VLLM_CACHED_SOURCES)
    # LMCache in-process and MP server.
    stats.lmcache_requested_tokens = d(LMCACHE_REQUESTED_TOKENS)
    stats.lmcache_hit_tokens = d(m.LMCACHE_HIT_TOKENS)
    stats.lmcache_hit_rate = _ratio(stats.lmcache_hit_tokens, stats.lmcache_requested_tokens)
    stats.lmcache_stored_tokens = d(m.LMCACHE_STORED_TOKENS)
    stats.lmcache_remote_reads = d(m.LMCACHE_REMOTE_READS)
    stats.lmcache_mp_requested_tokens = d(LMCACHE_MP_REQUESTED_TOKENS)
    stats.lmcache_mp_lookups = d(m.LMCACHE_MP_LOOKUPS)
    stats.lmcache_mp_hit_tokens = d(LMCACHE_MP_HIT_TOKENS)
    stats.lmcache_mp_l1_hit_tokens = d(m.LMCACHE_MP_L1_HIT_TOKENS)
    stats.lmcache_mp_l2_hit_tokens = d(m.LMCACHE_MP_L2_HIT_TOKENS)
    stats.lmcache_mp_l2_loads = d.by_label(m.LMCACHE_MP_L2_LOADS, "l2_name", ())
    # SGLang (python/sglang/srt/metrics/collector.py): mode=input is what was computed.
    stats.sglang_tokens_by_mode = d.by_label(m.SGLANG_EFFECTIVE_TOKENS, "mode", SGLANG_MODES)
    stats.token_hit_rate = _headline_hit_rate(stats)
    split = token_sources.sources(before, after)
    stats.tokens_by_source, stats.tokens_by_source_derived = split.tokens, split.derived
    return stats


def _headline_hit_rate(s: CacheStats) -> float | None:
    """Share of prompt tokens the server did not recompute, from the most direct counter it has."""
    if s.prompt_tokens_by_source:
        total = sum(s.prompt_tokens_by_source.values())
        reused = total - s.prompt_tokens_by_source.get("local_compute", 0.0)
        return _ratio(reused, total)
    if s.prefix_queries:
        # External queries are the tokens the local cache missed, so hits add up over one total.
        return _ratio((s.prefix_hits or 0.0) + (s.external_hits or 0.0), s.prefix_queries)
    if s.sglang_tokens_by_mode:
        total = sum(s.sglang_tokens_by_mode.values())
        reused = total - s.sglang_tokens_by_mode.get("input", 0.0)
        return _ratio(reused, total)
    return None
