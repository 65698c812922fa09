"""Preflight against a real redis-server on loopback (started by the fixtures in conftest.py)."""

from __future__ import annotations

import logging
import re
import subprocess

import pytest

from kvstack.errors import NetworkTargetError
from kvstack.remote.checks import remote_checks, remote_warnings
from kvstack.remote.preflight import KEY_PREFIX, preflight, require_reachable
from tests.integration.conftest import RedisFactory, RedisServer

pytestmark = pytest.mark.integration

PASSWORD = "kv-pass-7f3a9c"
SAMPLE = 64 * 1024


def installed_version(server: RedisServer) -> str:
    out = subprocess.run([server.binary, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"v=(\S+)", out)
    assert m, out
    return m.group(1)


def test_figures_of_a_default_server(redis_server: RedisServer) -> None:
    got = preflight(redis_server.url, sample_bytes=SAMPLE, samples=4)
    assert got.reachable and got.error is None
    assert got.server_version == installed_version(redis_server)
    assert got.latency_s is not None and 0 < got.latency_s < 1
    assert got.read_bw_bytes_per_s is not None and got.read_bw_bytes_per_s > 0
    assert got.write_bw_bytes_per_s is not None and got.write_bw_bytes_per_s > 0
    # What the server itself reports for the same settings.
    config = redis_server.client().config_get("maxmemory*")
    assert got.maxmemory_bytes == int(config["maxmemory"]) == 0
    assert got.maxmemory_policy == config["maxmemory-policy"] == "noeviction"


def test_temporary_key_is_deleted(redis_server: RedisServer) -> None:
    preflight(redis_server.url, sample_bytes=SAMPLE, samples=2)
    assert redis_server.client().keys(f"{KEY_PREFIX}*") == []
    assert redis_server.client().dbsize() == 0


def test_default_policies_warn_that_kv_keys_fill_the_server(redis_server: RedisServer) -> None:
    warnings = remote_warnings(preflight(redis_server.url, sample_bytes=SAMPLE, samples=2))
    assert any("maxmemory 0" in w for w in warnings)
    assert any("noeviction" in w for w in warnings)


def test_capped_allkeys_server_passes(redis_factory: RedisFactory) -> None:
    server = redis_factory(extra_args=("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
    got = preflight(server.url, sample_bytes=SAMPLE, samples=2)
    assert got.maxmemory_bytes == 64 * 1024 * 1024  # Redis: 1mb = 1024*1024 bytes
    assert got.maxmemory_policy == "allkeys-lru"
    assert remote_warnings(got) == []
    assert {c.status for c in remote_checks(got)} == {"ok"}


def test_volatile_policy_warns(redis_factory: RedisFactory) -> None:
    server = redis_factory(extra_args=("--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"))
    warnings = remote_warnings(preflight(server.url, sample_bytes=SAMPLE, samples=2))
    assert len(warnings) == 1 and "volatile-lru" in warnings[0]


def test_config_disabled_falls_back_to_info(redis_factory: RedisFactory) -> None:
    # Managed Redis services often rename or disable CONFIG.
    server = redis_factory(
        extra_args=(
            "--maxmemory",
            "32mb",
            "--maxmemory-policy",
            "allkeys-lfu",
            "--rename-command",
            "CONFIG",
            "",
        )
    )
    got = preflight(server.url, sample_bytes=SAMPLE, samples=2)
    assert got.reachable
    assert (got.maxmemory_bytes, got.maxmemory_policy) == (32 * 1024 * 1024, "allkeys-lfu")


def test_unreachable_port(redis_server: RedisServer) -> None:
    redis_server.stop()
    got = preflight(redis_server.url, timeout_s=1.0)
    assert got.reachable is False and got.error and "cannot connect" in got.error
    assert [c.status for c in remote_checks(got)] == ["fail"]


def test_password_server_accepts_the_right_password(redis_factory: RedisFactory) -> None:
    server = redis_factory(password=PASSWORD)
    got = preflight(server.url, sample_bytes=SAMPLE, samples=2)
    assert got.reachable and got.server_version
    assert PASSWORD not in got.model_dump_json()


@pytest.mark.parametrize("given", ["wrong-password-1234", None])
def test_wrong_or_missing_password_is_an_auth_failure_without_the_secret(
    redis_factory: RedisFactory, given: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_factory(password=PASSWORD)
    url = server.url_with(given)
    caplog.set_level(logging.DEBUG)
    got = preflight(url, timeout_s=2.0)
    assert got.reachable is False
    assert got.error is not None and got.error.startswith("authentication failed")
    with pytest.raises(NetworkTargetError) as err:
        require_reachable(url, timeout_s=2.0)
    assert err.value.hint is not None and "password" in err.value.hint
    everything = " ".join(
        [
            got.model_dump_json(),
            err.value.message,
            err.value.hint,
            caplog.text,
            *(c.message for c in remote_checks(got)),
        ]
    )
    for secret in (PASSWORD, given or PASSWORD):
        assert secret not in everything


def test_redis_restarted_between_two_preflights(redis_server: RedisServer) -> None:
    before = preflight(redis_server.url, sample_bytes=SAMPLE, samples=2)
    assert before.reachable
    redis_server.stop()
    assert preflight(redis_server.url, timeout_s=1.0).reachable is False
    redis_server.start()
    after = preflight(redis_server.url, sample_bytes=SAMPLE, samples=2)
    assert after.reachable and after.server_version == before.server_version
    assert after.read_bw_bytes_per_s is not None and after.read_bw_bytes_per_s > 0
