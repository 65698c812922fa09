"""The shared tier's writer records on a real redis-server (remote/writers.py) and the refusal of a
writer whose KV differs (serving/shared_tier_kv.py)."""

from __future__ import annotations

import time

import pytest

from kvstack.remote.writers import (
    KV_PREFIX,
    TTL_S,
    WRITER_PREFIX,
    WRITERS_INDEX,
    TierRecords,
    TierWriter,
    instance_name,
    layouts,
)
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.tier_kv import ENVIRONMENT, TierKv
from kvstack.serving.shared_tier_kv import TierKvMismatch, check_writers, recorded, writers_of
from tests.integration.conftest import RedisFactory, RedisServer
from tests.support.tier_kv import SAMPLE_KV

pytestmark = pytest.mark.integration

PASSWORD = "tier-pass-41c9e2"
KV = SAMPLE_KV


def spec(port: int, kv: TierKv) -> LaunchSpec:
    server = ProcessSpec(name="engine", argv=["vllm"])
    return LaunchSpec(
        engine="vllm", connector="lmcache-mp", server=server, base_url=f"http://127.0.0.1:{port}",
        served_model_name="m", tier_kv=kv,
    )  # fmt: skip


def test_records_are_written_refreshed_read_and_removed(redis_server: RedisServer) -> None:
    (writer,) = writers_of([spec(8001, KV)], ["/runs/a"])
    with TierRecords(redis_server.url) as records:
        records.register(writer)
        assert [w.instance for w in records.writers()] == [instance_name("http://127.0.0.1:8001")]
        (kept,) = records.kv_records()
        assert kept.kv == KV and kept.fingerprint == KV.fingerprint()
        first = kept.first_seen
        records.register(writer)  # a refresh keeps when the KV was first seen
        assert records.kv_records()[0].first_seen == first
        records.unregister(writer.instance)
        assert records.writers() == [] and len(records.kv_records()) == 1  # what the tier holds stays
    client = redis_server.client()
    assert client.keys(WRITER_PREFIX + "*") == [] and len(client.keys(KV_PREFIX + "*")) == 1


def test_reading_the_records_never_walks_the_keyspace(redis_server: RedisServer) -> None:
    """A shared tier holds LMCache's keys by the million and `kvstack top` reads the records at
    every refresh: the indexes name the records, no SCAN or KEYS runs (the store's own counters)."""
    client = redis_server.client()
    fill = client.pipeline(transaction=False)
    for i in range(20_000):
        fill.set(f"lmcache:chunk:{i}", b"kv")
    fill.execute()
    (writer,) = writers_of([spec(8001, KV)], ["/runs/a"])
    with TierRecords(redis_server.url) as records:
        records.register(writer)
        client.config_resetstat()
        assert [w.instance for w in records.writers()] == [writer.instance]
        assert [r.fingerprint for r in records.kv_records()] == [KV.fingerprint()]
        (layout,) = layouts(redis_server.url)
        assert layout.live_writers == [writer.instance]
        called = set(client.info("commandstats"))
    assert called and not called & {"cmdstat_scan", "cmdstat_keys"}, sorted(called)


