"""Hit evidence from recorded /metrics of vLLM (its own logger), LMCache (its own logger) and SGLang."""

from __future__ import annotations

from pathlib import Path

from kvstack.runtime.metrics import MetricsSnapshot, parse_metrics
from kvstack.validation.evidence import connector_hits, gpu_capacity_tokens, lmcache_disk_bytes, prefix_hits

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"


def load(*names: str) -> MetricsSnapshot:
    snap = MetricsSnapshot()
    for name in names:
        snap = snap.merged(parse_metrics((FIXTURES / f"{name}.prom").read_text(), name))
    return snap


def test_vllm_warm_request_shows_prefix_hits() -> None:
    hits = prefix_hits("vllm", load("vllm_after_cold"), load("vllm_after_warm"))
    assert hits.rose and hits.tokens == 1920.0
    assert hits.evidence == [
        "vllm:prefix_cache_hits +1920",
        'vllm:prompt_tokens_by_source{source="local_cache_hit"} +1920',
    ]


def test_vllm_cold_request_shows_none() -> None:
    hits = prefix_hits("vllm", load("vllm_start"), load("vllm_after_cold"))
    assert hits.tokens == 0.0 and not hits.rose


def test_degraded_connector_serves_nothing_after_reset() -> None:
    hits = connector_hits("vllm", load("vllm_degraded_before_tier"), load("vllm_degraded_after_tier"))
    assert hits.tokens == 0.0 and not hits.rose  # counters exist and stayed flat
    assert "vllm:external_prefix_cache_hits +0" in hits.evidence
    assert hits.by_tier == {}


def test_working_offload_tier_is_seen_with_its_tier() -> None:
    hits = connector_hits("vllm", load("vllm_offload_before_tier"), load("vllm_offload_after_tier"))
    assert hits.rose and hits.tokens == 1920.0
    assert hits.by_tier == {"cpu": 1920.0}
    assert 'vllm:prompt_tokens_cached_by_source{source="host"} +1920' in hits.evidence
    assert 'vllm:prompt_tokens_by_source{source="external_kv_transfer"} +1920' in hits.evidence


def test_lmcache_counters_join_vllm_ones() -> None:
    before = load("vllm_offload_before_tier", "lmcache_before_tier")
    after = load("vllm_offload_after_tier", "lmcache_after_tier")
    hits = connector_hits("vllm", before, after)
    assert hits.tokens == 2048.0  # the largest counter: LMCache counts the whole chunk
    assert "lmcache:num_hit_tokens +2048" in hits.evidence
    assert lmcache_disk_bytes(after) == 2048 * 1024


def test_sglang_hicache_host_hit() -> None:
    before, after = load("sglang_before_tier"), load("sglang_after_tier")
    hits = connector_hits("sglang", before, after)
    assert hits.rose and hits.tokens == 2047.0
    assert hits.by_tier == {"cpu": 2047.0, "disk": 0.0}
    assert prefix_hits("sglang", before, after).tokens == 0.0
    assert "sglang:cache_hit_rate 1.00" in prefix_hits("sglang", before, after).evidence


def test_no_counters_at_all_is_unknown_not_zero() -> None:
    empty = MetricsSnapshot()
    assert prefix_hits("vllm", empty, empty).tokens is None
    assert connector_hits("vllm", empty, empty).tokens is None
    assert connector_hits("sglang", empty, empty).tokens is None


def test_gpu_pool_capacity() -> None:
    assert gpu_capacity_tokens(load("vllm_start")) == 8192 * 128
    assert gpu_capacity_tokens(load("sglang_after_tier")) == 262144
    assert gpu_capacity_tokens(MetricsSnapshot()) is None
