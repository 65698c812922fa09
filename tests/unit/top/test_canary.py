"""The run's canary in `kvstack top`: canary.json as `kvstack serve` writes it (the real CanaryState,
written by CanaryFiles), read at the window's end, in --json and on the screen."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kvstack.canary.state import CanaryFiles, CanaryState, CheckRecord, FallbackRecord
from kvstack.top.snapshot import TopSnapshot
from kvstack.top.sources import collect
from kvstack.top.targets import Targets
from kvstack.top.window import build
from tests.support.cli_run import isolated_env, run_cli
from tests.support.deps import ROOT
from tests.support.stream_server import StreamServer
from tests.unit.rendering.test_top import text_of

NOW = float(int(time.time()))  # whole seconds: the differences below are exact
WAITING = "budget: 3,000 more computed prompt tokens of traffic"
FAIL_DETAIL = "typical disagreement 0.912 nats over the 0.120-nat gate"


def check(at: float, where: str, verdict: str = "pass", typical: float = 0.02) -> CheckRecord:
    return CheckRecord(
        at=at,
        probe=f"p{at:.0f}",
        age_s=61.0,
        served_from=where,
        verdict=verdict,
        typical=typical,
        gate=0.12,
        detail=FAIL_DETAIL if verdict == "fail" else "",
    )


def state(on_wrong_kv: str = "fallback") -> CanaryState:
    s = CanaryState(interval_s=60.0, budget=0.01, on_wrong_kv=on_wrong_kv, gate=0.12)
    s.record(check(NOW - 300, "cpu"))
    s.record(check(NOW - 200, "disk", typical=0.05))
    s.record(check(NOW - 100, "cpu"))
    s.canary_tokens, s.engine_tokens = 4_096, 1_024_000.0
    s.status = "watching"
    return s


def failed(s: CanaryState, action: str, tiers_off: list[str]) -> CanaryState:
    s.record(check(NOW - 50, "disk", "fail", typical=0.912))
    s.fallback = FallbackRecord(
        at=NOW - 40,
        action=action,
        served_from="disk",
        detail=f"wrong KV: canary probe p1 served from 'disk' differs from recompute: {FAIL_DETAIL}",
        tiers_off=tiers_off,
        restarted=1 if tiers_off else 0,
    )
    if tiers_off:
        s.status = "fallback"
    return s


def flat(screen: str) -> str:
    """The screen's words, whatever rich wrapped."""
    return " ".join(screen.split())


def snapshot(run: Path) -> TopSnapshot:
    """A window over ``run`` (no server), ending at NOW."""
    targets = Targets(servers=(), run_dir=str(run))
    before = collect(targets)
    after = collect(targets)
    after.wall = NOW
    return build(targets, before, after)


def test_a_watching_canary_shows_its_summary_last_pass_and_share(tmp_path: Path) -> None:
    s = state()
    CanaryFiles(tmp_path).write(s)
    snap = snapshot(tmp_path)
    c = snap.canary
    assert c is not None
    assert (c.status, c.checks, c.failed, c.fallback) == ("watching", 3, 0, None)
    assert c.summary == s.summary() and c.summary.startswith("canary: 3 checks (cpu 2 pass, disk 1 pass)")
    assert c.seconds_since_pass == 100.0  # to the window's end
    assert c.prefill_share == 4_096 / 1_024_000 and c.budget == 0.01
    assert snap.warnings == []
    screen = flat(text_of(snap))
    assert "canary watching · 3 checks (cpu 2 pass, disk 1 pass)" in screen
    assert "largest passing disagreement 0.050 of the 0.120-nat gate" in screen
    assert "last pass 100 s ago" in screen and "prefill share 0.40% (budget 1.00%)" in screen
    assert "OFFLOAD TIERS OFF" not in screen and "WRONG KV" not in screen
    doc = json.loads(snap.to_json())
    assert doc["canary"]["status"] == "watching" and doc["canary"]["seconds_since_pass"] == 100.0
    assert doc["canary"]["fallback"] is None


def test_waiting_says_why_and_nothing_measured_yet_says_so(tmp_path: Path) -> None:
    s = CanaryState(interval_s=60.0, budget=0.005, on_wrong_kv="fallback", status="waiting")
    s.waiting_for = WAITING
    CanaryFiles(tmp_path).write(s)
    snap = snapshot(tmp_path)
    screen = flat(text_of(snap))
    assert f"canary waiting ({WAITING}) · 0 checks" in screen
    assert "no check passed yet" in screen and "prefill share not measured yet (budget 0.50%)" in screen


