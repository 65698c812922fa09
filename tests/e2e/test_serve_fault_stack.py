"""Faults on one served stack (tests/e2e/fault_stack.py), in order, each with its figure in
FIGURES (printed at the end with `pytest -s`, written to $KVSTACK_FAULT_FIGURES); each checked to
change no file outside the cache dir, the run dir and the engines' own caches."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from kvstack.engines.lmcache_guard import SHM_DIR, pool_name
from tests.e2e.fault_stack import (
    EVERY_PATTERN,
    FIGURES,
    PROMPT,
    REDIS_PASSWORD,
    Faulted,
    _complete,
    _fill,
    _requests,
    _same_answer,
    _wait_output,
    no_file_changed,
    served_stack,
)

L2_HITS = "lmcache_mp_lookup_hit_l2_tokens_total"


@pytest.fixture(scope="module")
def faulted(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulted]:
    yield from served_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def _no_file_changed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every fault on the stack: no file outside the cache and run dirs changed (fs_guard.py)."""
    if "faulted" not in request.fixturenames:
        yield
        return
    with no_file_changed(request.getfixturevalue("faulted")):
        yield


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


def test_the_cache_servers_control_routes_answer_only_kvstack(faulted: Faulted) -> None:
    """LMCache's HTTP API behind kvstack's guard (engines/lmcache_guard.py), in the served stack."""
    from tests.support.other_user import send_as_other_user

    url = faulted.session.cache_server_url
    token = (faulted.session.run_dir / "control-token").read_text().strip()
    routes = [("POST", "/cache/clear"), ("GET", "/env"), ("GET", "/status"), ("POST", "/metrics/reset")]
    mine = [httpx.request(m, url + p, json={"tier": "l1"}, timeout=10).status_code for m, p in routes]
    theirs = send_as_other_user([(m, url + p, {}, None) for m, p in routes])
    probes = send_as_other_user(
        [("GET", url + "/healthcheck", {}, None), ("GET", url + "/metrics", {}, None)]
    )
    env = httpx.get(url + "/env", headers={"X-Kvstack-Control": token}, timeout=10)
    assert set(mine) == {403} and set(theirs) == {403} and probes == [200, 200], (mine, theirs, probes)
    assert (
        env.status_code == 200 and token not in env.text and REDIS_PASSWORD in env.text
    )  # only kvstack reads it
    FIGURES["cache server control routes"] = {"refused without the token": len(routes), "probes": probes}


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


def _answers_meanwhile(f: Faulted, stop: threading.Event, t0: float, answered: list[float]) -> None:
    """Ask until ``stop``: one request after another (each may wait as long as it takes)."""
    while not stop.is_set():
        if _complete(f.session, f"meanwhile {len(answered)}: {PROMPT}", timeout_s=300) is not None:
            answered.append(time.monotonic() - t0)
        else:
            time.sleep(0.5)


