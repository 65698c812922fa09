"""A launch checks each fact once: the remote URL is parsed where it enters (``RemoteInputs.parsed``),
--port's range is the port layout's to check, and where --cache-dir and --run-dir may be created
is asked before the plan; the launch's preflight then asks only what can change until the start
(a port taken, a write that fails, the disk tier's room) and reaches the real Redis it names."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kvstack.netaddr import check_port
from kvstack.remote.source import RemoteInputs
from kvstack.remoteurl import parse_remote_url
from kvstack.runtime import writable
from kvstack.serving.launch_checks import preflight
from kvstack.serving.prepare import prepare
from kvstack.serving.request import ServeRequest
from tests.support.calls import count_calls
from tests.support.redis import RedisServer, free_port
from tests.unit.planning.helpers import snapshot


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    count_calls(monkeypatch, parse_remote_url, seen, "remote URL parsed")
    count_calls(monkeypatch, check_port, seen, "port range checked")
    count_calls(monkeypatch, writable.require_writable_dir, seen, "directory checked")
    count_calls(monkeypatch, writable.require_room, seen, "room checked")
    return seen


def test_a_launch_with_a_remote_tier_checks_each_fact_once(
    tmp_path: Path, redis_server: RedisServer, counted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC", "off")  # the probe has its own tests; this counts checks
    remote = RemoteInputs(remote=redis_server.url).parsed()
    request = ServeRequest(
        offload="lmcache-mp", port=free_port(), cache_dir=tmp_path / "cache", run_dir=tmp_path / "run"
    ).completed(remote=remote)
    launch = prepare(request, snapshot("no-gpu"))
    assert launch.plan.tier("remote") is not None, launch.plan.reasons  # a remote tier to reach
    preflight(launch)  # the real Redis answers; vLLM and LMCache are installed here
    assert counted == {
        "remote URL parsed": 1,
        "port range checked": 1,
        "directory checked": 2,  # --cache-dir and --run-dir, before the plan
        "room checked": 2,  # the run dir written, the disk tier's room: at the launch
    }, counted
    # The one parse is what the launch carries: the plan's redacted form, the options' credentials.
    options = launch.replicas[0].options
    assert options.remote is remote and launch.plan.transfer.remote_url == remote.redacted()
