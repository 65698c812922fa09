"""`kvstack top` as a user runs it: the real CLI in a subprocess against the stand-in server."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.cli_run import isolated_env, run_cli
from tests.support.deps import ROOT
from tests.support.stream_server import ServerKnobs, StreamServer

KEY = "top-cli-key-9876"


def traffic(url: str, stop: threading.Event) -> None:
    prompt = " ".join(f"t{i}" for i in range(300))
    while not stop.is_set():
        httpx.post(
            url + "/v1/completions",
            json={"prompt": prompt, "max_tokens": 1},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        httpx.post(url + "/reset_prefix_cache")  # the next one comes from the offload tier
        time.sleep(0.05)


@pytest.fixture
def busy_server() -> object:
    knobs = ServerKnobs(connector="lmcache", lmcache_mp=True, l2_fraction=0.5, api_key=KEY)
    with StreamServer(knobs) as srv:
        stop = threading.Event()
        thread = threading.Thread(target=traffic, args=(srv.url, stop), daemon=True)
        thread.start()
        yield srv
        stop.set()
        thread.join(5)


def test_once_json_reports_the_window(busy_server: StreamServer, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    url = busy_server.url
    res = run_cli(
        [
            "top",
            "--url",
            url,
            "--lmcache",
            url,
            "--once",
            "--json",
            "--interval",
            "1",
            "--api-key-file",
            str(key_file),
        ],
        ROOT,
        isolated_env(tmp_path),
    )
    assert res.code == 0, res.stderr
    assert not res.survivors
    doc = json.loads(res.stdout)
    assert doc["schema"] == "kvstack.top/1"
    assert 0.9 < doc["window_s"] < 5
    server = doc["servers"][0]
    assert server["up"] and server["requests"] > 0 and server["prompt_tokens_per_s"] > 0
    assert server["ttft_p50_s"] > 0
    assert server["sources"]["dram"]["tokens"] > 0 and server["sources"]["disk"]["tokens"] > 0
    shares = sum(v["share"] for v in server["sources"].values())
    assert shares == pytest.approx(1.0)
    [lm] = doc["lmcache"]
    assert (
        lm["l1_hit_tokens"] > 0
        and lm["l2_hit_tokens"] > 0
        and lm["l1_hit_tokens_total"] >= lm["l1_hit_tokens"]
    )
    assert KEY not in res.stdout + res.stderr


def test_once_without_json_prints_the_screen(busy_server: StreamServer, tmp_path: Path) -> None:
    url = busy_server.url
    res = run_cli(
        ["top", "--url", url, "--lmcache", url, "--once", "--interval", "0.5"], ROOT, isolated_env(tmp_path)
    )
    assert res.code == 0, res.stderr
    assert "DRAM (LMCache L1)" in res.stdout and url in res.stdout


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--url", "http://127.0.0.1:1", "--interval", "0"], "--interval must be between"),
        (["--url", "http://127.0.0.1:1", "--json"], "--json prints one window"),
        (["--url", "ftp://x:1", "--once"], "is not an http(s) URL"),
        (["--run-dir", "/nonexistent/run"], "no launch.json"),
        (["--once"], "no kvstack serve run"),  # no run under the (empty) state dir
        (["--url", "http://127.0.0.1:1", "--remote", "redis://:pw-secret-1@h"], "redis"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], needle: str, tmp_path: Path) -> None:
    res = run_cli(["top", *argv], ROOT, isolated_env(tmp_path))
    assert res.code == 2, (res.stdout, res.stderr)
    errors = [line for line in res.err_lines if not line.startswith("warning: ")]  # --remote with a password
    assert errors[0].startswith("error: ") and needle in res.stderr
    assert "Traceback" not in res.stderr and "pw-secret-1" not in res.stderr


def test_a_server_that_is_down_is_data_not_an_error(tmp_path: Path) -> None:
    srv = StreamServer().start()
    url = srv.url
    srv.stop()
    res = run_cli(
        ["top", "--url", url, "--once", "--json", "--interval", "0.2"], ROOT, isolated_env(tmp_path)
    )
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["servers"][0]["up"] is False
    assert any("not answering" in w for w in doc["warnings"])


def read_until(fd: int, needles: tuple[str, ...], timeout_s: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(n in seen for n in needles):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 65536).decode(errors="replace")
            except OSError:
                break
    return seen


def exit_code(proc: subprocess.Popen[bytes], master: int, timeout_s: float) -> int | None:
    """``proc``'s exit code once it ends, reading its terminal meanwhile: a process whose terminal is
    not read blocks writing its last frames, and restoring the screen on exit, once the pty is full."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        read_until(master, ("\x00never",), 0.2)
    return proc.poll()


def _ctrl_c_as_on_a_terminal() -> None:
    # A test run started in the background (`pytest ... &` from a script) has SIGINT ignored, and a
    # Python started with it ignored keeps it so: Ctrl-C would never reach kvstack top here.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def live(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    master, slave = pty.openpty()
    env = isolated_env(tmp_path, {"COLUMNS": "200", "LINES": "50", "TERM": "xterm"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstack", "top", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=env,
        start_new_session=True,
        preexec_fn=_ctrl_c_as_on_a_terminal,
    )
    os.close(slave)
    return proc, master


def test_live_view_on_a_terminal_refreshes_and_q_leaves_with_0(
    busy_server: StreamServer, tmp_path: Path
) -> None:
    url = busy_server.url
    proc, master = live(["--url", url, "--lmcache", url, "--interval", "0.5"], tmp_path)
    try:
        screen = read_until(master, ("DRAM (LMCache L1)", "prompt tokens by source", "disk tier (L2 fs)"), 30)
        assert "DRAM (LMCache L1)" in screen and "DRAM tier" in screen, screen[-3000:]
        os.write(master, b"q")
        assert exit_code(proc, master, 10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_live_view_leaves_on_ctrl_c_with_0(tmp_path: Path) -> None:
    with StreamServer() as srv:
        proc, master = live(["--url", srv.url, "--interval", "0.3"], tmp_path)
        try:
            assert "servers" in read_until(master, ("servers",), 30)
            os.killpg(proc.pid, signal.SIGINT)
            assert exit_code(proc, master, 10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