def test_the_fallback_is_a_marked_line_saying_since_when_and_why(tmp_path: Path) -> None:
    CanaryFiles(tmp_path).write(failed(state(), "fallback", ["cpu", "disk"]))
    snap = snapshot(tmp_path)
    c = snap.canary
    assert c is not None
    assert c.status == "fallback" and c.offload_off and c.failed == 1
    assert c.last_fail_served_from == "disk" and c.last_fail_detail == FAIL_DETAIL
    screen = flat(text_of(snap))
    assert screen.count("OFFLOAD TIERS OFF") == 1
    marked = screen[screen.index("!! OFFLOAD TIERS OFF") :]
    since = time.strftime("%H:%M:%S", time.localtime(NOW - 40))
    assert marked.startswith("!! OFFLOAD TIERS OFF since " + since + " (40 s ago)")
    assert "a check served from 'disk' failed" in marked and FAIL_DETAIL in marked
    assert "serving without cpu, disk" in marked
    assert "canary fallback · 4 checks (cpu 2 pass, disk 1 pass/1 fail)" in screen
    fb = json.loads(snap.to_json())["canary"]["fallback"]
    assert fb["tiers_off"] == ["cpu", "disk"] and fb["served_from"] == "disk" and fb["at"] == NOW - 40
    assert FAIL_DETAIL in fb["detail"] and fb["action"] == "fallback"
    assert snap.warnings == []  # acted on: the marked line says it


def test_warn_and_stop_say_the_tiers_still_serve_or_serving_stopped(tmp_path: Path) -> None:
    warn, stop = tmp_path / "warn", tmp_path / "stop"
    CanaryFiles(warn).write(failed(state("warn"), "warn", []))
    CanaryFiles(stop).write(failed(state("stop"), "stop", []))
    warn_screen = flat(text_of(snapshot(warn)))
    assert (
        "!! WRONG KV at" in warn_screen
        and "the offload tiers still serve (--on-wrong-kv warn)" in warn_screen
    )
    assert "OFFLOAD TIERS OFF" not in warn_screen
    assert "kvstack stopped serving (--on-wrong-kv stop)" in flat(text_of(snapshot(stop)))


def test_a_later_failure_after_the_fallback_still_says_the_tiers_are_off(tmp_path: Path) -> None:
    # serving/wrong_kv.py records a failure after the fallback as a "warn" with no tiers, replacing
    # the fallback's record; the status stays "fallback", and so does the marked line.
    s = failed(state(), "fallback", ["cpu", "disk"])
    s.record(check(NOW - 10, "gpu", "fail", typical=0.9))
    s.fallback = FallbackRecord(at=NOW - 10, action="warn", served_from="gpu", detail="wrong KV again")
    CanaryFiles(tmp_path).write(s)
    screen = flat(text_of(snapshot(tmp_path)))
    assert "!! OFFLOAD TIERS OFF (since an earlier fallback" in screen and "wrong KV again" in screen
    assert "still serve" not in screen


def test_a_failed_check_not_acted_on_yet_is_a_warning(tmp_path: Path) -> None:
    s = state()
    s.record(check(NOW - 5, "cpu", "fail", typical=0.9))
    CanaryFiles(tmp_path).write(s)
    snap = snapshot(tmp_path)
    (warning,) = snap.warnings
    assert "the canary found wrong KV" in warning and "'cpu'" in warning and FAIL_DETAIL in warning


def test_no_canary_json_no_canary(tmp_path: Path) -> None:
    snap = snapshot(tmp_path)
    assert snap.canary is None
    assert json.loads(snap.to_json())["canary"] is None
    (tmp_path / "canary.json").write_text("{not json")  # unreadable: shown as no canary, no error
    assert snapshot(tmp_path).canary is None
    assert "canary " not in flat(text_of(snapshot(tmp_path))).split("leave)")[1]


def test_once_json_from_a_run_dir_has_the_canary(tmp_path: Path) -> None:
    srv = StreamServer().start()
    url = srv.url
    srv.stop()  # down is data: the canary still shows
    run = tmp_path / "run"
    run.mkdir()
    (run / "launch.json").write_text(json.dumps({"base_url": url, "engine": "vllm"}))
    CanaryFiles(run).write(failed(state(), "fallback", ["cpu", "disk"]))
    env = isolated_env(tmp_path)
    res = run_cli(["top", "--run-dir", str(run), "--once", "--json", "--interval", "0.2"], ROOT, env)
    assert res.code == 0, res.stderr
    c = json.loads(res.stdout)["canary"]
    assert c["status"] == "fallback" and c["fallback"]["tiers_off"] == ["cpu", "disk"]
    assert c["summary"].startswith("canary: 4 checks") and c["seconds_since_pass"] >= 100
    res = run_cli(["top", "--run-dir", str(run), "--once", "--interval", "0.2"], ROOT, env)
    assert res.code == 0, res.stderr
    assert "OFFLOAD TIERS OFF since" in flat(res.stdout) and "canary fallback" in res.stdout
