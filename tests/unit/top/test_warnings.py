"""Warning lines: a tier configured but serving nothing while there were lookups, a store evicting."""

from __future__ import annotations

import httpx

from kvstack.top.snapshot import AdapterView, LmcacheView, RemoteView, ServerView, SourceShare, TopSnapshot
from kvstack.top.sources import collect
from kvstack.top.targets import Targets
from kvstack.top.window import build, warnings
from tests.support.stream_server import ServerKnobs, StreamServer

ALL = Targets(servers=("http://s",), lmcache=("http://lm",), tiers=("cpu", "disk", "remote"))


def lm(lookup: float, l1: float, l2: float, fs_loads: float = 0, fs_usage: float = 4096) -> LmcacheView:
    fs = AdapterView(name="fs", tier="disk", loads=fs_loads, usage_bytes=fs_usage, stores_total=1)
    return LmcacheView(
        url="http://lm", up=True, lookup_tokens=lookup, l1_hit_tokens=l1, l2_hit_tokens=l2, adapters=[fs]
    )


def snap(**kw: object) -> TopSnapshot:
    return TopSnapshot(time=0.0, window_s=2.0, **kw)  # type: ignore[arg-type]


def test_lookups_with_no_hit_at_all_is_the_production_stack_818_symptom() -> None:
    out = warnings(snap(lmcache=[lm(1000, 0, 0)]), ALL)
    assert len(out) == 1
    assert "LMCache served 0 of 1,000 tokens looked up in the last 2s" in out[0]


def test_no_lookups_no_warning() -> None:
    assert warnings(snap(lmcache=[lm(0, 0, 0)]), ALL) == []


def test_a_disk_tier_holding_data_that_serves_nothing_while_dram_missed() -> None:
    out = warnings(snap(lmcache=[lm(1000, 600, 0)]), ALL)
    assert len(out) == 1
    assert out[0].startswith("disk tier (LMCache L2 fs) holds data but served nothing")
    assert "400 looked-up tokens missed DRAM" in out[0]


def test_no_l2_warning_when_dram_served_every_lookup_or_l2_loaded_or_the_tier_is_not_planned() -> None:
    assert warnings(snap(lmcache=[lm(1000, 1000, 0)]), ALL) == []
    assert warnings(snap(lmcache=[lm(1000, 600, 400, fs_loads=2)]), ALL) == []
    assert warnings(snap(lmcache=[lm(1000, 600, 0)]), Targets(servers=(), tiers=("cpu",))) == []


def test_an_empty_l2_tier_that_never_stored_is_not_blamed() -> None:
    empty = lm(1000, 600, 0, fs_usage=0)
    empty.adapters[0].stores_total = 0
    assert warnings(snap(lmcache=[empty]), ALL) == []


def test_dram_tier_that_served_nothing_while_l2_did() -> None:
    out = warnings(snap(lmcache=[lm(1000, 0, 800, fs_loads=3)]), ALL)
    assert out == ["DRAM tier (LMCache L1) served nothing of 1,000 tokens looked up in the last 2s"]


def test_down_servers_and_stores_are_named() -> None:
    s = snap(
        servers=[ServerView(url="http://s", up=False, error="ConnectError")],
        lmcache=[LmcacheView(url="http://lm", up=False, error="ReadTimeout")],
        remote=RemoteView(url="redis://:***@h:1/0", up=False, error="cannot connect"),
    )
    out = warnings(s, ALL)
    assert any("server http://s is not answering (ConnectError)" in w for w in out)
    assert any("LMCache cache server http://lm is not answering" in w for w in out)
    assert any("remote store redis://:***@h:1/0 is not answering" in w for w in out)


def test_redis_evictions_in_the_window() -> None:
    out = warnings(snap(remote=RemoteView(url="r", up=True, evicted_keys=7)), ALL)
    assert out == ["remote store r evicted 7 keys in the last 2s (maxmemory reached)"]


def test_a_tier_written_with_several_kv_layouts_at_once() -> None:
    one = {"aaaaaaaaaaaa": ["h1:8001", "h1:8002"]}
    assert warnings(snap(remote=RemoteView(url="r", up=True, live_layouts=one)), ALL) == []
    two = {**one, "bbbbbbbbbbbb": ["h2:8001"]}
    (line,) = warnings(snap(remote=RemoteView(url="r", up=True, live_layouts=two)), ALL)
    assert "written with 2 KV layouts at once" in line and "bbbbbbbbbbbb: h2:8001" in line


def vllm_window(sources: dict[str, SourceShare]) -> TopSnapshot:
    """A window of vLLM at http://s: 500 prompt tokens, served from ``sources``."""
    server = ServerView(url="http://s", up=True, engine="vllm", prompt_tokens=500, sources=sources)
    return snap(servers=[server])


DRAM_PLANNED = Targets(servers=("http://s",), tiers=("cpu",))


def test_native_offload_tiers_serving_nothing() -> None:
    window = vllm_window({"recomputed": SourceShare(tokens=500, share=1.0, per_s=250)})
    out = warnings(window, DRAM_PLANNED)
    assert out == ["http://s: the offload tiers served nothing in the last 2s (500 prompt tokens)"]
    assert warnings(window, Targets(servers=("http://s",))) == []  # none planned


def test_a_window_served_by_the_engines_own_cache_is_not_a_silent_tier() -> None:
    window = vllm_window(
        {
            "recomputed": SourceShare(tokens=0, share=0.0, per_s=0),
            "engine_cache": SourceShare(tokens=500, share=1.0, per_s=250),
        }
    )
    assert warnings(window, DRAM_PLANNED) == []


def test_a_degraded_connector_on_the_stand_in_warns() -> None:
    # LMCache looks every prompt up but never stores: lookups rise, hits stay 0.
    with StreamServer(ServerKnobs(connector="lmcache", lmcache_mp=True, degraded=True)) as srv:
        targets = Targets(servers=(srv.url,), lmcache=(srv.url,), tiers=("cpu",))
        before = collect(targets)
        for _ in range(2):
            httpx.post(srv.url + "/v1/completions", json={"prompt": "a b c " * 100, "max_tokens": 1})
        out = build(targets, before, collect(targets)).warnings
    assert len(out) == 1 and out[0].startswith("LMCache served 0 of ")
