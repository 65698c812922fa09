"""The supervisor with real child processes: readiness, death, stop, signals, SIGKILL of kvstack."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from kvstack.errors import EngineError, MissingProgramError
from kvstack.runtime.group import SupervisorGroup
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.status import SupervisorStatus
from kvstack.runtime.supervisor import ProcessFailed, Supervisor, child_env

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable

SERVE = """
import http.server, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
print("starting up", flush=True)
time.sleep(delay)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path in ("/health", "/v1/models")
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *a):
        pass
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

CRASH = """
import sys, time
for i in range(int(sys.argv[1])):
    print(f"line {i}", flush=True)
time.sleep(float(sys.argv[3]))
sys.exit(int(sys.argv[2]))
"""

# Spawns grandchildren (one ignores SIGTERM), writes every pid to a file, then waits.
TREE = """
import json, os, signal, subprocess, sys, time
pidfile, ignore = sys.argv[1], sys.argv[2] == "1"
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"]
kids = [subprocess.Popen(sleeper), subprocess.Popen(stubborn, stdout=subprocess.PIPE)]
kids[1].stdout.readline()  # its SIGTERM handler is in place
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
tmp = pidfile + ".tmp"
with open(tmp, "w") as fh:
    json.dump([os.getpid()] + [k.pid for k in kids], fh)
os.replace(tmp, pidfile)
print("tree up", flush=True)
time.sleep(600)
"""


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def served_engine(tmp_path: Path, port: int) -> ProcessSpec:
    """An "engine" serving /health on ``port`` (the SERVE script)."""
    serve = script(tmp_path, "serve.py", SERVE)
    return ProcessSpec(
        name="engine", argv=[PY, serve, str(port), "0"], ready_url=f"http://127.0.0.1:{port}/health"
    )


def engine_and_cache_server(tmp_path: Path) -> tuple[ProcessSpec, ProcessSpec, int]:
    """(engine, its critical lmcache-server helper, the engine's port)."""
    hport, port = free_port(), free_port()
    server = served_engine(tmp_path, port)
    helper = ProcessSpec(
        name="lmcache-server",
        argv=[PY, server.argv[1], str(hport), "0"],
        ready_url=f"http://127.0.0.1:{hport}/health",
        critical=True,
    )
    return server, helper, port


