from __future__ import annotations

import pytest

from kvstack.hardware.snapshot import RemoteInfo
from kvstack.remote.checks import remote_checks, remote_warnings

GIB = 1 << 30


def info(**kw: object) -> RemoteInfo:
    base: dict[str, object] = {
        "url": "redis://cache:6379",
        "reachable": True,
        "server_version": "7.0.15",
        "maxmemory_bytes": 64 * GIB,
        "maxmemory_policy": "allkeys-lru",
        "latency_s": 0.0004,
        "read_bw_bytes_per_s": 2.0e9,
        "write_bw_bytes_per_s": 1.5e9,
    }
    base.update(kw)
    return RemoteInfo.model_validate(base)


def test_a_capped_allkeys_store_has_no_warning_and_ok_checks() -> None:
    good = info()
    assert remote_warnings(good) == []
    checks = {c.name: c for c in remote_checks(good)}
    assert {c.status for c in checks.values()} == {"ok"}
    assert "7.0.15" in checks["remote"].message and "0.40 ms" in checks["remote"].message
    assert "2.0 GB/s" in checks["remote.bandwidth"].message


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"maxmemory_bytes": 0}, "maxmemory 0"),
        ({"maxmemory_policy": "noeviction"}, "'noeviction'"),
        ({"maxmemory_policy": "volatile-lru"}, "'volatile-lru'"),
        ({"maxmemory_bytes": None, "maxmemory_policy": None}, "unknown"),
    ],
)
def test_memory_settings_that_let_kv_keys_fill_the_server_warn(
    fields: dict[str, object], needle: str
) -> None:
    bad = info(**fields)
    warnings = remote_warnings(bad)
    assert any(needle in w for w in warnings), warnings
    memory = next(c for c in remote_checks(bad) if c.name == "remote.memory")
    assert memory.status == "warn" and needle in memory.message


def test_unreachable_is_one_failing_check_with_the_reason() -> None:
    down = RemoteInfo(url="redis://cache:6379", reachable=False, error="cannot connect: refused")
    assert remote_warnings(down) == []
    assert [(c.name, c.status) for c in remote_checks(down)] == [("remote", "fail")]
    assert "refused" in remote_checks(down)[0].message


def test_a_failed_bandwidth_probe_warns() -> None:
    partial = info(read_bw_bytes_per_s=None, write_bw_bytes_per_s=None, error="bandwidth probe failed: OOM")
    bw = next(c for c in remote_checks(partial) if c.name == "remote.bandwidth")
    assert bw.status == "warn" and "OOM" in bw.message
