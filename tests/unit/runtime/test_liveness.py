"""A critical helper or the engine that stops answering (SIGSTOP) is a death to the supervisor:
real processes, and a real HTTP server in a thread for the probe itself."""

from __future__ import annotations

import http.server
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.runtime import liveness
from kvstack.runtime.liveness import HangWatch
from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.supervisor import HUNG, Supervisor
from tests.unit.runtime.test_supervisor import (
    PY,
    SERVE,
    engine_and_cache_server,
    free_port,
    script,
    served_engine,
    spec,
    wait_gone,
)

# The bound a hang is noticed within, from the probe's own figures: the first probe after at most
# one interval, then ``misses`` probes that each time out, with an interval between them.
BOUND_S = liveness.EVERY_S * liveness.MISSES + liveness.TIMEOUT_S * liveness.MISSES


class Health(http.server.ThreadingHTTPServer):
    """/health on loopback, in a thread; ``hang`` makes every request wait (the connection is taken,
    no answer comes: a SIGSTOPped or deadlocked server as its client sees it), ``delay_s`` slows
    each answer down."""

    daemon_threads = True

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.release = threading.Event()
        self.hang_next = 0  # this many requests more get no answer, then it answers again
        self.delay_s = 0.0
        self.answered = 0
        lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    silent = outer.hang.is_set() or outer.hang_next > 0
                    outer.hang_next = max(0, outer.hang_next - 1)
                if silent:
                    outer.release.wait(60)
                    return
                time.sleep(outer.delay_s)
                outer.answered += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/health"


@pytest.fixture
def health() -> Iterator[Health]:
    srv = Health()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


def _until_hung(watch: HangWatch, name: str, timeout_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if watch.hung(name) is not None:
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def test_a_server_that_stops_answering_is_hung_within_the_bound(health: Health) -> None:
    watch = HangWatch()  # the figures serve runs with
    try:
        watch.watch("engine", health.url)
        time.sleep(2.5)
        assert watch.hung("engine") is None and health.answered >= 1  # answering: never hung
        health.hang.set()
        noticed = _until_hung(watch, "engine", BOUND_S + 5)
        assert noticed is not None and noticed <= BOUND_S + 1.0, noticed
        silent = watch.hung("engine")
        assert silent is not None and liveness.TIMEOUT_S * liveness.MISSES <= silent <= noticed + 0.1
    finally:
        watch.close()


def test_a_slow_answer_or_fewer_misses_than_the_limit_is_not_a_hang(health: Health) -> None:
    # A timeout well above the slow answer: on a loaded 2-core machine a thread can wait its turn.
    watch = HangWatch(every_s=0.05, timeout_s=2.0, misses=3)
    try:
        health.delay_s = 0.3  # slow, within the timeout
        watch.watch("engine", health.url)
        time.sleep(2.0)
        assert watch.hung("engine") is None and health.answered >= 3
        health.delay_s = 0.0
        answered = health.answered
        health.hang_next = 2  # two misses in a row, then it answers again
        deadline = time.monotonic() + 15
        while health.answered <= answered + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health.hang_next == 0 and health.answered > answered + 2
        assert watch.hung("engine") is None
        health.hang.set()  # now for good: three in a row
        noticed = _until_hung(watch, "engine", 15)
        assert noticed is not None and noticed <= 3 * 0.05 + 3 * 2.0 + 1.0, noticed
    finally:
        watch.close()


def test_a_stopped_engine_is_found_hung_and_its_unit_restarts(tmp_path: Path) -> None:
    """The engine alive but not answering /health (SIGSTOP): found within the helpers' bound, and
    handled as a hung cache server is: the unit restarts (not a death that ends serving)."""
    port = free_port()
    server = served_engine(tmp_path, port)
    with Supervisor(spec(server, port=port), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(20)
        assert sup.liveness.url("engine") == f"http://127.0.0.1:{port}/health"
        time.sleep(2.5)
        assert sup.poll_died() is None
        (first,) = [p.popen.pid for p in sup.procs]
        os.kill(first, signal.SIGSTOP)
        t0 = time.monotonic()
        while sup.poll_died() is None and time.monotonic() < t0 + BOUND_S + 10:
            time.sleep(0.05)
        noticed = time.monotonic() - t0
        assert sup.died == ("engine", HUNG) and noticed <= BOUND_S + 1.0, noticed
        assert sup.restartable() and sup.restart_what() == "the engine"
        error = sup.death_error()
        assert error.message.startswith(f"engine stopped answering http://127.0.0.1:{port}/health for ")
        assert "(hung, not dead) during serving" in error.message
        sup.restart(20)
        assert sup.poll_died() is None
        (second,) = [p.popen.pid for p in sup.procs]
        assert wait_gone([first], 5.0) == [] and second != first
        assert sup.liveness.url("engine") is not None  # watched again once ready
    assert wait_gone([second], 5.0) == []


def test_a_dead_engine_still_ends_serving_only_a_hung_one_restarts(tmp_path: Path) -> None:
    port = free_port()
    server = served_engine(tmp_path, port)
    with Supervisor(spec(server, port=port), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(20)
        os.kill(sup.procs[0].popen.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while sup.poll_died() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sup.died == ("engine", -signal.SIGKILL) and not sup.restartable()


def test_a_stopped_cache_server_is_found_hung_and_the_unit_restarts(tmp_path: Path) -> None:
    server, helper, port = engine_and_cache_server(tmp_path)
    with Supervisor(spec(server, [helper], port=port), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(20)
        time.sleep(2.5)  # probes that pass do not count against it
        assert sup.poll_died() is None
        first = [p.popen.pid for p in sup.procs]
        os.kill(first[0], signal.SIGSTOP)
        t0 = time.monotonic()
        deadline = t0 + 30
        while sup.poll_died() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        noticed = time.monotonic() - t0
        assert sup.died == ("lmcache-server", HUNG) and sup.restartable(), noticed
        assert sup.restart_what() == "the cache server, then the engine"
        error = sup.death_error()
        assert "stopped answering http://127.0.0.1:" in error.message and "(hung, not dead)" in error.message
        sup.restart(20)  # SIGTERM cannot stop a stopped process: the stop ends with SIGKILL
        assert sup.poll_died() is None
        second = [p.popen.pid for p in sup.procs]
        assert wait_gone(first, 5.0) == [] and not set(first) & set(second)
    assert wait_gone(second, 5.0) == []


def test_a_plain_helper_is_not_probed(tmp_path: Path) -> None:
    """Only critical helpers and the server: a hang of anything else is not kvstack's to restart."""
    hport = free_port()
    serve = script(tmp_path, "serve.py", SERVE)
    helper = ProcessSpec(
        name="h", argv=[PY, serve, str(hport), "0"], ready_url=f"http://127.0.0.1:{hport}/health"
    )
    server = ProcessSpec(name="engine", argv=[PY, "-c", "import time; time.sleep(60)"])
    with Supervisor(spec(server, [helper]), tmp_path / "run") as sup:
        sup.start()
        assert sup.liveness.url("h") is None
