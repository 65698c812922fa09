"""`kvstack plan --slo-ttft` through the real CLI: each layout's predicted capacity and its bound,
in the human form and in --json (from a served calibration on the CPU platform); the SLO's
companion flags refused without it."""

from __future__ import annotations

import json
from pathlib import Path

from kvstack.profiles import profiles_dir
from tests.support.calibration import demo_served_ttft
from tests.support.cli_run import one_line_error, run_kvstack

L40S = str(profiles_dir() / "hardware" / "l40s.json")
NO_GPU = str(profiles_dir() / "hardware" / "no-gpu.json")
TRACE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "conversation_1in40.jsonl"
BASE = (
    "--model",
    "llama-3.1-8b",
    "--context",
    "8k",
    "--users",
    "16",
    "--workload",
    "rag-long-doc",
    "--hardware",
    L40S,
)


def test_json_carries_each_layouts_capacity_and_bound() -> None:
    proc = run_kvstack("plan", *BASE, "--slo-ttft", "2000", "--output-tokens", "64", "--json")
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)["capacity"]
    assert cap["ask"] == {"slo_ttft_s": 2.0, "share": 0.9, "output_tokens": 64}
    layouts = cap["layouts"]
    assert layouts[0]["layout"] == "engine" and len(layouts) >= 2
    assert any(lay["bound"] is not None and lay["rate_per_s"] > 0 for lay in layouts)


def test_human_form_names_the_bound() -> None:
    proc = run_kvstack("plan", *BASE, "--slo-ttft", "2000")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(
        i for i, line in enumerate(lines) if line.startswith("predicted capacity under TTFT p90 <= 2000 ms")
    )
    assert "(step-level simulator)" in lines[at]
    assert lines[at + 1].startswith("  workload: synthetic: 200 requests, Poisson arrivals")
    assert lines[at + 2].startswith("  costs: the plan's TTFT model")
    assert lines[at + 3].startswith("  scheduler: 2,048 tokens a step, 256 sequences, 16-token blocks")
    assert lines[at + 4].startswith("  capacity in requests/s (Poisson arrivals")
    assert lines[at + 5].startswith("  engine pool alone: ")
    assert any(
        " requests/s (below " in line and "bound: " in line and "TTFT p50 / p90 at 0.5x" in line
        for line in lines[at + 5 :]
    )


def test_no_capacity_without_the_slo() -> None:
    proc = run_kvstack("plan", *BASE, "--json")
    assert proc.returncode == 0 and "capacity" not in json.loads(proc.stdout)


def test_the_slos_companions_need_it() -> None:
    one_line_error(
        run_kvstack("plan", *BASE, "--slo-share", "0.8"), "--slo-share is read with --slo-ttft only"
    )
    one_line_error(
        run_kvstack("plan", *BASE, "--slo-ttft", "500", "--slo-share", "1.5"), "--slo-share must be at"
    )


def test_a_calibration_predicts_the_cpu_platforms_capacity_and_says_so(tmp_path: Path) -> None:
    """The demo on the CPU platform has no prefill figure: with the costs bench --trace measured on
    it (the recorded calibration), each layout gets a capacity, and the output names those costs."""
    cal = demo_served_ttft(tmp_path / "served-ttft.json", "the demo's recorded calibration")
    args = ("--model", str(profiles_dir() / "demo"), "--hardware", NO_GPU, "--trace", str(TRACE))
    args += ("--offload", "lmcache-mp", "--slo-ttft", "30000", "--output-tokens", "16")
    proc = run_kvstack("plan", *args, "--calibration", str(cal), "--json")
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)["capacity"]
    assert cap["costs_from"].startswith("costs measured on the served engine (the demo's recorded")
    assert [lay["layout"] for lay in cap["layouts"]] == ["engine", "engine+cpu", "engine+cpu+disk"]
    assert cap["traced"] and cap["shares_from"].startswith(f"the trace {TRACE}: its first ")
    assert all(lay["rate_per_s"] > 0 and lay["in_flight"] > 0 for lay in cap["layouts"])
    assert "measured: 103 us a token recomputed" in cap["layouts"][0]["bound"]["source"]
    assert [t["of_capacity"] for t in cap["layouts"][0]["ttft_at"]] == [0.5, 0.9]
    proc = run_kvstack("plan", *args, "--calibration", str(cal))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("predicted capacity under TTFT p90"))
    assert lines[at + 1].startswith(f"  workload: the trace {TRACE}: its first ")
    assert lines[at + 2].startswith("  costs: costs measured on the served engine (the demo's recorded")
    assert "the trace's own rate, is a sweep's rate:" in lines[at + 4]
    assert lines[at + 5].startswith("  engine pool alone: ") and " requests/s (below " in lines[at + 5]
    assert lines[at + 6].startswith("  + cpu: ") and "bound: " in lines[at + 6]
    # Without it, the same plan predicts nothing, as before.
    proc = run_kvstack("plan", *args)
    assert proc.returncode == 0, proc.stderr
    assert "  no prediction: no prefill figure on this platform" in proc.stdout
    assert "  costs: " not in proc.stdout