def spec(
    server: ProcessSpec, helpers: list[ProcessSpec] | None = None, port: int = 1, **kw: object
) -> LaunchSpec:
    return LaunchSpec(
        engine="vllm",
        connector="none",
        server=server,
        helpers=helpers or [],
        base_url=f"http://127.0.0.1:{port}",
        served_model_name="demo",
        **kw,  # type: ignore[arg-type]
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_file(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def wait_died(sup: Supervisor | SupervisorGroup, timeout: float) -> None:
    """Until poll_died reports a death; the test fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while sup.poll_died() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_ready_after_health_and_models_with_status_and_log(tmp_path: Path) -> None:
    port = free_port()
    argv = [PY, script(tmp_path, "serve.py", SERVE), str(port), "0.5"]
    server = ProcessSpec(name="engine", argv=argv, ready_url=f"http://127.0.0.1:{port}/health")
    seen: list[SupervisorStatus] = []
    run_dir = tmp_path / "run"
    with Supervisor(spec(server, port=port), run_dir, on_status=seen.append) as sup:
        sup.start()
        t0 = time.monotonic()
        sup.wait_ready(20)
        assert time.monotonic() - t0 < 10
        assert sup.poll_died() is None
        assert sup.status().phase == "ready"
    log = run_dir / "engine.log"
    assert "starting up" in log.read_text() and "listening" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    phases = [s.phase for s in seen]
    assert "waiting for readiness" in phases and phases[-1] in ("ready", "stopping")
    assert any(s.last_line == "starting up" for s in seen)
    assert all(s.name == "engine" and s.elapsed_s >= 0 for s in seen)


@pytest.mark.parametrize("waiter", ["supervisor", "group"])
def test_start_files_exist_only_while_the_process_starts(tmp_path: Path, waiter: str) -> None:
    # SGLang's key file: read once at start, so on disk only until the server is ready, whether
    # one supervisor waits (wait_ready) or serve's group does (probe_ready).
    from kvstack.runtime.group import SupervisorGroup
    from kvstack.runtime.specs import FileSpec

    port = free_port()
    key_file = tmp_path / "run" / "auth.yaml"
    copy = tmp_path / "read-at-start"
    reader = f"import shutil; shutil.copy({str(key_file)!r}, {str(copy)!r})\n" + SERVE
    argv = [PY, script(tmp_path, "reader.py", reader), str(port), "0.5"]
    server = ProcessSpec(
        name="engine",
        argv=argv,
        ready_url=f"http://127.0.0.1:{port}/health",
        start_files=[FileSpec(path=str(key_file), content="api-key: sk-start-0001\n")],
    )
    sup = Supervisor(spec(server, port=port), tmp_path / "run", handle_signals=waiter == "supervisor")
    with SupervisorGroup(handle_signals=False) as group:
        if waiter == "group":
            group.launch([sup])
            group.wait_ready(20)
        else:
            sup.start()
            sup.wait_ready(20)
        assert copy.read_text() == "api-key: sk-start-0001\n"  # it was there when the server started
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600  # shutil.copy keeps the mode written
        assert not key_file.exists()  # gone once the server is ready
        sup.stop()
    assert not key_file.exists()


def test_start_files_are_removed_when_the_start_fails(tmp_path: Path) -> None:
    from kvstack.runtime.specs import FileSpec

    key_file = tmp_path / "run" / "auth.yaml"
    argv = [PY, script(tmp_path, "crash.py", CRASH), "1", "3", "0.2"]
    server = ProcessSpec(
        name="engine",
        argv=argv,
        ready_url="http://127.0.0.1:1/health",
        start_files=[FileSpec(path=str(key_file), content="api-key: sk-start-0002\n")],
    )
    with pytest.raises(ProcessFailed), Supervisor(spec(server), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(20)
    assert not key_file.exists()


def test_death_during_startup_is_noticed_within_two_seconds(tmp_path: Path) -> None:
    argv = [PY, script(tmp_path, "crash.py", CRASH), "45", "3", "1.0"]
    server = ProcessSpec(name="engine", argv=argv, ready_url="http://127.0.0.1:1/health")
    with Supervisor(spec(server), tmp_path / "run") as sup:
        sup.start()
        with pytest.raises(ProcessFailed) as info:
            sup.wait_ready(60)
    err = info.value
    assert isinstance(err, EngineError) and err.exit_code == 1  # kvstack exits 1
    assert err.process_exit_code == 3
    assert "exited with code 3 during startup" in err.message
    assert err.tail[-1] == "line 44" and len(err.tail) == 30
    assert str(tmp_path / "run" / "engine.log") in err.message
    assert err.hint is not None and "engine.log" in err.hint


# An engine whose core dies in a process of its own, as vLLM's does: the real error first, then
# many lines, then the API server's word that the cause is above (what a log tail shows).
CORE_DIES = """
import sys
at = "(EngineCore pid=2) ERROR 11-28 01:05:18 [core.py:1] "
print(at + "Traceback (most recent call last):", flush=True)
print(at + "  File 'core.py', line 9, in run", flush=True)
print(at + "AssertionError: Sliding window for some but all layers", flush=True)
for i in range(40):
    print(f"shutting down {i}", flush=True)
print("Traceback (most recent call last):", flush=True)
print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
sys.exit(1)
"""


def test_a_death_at_startup_quotes_the_root_cause_above_the_tail(tmp_path: Path) -> None:
    argv = [PY, script(tmp_path, "core_dies.py", CORE_DIES)]
    server = ProcessSpec(name="engine", argv=argv, ready_url="http://127.0.0.1:1/health")
    with Supervisor(spec(server), tmp_path / "run") as sup:
        sup.start()
        with pytest.raises(ProcessFailed) as info:
            sup.wait_ready(60)
    err = info.value
    first = err.message.splitlines()[0]
    assert first.startswith("engine exited with code 1 during startup (pid ")
    assert first.endswith("): AssertionError: Sliding window for some but all layers"), first
    assert not any("Sliding window" in line for line in err.tail)  # the tail alone would not say it


def test_death_notice_latency(tmp_path: Path) -> None:
    argv = [PY, script(tmp_path, "crash.py", CRASH), "1", "7", "1.5"]
    server = ProcessSpec(name="engine", argv=argv, ready_url="http://127.0.0.1:1/health")
    with Supervisor(spec(server), tmp_path / "run") as sup:
        sup.start()
        proc = sup.procs[0].popen
        with pytest.raises(ProcessFailed):
            sup.wait_ready(60)
        noticed = time.monotonic()
        # The child slept 1.5 s after start; it cannot have exited before that.
        started = sup.procs[0].started
        assert proc.returncode == 7
        assert noticed - started < 1.5 + 2.0


def test_timeout_reports_tail_and_keeps_running_until_stop(tmp_path: Path) -> None:
    argv = [PY, script(tmp_path, "crash.py", CRASH), "3", "0", "600"]
    server = ProcessSpec(name="engine", argv=argv, ready_url="http://127.0.0.1:1/health")
    with Supervisor(spec(server), tmp_path / "run", stop_timeout_s=3) as sup:
        sup.start()
        pid = sup.procs[0].popen.pid
        with pytest.raises(ProcessFailed) as info:
            sup.wait_ready(1.0)
        assert "was not ready after 1 s" in info.value.message
        assert info.value.tail == ["line 0", "line 1", "line 2"]
        assert alive(pid)
    assert not alive(pid)


def test_poll_died_while_serving(tmp_path: Path) -> None:
    argv = [PY, script(tmp_path, "crash.py", CRASH), "2", "5", "0.3"]
    with Supervisor(spec(ProcessSpec(name="engine", argv=argv)), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(5)  # no ready_url: ready once started
        wait_died(sup, 5)
        assert sup.poll_died() == 5
        err = sup.death_error()
    assert "exited with code 5 during serving" in err.message and err.tail == ["line 0", "line 1"]


@pytest.mark.parametrize("leader_ignores_term", [False, True])
def test_stop_kills_the_whole_tree(tmp_path: Path, leader_ignores_term: bool) -> None:
    pidfile = tmp_path / "pids.json"
    argv = [PY, script(tmp_path, "tree.py", TREE), str(pidfile), "1" if leader_ignores_term else "0"]
    sup = Supervisor(spec(ProcessSpec(name="engine", argv=argv)), tmp_path / "run", stop_timeout_s=1.5)
    sup.start()
    wait_file(pidfile)
    pids = json.loads(pidfile.read_text())
    assert all(alive(p) for p in pids)
    t0 = time.monotonic()
    sup.stop()
    assert time.monotonic() - t0 < 1.5 + 4.0
    assert wait_gone(pids, 1.0) == []
    sup.stop()  # idempotent


def test_helpers_start_first_and_must_be_ready(tmp_path: Path) -> None:
    hport = free_port()
    helper = ProcessSpec(
        name="lmcache-server",
        argv=[PY, script(tmp_path, "serve.py", SERVE), str(hport), "0.3"],
        ready_url=f"http://127.0.0.1:{hport}/health",
    )
    # The engine refuses to run unless the helper already answers.
    check = f"import socket, sys, time; socket.create_connection(('127.0.0.1', {hport}), 1); time.sleep(600)"
    server = ProcessSpec(name="engine", argv=[PY, "-c", check])
    with Supervisor(spec(server, [helper]), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(10)
        time.sleep(0.5)
        assert sup.poll_died() is None
        assert (tmp_path / "run" / "lmcache-server.log").exists()
        pids = [p.popen.pid for p in sup.procs]
    assert wait_gone(pids, 2.0) == []


def test_a_helper_the_server_waits_for_starts_with_it_and_must_still_be_ready(tmp_path: Path) -> None:
    hport = free_port()
    started = tmp_path / "engine-started"
    # The helper answers only after 1.5 s; the engine notes when it was launched, then waits for it.
    helper = ProcessSpec(
        name="lmcache-server",
        argv=[PY, script(tmp_path, "serve.py", SERVE), str(hport), "1.5"],
        ready_url=f"http://127.0.0.1:{hport}/health",
        starts_with_server=True,
    )
    tmp = f"{started}.tmp"
    note = (
        f"import os, time; open({tmp!r}, 'w').write(repr(time.time())); "
        f"os.replace({tmp!r}, {str(started)!r}); time.sleep(600)"
    )
    server = ProcessSpec(name="engine", argv=[PY, "-c", note])
    with Supervisor(spec(server, [helper]), tmp_path / "run") as sup:
        sup.start()  # returns once the helper is ready
        ready_at = time.time()
        with httpx.Client() as client:
            assert sup.probe_ready(client, "lmcache-server")
        assert [p.spec.name for p in sup.procs] == ["lmcache-server", "engine"]
        # The engine ran while the helper still slept its 1.5 s: launched before the helper answered.
        wait_file(started)
        assert float(started.read_text()) < ready_at - 0.5
        assert sup.poll_died() is None
    # A helper that dies while the server starts beside it stops both, as one waited for first does.
    crash = ProcessSpec(
        name="lmcache-server",
        argv=[PY, script(tmp_path, "crash.py", CRASH), "2", "4", "0.5"],
        ready_url="http://127.0.0.1:1/health",
        starts_with_server=True,
    )
    engine = ProcessSpec(name="engine", argv=[PY, "-c", "import time; time.sleep(600)"])
    sup = Supervisor(spec(engine, [crash]), tmp_path / "run2")
    with pytest.raises(ProcessFailed, match="lmcache-server exited with code 4 during startup"):
        sup.start()
    assert [p.spec.name for p in sup.procs] == ["lmcache-server", "engine"]
    assert wait_gone([p.popen.pid for p in sup.procs], 2.0) == []


def test_secrets_are_masked_in_the_log(tmp_path: Path) -> None:
    secret = "sk-supersecret-1234"
    code = f"print('api key {secret}'); print('remote redis://kv:hunter2pw@cache:6379/0', flush=True)"
    server = ProcessSpec(name="engine", argv=[PY, "-c", code, "--api-key", secret])
    with Supervisor(spec(server, secrets=[secret]), tmp_path / "run") as sup:
        sup.start()
        deadline = time.monotonic() + 5
        while sup.poll_died() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    text = (tmp_path / "run" / "engine.log").read_text()
    assert secret not in text and "hunter2pw" not in text
    assert "api key ***" in text and "redis://kv:***@cache:6379/0" in text
    assert "--api-key ***" in text  # the command line kvstack logs


def test_child_environment(tmp_path: Path) -> None:
    pspec = ProcessSpec(
        name="engine",
        argv=[PY, "-c", "pass"],
        env={"LMCACHE_CONFIG_FILE": "/run/lmcache.yaml", "VLLM_SERVER_DEV_MODE": "1"},
        unset_env=["HF_TOKEN"],
        unset_env_prefixes=["LMCACHE_"],
    )
    base = {"PATH": "/usr/bin", "HF_TOKEN": "x", "LMCACHE_CHUNK_SIZE": "8", "LMCACHE_LOCAL_CPU": "1"}
    env = child_env(pspec, base)
    assert env == {
        "PATH": "/usr/bin",
        "PYTHONUNBUFFERED": "1",
        "LMCACHE_CONFIG_FILE": "/run/lmcache.yaml",
        "VLLM_SERVER_DEV_MODE": "1",
    }


def test_failed_helper_stops_everything_without_a_with_block(tmp_path: Path) -> None:
    helper = ProcessSpec(
        name="lmcache-server",
        argv=[PY, script(tmp_path, "crash.py", CRASH), "2", "4", "0.2"],
        ready_url="http://127.0.0.1:1/health",
    )
    server = ProcessSpec(name="engine", argv=[PY, "-c", "import time; time.sleep(600)"])
    sup = Supervisor(spec(server, [helper]), tmp_path / "run")
    with pytest.raises(ProcessFailed, match="lmcache-server exited with code 4 during startup"):
        sup.start()
    assert [p.spec.name for p in sup.procs] == ["lmcache-server"]  # the engine never started
    assert sup._watchdog.popen is None  # and the watchdog was sent home


def test_missing_program(tmp_path: Path) -> None:
    server = ProcessSpec(name="engine", argv=["/nonexistent/vllm-binary", "serve"])
    with Supervisor(spec(server), tmp_path / "run") as sup, pytest.raises(MissingProgramError) as info:
        sup.start()
    assert "/nonexistent/vllm-binary" in info.value.message


DRIVER = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.errors import Interrupted
from kvstack.runtime.supervisor import Supervisor
run_dir, tree, pidfile = sys.argv[1], sys.argv[2], sys.argv[3]
server = ProcessSpec(name="engine", argv=[sys.executable, tree, pidfile, "0"])
spec = LaunchSpec(engine="vllm", connector="none", server=server, base_url="http://127.0.0.1:1",
                  served_model_name="demo")
sup = Supervisor(spec, Path(run_dir), stop_timeout_s=2)
try:
    sup.start()
    print("started", flush=True)
    time.sleep(600)
except Interrupted as exc:
    print("interrupted:", exc, flush=True)
    sys.exit(130)
"""


def _driver(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int], int]:
    pidfile = tmp_path / "pids.json"
    drv = script(tmp_path, "driver.py", DRIVER.format(root=str(ROOT)))
    tree = script(tmp_path, "tree.py", TREE)
    proc = subprocess.Popen(
        [PY, drv, str(tmp_path / "run"), tree, str(pidfile)], stdout=subprocess.PIPE, text=True
    )
    wait_file(pidfile)
    pids = json.loads(pidfile.read_text())
    watchdogs = [
        c.pid
        for c in psutil.Process(proc.pid).children()
        if "kvstack.runtime.watchdog" in " ".join(c.cmdline())
    ]
    assert len(watchdogs) == 1
    return proc, pids, watchdogs[0]


def test_sigkill_of_kvstack_leaves_no_child(tmp_path: Path) -> None:
    proc, pids, watchdog = _driver(tmp_path)
    assert all(alive(p) for p in pids)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    # The direct child dies by PDEATHSIG at once; the watchdog takes the grandchildren
    # (one ignores SIGTERM, so it waits out the grace period and uses SIGKILL).
    assert wait_gone(pids, 10.0) == []
    assert wait_gone([watchdog], 5.0) == []


def test_sigterm_to_kvstack_stops_everything_and_raises_interrupted(tmp_path: Path) -> None:
    proc, pids, watchdog = _driver(tmp_path)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 130
    assert "interrupted: interrupted by SIGTERM" in out
    assert wait_gone(pids, 1.0) == []
    assert wait_gone([watchdog], 5.0) == []


# A helper that logs the line LMCache's server logs when it lacks the engine's transfer mode.
NO_HANDLER = """
import sys, time
print("server up", flush=True)
time.sleep(float(sys.argv[1]))
print("[2026-11-22 04:12:33,120] LMCache ERROR: No handler registered for operation "
      "register_kv_cache_engine_driven_context (mq.py:800:lmcache.v1.multiprocess)", flush=True)
time.sleep(600)
"""


def test_a_fatal_log_line_ends_the_start_within_seconds_quoting_it(tmp_path: Path) -> None:
    """A helper's line that means the engine can never become ready ends the wait at once."""
    helper = ProcessSpec(
        name="lmcache-server",
        argv=[PY, script(tmp_path, "helper.py", NO_HANDLER), "1.0"],
        fatal_patterns=[r"No handler registered for operation \S+"],
    )
    never = f"http://127.0.0.1:{free_port()}/health"  # nothing listens: the engine never gets ready
    server = ProcessSpec(name="engine", argv=[PY, "-c", "import time; time.sleep(600)"], ready_url=never)
    t0 = time.monotonic()
    with Supervisor(spec(server, [helper]), tmp_path / "run") as sup:
        sup.start()
        with pytest.raises(ProcessFailed) as err:
            sup.wait_ready(300)
        pids = [p.popen.pid for p in sup.procs]
    assert time.monotonic() - t0 < 10
    message = err.value.message
    assert message.startswith("lmcache-server logged '[2026-11-22 04:12:33,120] LMCache ERROR: No handler")
    assert "after which it cannot serve during startup" in message
    assert str(tmp_path / "run" / "lmcache-server.log") in message
    assert wait_gone(pids, 5.0) == []


def test_a_critical_helper_death_restarts_the_unit(tmp_path: Path) -> None:
    """The helper dies; restart() brings back the helper, then the server, on the same ports."""
    server, helper, port = engine_and_cache_server(tmp_path)
    with Supervisor(spec(server, [helper], port=port), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(20)
        first = [p.popen.pid for p in sup.procs]
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while sup.poll_died() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sup.died == ("lmcache-server", -signal.SIGKILL) and sup.restartable()
        sup.restart(20)
        assert sup.poll_died() is None and sup.restarts == 1
        second = [p.popen.pid for p in sup.procs]
        assert [p.spec.name for p in sup.procs] == ["lmcache-server", "engine"]
        assert not set(first) & set(second) and wait_gone(first, 5.0) == []
        log = (tmp_path / "run" / "lmcache-server.log").read_text()
        assert log.count("# kvstack: starting lmcache-server") == 2
    assert wait_gone(second, 5.0) == []


def test_a_server_death_is_not_restartable(tmp_path: Path) -> None:
    server = ProcessSpec(name="engine", argv=[PY, script(tmp_path, "crash.py", CRASH), "1", "3", "0"])
    with Supervisor(spec(server), tmp_path / "run") as sup:
        sup.start()
        deadline = time.monotonic() + 5.0
        while sup.poll_died() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sup.died == ("engine", 3) and not sup.restartable()


def test_disk_warnings_cover_the_disk_tier_only(tmp_path: Path) -> None:
    server = ProcessSpec(name="engine", argv=[PY, "-c", "pass"])
    sup = Supervisor(spec(server, cache_dirs={"disk": str(tmp_path), "cpu": "/dev/shm"}), tmp_path / "run")
    assert sup.disk_warnings(min_free_bytes=1 << 60) and len(sup.disk_warnings(min_free_bytes=1 << 60)) == 1
    assert sup.disk_warnings(min_free_bytes=0) == []
