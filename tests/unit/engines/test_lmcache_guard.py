"""kvstack's guard in front of LMCache's cache server: the routes it sorts, the token it takes.

The guard itself is vLLM's (engines/vllm_guard.py), driven here as the ASGI app it wraps with
LMCache's sorting; tests/integration/test_lmcache_guard.py runs it in a real `lmcache server`
against every route LMCache's app serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvstack.engines import lmcache_guard
from kvstack.engines.lmcache_guard import kind_of, own_shm_name, pool_name, sweep_stale_pools, take_token
from kvstack.engines.render import render
from kvstack.engines.vllm_guard import ControlGuard
from kvstack.names import CONTROL_ENV, CONTROL_HEADER
from tests.support.asgi_guard import through_guard
from tests.unit.engines.cases import HUB_FACTS, SOFTWARE, make_options, make_plan

TOKEN = "tok-" + "t" * 40
# Some of lmcache 0.5.6's routes (the integration test lists them all from the app).
CONTROL = [
    "/cache/clear",
    "/cache/objects",
    "/cache/prefetches",
    "/cache/prefetches/r1",
    "/cache/checksums",
    "/env",
    "/loglevel",
    "/metrics/reset",
    "/run_script",
    "/status",
    "/quota/salt",
    "/reconfigure/fs/l2/add",
    "/docs",
    "/",
    "/a_route_a_later_lmcache_adds",
]


def status(
    path: str, headers: dict[str, str], monkeypatch: pytest.MonkeyPatch, method: str = "POST"
) -> int | None:
    """What the guard LMCache runs behind answers from loopback (None: passed on to LMCache)."""
    monkeypatch.setenv("VLLM_API_KEY", "sk-not-lmcaches")  # an inherited key: not LMCache's concern
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8002),
    }
    reached, sent = through_guard(
        lambda app: ControlGuard(app, kind_of=kind_of, token=TOKEN, key_env=None), scope
    )
    return None if reached is not None else int(sent[0]["status"])


@pytest.mark.parametrize("path", ["/healthcheck", "/metrics"])
def test_health_and_metrics_are_open(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert kind_of(path) == "probe"
    assert status(path, {}, monkeypatch, method="GET") is None


@pytest.mark.parametrize("path", CONTROL)
def test_every_other_route_wants_the_token_on_loopback_too(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert kind_of(path) == "control"
    assert status(path, {}, monkeypatch) == 403
    assert status(path, {CONTROL_HEADER: TOKEN[:-1]}, monkeypatch) == 403
    assert status(path, {CONTROL_HEADER: TOKEN, "Origin": "http://evil.example"}, monkeypatch) == 403
    # The run's token is all it takes: LMCache has no key, an inherited VLLM_API_KEY is not asked for.
    assert status(path, {CONTROL_HEADER: TOKEN}, monkeypatch) is None


def test_the_token_leaves_the_environment_and_none_closes_the_routes_to_everyone() -> None:
    env = {CONTROL_ENV: TOKEN, "PATH": "/bin"}
    assert take_token(env) == (TOKEN, True) and env == {"PATH": "/bin"}
    first, given = take_token({})
    second, _ = take_token({"PATH": "/bin"})
    assert not given and len(first) >= 32 and first != second


def test_serve_starts_the_cache_server_through_the_guard_with_the_token_in_its_environment() -> None:
    plan = make_plan(connector="lmcache-mp", cpu_gib=8)
    out = render(plan, make_options(control_token=TOKEN), SOFTWARE["vllm"], HUB_FACTS)
    (helper,) = out.helpers
    assert helper.argv[1:4] == ["-m", lmcache_guard.__name__, "server"]
    assert helper.env[CONTROL_ENV] == TOKEN and TOKEN not in " ".join(helper.argv)
    assert TOKEN in out.secrets and TOKEN not in str(out.public())
    assert helper.ready_url is not None and helper.ready_url.endswith("/healthcheck")  # a probe: open


def test_the_shm_name_is_made_unique_to_the_servers_process() -> None:
    args = ["server", "--port", "8001", "--shm-name", "kvstack", "--http-port", "8002"]
    assert own_shm_name(args, 4242) == [
        "server",
        "--port",
        "8001",
        "--shm-name",
        "kvstack-4242",
        "--http-port",
        "8002",
    ]
    assert own_shm_name(["server", "--shm-name", "theirs"], 4242) == ["server", "--shm-name", "theirs"]
    assert own_shm_name(["server"], 4242) == ["server"]


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def test_pools_of_servers_that_are_gone_are_removed_and_no_other(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    names = [
        pool_name(dead),  # a killed server's: removed
        pool_name(alive),  # a running one's
        f"lmcache_l1_pool_{dead}",  # LMCache's own naming: not kvstack's to remove
        f"{pool_name(dead)}-x",
        "psm_0b6749dd",
    ]
    assert names[0] == f"lmcache_l1_pool_kvstack-{dead}"  # LMCache's prefix and the guard's name
    for name in names:
        (tmp_path / name).write_bytes(b"kv")
    assert sweep_stale_pools(tmp_path) == [names[0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])
    assert sweep_stale_pools(tmp_path / "missing") == []
