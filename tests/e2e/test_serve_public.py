"""`kvstack serve --host 0.0.0.0 --api-key-file FILE` on the demo model with a real vLLM: no
unauthenticated control of the engine, and the key in no command line, run dir file or output.

From 127.0.0.1, without the key, every control route of vLLM 0.32 (the development and RL routes
VLLM_SERVER_DEV_MODE would add, and those vLLM always serves, e.g. /scale_elastic_ep) answers
401, 403 or 404, as do /invocations and /tokenize, which vLLM's own key check leaves open;
completions work with the key. `kvstack validate` against it, given the key in KVSTACK_API_KEY,
says why the DRAM tier cannot be forced there (no development endpoints on a public bind).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from kvstack.clients.control import control_headers, read_control_token
from kvstack.engines.vllm_guard import classify
from tests.e2e.conftest import (
    ServeSession,
    env_for_tests,
    kvstack_cmd,
    start_serve,
    stop,
    wait_http_ready,
    wait_no_engine,
)
from tests.integration.test_vllm_guard_app import DEV_ROUTES
from tests.support.deps import ROOT
from tests.unit.engines.test_vllm_guard import CONTROL

KEY = f"sk-e2e-public-{secrets.token_hex(8)}"
AUTH = {"Authorization": f"Bearer {KEY}"}
# Routes that run the model or its tokenizer outside /v1: vLLM's own check never asks for the key.
UNGUARDED_CLIENT_ROUTES = ("/invocations", "/tokenize", "/detokenize", "/generative_scoring")
DEV_GET_ROUTES = ("/is_sleeping", "/server_info", "/is_paused", "/weight_info", "/get_world_size")


@pytest.fixture(scope="module")
def public_server(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSession]:
    tmp = tmp_path_factory.mktemp("public")
    key_file = tmp / "api.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    session = start_serve(tmp, "--host", "0.0.0.0", "--api-key-file", str(key_file), "--no-validate")
    try:
        wait_http_ready(session, headers=AUTH)
        yield session
    finally:
        if session.proc.poll() is None:
            stop(session)
        wait_no_engine(session.port)


def control_routes(session: ServeSession) -> dict[str, str]:
    """Path -> method of every control route: those the running server lists (with the key), the
    ones dev mode would add, and the others vllm 0.32 registers (tests/unit/engines/test_vllm_guard.py)."""
    listed = httpx.get(session.base_url + "/openapi.json", headers=AUTH, timeout=30)
    assert listed.status_code == 200, listed.text[:300]
    routes = {
        path: ("POST" if "post" in ops else next(iter(ops)).upper())
        for path, ops in listed.json()["paths"].items()
    }
    for path in [*DEV_ROUTES, *CONTROL]:
        routes.setdefault(path, "GET" if path in DEV_GET_ROUTES else "POST")
    return {p: m for p, m in routes.items() if classify(p) == "control"}


def test_no_control_route_answers_without_the_key(public_server: ServeSession) -> None:
    base = public_server.base_url
    routes = control_routes(public_server)
    assert {"/scale_elastic_ep", "/collective_rpc", "/sleep", "/reset_prefix_cache"} <= set(routes)
    seen: dict[str, int] = {}
    with httpx.Client(timeout=30) as client:
        for path, method in sorted(routes.items()):
            seen[path] = client.request(
                method, base + path.replace("{response_id}", "r1"), json={}
            ).status_code
    print("\ncontrol routes from 127.0.0.1 without the key:", json.dumps(seen, indent=1))
    assert all(code in (401, 403, 404) for code in seen.values()), seen
    # The key is not enough: every control route needs the run's token too, which only kvstack holds.
    with httpx.Client(timeout=30, headers=AUTH) as client:
        keyed = {p: client.request(m, base + p.replace("{response_id}", "r1"), json={}).status_code
                 for p, m in routes.items()}  # fmt: skip
    assert set(keyed.values()) == {403}, keyed
    # Development mode is off (a public bind, and --no-validate, which serve says): its routes do not
    # exist, even for the holder of the key and the token.
    token = read_control_token(public_server.run_dir)
    assert token is not None
    with httpx.Client(timeout=30, headers={**AUTH, **control_headers(token)}) as client:
        for path in sorted(DEV_ROUTES):
            method = "GET" if path in DEV_GET_ROUTES else "POST"
            assert client.request(method, base + path, json={}).status_code == 404, path
    assert "--no-validate: vLLM's development endpoints" in public_server.output()


def test_completions_need_the_key_and_work_with_it(public_server: ServeSession) -> None:
    base = public_server.base_url
    body = {"model": "demo", "prompt": "the cache", "max_tokens": 4}
    assert httpx.post(base + "/v1/completions", json=body, timeout=60).status_code == 401
    ok = httpx.post(base + "/v1/completions", json=body, headers=AUTH, timeout=60)
    assert ok.status_code == 200, ok.text
    answer = ok.json()
    assert isinstance(answer["choices"][0]["text"], str), answer
    assert answer["usage"]["completion_tokens"] >= 1, answer
    for path in UNGUARDED_CLIENT_ROUTES:
        assert (
            httpx.post(base + path, json={"model": "demo", "prompt": "x"}, timeout=30).status_code == 401
        ), path
    # The probes stay open: load balancers and Prometheus carry no key.
    assert httpx.get(base + "/health", timeout=30).status_code == 200
    assert httpx.get(base + "/metrics", timeout=30).status_code == 200


def test_only_the_engine_listens_on_the_public_address(public_server: ServeSession) -> None:
    listening = {
        c.laddr.port: c.laddr.ip
        for p in psutil.Process(public_server.proc.pid).children(recursive=True)
        for c in _connections(p)
        if c.status == psutil.CONN_LISTEN
    }
    port = public_server.port
    assert listening.get(port) == "0.0.0.0", listening
    # LMCache's cache server has no authentication: loopback only, whatever --host says.
    assert listening.get(port + 1) == "127.0.0.1" and listening.get(port + 2) == "127.0.0.1", listening
    # Nothing else the unit started (vLLM's internal sockets included) listens beyond loopback.
    others = {p: ip for p, ip in listening.items() if p != port}
    assert all(ip in ("127.0.0.1", "::1") for ip in others.values()), others


def _connections(p: psutil.Process) -> list[Any]:
    try:
        return list(p.net_connections(kind="inet"))
    except psutil.Error:
        return []


def test_the_key_is_in_no_command_line_file_or_output(public_server: ServeSession) -> None:
    for proc in psutil.process_iter(["pid", "cmdline"]):
        assert KEY not in " ".join(proc.info["cmdline"] or []), proc.info["pid"]
    engine = [
        p
        for p in psutil.Process(public_server.proc.pid).children(recursive=True)
        if "--middleware" in p.cmdline()
    ]
    assert engine, "the engine kvstack started"
    # The engine holds the key in its environment, which only its owner can read.
    environ = Path(f"/proc/{engine[0].pid}/environ")
    assert stat.S_IMODE(environ.stat().st_mode) & 0o077 == 0
    assert f"VLLM_API_KEY={KEY}".encode() in environ.read_bytes()
    for path in public_server.run_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    out = public_server.output()
    assert KEY not in out
    assert "every local user" not in out  # a key from a file: no argv warning
    assert "without an API key" not in out


# Its premise (overflowing the pool takes more than validate's 64 requests) holds for bf16's pool,
# not float32's (an AVX2-only host), where validate overflows it instead: a sweep, not CI.
@pytest.mark.sweep
def test_validate_says_why_a_tier_cannot_be_forced(public_server: ServeSession, tmp_path: Path) -> None:
    env = {k: v for k, v in env_for_tests().items() if k != "VLLM_API_KEY"}
    env["KVSTACK_API_KEY"] = KEY
    lmcache = public_server.cache_server_url
    argv = kvstack_cmd(
        "validate",
        "--url",
        public_server.base_url,
        "--tier",
        "cpu",
        "--lmcache",
        lmcache,
        "--repeat",
        "1",
        "--json",
    )
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert KEY not in res.stdout + res.stderr
    report = json.loads(res.stdout)
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["warm"]["verdict"] == "pass", steps["warm"]  # the key from the variable works
    tier = steps["tier:cpu"]
    print("\ntier:cpu on a public bind:", tier["verdict"], tier["reason"])
    assert res.returncode == 1 and tier["verdict"] == "fail"
    assert (
        "cannot drop the GPU copy" in tier["reason"] and "/reset_prefix_cache is not served" in tier["reason"]
    )
    assert os.environ.get("KVSTACK_API_KEY") != KEY  # the test's own environment was not changed
