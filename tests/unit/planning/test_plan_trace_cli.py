"""`kvstack plan --trace` through the real CLI, on the 1-in-40 sample of the conversation trace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvstack.profiles import profiles_dir
from tests.support.cli_run import one_line_error, run_kvstack

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "conversation_1in40.jsonl"
H100 = str(profiles_dir() / "hardware" / "h100-sxm.json")
L40S = str(profiles_dir() / "hardware" / "l40s.json")
BASE = ("--model", "llama-3.1-8b", "--context", "128k", "--users", "8")


def kvstack(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kvstack("plan", *args)


def test_json_carries_the_curve_and_the_evidence() -> None:
    proc = kvstack(*BASE, "--hardware", L40S, "--trace", str(FIXTURE), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    t = plan["trace"]
    assert t["evidence"] == "trace" and t["requests"] == 342
    assert len(t["curve"]) > 50 and t["curve"][-1]["hit_ratio"] == pytest.approx(t["max_ratio"])
    assert plan["concurrency"]["retention_target_bytes"] == t["target_bytes"]
    assert [x["kind"] for x in t["tiers"]] == ["engine", "cpu"]
    assert t["offload_pays"] is True and plan["connector"] == "lmcache-mp"


def test_human_form_shows_the_curve_the_tiers_and_the_verdict(tmp_path: Path) -> None:
    png = tmp_path / "curve.png"
    proc = kvstack(*BASE, "--hardware", L40S, "--trace", str(FIXTURE), "--curve-png", str(png))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "capacity curve from" in out and "342 requests" in out
    assert "engine pool" in out and "+ DRAM tier" in out and "target: 95%" in out
    assert "sized by                 the trace" in out
    assert "verdict                  offload pays on this trace" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sample_and_slice_options(tmp_path: Path) -> None:
    proc = kvstack(
        *BASE, "--hardware", H100, "--trace", str(FIXTURE), "--start", "10", "--max-requests", "100",
        "--trace-sample", "30%", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    t = json.loads(proc.stdout)["trace"]
    assert 0 < t["requests"] < 100
    assert "requests 10..109" in t["sample"] and "a 0.3 share of sessions" in t["sample"]


def test_offload_cost_overrides_the_measured_figure() -> None:
    proc = kvstack(*BASE, "--hardware", L40S, "--trace", str(FIXTURE), "--offload-cost", "5000", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["trace"]["offload_cost_source"] == "--offload-cost"
    assert plan["trace"]["offload_pays"] is False and plan["connector"] == "none"


def test_offload_cost_from_needs_a_trace_and_excludes_the_number(tmp_path: Path) -> None:
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--offload-cost-from", str(tmp_path)),
        "--offload-cost-from needs --trace",
    )
    one_line_error(
        kvstack(
            *BASE, "--hardware", H100, "--trace", str(FIXTURE), "--offload-cost", "5",
            "--offload-cost-from", str(tmp_path),
        ),
        "--offload-cost and --offload-cost-from",
    )  # fmt: skip
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--trace", str(FIXTURE), "--offload-cost-from", str(tmp_path)),
        "cannot read",
    )


def test_bad_traces_are_one_line_errors(tmp_path: Path) -> None:
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--trace", str(tmp_path / "no.jsonl")), "does not exist"
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"oops"\n')
    one_line_error(kvstack(*BASE, "--hardware", H100, "--trace", str(bad)), f"{bad}:2: not JSON")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    one_line_error(kvstack(*BASE, "--hardware", H100, "--trace", str(empty)), "has no requests")
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--trace-sample", "1/40"), "--trace-sample needs --trace"
    )
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--trace", str(FIXTURE), "--trace-sample", "lots"),
        "--trace-sample must be a fraction",
    )
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--trace", str(FIXTURE), "--retain", "10"), "--retain and --trace"
    )


def test_auto_without_offload_shows_what_was_considered() -> None:
    # BF16 KV on an H100: a DRAM tier would add ~2% of hits for 15 ms a request (test_plan_trace.py).
    proc = kvstack(*BASE, "--hardware", H100, "--trace", str(FIXTURE), "--kv-dtype", "auto")
    assert proc.returncode == 0, proc.stderr
    assert "  connector                none\n" in proc.stdout
    assert "offload: none (--offload auto): offload does not pay on this trace" in proc.stdout
    assert "+ DRAM tier (considered, not planned)" in proc.stdout


def _calibration(tmp_path: Path, offload_fixed_s: float) -> Path:
    """A served-ttft.json with the demo's figures (README: 51.1 ms a request on none, 103 us a token
    recomputed, a DRAM fetch 3.8 us a token), the offload layout's fixed cost as given."""
    plain = {
        "hit_s": 0.0411,
        "miss_s": 0.010,
        "linear_s_per_token": 1.03e-4,
        "quadratic_s_per_token2": 3.4e-8,
    }
    offload = {**plain, "miss_s": offload_fixed_s - 0.0411, "fetch_s_per_token": {"dram": 3.8e-6}}
    doc = {
        "source": "a test calibration",
        "layouts": {
            "none": {"offload": False, "calibration": plain},
            "lmcache-mp": {"offload": True, "calibration": offload},
        },
    }
    path = tmp_path / "served-ttft.json"
    path.write_text(json.dumps(doc))
    return path


def _roomy_cpu(tmp_path: Path) -> str:
    """The no-GPU snapshot with 256 GiB: an 8B model's one 128K session leaves room for LMCache."""
    doc = json.loads((profiles_dir() / "hardware" / "no-gpu.json").read_text())
    doc["memory"].update(total_bytes=256 << 30, available_bytes=252 << 30)
    path = tmp_path / "roomy-cpu.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_calibration_gives_the_cpu_platform_a_ttft_verdict(tmp_path: Path) -> None:
    hw = _roomy_cpu(tmp_path)
    args = (
        "--model",
        "llama-3.1-8b",
        "--context",
        "128k",
        "--users",
        "1",
        "--hardware",
        hw,
        "--trace",
        str(FIXTURE),
    )
    proc = kvstack(*args, "--calibration", str(_calibration(tmp_path, 0.0566)), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    t = plan["trace"]
    assert plan["platform"] == "cpu" and plan["connector"] == "lmcache-mp" and t["offload_pays"] is True
    assert [d["tiers"] for d in t["by_depth"]][:2] == ["engine", "engine+cpu"]
    assert t["with_offload"]["p50_s"] < t["without_offload"]["p50_s"]
    assert "56.6 ms on lmcache-mp vs 51.1 ms on none, a test calibration" in t["offload_cost_source"]
    # The human form prints each depth's TTFT; a path costing 5 s a request is dropped (auto).
    proc = kvstack(*args, "--calibration", str(_calibration(tmp_path, 5.0)))
    assert proc.returncode == 0, proc.stderr
    assert "TTFT engine pool alone   p50" in proc.stdout and "TTFT + cpu" in proc.stdout
    assert "  connector                none\n" in proc.stdout
    assert "verdict                  offload does not pay on this trace: predicted TTFT" in proc.stdout


def test_calibration_bad_input(tmp_path: Path) -> None:
    cal = str(_calibration(tmp_path, 0.06))
    one_line_error(kvstack(*BASE, "--hardware", H100, "--calibration", cal), "--calibration needs --trace")
    one_line_error(
        kvstack(
            *BASE, "--hardware", H100, "--trace", str(FIXTURE), "--calibration", cal, "--offload-cost", "5"
        ),
        "--calibration and --offload-cost both give the offload cost",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(
        kvstack(*BASE, "--hardware", H100, "--trace", str(FIXTURE), "--calibration", str(empty)),
        "cannot read",
    )
