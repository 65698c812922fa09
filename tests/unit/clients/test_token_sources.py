"""Prompt tokens by source: the engine's split, then the tier each offloaded token came from."""

from __future__ import annotations

import pytest

from kvstack.clients.metrics import MetricsSnapshot, Sample
from kvstack.clients.token_sources import adapter_tier, by_source


def vllm(by_src: dict[str, float], cached: dict[str, float] | None = None) -> list[Sample]:
    out = [Sample("vllm:prompt_tokens_by_source_total", {"source": k}, v) for k, v in by_src.items()]
    out += [
        Sample("vllm:prompt_tokens_cached_by_source_total", {"source": k}, v)
        for k, v in (cached or {}).items()
    ]
    return out


def lm(l1: float, l2: float, loads: dict[str, float]) -> list[Sample]:
    out = [
        Sample("lmcache_mp_lookup_hit_l1_tokens_total", {}, l1),
        Sample("lmcache_mp_lookup_hit_l2_tokens_total", {}, l2),
    ]
    return out + [
        Sample("lmcache_mp_l2_load_completed_requests_total", {"l2_name": k}, v) for k, v in loads.items()
    ]


ZERO = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}


def test_lmcache_server_counters_split_the_engines_external_tokens() -> None:
    before = MetricsSnapshot([*vllm(ZERO), *lm(0, 0, {"fs": 0, "resp": 0})])
    after = MetricsSnapshot(
        [
            *vllm({"local_compute": 100, "local_cache_hit": 200, "external_kv_transfer": 1000}),
            # LMCache counted lookups twice (a waiting request is looked up again): only proportions count.
            *lm(l1=1000, l2=1000, loads={"fs": 3, "resp": 1}),
        ]
    )
    got = by_source(before, after)
    assert got == pytest.approx(
        {"recomputed": 100, "engine_cache": 200, "dram": 500, "disk": 375, "remote": 125}
    )
    assert sum(got.values()) == 1300  # every prompt token, once


def test_native_offload_uses_vllms_cached_by_source() -> None:
    after = MetricsSnapshot(
        vllm(
            {"local_compute": 10, "local_cache_hit": 0, "external_kv_transfer": 90},
            cached={"host": 60, "disk": 30},
        )
    )
    assert by_source(MetricsSnapshot(), after) == pytest.approx(
        {"recomputed": 10, "engine_cache": 0, "dram": 60, "disk": 30}
    )


def test_offloaded_tokens_no_counter_places_are_offload() -> None:
    after = MetricsSnapshot(vllm({"local_compute": 10, "local_cache_hit": 5, "external_kv_transfer": 20}))
    assert by_source(MetricsSnapshot(), after) == {"recomputed": 10, "engine_cache": 5, "offload": 20}


def test_sglang_modes() -> None:
    after = MetricsSnapshot(
        [
            Sample("sglang:prefill_effective_tokens_total", {"mode": m}, v)
            for m, v in (("input", 40), ("device_hit", 30), ("host_hit", 20), ("storage_hit", 10))
        ]
    )
    assert by_source(MetricsSnapshot(), after) == {
        "recomputed": 40,
        "engine_cache": 30,
        "dram": 20,
        "disk": 10,
    }


def test_no_engine_counters_no_sources() -> None:
    assert by_source(MetricsSnapshot(), MetricsSnapshot(lm(5, 5, {"fs": 1}))) == {}


def test_adapter_tiers() -> None:
    assert (adapter_tier("fs"), adapter_tier("resp"), adapter_tier("nixl")) == ("disk", "remote", "offload")
    assert adapter_tier("fs_native") == "disk"  # the adapter kvstack renders for the disk tier
