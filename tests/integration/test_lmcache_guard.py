"""LMCache's cache server as serve starts it (kvstack's rendered argv, its disk bound, the guard,
supervised): every route of LMCache's own HTTP app but its probes refuses a request without the
run's control token, from this user and from another local user; kvstack's own callers (validation's
health and L1 clear, the disk bound's deletes, the trace replay's /status, the liveness probe) still work.

A real `lmcache server` (lmcache 0.5.6, CPU; no engine): about 7 s to start and 0.5 GiB here."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from kvstack.clients import control
from kvstack.clients.lmcache_status import cache_server_status
from kvstack.engines.disk_bound import server_argv, server_remove, server_remover
from kvstack.engines.render import render
from kvstack.names import CONTROL_ENV, CONTROL_HEADER
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.supervisor import Supervisor
from kvstack.validation.cache_server import CacheServer
from tests.support.deps import require_engine_module
from tests.support.other_user import can_read_as_other_user, send_as_other_user
from tests.support.ports import free_block
from tests.unit.engines.cases import HUB_FACTS, SOFTWARE, make_options, make_plan

pytestmark = pytest.mark.integration

TOKEN = "run-token-" + "k" * 32
PROBES = {"/healthcheck", "/metrics"}
ROUTES_OF_LMCACHE = """
import json
from lmcache.v1.multiprocess.http_server import app
print(json.dumps([[m, r.path] for r in app.routes for m in sorted(getattr(r, "methods", None) or [])]))
"""


@dataclass
class Served:
    url: str
    sup: Supervisor
    helper: ProcessSpec
    disk: Path
    routes: list[tuple[str, str]]  # (method, path) of every route LMCache's app serves


def _routes(py: str) -> list[tuple[str, str]]:
    import subprocess

    done = subprocess.run([py, "-c", ROUTES_OF_LMCACHE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    pairs = json.loads(done.stdout.strip().splitlines()[-1])
    # A path parameter gets a value; HEAD is GET's twin.
    return [(m, re.sub(r"\{[^}]+\}", "x", p)) for m, p in pairs if m != "HEAD"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    py = require_engine_module("lmcache")
    tmp = tmp_path_factory.mktemp("lmcache-guard")
    port = free_block(3)
    plan = make_plan(
        connector="lmcache-mp",
        platform="cpu",
        gpu_gib=1,
        cpu_gib=0.1,
        disk_gib=0.05,
        disk_path=str(tmp / "d"),
    )
    options = make_options(
        python=py, port=port, cache_root=str(tmp / "cache"), run_dir=str(tmp / "run"), control_token=TOKEN
    )
    spec = render(plan, options, SOFTWARE["vllm-cpu"], HUB_FACTS)
    (helper,) = spec.helpers
    assert helper.env[CONTROL_ENV] == TOKEN and TOKEN not in " ".join(helper.argv)
    assert server_argv(helper.argv)[1:4] == ["-m", "kvstack.engines.lmcache_guard", "server"]
    idle = ProcessSpec(name="engine", argv=[sys.executable, "-c", "import time; time.sleep(3600)"])
    unit = LaunchSpec(
        engine="vllm", connector="lmcache-mp", server=idle, helpers=[helper],
        base_url=f"http://127.0.0.1:{port}", served_model_name="demo", secrets=[TOKEN],
    )  # fmt: skip
    routes = _routes(py)
    with Supervisor(unit, tmp / "run", helper_ready_timeout_s=180) as sup:
        sup.start()  # waits until the helper answers /healthcheck (through the guard)
        assert spec.cache_server_url is not None
        yield Served(spec.cache_server_url, sup, helper, Path(spec.cache_dirs["disk"]), routes)


def test_lmcache_serves_the_routes_the_guard_sorts(served: Served) -> None:
    paths = {p for _, p in served.routes}
    # The routes this test exists for are there (LMCache renaming them would make it vacuous).
    assert {"/cache/clear", "/cache/objects", "/cache/prefetches", "/env", "/metrics/reset"} <= paths
    assert paths >= PROBES and len(served.routes) >= 30


def test_every_route_but_the_probes_refuses_this_user_without_the_token(served: Served) -> None:
    statuses = {}
    with httpx.Client(trust_env=False, timeout=20) as client:
        for method, path in served.routes:
            statuses[(method, path)] = client.request(method, served.url + path).status_code
        env = client.get(served.url + "/env", headers={CONTROL_HEADER: TOKEN})
        wrong = client.post(served.url + "/cache/clear", headers={CONTROL_HEADER: "x" + TOKEN}, json={})
    refused = {k: v for k, v in statuses.items() if k[1] not in PROBES}
    assert set(refused.values()) == {403}, refused
    assert {statuses[("GET", p)] for p in PROBES} == {200}
    assert wrong.status_code == 403
    # With the token /env answers, and the token itself is not in LMCache's environment.
    assert env.status_code == 200 and TOKEN not in env.text and CONTROL_ENV not in env.text


def test_another_local_user_is_refused_every_route_but_the_probes(served: Served) -> None:
    requests = [(m, served.url + p, {}, None) for m, p in served.routes]
    # ... even when they name a token, or send what validation sends.
    requests += [("POST", served.url + "/cache/clear", {CONTROL_HEADER: "guess"}, '{"tier": "l1"}')]
    statuses = send_as_other_user(requests)
    by_route = dict(zip([(m, p) for m, p in served.routes] + [("POST", "guess")], statuses, strict=True))
    refused = {k: v for k, v in by_route.items() if k[1] not in PROBES}
    assert set(refused.values()) == {403}, refused
    assert {by_route[("GET", p)] for p in PROBES} == {200}
    # The token's file in the run dir is no more theirs to read than the server's environment.
    token_file = control.write_control_token(served.sup.run_dir, TOKEN)
    assert not can_read_as_other_user(str(token_file))


def test_validation_clears_l1_and_sees_health_with_the_published_token(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # serve's control index, this test's

    async def calls() -> tuple[str | None, tuple[bool, str]]:
        async with httpx.AsyncClient(trust_env=False) as client:
            server = CacheServer(client, served.url)
            return await server.problem(), await server.clear_l1()

    problem, (ok, said) = asyncio.run(calls())
    assert problem is None and not ok and "HTTP 403" in said  # not this run's: refused
    control.publish(served.url, TOKEN)
    try:
        problem, (ok, said) = asyncio.run(calls())
        status = cache_server_status(served.url)
    finally:
        control.withdraw(served.url, TOKEN)
    assert problem is None and ok, said
    assert status is not None and status.l1_total_bytes > 0  # the trace replay's read of the tiers
    assert cache_server_status(served.url) is None  # without the token: refused, so unknown


def _lmcache_file(directory: Path, i: int) -> Path:
    name = f"demo@0x00000000@0@{i:064x}.data"
    path = directory / name
    path.write_bytes(b"\0" * 4096)
    return path


def test_the_disk_bound_deletes_through_the_guard_with_the_token(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    served.disk.mkdir(parents=True, exist_ok=True)
    victim = _lmcache_file(served.disk, 1)
    without = server_remove(served.url, "fs_native")
    with pytest.raises(urllib.error.HTTPError) as refused:
        without([victim])
    assert refused.value.code == 403
    # The watcher takes the token from its environment, as the disk bound's process has it.
    monkeypatch.setenv(CONTROL_ENV, TOKEN)
    remove = server_remover(server_argv(served.helper.argv), str(served.disk))
    assert remove is not None
    remove([victim])  # DELETE /cache/objects answered 2xx: LMCache's accounting follows


def test_the_liveness_probe_passes_the_guard(served: Served) -> None:
    assert served.sup.liveness.url("lmcache-server") == served.url + "/healthcheck"
    time.sleep(3.5)  # a few probes
    assert served.sup.liveness.hung("lmcache-server") is None and served.sup.poll_died() is None
