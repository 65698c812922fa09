"""`kvstack validate` as a user runs it: the real CLI in a subprocess against a real server."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

from tests.support.stream_server import ServerKnobs, StreamServer

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def kvstack(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstack", "validate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def test_pass_prints_the_table_and_exits_0() -> None:
    with StreamServer() as srv:
        res = kvstack("--url", srv.url, "--prompt-tokens", "512", "--repeat", "1")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for word in ("step", "TTFT", "speedup", "evidence", "verdict", "cold", "warm", "diagnosis"):
        assert word in out
    assert "vllm:prefix_cache_hits +496" in out
    summary = " ".join(out.strip().split("PASS (", 1)[1].split())
    assert summary.startswith(
        "512-token prompts, 1 rounds; warm >= 1.5x cold, each tier >= 1.2x its recompute"
    )
    assert "correctness: 16 tokens, typical disagreement with recompute <= 0.050 nats" in summary


def test_json_and_out_file(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    with StreamServer(ServerKnobs(api_key="sk-cli-secret-1")) as srv:
        res = kvstack(
            "--url",
            srv.url,
            "--json",
            "--out",
            str(out),
            "--repeat",
            "1",
            env={"KVSTACK_API_KEY": "sk-cli-secret-1"},
        )
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout)
    assert printed["overall"] == "PASS" and printed == json.loads(out.read_text())
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "sk-cli-secret-1" not in res.stdout + res.stderr + out.read_text()


def test_degraded_lmcache_fails_with_exit_1_and_names_it(tmp_path: Path) -> None:
    disk = tmp_path / "kv"
    disk.mkdir()
    with StreamServer(ServerKnobs(connector="lmcache", degraded=True)) as srv:
        res = kvstack(
            "--url", srv.url, "--cache-dir", str(disk), "--log", str(LOGS / "vllm_lmcache_degraded.log"),
            "--repeat", "1", "--json",
        )  # fmt: skip
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert report["overall"] == "FAIL"
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["tier:disk"]["verdict"] == "fail"
    assert "lmcache-degraded-mode" in steps["diagnosis"]["reason"]


def test_nothing_listening_is_a_user_mistake() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = kvstack("--url", f"http://127.0.0.1:{port}")
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"error: nothing is listening at http://127.0.0.1:{port}",
        "hint: start the server (kvstack serve ...) or correct --url",
    ]


def test_bad_options_exit_2_without_traceback(tmp_path: Path) -> None:
    cases = [
        (["--url", "http://127.0.0.1:1", "--engine", "tgi"], "--engine must be one of vllm, sglang"),
        (["--url", "http://127.0.0.1:1", "--tier", "nvme"], "--tier must be one of cpu, disk, remote"),
        (["--url", "http://127.0.0.1:1", "--tier", "disk"], "--tier disk needs the disk tier's directory"),
        (["--url", "ftp://x"], "is not an http(s) URL like http://HOST:PORT"),
        (["--url", "http://127.0.0.1:1", "--min-speedup", "abc"], "--min-speedup"),
        (["--url", "http://127.0.0.1:1", "--log", str(tmp_path / "none.log")], "does not exist"),
        (
            ["--url", "http://127.0.0.1:1", "--offload", "swap"],
            "--offload must be one of lmcache, lmcache-mp",
        ),
        (
            ["--url", "http://127.0.0.1:1", "--min-tier-speedup", "0.9"],
            "--min-tier-speedup must be a number >= 1.0",
        ),
        (["--url", "http://127.0.0.1:1", "--top-k", "0"], "--top-k must be between 1 and 20"),
        (["--url", "http://127.0.0.1:1", "--chunk-tokens", "0"], "--chunk-tokens must be a positive number"),
        (
            [
                "--url",
                "http://127.0.0.1:1",
                "--remote",
                "redis://127.0.0.1:1",
                "--remote-file",
                str(tmp_path),
            ],
            "--remote and --remote-file both give the remote store",
        ),
    ]
    for args, text in cases:
        res = kvstack(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert text in res.stderr and "Traceback" not in res.stderr
