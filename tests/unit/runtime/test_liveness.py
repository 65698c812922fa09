"""A critical helper that stops answering (SIGSTOP) is a death to the supervisor: real processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.supervisor import HUNG, Supervisor
from tests.unit.runtime.test_supervisor import PY, SERVE, free_port, script, spec, wait_gone


def test_a_stopped_cache_server_is_found_hung_and_the_unit_restarts(tmp_path: Path) -> None:
    hport, port = free_port(), free_port()
    serve = script(tmp_path, "serve.py", SERVE)
    helper = ProcessSpec(
        name="lmcache-server",
        argv=[PY, serve, str(hport), "0"],
        ready_url=f"http://127.0.0.1:{hport}/health",
        critical=True,
    )
    server = ProcessSpec(
        name="engine", argv=[PY, serve, str(port), "0"], ready_url=f"http://127.0.0.1:{port}/health"
    )
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
        error = sup.death_error()
        assert "stopped answering http://127.0.0.1:" in error.message and "(hung, not dead)" in error.message
        sup.restart(20)  # SIGTERM cannot stop a stopped process: the stop ends with SIGKILL
        assert sup.poll_died() is None
        second = [p.popen.pid for p in sup.procs]
        assert wait_gone(first, 5.0) == [] and not set(first) & set(second)
    assert wait_gone(second, 5.0) == []


def test_a_plain_helper_is_not_probed(tmp_path: Path) -> None:
    """Only critical helpers: a hang of anything else is not kvstack's to restart."""
    hport = free_port()
    serve = script(tmp_path, "serve.py", SERVE)
    helper = ProcessSpec(
        name="h", argv=[PY, serve, str(hport), "0"], ready_url=f"http://127.0.0.1:{hport}/health"
    )
    server = ProcessSpec(name="engine", argv=[PY, "-c", "import time; time.sleep(60)"])
    with Supervisor(spec(server, [helper]), tmp_path / "run") as sup:
        sup.start()
        assert sup.liveness.url("h") is None
