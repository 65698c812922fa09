"""SupervisorGroup with real child processes: N replicas ready together, one death stops all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from kvstack.errors import EngineError, MissingProgramError
from kvstack.runtime.group import SupervisorGroup
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.status import SupervisorStatus
from kvstack.runtime.supervisor import ProcessFailed, Supervisor
from tests.unit.runtime.test_supervisor import (
    CRASH,
    PY,
    ROOT,
    SERVE,
    alive,
    free_port,
    script,
    wait_died,
    wait_file,
    wait_gone,
)

# Writes the time it got SIGTERM to a file, then exits: shows the order of a stop.
STAMP_ON_TERM = """
import signal, sys, time
stamp = sys.argv[1]
def on_term(*_):
    with open(stamp, "w") as fh:
        fh.write(repr(time.monotonic()))
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("up", flush=True)
while True:
    time.sleep(0.05)
"""

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def replica(tmp_path: Path, index: int, argv: list[str], port: int = 1, ready: bool = True) -> Supervisor:
    ready_url = f"http://127.0.0.1:{port}/health" if ready else None
    spec = LaunchSpec(
        engine="vllm",
        connector="none",
        server=ProcessSpec(name="engine", argv=argv, ready_url=ready_url),
        base_url=f"http://127.0.0.1:{port}",
        served_model_name="demo",
    )
    return Supervisor(
        spec, tmp_path / f"replica-{index}", handle_signals=False, label=f"replica {index}", stop_timeout_s=2
    )


def serving(tmp_path: Path, index: int, delay: float = 0.3) -> tuple[Supervisor, int]:
    port = free_port()
    argv = [PY, script(tmp_path, "serve.py", SERVE), str(port), str(delay)]
    return replica(tmp_path, index, argv, port), port


def pids(group: SupervisorGroup) -> list[int]:
    return [p.popen.pid for s in group.members for p in s.procs]


def test_every_replica_ready_then_all_stopped(tmp_path: Path) -> None:
    (a, _), (b, _) = serving(tmp_path, 0, 0.2), serving(tmp_path, 1, 1.0)
    with SupervisorGroup() as group:
        group.launch([a, b])
        group.wait_ready(20)
        assert a.status().phase == "ready" and b.status().phase == "ready"
        assert group.poll_died() is None
        started = pids(group)
        assert len(started) == 2 and all(alive(p) for p in started)
    assert wait_gone(started, 2.0) == []
    assert (tmp_path / "replica-0" / "engine.log").exists() and (
        tmp_path / "replica-1" / "engine.log"
    ).exists()


def test_hooks_run_before_any_member_stops_and_a_failing_hook_stops_nothing_less(tmp_path: Path) -> None:
    (a, _) = serving(tmp_path, 0, 0.2)
    seen: list[bool] = []

    def hook() -> None:  # what the canary's halt sees: every member still alive
        seen.append(all(alive(p) for p in pids(group)))
        raise RuntimeError("a hook that fails")

    with SupervisorGroup() as group:
        group.launch([a])
        group.wait_ready(20)
        started = pids(group)
        group.before_stop(hook)
    assert seen == [True]
    assert wait_gone(started, 2.0) == []


def test_a_replica_dying_at_startup_is_named_and_stops_the_rest(tmp_path: Path) -> None:
    slow, _ = serving(tmp_path, 0, 600.0)  # never ready: only the death can end the wait
    crash = replica(tmp_path, 1, [PY, script(tmp_path, "crash.py", CRASH), "5", "9", "0.5"])
    group = SupervisorGroup()
    t0 = time.monotonic()
    group.launch([slow, crash])
    started = pids(group)
    with pytest.raises(ProcessFailed) as info:
        group.wait_ready(60)
    assert time.monotonic() - t0 < 0.5 + 2.0 + 3.0  # noticed within 2 s, stopped within the grace
    err = info.value
    assert isinstance(err, EngineError) and err.exit_code == 1
    assert err.name == "replica 1 engine" and err.process_exit_code == 9
    assert err.message.startswith("replica 1 engine exited with code 9 during startup")
    assert err.tail == [f"line {i}" for i in range(5)]
    assert str(tmp_path / "replica-1" / "engine.log") in err.message
    assert wait_gone(started, 2.0) == []  # the healthy replica went down with it


def test_a_replica_dying_while_serving_is_named(tmp_path: Path) -> None:
    ok, _ = serving(tmp_path, 0)
    dies = replica(tmp_path, 1, [PY, script(tmp_path, "crash.py", CRASH), "1", "3", "1.0"], ready=False)
    with SupervisorGroup() as group:
        group.launch([ok, dies])
        group.wait_ready(20)
        wait_died(group, 10)
        assert group.poll_died() == 3
        err = group.death_error()
        started = pids(group)
    assert "replica 1 engine exited with code 3 during serving" in err.message
    assert wait_gone(started, 2.0) == []


def test_timeout_names_the_replica_that_is_not_ready(tmp_path: Path) -> None:
    ready, _ = serving(tmp_path, 0, 0.1)
    never, _ = serving(tmp_path, 1, 600.0)
    group = SupervisorGroup()
    group.launch([ready, never])
    started = pids(group)
    with pytest.raises(ProcessFailed, match=r"^replica 1 engine was not ready after 2 s"):
        group.wait_ready(2.0)
    assert wait_gone(started, 2.0) == []


def test_a_failed_launch_stops_the_replicas_already_started(tmp_path: Path) -> None:
    first, _ = serving(tmp_path, 0)
    missing = replica(tmp_path, 1, ["/nonexistent/engine"])
    group = SupervisorGroup()
    with pytest.raises(MissingProgramError, match="/nonexistent/engine not found"):
        group.launch([first, missing])
    assert first.procs and wait_gone([first.procs[0].popen.pid], 2.0) == []


def test_stages_stop_last_first_and_a_stage_in_parallel(tmp_path: Path) -> None:
    stamp = script(tmp_path, "stamp.py", STAMP_ON_TERM)
    engines = [replica(tmp_path, i, [PY, "-c", STUBBORN], ready=False) for i in range(3)]
    router = replica(tmp_path, 9, [PY, stamp, str(tmp_path / "router.stamp")], ready=False)
    watcher = replica(tmp_path, 8, [PY, stamp, str(tmp_path / "engine.stamp")], ready=False)
    group = SupervisorGroup()
    group.launch([*engines, watcher])
    group.launch([router])
    group.wait_ready(10)
    time.sleep(0.3)  # the stamp scripts have their SIGTERM handlers in place
    started = pids(group)
    t0 = time.monotonic()
    group.stop()
    took = time.monotonic() - t0
    # Three engines ignore SIGTERM: 2 s grace each in turn would be 6 s; in parallel it is one.
    assert took < 2.0 + 3.0, took
    assert wait_gone(started, 2.0) == []
    router_at = float((tmp_path / "router.stamp").read_text())
    engine_at = float((tmp_path / "engine.stamp").read_text())
    assert router_at < engine_at  # the router in front went first
    group.stop()  # idempotent


def test_status_names_carry_the_replica_and_keep_moving_while_the_group_waits(tmp_path: Path) -> None:
    # serve waits through the group, one engine or several: its live line (elapsed time, last log
    # line) must follow the start as one supervisor's wait does, not freeze at its first second.
    seen: list[SupervisorStatus] = []
    sup, _ = serving(tmp_path, 3, 1.5)
    sup.on_status = seen.append
    with SupervisorGroup() as group:
        group.launch([sup])
        group.wait_ready(20)
    assert {s.name for s in seen} == {"replica 3 engine"}
    assert [s.phase for s in seen if s.phase == "ready"] == ["ready"]
    waiting = [s for s in seen if s.phase == "waiting for readiness"]
    assert max(s.elapsed_s for s in waiting) >= 1.0, [round(s.elapsed_s, 2) for s in waiting]


def test_disk_warnings_once_per_shared_directory(tmp_path: Path) -> None:
    sups = []
    for i in range(2):
        spec = LaunchSpec(
            engine="vllm",
            connector="lmcache",
            server=ProcessSpec(name="engine", argv=[PY, "-c", "pass"]),
            base_url="http://127.0.0.1:1",
            served_model_name="demo",
            cache_dirs={"disk": str(tmp_path)},
        )
        sups.append(Supervisor(spec, tmp_path / f"r{i}", handle_signals=False))
    group = SupervisorGroup()
    group.stages.append(sups)
    assert len(group.disk_warnings(min_free_bytes=1 << 60)) == 1
    assert group.disk_warnings(min_free_bytes=0) == []


DRIVER = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.errors import Interrupted
from kvstack.runtime.group import SupervisorGroup
from kvstack.runtime.supervisor import Supervisor
run_dir, tree, pidfile = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sups = []
for i in range(2):
    server = ProcessSpec(name="engine", argv=[sys.executable, tree, f"{{pidfile}}.{{i}}", "0"])
    spec = LaunchSpec(engine="vllm", connector="none", server=server, base_url="http://127.0.0.1:1",
                      served_model_name="demo")
    sups.append(Supervisor(spec, run_dir / f"replica-{{i}}", stop_timeout_s=2, handle_signals=False,
                           label=f"replica {{i}}"))
group = SupervisorGroup()
try:
    group.launch(sups)
    print("started", flush=True)
    time.sleep(600)
except Interrupted as exc:
    print("interrupted:", exc, flush=True)
    sys.exit(130)
"""


def test_sigterm_to_kvstack_stops_every_replica_tree(tmp_path: Path) -> None:
    from tests.unit.runtime.test_supervisor import TREE

    drv = script(tmp_path, "driver.py", DRIVER.format(root=str(ROOT)))
    tree = script(tmp_path, "tree.py", TREE)
    pidfile = tmp_path / "pids.json"
    proc = subprocess.Popen(
        [PY, drv, str(tmp_path / "run"), tree, str(pidfile)], stdout=subprocess.PIPE, text=True
    )
    everyone: list[int] = []
    for i in range(2):
        wait_file(Path(f"{pidfile}.{i}"))
        everyone += json.loads(Path(f"{pidfile}.{i}").read_text())
    assert len(everyone) == 6 and all(alive(p) for p in everyone)
    children = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130, out
    assert "interrupted: interrupted by SIGTERM" in out
    assert wait_gone(everyone, 2.0) == []
    _, left = psutil.wait_procs(children, timeout=5)
    assert not left, [p.pid for p in left]  # the watchdogs too
