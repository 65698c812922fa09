"""`kvstack plan --slo-ttft` through the real CLI: each layout's predicted capacity and its bound,
in the human form and in --json; the SLO's companion flags refused without it."""

from __future__ import annotations

import json

from kvstack.profiles import profiles_dir
from tests.support.cli_run import one_line_error, run_kvstack

L40S = str(profiles_dir() / "hardware" / "l40s.json")
BASE = (
    "--model",
    "llama-3.1-8b",
    "--context",
    "32k",
    "--users",
    "64",
    "--workload",
    "rag-long-doc",
    "--hardware",
    L40S,
)


def test_json_carries_each_layouts_capacity_and_bound() -> None:
    proc = run_kvstack("plan", *BASE, "--slo-ttft", "2000", "--output-tokens", "64", "--json")
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)["capacity"]
    assert cap["ask"] == {"slo_ttft_s": 2.0, "share": 0.9, "output_tokens": 64}
    layouts = cap["layouts"]
    assert layouts[0]["layout"] == "engine" and len(layouts) >= 2
    assert any(lay["bound"] is not None and lay["rate_per_s"] > 0 for lay in layouts)


def test_human_form_names_the_bound() -> None:
    proc = run_kvstack("plan", *BASE, "--slo-ttft", "2000")
    assert proc.returncode == 0, proc.stderr
    assert "predicted capacity under TTFT p90 <= 2000 ms" in proc.stdout
    assert "requests/s" in proc.stdout and "bound: " in proc.stdout


def test_no_capacity_without_the_slo() -> None:
    proc = run_kvstack("plan", *BASE, "--json")
    assert proc.returncode == 0 and "capacity" not in json.loads(proc.stdout)


def test_the_slos_companions_need_it() -> None:
    one_line_error(
        run_kvstack("plan", *BASE, "--slo-share", "0.8"), "--slo-share is read with --slo-ttft only"
    )
    one_line_error(
        run_kvstack("plan", *BASE, "--slo-ttft", "500", "--slo-share", "1.5"), "--slo-share must be at"
    )
