"""`kvstack tune --trace FILE` in one step: without --calibration, tune measures its costs on the engine
first, as `bench --trace --compare none,lmcache-mp` would (none, then LMCache's server, each replayed
and calibrated after its replay), ranks with them, and proves the best candidates within the budget;
none's replay is the proof's first candidate, not replayed again (tune/calibration.py). On the
stand-in engines of helpers.py: a stand-in LMCache server for the offload layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.bench.replay.served_calibration import served_calibration_from
from kvstack.errors import InputError, Interrupted
from kvstack.tune.results import TuneResults
from tests.unit.tune.helpers import (
    REQUESTS,
    STANDIN_FETCH_S,
    STANDIN_OFFLOAD_S,
    STANDIN_PREFILL_S,
    StandIn,
    options,
    tune,
)


def test_without_a_calibration_tune_measures_none_and_lmcache_mp_first_and_ranks_with_their_costs(
    tmp_path: Path,
) -> None:
    engines = StandIn()
    run = tune(options(tmp_path, 128, calibration=None), start=engines, start_layout=engines.layout)
    # none, then LMCache's server as bench --compare serves it, then the best candidate: none once.
    assert engines.started[:2] == ["none", "lmcache-mp"] and len(engines.started) == 3
    assert engines.started[2].startswith("lmcache-mp, chunk ") and "none" not in engines.started[2:]
    assert all(sent == engines.sent["none"] for sent in engines.sent.values())  # the same prompts
    # The calibration bench gives from the same replays: the plain path's costs from none's, the
    # offload path's (its fixed cost, its DRAM fetch) from lmcache-mp's, as the stand-ins serve them.
    doc = run.doc
    kept = doc["calibration"]
    assert kept["source"].startswith("measured by this tune: none + lmcache-mp replays of ")
    assert doc["source"]["calibration"] == kept["source"]
    plain, offload = kept["layouts"]["none"], kept["layouts"]["lmcache-mp"]
    assert not plain["offload"] and offload["offload"]
    assert plain["calibration"]["linear_s_per_token"] == pytest.approx(STANDIN_PREFILL_S, rel=0.3)
    extra = offload["calibration"]["hit_s"] - plain["calibration"]["hit_s"]
    assert extra == pytest.approx(STANDIN_OFFLOAD_S, rel=0.25)
    # The fetch is the smallest of the stand-in's delays, so a second test run on the same cores moves
    # it most (1.5e-6 measured once against 4e-6): the right order of magnitude, not a timing.
    assert STANDIN_FETCH_S / 4 <= offload["calibration"]["fetch_s_per_token"]["dram"] <= STANDIN_FETCH_S * 4
    # The ranking used exactly those costs.
    assert run.result.costs is not None
    assert run.result.costs.plain.to_dict() == plain["calibration"]
    assert run.result.costs.default.to_dict() == offload["calibration"]
    # none's replay is the proof's first candidate (its run dir the calibration's), the offload
    # layout bench serves is no candidate here (its plan's sizes are not known to the stand-in).
    assert run.proof is not None and run.proof.verdict is not None
    none, best = run.proof.measured
    assert none.label == "none" and none.ok == REQUESTS and none.correct and none.predicted["p50_s"]
    assert none.run_dir == str(tmp_path / "tune" / "runs" / "01")
    assert best.label == engines.started[2] and best.correct
    replays = doc["calibration_replays"]
    assert [(r["layout"], r["candidate"], r["ok"]) for r in replays] == [
        ("none", "none", REQUESTS),
        ("lmcache-mp", None, REQUESTS),
    ]
    assert replays[1]["run_dir"] == str(tmp_path / "tune" / "runs" / "calibration")
    # The winner is measured as with a given calibration: on these long prompts offload wins.
    assert run.proof.verdict.winner == best.label and doc["winner"] == best.label
    assert [r["after"] for r in doc["measured"]["refits"]] == [["none"], ["none", best.label]]
    assert (tmp_path / "tune" / "tuned.json").is_file()
    # The budget counts the calibration's replays too.
    assert doc["measured"]["elapsed_s"] >= sum(r["wall_s"]["total"] for r in replays)
    # served-ttft.json is kept for a second tune (--calibration OUT), refit from the replays.
    again = served_calibration_from(tmp_path / "tune")
    assert again.source.startswith("kvstack tune's replays of") and again.offload_layout == "lmcache-mp"
    # results.json is its typed model's, as written.
    written = json.loads((tmp_path / "tune" / "results.json").read_text())
    assert TuneResults.of(written).model_dump(mode="json", by_alias=True, exclude_unset=True) == written
    assert written == json.loads(json.dumps(doc))


def test_a_second_tune_takes_the_first_ones_out_dir_as_its_calibration(tmp_path: Path) -> None:
    engines = StandIn()
    first = tune(
        options(tmp_path / "a", 32, calibration=None, replay_requests=24), start=engines,
        start_layout=engines.layout,
    )  # fmt: skip
    assert first.out is not None
    second = StandIn()
    run = tune(options(tmp_path / "b", 32, calibration=first.out, budget="0"), start=second)
    assert second.started == [] and run.proof is None
    assert run.doc["source"]["calibration"].startswith("kvstack tune's replays of")


def test_a_stopped_tune_that_measured_its_costs_resumes_with_them(tmp_path: Path) -> None:
    stopped = StandIn(interrupt_at=2)  # Ctrl-C in the replay of the first candidate after none
    with pytest.raises(Interrupted, match="--resume continues"):
        tune(options(tmp_path, 128, calibration=None), start=stopped, start_layout=stopped.layout)
    saved = json.loads((tmp_path / "tune" / "results.json").read_text())
    assert [c["label"] for c in saved["measured"]["candidates"]] == ["none"]
    resumed = StandIn()
    opts = options(tmp_path, 128, calibration=None, out=None, resume=tmp_path / "tune")
    run = tune(opts, start=resumed, start_layout=resumed.layout)
    # No calibration replayed again, none not measured again: the stopped tune's costs and ranking.
    assert resumed.started == [stopped.started[2]]
    assert run.doc["calibration"] == saved["calibration"]
    assert run.doc["calibration_replays"] == saved["calibration_replays"]
    assert run.proof is not None and run.proof.verdict is not None
    assert [m.label for m in run.proof.measured] == ["none", stopped.started[2]]


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"budget": "120"}, "--budget 2 min is too small to measure the costs first: none, lmcache-mp"),
        ({"objective": "goodput"}, "--objective goodput needs a TTFT SLO"),
        ({"knob": ["chunk-size=100"]}, "is not a multiple of the engine's 128-token KV block"),
        ({"budget": "0"}, "--budget 0 ranks without replaying anything on the engine"),
    ],
)
def test_what_cannot_be_measured_or_ranked_is_refused_before_any_engine_starts(
    tmp_path: Path, changes: dict[str, object], needle: str
) -> None:
    engines = StandIn()
    with pytest.raises(InputError) as info:
        tune(options(tmp_path, 128, calibration=None, **changes), start=engines, start_layout=engines.layout)
    assert needle in info.value.message
    assert engines.started == [] and not (tmp_path / "tune").exists()
