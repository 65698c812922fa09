"""tune --objective capacity on the stand-in engine: each proven candidate, after its replay, swept on
the same engine at multiples of the trace's rate; the winner is the one that sustains the most
within the SLO, never worse than none at 1x and at its capacity.

The trace: two sessions taking turns, 12 requests 200 ms apart (5 requests/s at 1x), prompts of 32
to 192 tokens. The stand-in's TTFT grows by 120 ms per request in flight on none and 20 ms on the
offload candidate (no fixed offload cost here): at 1x none serves a request in 122-141 ms, before
the next arrives, within a 200 ms SLO; at 2x (100 ms gaps) the next always arrives first: two in
flight, 242 ms and more. The candidate serves one in 22-41 ms, under the 50 ms gaps of 4x (and
within the SLO with three in flight): it passes the whole ladder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from kvstack.cli.app import run
from kvstack.planning.tuned import TUNED_JSON, TunedLayout
from kvstack.rendering.tune import render_measured
from kvstack.tune.results import TuneResults
from tests.unit.tune.helpers import StandIn, options, tune

ROWS = 12


def write_paced(path: Path, gap_ms: int = 200) -> Path:
    rows = []
    for i in range(ROWS):
        s, turn = i % 2, i // 2
        ids = [10_000 * (s + 1) + k for k in range(turn + 1)]
        rows.append({"timestamp": i * gap_ms, "input_length": len(ids) * 512, "output_length": 2,
                     "hash_ids": ids, "session_id": f"s{s}"})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tune_chooses_the_candidate_that_sustains_the_most_of_the_traces_rate(tmp_path: Path) -> None:
    engines = StandIn(per_in_flight=(0.12, 0.02), offload_request_s=0.0)
    o = options(tmp_path, 32, trace=write_paced(tmp_path / "paced.jsonl"), objective="capacity",
                slo_ttft=200.0, slo_share=0.75, sweep_multiples="2,4")  # fmt: skip
    run = tune(o, start=engines)
    assert run.proof is not None and run.proof.verdict is not None
    none, offload = run.proof.measured
    assert engines.started == ["none", offload.label]
    assert none.capacity is not None and offload.capacity is not None
    # 1 (the trace's own load) is always swept; the ladder only, the same for every candidate.
    assert [s.load for s in none.capacity.sweep.steps] == [1, 2, 4]
    assert [s.load for s in offload.capacity.sweep.steps] == [1, 2, 4]
    assert none.capacity.sweep.capacity.status == "bracketed" and none.capacity.value == 1
    assert offload.capacity.sweep.capacity.status == "above_ladder" and offload.capacity.value == 4
    v = run.proof.verdict
    assert v.winner == offload.label, v.why
    assert v.why.startswith(f"{offload.label}: sustains 4x the trace's rate or more (above the ladder)")
    assert "against none's 1x" in v.why
    # Each sweep step sent the replay's requests anew: 12 each, after the 12 of the replay.
    assert all(s.summary.requests == ROWS for s in offload.capacity.sweep.steps)
    doc = TuneResults.of(json.loads((run.out / "results.json").read_text()))  # type: ignore[operator]
    assert doc.measured is not None and doc.measured.objective == "capacity"
    assert doc.measured.capacity is not None and doc.measured.capacity.multiples == [1, 2, 4]
    assert doc.measured.capacity.trace_rate_per_s == pytest.approx(5.0)
    assert doc.winner == offload.label
    rows = {c.label: c for c in doc.measured.candidates}
    assert rows["none"].capacity is not None and rows["none"].capacity.sweep.capacity.load == 1
    assert [s.load for s in rows["none"].capacity.sweep.steps] == [1, 2, 4]  # kept, with each step's TTFTs
    assert [len(t) for t in rows["none"].capacity.step_ttft_s] == [ROWS] * 3
    tuned = TunedLayout.model_validate_json((run.out / TUNED_JSON).read_text())  # type: ignore[operator]
    assert tuned.connector == "lmcache-mp" and tuned.objective == "capacity"
    for png in ("sweep_ttft_p90.png", "sweep_throughput.png", "candidates.png"):
        assert (run.out / png).stat().st_size > 0  # type: ignore[operator]
    # What kvstack top --capacity reads of it (and of a serve --tuned run): the winner's, 4x or more.
    from kvstack.top.capacity import read_capacity

    cap = read_capacity(str(run.out))
    assert cap.layout == offload.label and cap.status == "above_ladder"
    assert cap.rate_per_s == pytest.approx(20.0)
    # The report: what 1x is, then each candidate's capacity with its bracket.
    console = Console(record=True, width=300)
    render_measured(doc, console)
    text = console.export_text()
    assert "capacity: swept at 1x, 2x, 4x the trace's rate (1x = 5 requests/s)" in text
    assert "none: capacity 1x (passes at 1x, fails at 2x); SLO 75% of requests within TTFT <= 200 ms" in text
    assert f"{offload.label}: capacity above the ladder: every step up to 4x passed" in text
    assert "winner (measured, capacity)" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--objective", "capacity"], "--objective capacity needs the TTFT SLO"),
        (["--slo-ttft", "100"], "--slo-ttft is read by --objective capacity only"),
        (["--sweep-multiples", "1,2"], "--sweep-multiples is read by --objective capacity only"),
        (["--objective", "p90", "--slo-share", "0.5"], "--slo-share is read by --objective capacity only"),
        (["--objective", "capacity", "--slo-ttft", "100", "--slo-ms", "200"], "--slo-ms is goodput's SLO"),
        (["--objective", "capacity", "--slo-ttft", "100", "--budget", "0"], "--budget 0 measures nothing"),
        (["--objective", "capacity", "--slo-ttft", "100", "--sweep-multiples", "0,2"],
         "--sweep-multiples steps must be positive"),
        (["--objective", "capacity", "--slo-ttft", "100", "--sweep-multiples", "x"],
         "--sweep-multiples step 'x' is not a number"),
        (["--objective", "capacity", "--slo-ttft", "100", "--slo-share", "2"],
         "--slo-share must be at most 1"),
        (["--objective", "capacity", "--slo-ttft", "-1"], "--slo-ttft must be positive"),
    ],
)  # fmt: skip
def test_bad_capacity_flags_exit_2_in_one_line(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_paced(tmp_path / "paced.jsonl")
    cal = tmp_path / "served-ttft.json"
    from tests.unit.tune.helpers import write_calibration

    write_calibration(cal)
    rc = run(["tune", "--trace", str(trace), "--calibration", str(cal), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "hint:" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 2


def test_a_slice_that_spans_no_time_is_refused_before_any_engine_starts(tmp_path: Path) -> None:
    from kvstack.errors import InputError

    engines = StandIn()
    o = options(tmp_path, 32, trace=write_paced(tmp_path / "flat.jsonl", gap_ms=0), objective="capacity",
                slo_ttft=150.0)  # fmt: skip
    with pytest.raises(InputError, match="spans no time"):
        tune(o, start=engines)
    assert engines.started == []


def test_a_stopped_capacity_tune_resumes_with_nones_sweep_kept(tmp_path: Path) -> None:
    from kvstack.errors import InputError, Interrupted

    trace = write_paced(tmp_path / "paced.jsonl")
    given = {"trace": trace, "objective": "capacity", "slo_ttft": 200.0, "slo_share": 0.75,
             "sweep_multiples": "2,4"}  # fmt: skip
    stopped = StandIn(per_in_flight=(0.12, 0.02), offload_request_s=0.0, interrupt_at=2)
    with pytest.raises(Interrupted, match="--resume continues"):
        tune(options(tmp_path, 32, **given), start=stopped)
    resumed = StandIn(per_in_flight=(0.12, 0.02), offload_request_s=0.0)
    again = options(tmp_path, 32, **given, out=None, resume=tmp_path / "tune")
    run = tune(again, start=resumed)
    assert run.proof is not None and run.proof.verdict is not None
    assert "none" not in resumed.started  # none's replay and sweep come back from results.json
    none, offload = run.proof.measured
    assert none.capacity is not None and none.capacity.value == 1
    assert run.proof.verdict.winner == offload.label, (run.proof.verdict.why, run.proof.verdict.excluded)
    # Another SLO is not the stopped tune's sweep: refused.
    other = options(tmp_path, 32, **{**given, "slo_ttft": 300.0}, out=None, resume=tmp_path / "tune")
    with pytest.raises(InputError, match="that tune ran with another capacity sweep"):
        tune(other, start=StandIn())