def test_index_entries_expire_by_the_stores_clock_and_a_gone_record_is_skipped(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    (a,) = writers_of([spec(8001, KV)], ["/runs/a"])
    (b,) = writers_of([spec(8002, KV)], ["/runs/b"])
    with TierRecords(redis_server.url) as records:
        records.register(a)
        records.register(b)
        store_now, _ = client.time()
        expiry = client.zscore(WRITERS_INDEX, a.instance)
        assert expiry is not None and store_now + TTL_S - 5 <= expiry <= store_now + TTL_S + 1  # seconds
        client.delete(WRITER_PREFIX + b.instance)  # its record expired before its index entry
        assert [w.instance for w in records.writers()] == [a.instance]
        client.zadd(WRITERS_INDEX, {a.instance: store_now - 1})  # a stopped refreshing: past its expiry
        records.register(b)  # a registration drops the entries past their expiry
        assert client.zrange(WRITERS_INDEX, 0, -1) == [b.instance]
        assert [w.instance for w in records.writers()] == [b.instance]
        records.unregister(b.instance)
        assert records.writers() == []
    assert client.zrange(WRITERS_INDEX, 0, -1) == []  # unregister removes its entry too


def test_a_store_without_time_is_written_on_this_machines_clock(redis_factory: RedisFactory) -> None:
    """Some managed stores rename or disable TIME: the records are still kept and read."""
    server = redis_factory(extra_args=("--rename-command", "TIME", ""))
    (writer,) = writers_of([spec(8001, KV)], ["/runs/a"])
    with TierRecords(server.url) as records:
        records.register(writer)
        assert [w.instance for w in records.writers()] == [writer.instance]
    expiry = server.client().zscore(WRITERS_INDEX, writer.instance)
    assert expiry is not None and abs(expiry - (time.time() + TTL_S)) < 30


def test_a_writer_record_expires_on_its_own(redis_server: RedisServer) -> None:
    (writer,) = writers_of([spec(8001, KV)], ["/runs/a"])
    with TierRecords(redis_server.url) as records:
        records.register(writer)
    ttl = redis_server.client().ttl(WRITER_PREFIX + writer.instance)
    assert 0 < ttl <= TTL_S


def test_a_differing_writer_is_refused_naming_the_field_and_the_fix(redis_server: RedisServer) -> None:
    seeded = KV.model_copy(update={"hash_seed": "7", "set_by": {"hash_seed": ENVIRONMENT}})
    with recorded(redis_server.url, writers_of([spec(8001, KV)], ["/runs/a"]), warn=pytest.fail):
        with pytest.raises(TierKvMismatch) as err:
            check_writers(redis_server.url, "redis://127.0.0.1", [spec(9001, seeded)], allow_mixed=False)
        assert "hash seed (PYTHONHASHSEED) 7 (environment) here, unset (kvstack) there" in err.value.message
        assert "/runs/a" in err.value.message and err.value.exit_code == 2
        assert "PYTHONHASHSEED" in (err.value.hint or "") and "--allow-mixed-tier" in (err.value.hint or "")
        # --allow-mixed-tier: served, with the warning
        (warning,) = check_writers(
            redis_server.url, "redis://127.0.0.1", [spec(9001, seeded)], allow_mixed=True
        )
        assert "hash seed" in warning and "its own" in warning
        # The same KV is no mismatch, and a launch's own records are not compared with it.
        assert check_writers(redis_server.url, "r", [spec(9001, KV)], allow_mixed=False) == []
        assert check_writers(redis_server.url, "r", [spec(8001, seeded)], allow_mixed=False) == []
    with TierRecords(redis_server.url) as records:
        assert records.writers() == []  # removed when the block ended


def test_a_password_never_reaches_an_error(redis_factory: RedisFactory) -> None:
    server = redis_factory(password=PASSWORD)
    wrong = server.url_with("not-the-password")
    warnings: list[str] = []
    with recorded(wrong, writers_of([spec(8001, KV)], ["/runs/a"]), warn=warnings.append):
        pass
    assert len(warnings) == 1 and "could not be written" in warnings[0]
    assert "not-the-password" not in warnings[0]
    (unchecked,) = check_writers(wrong, "redis://127.0.0.1", [spec(9001, KV)], allow_mixed=False)
    assert "not compared" in unchecked and "not-the-password" not in unchecked
    assert isinstance(writers_of([spec(8001, KV)], ["/x"])[0], TierWriter)


def test_doctor_lists_the_layouts_and_warns_when_two_are_written_at_once(redis_server: RedisServer) -> None:
    from kvstack.hardware.snapshot import RemoteInfo
    from kvstack.remote.checks import writer_checks
    from kvstack.top.sources import redis_stats

    other = KV.model_copy(update={"chunk_tokens": 512})
    with recorded(redis_server.url, writers_of([spec(8001, KV), spec(8002, KV)], ["/a", "/b"]), pytest.fail):
        (one,) = layouts(redis_server.url)
        assert one.fingerprint == KV.fingerprint() and len(one.live_writers) == 2
        assert "chunk size 256" in one.summary and "hash seed (PYTHONHASHSEED) unset" in one.summary
        info = RemoteInfo(url="r", reachable=True, kv_layouts=layouts(redis_server.url))
        assert [c.status for c in writer_checks(info)] == ["ok"]
        with recorded(redis_server.url, writers_of([spec(9001, other)], ["/c"]), pytest.fail):
            info = RemoteInfo(url="r", reachable=True, kv_layouts=layouts(redis_server.url))
            (check,) = writer_checks(info)
            assert check.status == "warn" and "2 KV layouts are written at once" in check.message
            assert "chunk size 512" in check.message
            live = redis_stats(redis_server.url).live_layouts
            assert live is not None and set(live) == {KV.fingerprint(), other.fingerprint()}
    # Stopped: both layouts are still what the tier holds, with no live writer.
    held = layouts(redis_server.url)
    assert len(held) == 2 and all(not k.live_writers for k in held)
