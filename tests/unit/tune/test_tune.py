"""tune's proof by measurement end to end on the stand-in engine (tests/support/stream_server.py: a
real HTTP server with a block prefix cache, an offload tier and TTFT from prefill and tier costs):
the ranking, then none and the best-ranked candidates replayed through bench --trace's replay, each
judged by bench --check-correctness's judgement, and the measured winner kept.

The same sessions give two traces: short prompts, where the offload path's fixed cost outweighs
what its tier saves (none wins), and 4x longer ones, where reuse dominates (offload wins).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvstack.errors import InputError, Interrupted
from kvstack.planning.tuned import TUNED_JSON, TunedLayout
from kvstack.tune.prove import queue
from kvstack.tune.tune import rank_inputs
from tests.unit.tune.helpers import (
    REQUESTS,
    STANDIN_OFFLOAD_S,
    StandIn,
    options,
    read,
    tune,
    write_calibration,
)


def measured(out: Path) -> dict[str, object]:
    doc = json.loads((out / "results.json").read_text())
    assert isinstance(doc["measured"], dict)
    return doc


def test_short_prompts_none_wins_by_measurement(tmp_path: Path) -> None:
    engines = StandIn()
    run = tune(options(tmp_path, 32), start=engines)
    assert run.proof is not None and run.proof.verdict is not None
    assert engines.started[0] == "none" and len(engines.started) == 2
    none, offload = run.proof.measured
    assert none.stats is not None and offload.stats is not None
    assert none.correct and offload.correct and none.ok == offload.ok == REQUESTS
    # Offload loses every request here: its median is worse than none's beyond the noise, so it is out
    # whatever the model said, and the answer is none.
    assert offload.stats.p50.value - none.stats.p50.value > offload.stats.p50.noise + none.stats.p50.noise
    assert run.proof.verdict.winner == "none"
    assert "p50" in run.proof.verdict.excluded[offload.label] and "beyond the noise" in run.proof.verdict.why
    tuned = TunedLayout.model_validate_json((run.out / TUNED_JSON).read_text())  # type: ignore[operator]
    assert tuned.connector == "none" and tuned.chosen_by == "measured" and tuned.created
    assert tuned.measured["p50_s"] == none.stats.p50.value
    # Both engines got the very same prompts.
    assert engines.sent["none"] == engines.sent[offload.label]


def test_long_prompts_offload_wins_by_measurement(tmp_path: Path) -> None:
    engines = StandIn()
    run = tune(options(tmp_path, 128), start=engines)
    assert run.proof is not None and run.proof.verdict is not None
    none, offload = run.proof.measured
    assert none.stats is not None and offload.stats is not None
    assert run.proof.verdict.winner == offload.label and offload.connector == "lmcache-mp"
    assert offload.stats.p50.value < none.stats.p50.value / 1.3
    assert offload.stats.p90.value < none.stats.p90.value / 2
    # The tier served what the engine's pool lost; the slice is predicted for the same requests.
    assert offload.measured_tokens["dram"] > 0.5 * sum(offload.measured_tokens.values())
    assert none.measured_tokens.get("dram", 0.0) == 0
    assert offload.predicted["p50_s"] and offload.predicted_tokens["dram"] > 0
    doc = measured(run.out)  # type: ignore[arg-type]
    assert doc["winner"] == offload.label and doc["predicted_winner"]
    m = doc["measured"]
    assert [c["label"] for c in m["candidates"]] == ["none", offload.label]  # type: ignore[index]
    assert m["replay"]["requests_sent"] == REQUESTS  # type: ignore[index]
    tuned = TunedLayout.model_validate_json((run.out / TUNED_JSON).read_text())  # type: ignore[operator]
    assert tuned.connector == "lmcache-mp" and tuned.chosen_by == "measured"
    assert tuned.measured["p50_s"] == offload.stats.p50.value
    for png in ("predicted_vs_measured.png", "candidates.png"):
        assert (run.out / png).stat().st_size > 0  # type: ignore[operator]


def test_a_candidate_serving_wrong_kv_is_out_whatever_its_speed(tmp_path: Path) -> None:
    opts = options(tmp_path, 128, max_candidates=2)
    ranked = rank_inputs(opts, read(opts))[0].ranked
    best, second = (p.candidate.label for p in queue(ranked, 2)[0][1:])
    # The model's best offload candidate serves wrong KV from its tier (hits counted, other tokens).
    run = tune(opts, start=StandIn(corrupt=frozenset({best})))
    assert run.proof is not None and run.proof.verdict is not None
    by_label = {m.label: m for m in run.proof.measured}
    assert not by_label[best].correct and by_label[second].correct
    assert by_label[best].stats is not None and by_label[second].stats is not None
    assert by_label[best].correctness is not None and by_label[best].correctness.failed >= 1
    assert run.proof.verdict.excluded[best].startswith("serves wrong KV: ")
    assert "differ from recompute" in run.proof.verdict.excluded[best]
    assert run.proof.verdict.winner == second


def test_a_stopped_tune_resumes_from_the_candidates_measured(tmp_path: Path) -> None:
    stopped = StandIn(interrupt_at=2)  # Ctrl-C in the middle of the second candidate's replay
    with pytest.raises(Interrupted, match="--resume continues"):
        tune(options(tmp_path, 128, max_candidates=2), start=stopped)
    doc = measured(tmp_path / "tune")
    assert [c["label"] for c in doc["measured"]["candidates"]] == ["none"]  # type: ignore[index]
    assert doc["measured"]["stopped"] == "interrupted"  # type: ignore[index]
    assert not (tmp_path / "tune" / "tuned.json").exists()  # nothing chosen yet
    resumed = StandIn()
    run = tune(options(tmp_path, 128, max_candidates=2, out=None, resume=tmp_path / "tune"), start=resumed)
    assert run.proof is not None and run.proof.verdict is not None
    # none is not measured again; the interrupted candidate is, from the start.
    assert "none" not in resumed.started and len(resumed.started) == 2
    assert resumed.started[0] == stopped.started[1]
    assert run.proof.measured[0].label == "none" and len(run.proof.measured) == 3
    # The resumed engines were sent the prompts the first one was.
    assert all(sent == stopped.sent["none"] for sent in resumed.sent.values())
    # Another trace slice is not the stopped tune: refused, one line.
    with pytest.raises(InputError, match="that tune ran with another replay"):
        tune(options(tmp_path, 128, resume=tmp_path / "tune", out=None, replay_requests=10), start=StandIn())


def test_a_budget_too_small_for_one_candidate_is_refused_before_any_engine_starts(tmp_path: Path) -> None:
    engines = StandIn()
    with pytest.raises(InputError) as info:
        tune(options(tmp_path, 128, budget="60"), start=engines)
    msg = info.value.message
    assert msg.startswith("--budget 1 min is too small for one candidate: one takes about ")
    assert "engine start ~1 min 20 s" in msg and f"replay of {REQUESTS} requests" in msg
    assert engines.started == [] and not (tmp_path / "tune").exists()


def test_the_budget_stops_before_a_candidate_it_cannot_hold(tmp_path: Path) -> None:
    # Each engine start takes 5 min on this clock; the budget holds two candidates' 10 min, not a third.
    engines = StandIn(start_s=300.0)
    opts = options(tmp_path, 32, budget="660", max_candidates=3, replay_requests=24)
    run = tune(opts, start=engines, clock=engines.clock)
    assert run.proof is not None and len(engines.started) == 2
    nxt = [p.candidate.label for p in queue(run.result.ranked, 3)[0]][2]
    assert run.proof.stopped == f"budget: 2 measured; the next, {nxt}, needs about 5 min and 1 min is left"
    assert run.proof.verdict is not None and run.proof.measured[0].wall_s["start"] == 300.0
    doc = measured(run.out)  # type: ignore[arg-type]
    assert doc["measured"]["stopped"] == run.proof.stopped  # type: ignore[index]
    assert doc["measured"]["estimate"]["from"] in {m.label for m in run.proof.measured}  # type: ignore[index]


def test_a_candidate_whose_engine_dies_is_out_and_the_tune_goes_on(tmp_path: Path) -> None:
    engines = StandIn(die_at=2)
    run = tune(options(tmp_path, 32, max_candidates=2, replay_requests=24), start=engines)
    assert run.proof is not None and run.proof.verdict is not None and len(engines.started) == 3
    dead = run.proof.measured[1]
    assert dead.error == "vllm exited with code 1 during the bench of layout x" and dead.stats is None
    assert run.proof.verdict.excluded[dead.label] == f"not measured: {dead.error}"
    assert run.proof.measured[2].stats is not None


def test_each_candidate_is_served_as_serve_tuned_serves_a_winner(tmp_path: Path) -> None:
    """What an engine would be started with for a candidate (a dry run: no engine here)."""
    from kvstack.serving.prepare import prepare
    from kvstack.serving.request import ServeRequest
    from kvstack.tune.engines import candidate_request
    from tests.unit.tune.helpers import NO_GPU

    opts = options(tmp_path, 128, knob=["l1-size-gb=0.5", "chunk-size=512"])
    ranked = rank_inputs(opts, read(opts))[0].ranked
    pick = next(p for p in ranked if p.candidate.offloads and not p.candidate.not_settable)
    base = ServeRequest(hardware=NO_GPU, cache_dir=tmp_path / "cache", validate_after_start=False)
    request = candidate_request(base, tmp_path / "tune" / "runs", pick, 3, "p50")
    assert request.tuned == tmp_path / "tune" / "runs" / "03" / TUNED_JSON
    # Its own private disk-tier directory under the cache root, not the one earlier candidates wrote.
    assert request.cache_dir.parent == tmp_path / "cache" and request.cache_dir.name.startswith("tune-03-")
    assert request.cache_dir.stat().st_mode & 0o777 == 0o700
    again = candidate_request(base, tmp_path / "tune" / "runs", pick, 3, "p50")
    assert again.cache_dir != request.cache_dir
    launch = prepare(request.model_copy(update={"offload": pick.candidate.connector}))
    plan = launch.plan
    assert plan.transfer.connector == "lmcache-mp" and plan.cache.chunk_size == 512
    assert [t.size_bytes for t in plan.offload_tiers if t.kind == "cpu"] == [pick.candidate.dram_bytes]
    server = " ".join(launch.replicas[0].spec.helpers[0].argv)
    assert "--chunk-size 512" in server and "--l1-size-gb 0.5" in server
    assert launch.replicas[0].record()["tuned"]["winner"] == pick.candidate.label
    # A gated candidate: kvstack's gated connector, with the gate as its threshold.
    gated = next(p for p in ranked if p.candidate.gate is not None and p.candidate.gate.kind == "prompt")
    request = candidate_request(base, tmp_path / "tune" / "runs", gated, 4, "p50")
    launch = prepare(request.model_copy(update={"offload": "lmcache-mp"}))
    assert launch.plan.transfer.gate_prompt_tokens == gated.candidate.gate.tokens  # type: ignore[union-attr]
    argv = launch.replicas[0].spec.server.argv
    kvt = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert kvt["kv_connector"] == "GatedLMCacheMPConnector"
    assert kvt["kv_connector_extra_config"]["kvstack.gate_prompt_tokens"] == gated.candidate.gate.tokens  # type: ignore[union-attr]
    assert launch.replicas[0].record()["tuned"]["winner"] == gated.candidate.label


def test_each_candidate_starts_on_an_empty_disk_tier_that_is_removed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate served by kvstack must not read the files an earlier candidate left in the disk
    tier (a 1-in-40 tune here measured a disk candidate serving 157,952 of its 225,280 prompt tokens
    from the previous candidate's files), and a tune must not leave each candidate's tier behind."""
    from contextlib import contextmanager

    import kvstack.serving.start_layout as sized
    from kvstack.serving.request import ServeRequest
    from kvstack.tune.engines import serve_starter
    from tests.unit.tune.helpers import NO_GPU

    opts = options(tmp_path, 128)
    ranked = rank_inputs(opts, read(opts))[0].ranked
    pick = next(p for p in ranked if p.candidate.offloads and not p.candidate.not_settable)
    seen: list[Path] = []

    def starter(request: Any, overrides: Any, events: Any) -> Any:
        @contextmanager
        def serve(connector: str) -> Any:
            assert not any(request.cache_dir.iterdir())  # nothing an earlier candidate wrote
            (request.cache_dir / "chunk").write_bytes(b"kv")
            seen.append(request.cache_dir)
            yield connector

        return serve

    monkeypatch.setattr(sized, "sized_layout_starter", starter)
    base = ServeRequest(hardware=NO_GPU, cache_dir=tmp_path / "cache", validate_after_start=False)
    start = serve_starter(base, tmp_path / "tune" / "runs", None, ranked, "p50")
    for index in (1, 2):
        with start(pick.candidate, index) as layout:
            assert layout == pick.candidate.connector
    assert len(set(seen)) == 2 and not any(p.exists() for p in seen)
    assert (tmp_path / "cache").is_dir()  # the user's cache root stays


