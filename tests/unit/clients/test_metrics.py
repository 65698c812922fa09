"""Prometheus parsing over real vLLM/LMCache exposition text and a real /metrics endpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from kvstack.clients import metrics as m
from kvstack.clients.metrics import MetricsSnapshot, delta, parse_metrics, scrape, scrape_sync
from tests.support.stream_server import ServerKnobs, StreamServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"


def load(name: str) -> MetricsSnapshot:
    return parse_metrics((FIXTURES / f"{name}.prom").read_text(), name)


def test_counter_names_with_and_without_total_suffix() -> None:
    warm = load("vllm_after_warm")
    assert warm.value(m.VLLM_PREFIX_HITS) == 1920.0
    assert warm.value("vllm:prefix_cache_hits_total") == 1920.0
    assert warm.value(m.VLLM_PREFIX_QUERIES) == 4096.0


def test_created_timestamps_are_not_values() -> None:
    snap = load("vllm_start")
    assert not [s for s in snap.samples if s.name.endswith("_created")]
    assert snap.value(m.VLLM_PREFIX_HITS) == 0.0


def test_labels_select_and_sum() -> None:
    warm = load("vllm_after_warm")
    by_source = m.VLLM_PROMPT_TOKENS_BY_SOURCE
    assert warm.value(by_source, source="local_cache_hit") == 1920.0
    assert warm.value(by_source, source="local_compute") == 2048.0 + 128.0
    assert warm.value(by_source) == 4096.0  # all sources summed
    assert warm.value(by_source, source="local_cache_hit", model_name="demo") == 1920.0
    assert warm.value(by_source, source="local_cache_hit", model_name="other") == 0.0


def test_delta_between_scrapes() -> None:
    cold, warm = load("vllm_after_cold"), load("vllm_after_warm")
    assert delta(cold, warm, m.VLLM_PREFIX_HITS) == 1920.0
    assert delta(load("vllm_start"), cold, m.VLLM_PREFIX_HITS) == 0.0
    before, after = load("vllm_offload_before_tier"), load("vllm_offload_after_tier")
    assert delta(before, after, m.VLLM_EXTERNAL_HITS) == 1920.0
    assert delta(before, after, m.VLLM_CACHED_BY_SOURCE, source="host") == 1920.0


def test_absent_metric_is_none_not_zero() -> None:
    snap = load("vllm_start")
    assert snap.get("lmcache:num_hit_tokens") is None
    assert not snap.has("lmcache:num_hit_tokens")
    assert snap.value("lmcache:num_hit_tokens") == 0.0
    assert snap.get(m.VLLM_EXTERNAL_HITS) == 0.0  # present, and zero


def test_lmcache_multiprocess_text() -> None:
    before, after = load("lmcache_before_tier"), load("lmcache_after_tier")
    assert delta(before, after, m.LMCACHE_HIT_TOKENS) == 2048.0
    assert after.value(m.LMCACHE_LOCAL_STORAGE_USAGE) == 2048 * 1024
    assert after.engine is None  # LMCache alone names no engine


def test_merged_snapshots_and_engine_detection() -> None:
    both = load("vllm_offload_after_tier").merged(load("lmcache_after_tier"))
    assert both.engine == "vllm"
    assert both.value(m.LMCACHE_HIT_TOKENS) == 2048.0
    assert both.value(m.VLLM_EXTERNAL_HITS) == 1920.0
    assert load("sglang_after_tier").engine == "sglang"
    assert load("sglang_after_tier").value(m.SGLANG_EFFECTIVE_TOKENS, mode="host_hit") == 2047.0


def test_label_sets_of_an_info_gauge() -> None:
    (labels,) = load("vllm_start").label_sets(m.VLLM_CACHE_CONFIG_INFO)
    assert labels["block_size"] == "128"
    assert labels["enable_prefix_caching"] == "True"


def test_unparsable_text_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics("this is { not prometheus")


def test_scrape_a_real_endpoint_and_record_failures() -> None:
    with StreamServer(ServerKnobs()) as srv:
        good = scrape_sync([srv.url + "/metrics"])
        missing = scrape_sync([srv.url + "/nope"])

        async def both() -> MetricsSnapshot:
            async with httpx.AsyncClient(trust_env=False) as client:
                return await scrape(client, [srv.url + "/metrics", "http://127.0.0.1:1/metrics"])

        mixed = asyncio.run(both())
    assert good.engine == "vllm" and good.has(m.VLLM_PREFIX_HITS) and not good.errors
    assert missing.samples == [] and missing.errors and "HTTP 404" in missing.errors[0]
    assert mixed.has(m.VLLM_PREFIX_HITS)
    assert len(mixed.errors) == 1 and "127.0.0.1:1" in mixed.errors[0]
