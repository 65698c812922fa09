"""Prompt tokens by source: the engine's split, then each offload tier's tokens from its own counter.

The one rule bench (per request and per run) and top (per window) use: its tests live here."""

from __future__ import annotations

import pytest

from kvstack.clients.metrics import MetricsSnapshot, Sample
from kvstack.clients.token_sources import (
    DERIVED_ADAPTERS,
    DERIVED_DRAM,
    DERIVED_UNPLACED,
    adapter_tier,
    by_source,
    sources,
)


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


def test_one_request_reads_each_tier_from_its_own_counter() -> None:
    # 1,024 offloaded: LMCache's lookup counted 1,280 L1 tokens, the engine's own 768 among them
    # (its lookup covers the whole prompt), and 512 L2 tokens beyond them, loaded through the disk.
    before = MetricsSnapshot([*vllm(ZERO), *lm(0, 0, {"fs_native": 0})])
    after = MetricsSnapshot(
        [
            *vllm({"local_compute": 256, "local_cache_hit": 768, "external_kv_transfer": 1024}),
            *lm(l1=1280, l2=512, loads={"fs_native": 1}),
        ]
    )
    got = sources(before, after, one_request=True)
    assert got.tokens == {"recomputed": 256, "engine_cache": 768, "dram": 512, "disk": 512}
    assert got.derived == {}  # every figure is a counter's own


def test_the_engines_prefix_counted_in_l1_is_not_dram() -> None:
    # The engine held 1,000 tokens of which L1 has the first 768 (whole chunks); L2 holds the next
    # chunk: only the 24 tokens past the engine's prefix were loaded, all of them from L2.
    after = MetricsSnapshot(
        [
            *vllm({"local_compute": 8, "local_cache_hit": 1000, "external_kv_transfer": 24}),
            *lm(l1=768, l2=256, loads={"fs": 1}),
        ]
    )
    got = sources(MetricsSnapshot(), after, one_request=True)
    assert got.tokens == {"recomputed": 8, "engine_cache": 1000, "disk": 24}


def test_a_split_the_tiers_counters_do_not_bear_out_shows() -> None:
    # The engine loaded 1,024 tokens, LMCache's counters place 512 in L1 (past the engine's 768) and
    # 256 in L2. A remainder rule would call the other 256 DRAM and add up; here they are unplaced.
    after = MetricsSnapshot(
        [
            *vllm({"local_compute": 0, "local_cache_hit": 768, "external_kv_transfer": 1024}),
            *lm(l1=1280, l2=256, loads={"fs": 1}),
        ]
    )
    got = sources(MetricsSnapshot(), after, one_request=True)
    assert got.tokens == {"recomputed": 0, "engine_cache": 768, "dram": 512, "disk": 256, "offload": 256}
    assert got.derived == {"offload": DERIVED_UNPLACED}
    # Counters that place more than the engine loaded: the sources add up to more than the prompt.
    over = MetricsSnapshot(
        [
            *vllm({"local_compute": 0, "local_cache_hit": 768, "external_kv_transfer": 512}),
            *lm(l1=1280, l2=256, loads={"fs": 1}),
        ]
    )
    got = sources(MetricsSnapshot(), over, one_request=True)
    assert got.tokens == {"recomputed": 0, "engine_cache": 768, "dram": 512, "disk": 256}
    assert sum(got.tokens.values()) > 768 + 512


def test_over_a_window_dram_is_what_the_l2_tiers_leave_and_is_marked_derived() -> None:
    # Two requests: one loads 600 tokens from L1 and 400 from L2 (3 loads through the disk, 1 through
    # the remote store); the other is served by the engine (200 tokens), which LMCache's L1 lookup
    # counts too. L1's 800 cannot be cleared of the engine's part over a window, L2's 400 can be read.
    before = MetricsSnapshot([*vllm(ZERO), *lm(0, 0, {"fs": 0, "resp": 0})])
    after = MetricsSnapshot(
        [
            *vllm({"local_compute": 100, "local_cache_hit": 200, "external_kv_transfer": 1000}),
            *lm(l1=800, l2=400, loads={"fs": 3, "resp": 1}),
        ]
    )
    got = sources(before, after)
    assert got.tokens == pytest.approx(
        {"recomputed": 100, "engine_cache": 200, "dram": 600, "disk": 300, "remote": 100}
    )
    assert got.derived == {"dram": DERIVED_DRAM, "disk": DERIVED_ADAPTERS, "remote": DERIVED_ADAPTERS}
    assert by_source(before, after) == got.tokens


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
    # Each tier is its own count: what none of them counted is not spread over them.
    short = MetricsSnapshot(
        vllm({"local_compute": 10, "local_cache_hit": 0, "external_kv_transfer": 90}, cached={"host": 60})
    )
    assert by_source(MetricsSnapshot(), short) == {
        "recomputed": 10,
        "engine_cache": 0,
        "dram": 60,
        "offload": 30,
    }


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
