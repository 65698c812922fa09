"""The canary's check (canary/checker.py) against a stand-in engine (a real HTTP server,
tests/support/stream_server.py): a failed check is scored by a second recompute before it counts, so
a recompute that a busy batch moved is not wrong KV, and KV that is wrong fails both."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from kvstack.canary.checker import NOISE_PROBES, CanaryConfig
from kvstack.canary.runner import CanaryRunner
from kvstack.validation.report import TierTarget, ValidationTarget
from tests.support.stream_server import ServerKnobs, StreamServer

# An offload tier serves every re-asked probe (the engine's own cache never hits).
TIERED = ServerKnobs(connector="native", gpu_hit_cap=0)
CONFIG = CanaryConfig(interval_s=0.2, budget=1.0, probe_tokens=64)
# The canary scores its first NOISE_PROBES cold answers for the noise floor; the next scoring request
# is the first check's recompute.
FIRST_CHECK_SCORE = NOISE_PROBES


def checks_of(srv: StreamServer, run_dir: Path, count: int) -> list[dict[str, object]]:
    """The first ``count`` checks the canary made against ``srv``, written to the run's events."""
    target = ValidationTarget(
        base_url=srv.url,
        engine="vllm",
        connector="native",
        tiers=[TierTarget(kind="cpu")],
        correctness_tokens=8,
    )
    runner = CanaryRunner(target, CONFIG, "warn", run_dir)
    runner.start()
    path = run_dir / "events.jsonl"
    found: list[dict[str, object]] = []
    try:
        deadline = time.monotonic() + 60
        while len(found) < count and time.monotonic() < deadline:
            time.sleep(0.1)
            rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
            found = [r for r in rows if r["kind"] == "canary-check"]
    finally:
        runner.stop()
    assert len(found) >= count, f"{len(found)} checks in 60 s"
    return found[:count]


def test_a_recompute_that_moved_is_scored_again_and_the_check_passes(tmp_path: Path) -> None:
    knobs = replace(TIERED, shifted_scores=(FIRST_CHECK_SCORE,), score_shift=0.2)
    with StreamServer(knobs) as srv:
        first, second = checks_of(srv, tmp_path, 2)
        scored = srv.scores
    assert first["served_from"] == "cpu" and first["verdict"] == "pass"
    assert "passed on a second recompute; the first put it 0.200 nats from recompute" in str(first["detail"])
    assert second["verdict"] == "pass" and second["detail"] == ""
    # The noise probes, the first check's two recomputes, at least the second check's one.
    assert scored >= NOISE_PROBES + 3


def test_wrong_kv_fails_both_recomputes(tmp_path: Path) -> None:
    with StreamServer(replace(TIERED, corrupt_tier_from=0)) as srv:
        (check,) = checks_of(srv, tmp_path, 1)
        scored = srv.scores
    assert check["verdict"] == "fail" and "over the gate" in str(check["detail"])
    assert scored >= NOISE_PROBES + 2  # the check's recompute, then the second one


def test_a_probe_whose_decode_sits_off_its_prefill_passes_beside_its_recompute(tmp_path: Path) -> None:
    """Every scoring from the first check's on sits 0.3 nats off (a prompt on which the engine's decode
    and prefill differ, whatever the KV's source): both recomputes fail the check, then the probe is
    answered by a recompute that reads no cache, scored the same way, and the check passes beside it."""
    knobs = replace(TIERED, shifted_scores_from=FIRST_CHECK_SCORE, score_shift=0.3)
    with StreamServer(knobs) as srv:
        (check,) = checks_of(srv, tmp_path, 1)
        scored = srv.scores
    assert check["served_from"] == "cpu" and check["verdict"] == "pass"
    assert "within half of it of the recompute's own answer to this prompt (0.300 nats" in str(
        check["detail"]
    )
    # The noise probes, the check's two recomputes, the recompute's answer (with prompt log-probabilities:
    # it reads no cache) and its scoring.
    assert scored >= NOISE_PROBES + 4


def test_wrong_kv_fails_beside_the_recomputes_own_answer_too(tmp_path: Path) -> None:
    knobs = replace(TIERED, shifted_scores_from=FIRST_CHECK_SCORE, score_shift=0.3, corrupt_tier_from=0)
    with StreamServer(knobs) as srv:
        (check,) = checks_of(srv, tmp_path, 1)
    assert check["verdict"] == "fail"
    assert "the recompute's own answer to this prompt sits 0.300 nats from the same scorer" in str(
        check["detail"]
    )
