"""Hit evidence from recorded /metrics of vLLM (its own logger), LMCache (its own logger) and SGLang."""

from __future__ import annotations

from pathlib import Path

from kvstack.clients.metrics import MetricsSnapshot, parse_metrics
from kvstack.validation.cache_server import moved_aside
from kvstack.validation.evidence import (
    cache_server_tier_hits,
    connector_hits,
    file_set,
    gpu_capacity_tokens,
    l2_stores,
    lmcache_disk_bytes,
    new_files,
    prefix_hits,
)

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


# Samples as LMCache 0.5.6's cache server and vLLM 0.32 export them (names and labels seen on
# their /metrics here, during a disk-tier round: L1 emptied, the prompt loaded from the fs adapter).
MP_BEFORE = """
# TYPE lmcache_mp_lookup_hit_l1_tokens counter
lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="",model_name="/m"} 1792.0
# TYPE lmcache_mp_lookup_hit_l2_tokens counter
lmcache_mp_lookup_hit_l2_tokens_total{cache_salt="",model_name="/m"} 0.0
# TYPE lmcache_mp_l2_load_completed_requests counter
lmcache_mp_l2_load_completed_requests_total{l2_name="fs"} 0.0
lmcache_mp_l2_load_completed_requests_total{l2_name="resp"} 0.0
# TYPE lmcache_mp_l2_store_completed_requests counter
lmcache_mp_l2_store_completed_requests_total{l2_name="fs"} 1.0
# TYPE vllm:external_prefix_cache_hits counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="demo"} 1792.0
"""


def mp_after(l1: int, l2: int, fs_loads: int, resp_loads: int, stores: int = 1) -> MetricsSnapshot:
    text = (
        MP_BEFORE.replace('model_name="/m"} 1792.0', f'model_name="/m"}} {1792 + l1}.0')
        .replace('model_name="/m"} 0.0', f'model_name="/m"}} {l2}.0')
        .replace('l2_name="fs"} 0.0', f'l2_name="fs"}} {fs_loads}.0')
        .replace('l2_name="resp"} 0.0', f'l2_name="resp"}} {resp_loads}.0')
        .replace(
            'store_completed_requests_total{l2_name="fs"} 1.0',
            f'store_completed_requests_total{{l2_name="fs"}} {stores}.0',
        )
        .replace('model_name="demo"} 1792.0', f'model_name="demo"}} {1792 + l1 + l2}.0')
    )
    return parse_metrics(text)


def test_cache_server_tiers_are_judged_by_their_own_counters() -> None:
    before = parse_metrics(MP_BEFORE)
    cpu = cache_server_tier_hits("cpu", None, before, mp_after(l1=1792, l2=0, fs_loads=0, resp_loads=0))
    assert cpu.rose and cpu.tokens == 1792 and cpu.by_tier == {"cpu": 1792}
    assert "lmcache_mp_lookup_hit_l1_tokens +1792" in cpu.evidence
    assert "vllm:external_prefix_cache_hits +1792" in cpu.evidence
    disk = cache_server_tier_hits("disk", "fs", before, mp_after(l1=0, l2=1792, fs_loads=1, resp_loads=0))
    assert disk.rose and disk.by_tier == {"disk": 1792}
    assert 'lmcache_mp_l2_load_completed_requests{l2_name="fs"} +1' in disk.evidence
    # L2 hits loaded by the disk's adapter are not the remote tier's.
    remote = cache_server_tier_hits(
        "remote", "resp", before, mp_after(l1=0, l2=1792, fs_loads=1, resp_loads=0)
    )
    assert not remote.rose and remote.tokens == 0
    # L1 hits do not prove an L2 tier.
    assert not cache_server_tier_hits("disk", "fs", before, mp_after(1792, 0, 0, 0)).rose
    assert l2_stores("fs", before, mp_after(0, 0, 0, 0, stores=3)) == 2


def test_objects_moved_aside_come_back(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    (root / "a").mkdir(parents=True)
    for rel in ("old.bin", "a/new1.bin", "new2.bin"):
        (root / rel).write_bytes(rel.encode())
    before = {"old.bin"}
    moved = new_files(str(root), before)
    assert moved == ["a/new1.bin", "new2.bin"]
    with moved_aside(str(root), moved) as n:
        assert n == 2 and file_set(str(root)) == {"old.bin"}
    assert file_set(str(root)) == {"old.bin", "a/new1.bin", "new2.bin"}
    assert (root / "a" / "new1.bin").read_bytes() == b"a/new1.bin"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tier"]  # the holding directory is gone