def test_a_stopped_redis_is_dropped_and_serving_goes_on(faulted: Faulted) -> None:
    """SIGSTOP of Redis: warned within seconds; after the grace window the unit restarts without the
    remote tier and answers again, the same answer as before; SIGCONT: said, the tier stays off."""
    session, store = faulted.session, faulted.store
    assert store.proc is not None
    since = len(session.output())
    answered: list[float] = []
    done = threading.Event()
    t0 = time.monotonic()
    os.kill(store.proc.pid, signal.SIGSTOP)
    asker = threading.Thread(target=_answers_meanwhile, args=(faulted, done, t0, answered), daemon=True)
    asker.start()

    def at(needle: str, timeout_s: float) -> float | None:
        seen = _wait_output(session, needle, since, timeout_s)
        return None if seen is None else round(time.monotonic() - t0, 1)

    try:
        noticed = at("is unreachable or not answering", 30)
        dropping = at("and the engine without the remote tier", 60)
        again = at("serving again without the remote tier", 420)
        while again is not None and not [t for t in answered if t >= again] and time.monotonic() - t0 < 480:
            time.sleep(0.2)  # the first answer of the restarted unit
        same = _same_answer(faulted)
    finally:
        done.set()
        os.kill(store.proc.pid, signal.SIGCONT)
    back = _wait_output(session, "the remote tier stays off for this run", since, 30)
    asker.join(330)
    times = [0.0, *answered]
    after = [t for t in answered if again is not None and t >= again]
    FIGURES["redis SIGSTOP"] = {
        "noticed_s": noticed, "restart_without_tier_at_s": dropping, "serving_again_at_s": again,
        "answers_at_s": [round(t, 1) for t in answered[:6]],
        "first_answer_after_restart_at_s": after and round(after[0], 1),
        "longest_without_answers_s": round(max(b - a for a, b in itertools.pairwise(times)), 1),
        "answers_unchanged": same, "sigcont_noticed_s": back,
    }  # fmt: skip
    out = session.output()[since:]
    assert noticed is not None and dropping is not None and again is not None, out[-4000:]
    assert after and same and back is not None, out[-4000:]
    assert session.proc.poll() is None and out.count("without the remote tier;") == 1  # once, no loop
    assert "restart 1/" not in out  # the restart budget (for deaths) is not spent
    # The run dir's launch record says what runs now (top and a reader of the run dir see no Redis).
    launch = json.loads((session.run_dir / "launch.json").read_text())
    assert '"resp"' not in json.dumps(launch["helpers"]) and "remote" not in launch["tier_adapters"], launch


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
    """kill -9 of LMCache's cache server: noticed within seconds, the unit restarted; the killed
    server's /dev/shm pool (which it could not unlink) removed by the new one's guard; and a prefix
    computed before the kill comes back from the disk tier (the new server's DRAM is empty)."""
    session = faulted.session
    text = f"before the kill: {PROMPT * 4}"  # several of LMCache's 256-token chunks
    assert _complete(session, text) is not None  # computed and stored in DRAM and on disk
    time.sleep(1.0)
    pid = faulted.tree.listener(session.port + 2)
    pool = SHM_DIR / pool_name(pid)
    assert pool.exists(), sorted(p.name for p in SHM_DIR.iterdir())
    since = len(session.output())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    noticed = _wait_output(session, "restarting the cache server", since, 30)
    restarted = _wait_output(session, "restarted: serving again", since, 420)
    total = round(time.monotonic() - t0, 1)
    l2_before = _lmcache_counter(faulted, L2_HITS)
    from_disk = _complete(session, text) is not None and _lmcache_counter(faulted, L2_HITS) > l2_before
    FIGURES["cache server kill -9"] = {
        "noticed_s": noticed, "serving_again_s": restarted and total, "prefix_from_disk_after": from_disk,
        "answered_after": _requests(session, 2, "after-kill"), "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert noticed is not None and noticed < 10 and restarted is not None, session.output()[-4000:]
    assert from_disk, FIGURES["cache server kill -9"]
    assert not pool.exists() and (SHM_DIR / pool_name(faulted.tree.listener(session.port + 2))).exists()
    assert FIGURES["cache server kill -9"]["answers_unchanged"]


def _lmcache_counter(f: Faulted, name: str) -> float:
    from kvstack.clients.metrics import parse_metrics

    text = httpx.get(f.session.cache_server_url + "/metrics", timeout=10).text
    return parse_metrics(text).value(name)


def test_a_stopped_engine_is_restarted(faulted: Faulted) -> None:
    """The engine's API server alive but not answering (SIGSTOP): noticed within the helpers'
    bound (runtime/liveness.py) and handled as a hung cache server is: the unit restarts."""
    session = faulted.session
    pid = faulted.tree.listener(session.port)  # the engine's API server: /health
    since = len(session.output())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        noticed = _wait_output(session, "engine stopped answering", since, 60)
        restarted = _wait_output(session, "restarted: serving again", since, 420)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    total = round(time.monotonic() - t0, 1)
    FIGURES["engine SIGSTOP"] = {
        "noticed_s": noticed, "serving_again_s": restarted and total,
        "answered_after": _requests(session, 2, "after-engine-stop"),
        "answers_unchanged": _same_answer(faulted),
    }  # fmt: skip
    assert noticed is not None and noticed <= 12.0, session.output()[-4000:]
    assert restarted is not None, session.output()[-4000:]
    assert "(hung, not dead)" in session.output()[since:]
    assert "restarting the cache server, then the engine" in session.output()[since:]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert FIGURES["engine SIGSTOP"]["answers_unchanged"]


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