def test_each_replay_refits_the_model_that_predicts_the_next_candidate(tmp_path: Path) -> None:
    # A calibration from somewhere else: the offload path 5 ms a request (the stand-in's costs 40 ms),
    # recompute twice the stand-in's.
    cal = json.loads(write_calibration(tmp_path / "true.json").read_text())
    for layout in cal["layouts"].values():
        c = layout["calibration"]
        c["linear_s_per_token"] *= 2
        if layout.get("offload"):
            c["hit_s"] = c["hit_s"] - STANDIN_OFFLOAD_S + 0.005
    wrong = tmp_path / "elsewhere.json"
    wrong.write_text(json.dumps(cal))
    run = tune(options(tmp_path, 128, max_candidates=2, calibration=wrong), start=StandIn())
    assert run.proof is not None and len(run.proof.measured) == 3
    ratios = [m.stats.p50.value / m.predicted["p50_s"] for m in run.proof.measured if m.stats and m.predicted]
    # none and the first offload candidate are predicted from the calibration alone; the second
    # from none's replay and the first one's: within 1.3x where the calibration was not.
    assert len(ratios) == 3 and not 1 / 1.3 < ratios[1] < 1.3, ratios
    assert 1 / 1.3 < ratios[2] < 1.3, ratios
    refits = measured(run.out)["measured"]["refits"]  # type: ignore[arg-type, index]
    assert [r["after"] for r in refits] == [[m.label for m in run.proof.measured[: i + 1]] for i in range(3)]
    fit = refits[-1]["by_connector"]["lmcache-mp"]
    assert fit["miss_s"] + fit["chunk_s"] * 8 > 0.6 * STANDIN_OFFLOAD_S
    # The refit replaces the calibration tune keeps: plan --calibration and tune --calibration read it.
    from kvstack.bench.replay.served_calibration import served_calibration_from

    kept = served_calibration_from(run.out)  # type: ignore[arg-type]
    assert kept.source.startswith("kvstack tune's replays of") and kept.offload_layout == "lmcache-mp"
    assert kept.plain.linear_s == pytest.approx(refits[-1]["plain"]["linear_s_per_token"])
    assert kept.offload is not None and kept.offload.miss_s == pytest.approx(fit["miss_s"])
