"""Faults with a real vLLM: degraded LMCache caught, Redis gone while serving, startup crash,
signals, SIGKILL, busy port."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.conftest import (
    ServeSession,
    env_for_tests,
    kvstack_cmd,
    start_serve,
    stop,
    wait_http_ready,
    wait_no_engine,
)
from tests.support.deps import ROOT
from tests.support.redis import RedisFactory


def _finish(session: ServeSession, timeout_s: float = 600) -> int:
    try:
        return session.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        session.proc.kill()
        raise


def _wait_for_engine(session: ServeSession, timeout_s: float = 120) -> list[psutil.Process]:
    """Wait until kvstack has started the engine (it has children and an engine log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert session.proc.poll() is None, session.output()[-3000:]
        log = session.run_dir / "engine.log"
        kids = psutil.Process(session.proc.pid).children(recursive=True)
        if log.exists() and log.stat().st_size > 0 and len(kids) >= 2:
            return kids
        time.sleep(0.5)
    raise AssertionError("the engine never started:\n" + session.output()[-3000:])


def test_lmcache_on_cpu_fails_with_degraded_mode_diagnosis(engine_ready: str, tmp_path: Path) -> None:
    session = start_serve(tmp_path, "--offload", "lmcache", "--exit-after-validate")
    code = _finish(session)
    out = session.output()
    assert code == 1, out[-3000:]
    assert "degraded" in out.lower()
    assert "validation FAILED" in out
    assert not wait_no_engine(session.port)


def _complete(session: ServeSession) -> None:
    body = {"model": "demo", "prompt": "The shared tier went away but", "max_tokens": 4}
    resp = httpx.post(session.base_url + "/v1/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["text"]


def _wait_output(session: ServeSession, needle: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = session.output()
        if needle in out:
            return out
        assert session.proc.poll() is None, out[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} never appeared:\n{session.output()[-3000:]}")


def test_redis_gone_while_serving_engine_serves_and_validate_names_it(
    engine_ready: str, tmp_path: Path, redis_factory: RedisFactory
) -> None:
    """Issue 7: the remote tier's Redis stops; vLLM keeps answering, serve warns, validate fails the tier.

    LMCache is degraded on this CPU-only machine (it never reached Redis), so what this proves is
    the engine and kvstack side; a GPU run shows the tier serving before the outage.
    """
    store = redis_factory(password="e2e-redis-pw")
    session = start_serve(tmp_path, "--offload", "lmcache", "--remote", store.url, "--no-validate")
    try:
        wait_http_ready(session)
        _wait_output(session, "serving at", 60)
        _complete(session)
        store.stop()
        out = _wait_output(session, "is unreachable", 30)  # the watch pings every 10 s
        _complete(session)  # the engine keeps serving
        res = subprocess.run(
            kvstack_cmd("validate", "--url", session.base_url, "--remote", store.url, "--repeat", "1",
                        "--prompt-tokens", "256", "--json"),
            capture_output=True, text=True, timeout=600, cwd=ROOT, env=env_for_tests(),
        )  # fmt: skip
    finally:
        code = stop(session)
    assert code == 0, session.output()[-3000:]
    assert f"remote store redis://:***@127.0.0.1:{store.port}/0 is unreachable" in out
    assert res.returncode == 1, res.stderr[-2000:]
    report = json.loads(res.stdout)
    tier = next(s for s in report["steps"] if s["name"] == "tier:remote")
    assert tier["verdict"] == "fail"
    assert tier["reason"].startswith(f"the remote store redis://:***@127.0.0.1:{store.port}/0 is unreachable")
    assert "e2e-redis-pw" not in session.output() + res.stdout + res.stderr
    assert not wait_no_engine(session.port)


def test_startup_crash_reports_exit_code_and_log_tail(engine_ready: str, tmp_path: Path) -> None:
    session = start_serve(tmp_path, "--exit-after-validate", "--", "--no-such-engine-flag")
    code = _finish(session, 300)
    out = session.output()
    assert code == 1, out[-3000:]
    assert "during startup" in out
    assert "no-such-engine-flag" in out  # the engine's own complaint, from the log tail
    assert str(session.run_dir / "engine.log") in out
    assert "Traceback (most recent call last)" not in out.split("engine.log")[0]


def test_port_in_use_is_refused_before_launch(engine_ready: str, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = subprocess.run(
            kvstack_cmd(
                "serve",
                "--port",
                str(port),
                "--run-dir",
                str(tmp_path / "run"),
                "--cache-dir",
                str(tmp_path / "c"),
            ),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    assert res.returncode == 2, res.stderr
    assert f"{port}" in res.stderr and "in use" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists(), "nothing is written before the preflight passes"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_startup_stops_everything(
    engine_ready: str, tmp_path: Path, sig: signal.Signals
) -> None:
    session = start_serve(tmp_path, "--exit-after-validate")
    tree = _wait_for_engine(session)
    code = stop(session, sig)
    assert code != 0  # interrupted before it was serving
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"survived kvstack: {[(p.pid, p.name()) for p in alive]}"


def test_sigkill_of_kvstack_leaves_no_engine(engine_ready: str, tmp_path: Path) -> None:
    session = start_serve(tmp_path, "--exit-after-validate")
    tree = _wait_for_engine(session)
    session.proc.send_signal(signal.SIGKILL)
    session.proc.wait(10)
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"survived a SIGKILLed kvstack: {[(p.pid, p.name()) for p in alive]}"
