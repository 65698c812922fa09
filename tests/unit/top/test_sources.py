"""Scraping real servers: the stand-in engine, a real redis-server on loopback, a directory."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from kvstack.clients.token_sources import DERIVED_DRAM
from kvstack.remote.writers import instance_name
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.serving.shared_tier_kv import recorded, writers_of
from kvstack.top.live import snapshot_once
from kvstack.top.sources import collect, disk_stats, redis_stats
from kvstack.top.targets import Targets
from kvstack.top.window import build
from tests.support.redis import RedisFactory
from tests.support.stream_server import ServerKnobs, StreamServer
from tests.support.tier_kv import SAMPLE_KV

PASSWORD = "top-redis-pw-1234"


def complete(url: str, prompt: str, headers: dict[str, str] | None = None) -> None:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, headers=headers)
    assert r.status_code == 200


def words(n: int, seed: int = 0) -> str:
    return " ".join(f"w{seed}-{i}" for i in range(n))


def test_a_window_of_a_real_server_with_lmcache_tiers() -> None:
    knobs = ServerKnobs(connector="lmcache", lmcache_mp=True, l2_fraction=0.25)
    with StreamServer(knobs) as srv:
        targets = Targets(servers=(srv.url,), lmcache=(srv.url,))
        complete(srv.url, words(400))  # stored; recomputed
        before = collect(targets)
        # The GPU cache is dropped, so the prompt comes back from the offload tier: 400 of 401 tokens
        # (whole 16-token blocks, the last token recomputed).
        httpx.post(srv.url + "/reset_prefix_cache")
        complete(srv.url, words(400))
        complete(srv.url, words(400))  # now from the engine's own cache
        snap = build(targets, before, collect(targets))
    server = snap.servers[0]
    assert server.up and server.requests == 2
    assert server.prompt_tokens == 802
    src = {k: v.tokens for k, v in server.sources.items()}
    assert src["engine_cache"] == 400
    # The offloaded 400: L2 (through fs) counted 100 of them, DRAM served the rest. LMCache's L1
    # count is 700: its lookup of the third request found the 400 tokens the engine held too, so
    # L1 : L2 is no DRAM : disk split (a proportional one would say 350 : 50).
    assert src["dram"] == 300 and src["disk"] == 100
    assert server.derived == {"dram": DERIVED_DRAM}
    assert src["recomputed"] == 2
    assert server.ttft_p50_s is not None and server.ttft_p90_s is not None
    [lm] = snap.lmcache
    assert lm.up
    assert (lm.l1_hit_tokens, lm.l2_hit_tokens) == (700, 100)
    assert lm.l1_hit_tokens_total == 700
    assert [(a.name, a.tier, a.loads) for a in lm.adapters] == [("fs", "disk", 1)]
    assert snap.warnings == []


def test_a_server_that_goes_away_is_marked_down_and_the_rest_keeps_going() -> None:
    with StreamServer() as alive:
        gone = StreamServer().start()
        targets = Targets(servers=(alive.url, gone.url))
        before = collect(targets)
        gone.stop()
        complete(alive.url, words(50))
        snap = build(targets, before, collect(targets, timeout_s=1.0))
    by_url = {s.url: s for s in snap.servers}
    assert by_url[alive.url].up and by_url[alive.url].prompt_tokens == 51
    assert not by_url[gone.url].up and by_url[gone.url].error
    assert any(gone.url in w and "not answering" in w for w in snap.warnings)


def test_a_server_without_metrics_is_down_with_the_http_status() -> None:
    with StreamServer(ServerKnobs(metrics=False)) as srv:
        snap = snapshot_once(Targets(servers=(srv.url,)), 0.0)
    assert not snap.servers[0].up
    assert "HTTP 404" in (snap.servers[0].error or "")


def test_guarded_server_gets_the_key_and_the_key_is_never_in_the_snapshot() -> None:
    key = "top-api-key-5678"
    with StreamServer(ServerKnobs(api_key=key)) as srv:
        snap = snapshot_once(Targets(servers=(srv.url,)), 0.0, api_key=key)
    assert snap.servers[0].up
    assert key not in snap.to_json()


def test_redis_info_with_a_password_that_is_never_shown(redis_factory: RedisFactory) -> None:
    store = redis_factory(password=PASSWORD)
    client = store.client()
    client.set("a", "1")
    client.get("a")  # a hit
    client.get("missing")  # a miss
    stats = redis_stats(store.url)
    assert stats.up and stats.keys == 1
    assert stats.used_memory and stats.used_memory > 0
    assert (stats.keyspace_hits, stats.keyspace_misses, stats.evicted_keys) == (1, 1, 0)
    wrong = redis_stats(store.url_with("wrong-password-99"))
    assert not wrong.up and "authentication" in (wrong.error or "")
    assert "wrong-password-99" not in (wrong.error or "")


def test_redis_window_in_the_snapshot(redis_factory: RedisFactory) -> None:
    store = redis_factory(password=PASSWORD)
    targets = Targets(servers=(), remote=store.url)
    client = store.client()
    client.set("k", "v")
    before = collect(targets)
    for _ in range(3):
        client.get("k")
    client.get("nope")
    snap = build(targets, before, collect(targets))
    assert snap.remote is not None and snap.remote.up
    assert snap.remote.hit_ratio == 0.75
    assert snap.remote.keys == 1
    assert PASSWORD not in snap.to_json()
    assert snap.remote.url == f"redis://:***@127.0.0.1:{store.port}/0"
    store.stop()
    down = build(targets, before, collect(targets))
    assert down.remote is not None and not down.remote.up
    assert any("remote store" in w and "not answering" in w for w in down.warnings)


def test_kvstacks_own_reads_of_the_writer_records_are_not_in_the_hit_ratio(
    redis_factory: RedisFactory,
) -> None:
    """Each refresh reads the tier's writer records (indexes and records: lookups the store counts):
    the window's hit ratio is the users' lookups alone."""
    store = redis_factory()
    engine = ProcessSpec(name="engine", argv=["vllm"])
    launch = LaunchSpec(
        engine="vllm", connector="lmcache-mp", server=engine, base_url="http://127.0.0.1:8001",
        served_model_name="m", tier_kv=SAMPLE_KV,
    )  # fmt: skip
    targets = Targets(servers=(), remote=store.url)
    client = store.client()
    client.set("k", "v")
    with recorded(store.url, writers_of([launch], ["/runs/a"]), warn=pytest.fail):
        first = collect(targets)
        client.get("k")
        client.get("nope")
        second = collect(targets)
        client.get("k")
        third = collect(targets)
    assert first.redis is not None
    assert first.redis.live_layouts == {SAMPLE_KV.fingerprint(): [instance_name(launch.base_url)]}
    # after INFO: the two indexes, the writer's record and the KV record, each a hit
    assert (first.redis.own_hits, first.redis.own_misses) == (4, 0)
    views = [build(targets, a, b).remote for a, b in ((first, second), (second, third))]
    assert [v.hit_ratio if v else None for v in views] == [0.5, 1.0]


def test_disk_bytes_and_free_space(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.data").write_bytes(b"\0" * 1000)
    (tmp_path / "y.data").write_bytes(b"\0" * 24)
    stats = disk_stats(str(tmp_path))
    assert (stats.bytes, stats.files, stats.partial) == (1024, 2, False)
    assert stats.free_bytes is not None and stats.free_bytes > 0
    assert disk_stats(str(tmp_path), limit=1).partial
    assert not disk_stats(str(tmp_path), limit=2).partial  # exactly the limit: the count is whole


def test_the_walk_stops_at_the_limit_inside_one_flat_directory(tmp_path: Path) -> None:
    # LMCache's fs adapter writes every object into one directory.
    for i in range(50):
        (tmp_path / f"{i}.data").write_bytes(b"\0" * 10)
    stats = disk_stats(str(tmp_path), limit=20)
    assert (stats.files, stats.bytes, stats.partial) == (20, 200, True)
    assert disk_stats(str(tmp_path / "missing")).error is not None


def test_replicas_are_attributed_with_their_own_cache_server() -> None:
    # Replica a's LMCache serves from DRAM only, replica b's from disk only: no mixing.
    with (
        StreamServer(ServerKnobs(connector="lmcache", lmcache_mp=True, l2_fraction=0.0)) as a,
        StreamServer(ServerKnobs(connector="lmcache", lmcache_mp=True, l2_fraction=1.0)) as b,
    ):
        targets = Targets(servers=(a.url, b.url), lmcache=(a.url, b.url))
        before = collect(targets)
        for srv in (a, b):
            complete(srv.url, words(100))
            httpx.post(srv.url + "/reset_prefix_cache")
            complete(srv.url, words(100))
        snap = build(targets, before, collect(targets))
    sa, sb = snap.servers
    assert set(sa.sources) == {"recomputed", "engine_cache", "dram"}
    assert set(sb.sources) == {"recomputed", "engine_cache", "disk"}
    assert [lm.url for lm in snap.lmcache] == [a.url, b.url]
    assert [(lm.l1_hit_tokens, lm.l2_hit_tokens) for lm in snap.lmcache] == [(96, 0), (0, 96)]
    assert (sa.sources["dram"].tokens, sb.sources["disk"].tokens) == (96, 96)


def test_credentials_in_a_url_are_never_shown() -> None:
    with StreamServer(ServerKnobs(metrics=False)) as srv:
        url = srv.url.replace("http://", "http://admin:url-pw-4321@")
        snap = snapshot_once(Targets(servers=(url,), lmcache=(url,)), 0.0)
    text = snap.to_json()
    assert "url-pw-4321" not in text
    assert snap.servers[0].url == url.replace("url-pw-4321", "***")
    assert not snap.servers[0].up and not snap.lmcache[0].up
