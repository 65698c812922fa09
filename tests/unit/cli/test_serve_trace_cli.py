"""`kvstack serve --trace`: the plan serve launches is sized from the trace and follows its verdict
on --offload auto (dry run: nothing started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.cli import app as cli_app
from tests.support.deps import ROOT

NO_GPU = str(ROOT / "profiles" / "hardware" / "no-gpu.json")
FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "conversation_1in40.jsonl"


def serve(tmp_path: Path, *args: str) -> list[str]:
    dirs = ("--cache-dir", str(tmp_path / "c"), "--run-dir", str(tmp_path / "r"))
    return ["serve", "--hardware", NO_GPU, *dirs, "--dry-run", "--json", *args]


def test_auto_drops_an_offload_path_the_trace_says_serves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without a trace the demo on a CPU machine with LMCache gets lmcache-mp and its cache server.
    assert cli_app.run(serve(tmp_path)) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["plan"]["connector"] == "lmcache-mp" and plain["helpers"]
    # The 1-in-40 sample: the demo's 1 GiB pool serves what any cache can; the tiers below, nothing.
    assert cli_app.run(serve(tmp_path, "--trace", str(FIXTURE))) == 0
    doc = json.loads(capsys.readouterr().out)
    plan = doc["plan"]
    assert plan["connector"] == "none" and [t["kind"] for t in plan["tiers"]] == ["cpu"]
    assert plan["trace"]["offload_pays"] is False and plan["trace"]["requests"] == 342
    assert "the offload tiers serve 0.3% of prompt tokens" in plan["reasons"]["offload"]
    assert doc["helpers"] == [] and "lmcache" not in " ".join(doc["argv"]).lower()


def test_a_named_connector_stays_with_the_verdict_as_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_app.run(
        serve(tmp_path, "--offload", "lmcache-mp", "--trace", str(FIXTURE), "--trace-sample", "1/2")
    )
    assert code == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["connector"] == "lmcache-mp" and "a 0.5 share of sessions" in plan["trace"]["sample"]
    assert any("offload planned as asked: --offload lmcache-mp" in w for w in plan["warnings"])


def _error(err: str) -> list[str]:
    lines = err.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    assert "Traceback" not in err and len(lines) - at <= 2
    return lines[at:]


def test_trace_options_are_checked_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(serve(tmp_path, "--trace-sample", "1/40")) == 2
    assert _error(capsys.readouterr().err)[0] == "error: --trace-sample needs --trace"
    assert cli_app.run(serve(tmp_path, "--trace", str(tmp_path / "none.jsonl"))) == 2
    assert "does not exist" in _error(capsys.readouterr().err)[0]


def test_serve_predicts_ttft_from_a_calibration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = {
        "hit_s": 0.0411,
        "miss_s": 0.010,
        "linear_s_per_token": 1.03e-4,
        "quadratic_s_per_token2": 3.4e-8,
    }
    cal = tmp_path / "served-ttft.json"
    cal.write_text(json.dumps({"layouts": {"none": {"offload": False, "calibration": plain}}}))
    assert cli_app.run(serve(tmp_path, "--calibration", str(cal))) == 2
    assert _error(capsys.readouterr().err)[0] == "error: --calibration needs --trace"
    assert cli_app.run(serve(tmp_path, "--trace", str(FIXTURE), "--calibration", str(cal))) == 0
    t = json.loads(capsys.readouterr().out)["plan"]["trace"]
    assert [d["tiers"] for d in t["by_depth"]] == ["engine", "engine+cpu", "engine+cpu+disk"]
    assert t["offload_pays"] is False and t["without_offload"]["p50_s"] > 0.0511
