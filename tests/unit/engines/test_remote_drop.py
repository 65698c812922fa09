"""The rendered LMCache cache server without its Redis adapter (serving drops a hung remote tier)."""

from __future__ import annotations

import json

from kvstack.engines.remote_drop import without_remote_tier
from kvstack.runtime.specs import LaunchSpec
from tests.unit.engines.cases import REDIS_PASSWORD, REDIS_URL, REDIS_URL_REDACTED
from tests.unit.engines.test_lmcache import helper_flag, mp


def _with_remote(**tiers: float) -> LaunchSpec:
    return mp(remote_gib=10, remote_url=REDIS_URL_REDACTED, options={"remote_url": REDIS_URL}, **tiers)


def test_the_resp_adapter_and_its_credentials_go_the_rest_stays() -> None:
    spec = _with_remote(cpu_gib=8, disk_gib=20)
    dropped = without_remote_tier(spec)
    assert dropped is not None
    (before,), (after,) = spec.helpers, dropped.helpers
    kinds = [json.loads(a)["type"] for a in helper_flag(dropped, "--l2-adapter")]
    assert kinds == ["fs_native"]  # the disk tier stays, Redis goes
    assert helper_flag(dropped, "--l2-adapter") == helper_flag(spec, "--l2-adapter")[:1]
    removed = [a for a in before.argv if a not in after.argv]
    assert len(removed) == 1 and json.loads(removed[0])["type"] == "resp"
    assert len(before.argv) - len(after.argv) == 2  # the flag and its value
    assert after.env == {} and REDIS_PASSWORD not in json.dumps(after.model_dump())
    assert after.unset_env_prefixes == ["LMCACHE_"]  # inherited LMCACHE_RESP_* stay cleared too
    assert dropped.server == spec.server and dropped.ports == spec.ports


def test_a_remote_only_server_keeps_its_staging_buffer() -> None:
    dropped = without_remote_tier(_with_remote())
    assert dropped is not None and helper_flag(dropped, "--l2-adapter") == []
    assert helper_flag(dropped, "--l1-size-gb")  # it still serves the engine, from L1


def test_nothing_to_drop_without_a_resp_adapter() -> None:
    assert without_remote_tier(mp(cpu_gib=8, disk_gib=20)) is None
