"""The canary's state: checks counted by where they were served and their verdict, the cost in words,
and the run dir's canary.json (atomic, 0600) and events.jsonl (appended, 0600)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from kvstack.canary.state import CanaryFiles, CanaryState, CheckRecord, FallbackRecord, read_state
from kvstack.rundir import CANARY_JSON, EVENTS_JSONL


def state(**fields: object) -> CanaryState:
    return CanaryState.model_validate(
        {"interval_s": 60.0, "budget": 0.01, "on_wrong_kv": "fallback", **fields}
    )


def check(served_from: str, verdict: str, at: float = 1000.0, typical: float | None = None) -> CheckRecord:
    return CheckRecord.model_validate(
        {
            "at": at,
            "probe": f"Probe-{served_from}-{verdict}-{at:g}",
            "age_s": 61.0,
            "served_from": served_from,
            "verdict": verdict,
            "typical": typical,
            "hit_tokens": {served_from: 960.0},
        }
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_record_counts_by_where_served_and_verdict() -> None:
    s = state()
    records = [
        check("cpu", "pass", 1.0, 0.04),
        check("cpu", "pass", 2.0, 0.07),
        check("disk", "pass", 3.0, 0.05),
        check("disk", "fail", 4.0, 2.5),
        check("recompute", "unknown", 5.0),
    ]
    for r in records:
        s.record(r)
    assert s.checks == {"cpu": {"pass": 2}, "disk": {"pass": 1, "fail": 1}, "recompute": {"unknown": 1}}
    assert s.total == len(records)
    assert (s.count("pass"), s.count("fail"), s.count("unknown")) == (3, 1, 1)
    assert s.last == records[-1]
    assert s.last_pass_at == 3.0  # the last passing check's time, not the last check's
    assert s.last_fail == records[3]
    assert s.largest_typical == 0.07  # over passing checks only: the failed 2.5 is not a correct answer


def test_share_is_the_canarys_computed_tokens_over_the_engines() -> None:
    assert state().share is None  # the engine has computed nothing yet
    assert state(canary_tokens=500, engine_tokens=100_000.0).share == 500 / 100_000
    assert state(canary_tokens=5000, engine_tokens=1000.0).share == 1.0  # never above the whole


def test_share_line_says_the_measured_cost() -> None:
    assert "not measured yet" in state().share_line()
    line = state(canary_tokens=500, engine_tokens=100_000.0, budget=0.01).share_line()
    assert "prefill share 0.50%" in line and "500 computed prompt tokens" in line
    assert "100,000" in line and "budget 1.00%" in line and "engine prefill" not in line
    timed = state(canary_tokens=500, engine_tokens=100_000.0, engine_prefill_s=20.0).share_line()
    assert "of 20.0 s engine prefill, ~0.10 s" in timed  # 0.5% of 20 s


def test_summary_lists_tiers_in_order_with_their_verdicts_and_the_closest_call() -> None:
    s = state(gate=0.35)
    assert s.summary() == "canary: 0 checks"
    for r in (check("disk", "fail"), check("cpu", "pass", typical=0.12), check("disk", "pass", typical=0.05)):
        s.record(r)
    text = s.summary()
    assert text.startswith("canary: 3 checks (cpu 1 pass, disk 1 pass/1 fail)")
    assert "largest passing disagreement 0.120 of the 0.350-nat gate" in text


def test_state_round_trips_through_canary_json_atomically_and_private(tmp_path: Path) -> None:
    files = CanaryFiles(tmp_path)
    s = state(status="watching", gate=0.3, probe_tokens=1024)
    s.record(check("cpu", "pass", typical=0.1))
    s.updated_at = 0.0
    files.write(s)
    path = tmp_path / CANARY_JSON
    assert mode(path) == 0o600
    assert s.updated_at > 0.0  # stamped as written
    back = read_state(tmp_path)
    assert back == s
    s.record(check("disk", "fail", typical=3.0))
    files.write(s)
    assert read_state(tmp_path) == s and mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [CANARY_JSON]  # no temporary file left


def test_events_are_appended_one_json_line_each_and_private(tmp_path: Path) -> None:
    files = CanaryFiles(tmp_path)
    r = check("disk", "fail", typical=3.0)
    files.event("check", **r.model_dump())
    fallback = FallbackRecord(at=2.0, action="fallback", served_from="disk", detail="x", tiers_off=["disk"])
    files.event("fallback", **fallback.model_dump(), path=tmp_path)  # a Path is written as its text
    path = tmp_path / EVENTS_JSONL
    assert mode(path) == 0o600
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [e["kind"] for e in lines] == ["check", "fallback"]
    assert CheckRecord.model_validate({k: v for k, v in lines[0].items() if k != "kind"}) == r
    assert lines[1]["tiers_off"] == ["disk"] and lines[1]["path"] == str(tmp_path)
    assert all(isinstance(e["at"], float) for e in lines)
    CanaryFiles(tmp_path).event("check", probe="again")  # a later run's writer appends too
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3


def test_read_state_is_none_when_there_is_none_or_it_cannot_be_read(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None  # missing
    path = tmp_path / CANARY_JSON
    path.write_text('{"interval_s": 60, "budget": 0.01, "on_wrong_', encoding="utf-8")
    assert read_state(tmp_path) is None  # cut short
    path.write_text(json.dumps({"interval_s": 60}), encoding="utf-8")
    assert read_state(tmp_path) is None  # not a canary state
    path.write_bytes(b"\xff\xfe not utf-8")
    assert read_state(tmp_path) is None
    path.unlink()
    path.mkdir()
    assert read_state(tmp_path) is None  # not a file
    assert read_state(tmp_path / "no-such-run") is None
