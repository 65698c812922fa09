"""scripts/bench-capacity predict: its pure parts (the ladder around a prediction, load 1 of a trace
sweep, the simulator's capacity and TTFT against the sweep's per layout) and its flow, the engine runs
replaced by recorded sweeps (the plan is the real CLI's, on the demo's recorded calibration)."""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvstack.bench.schema import Distribution, Summary
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    Slo,
    SweepConfig,
    SweepResult,
    SweepStep,
    TraceLoad,
)
from kvstack.planning.predict.capacity_schema import CapacityAsk
from kvstack.planning.predict.plan_capacity import SimWorkload, capacity_costs, layout_capacity
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.planning.predict.sim_layouts import sim_layouts
from kvstack.planning.predict.simulator import run_at
from kvstack.traces.mooncake import TraceRow
from tests.support.calibration import DEMO_LMCACHE_MP, DEMO_NONE, demo_served_ttft
from tests.unit.planning.helpers import plan_for, roomy_cpu_host

ROOT = Path(__file__).resolve().parents[4]
SLO = Slo(ttft_s=0.5, share=0.9)


@pytest.fixture(scope="module")
def script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("bench_capacity", str(ROOT / "scripts" / "bench-capacity"))
    spec = importlib.util.spec_from_loader("bench_capacity", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def step(load: float, meets: bool, *, ttft: float, shares: dict[str, float]) -> SweepStep:
    """10 requests of 1,000 prompt and 10 output tokens over 2 s, each with TTFT ``ttft`` s."""

    def dist(v: float) -> Distribution:
        return Distribution(n=10, mean=v, p50=v, p90=v, p99=v, min=v, max=v)

    summary = Summary(requests=10, ok=10, errors=0, wall_s=2.0, requests_per_s=5.0, output_tokens_per_s=50.0,
                      prompt_tokens=10_000, expected_prefix_tokens=0, output_tokens=100, ttft_s=dist(ttft),
                      e2e_s=dist(ttft + 0.4))  # fmt: skip
    return SweepStep(step=0, origin="ladder", load=load, seed=0, complete=True, summary=summary,
                     within_slo=10 if meets else 0, share_within_slo=1.0 if meets else 0.0, meets_slo=meets,
                     prompt_token_shares=shares)  # fmt: skip


def _calibration() -> ServedCalibration:
    found = [
        ("none", False, ServedCosts.from_dict(DEMO_NONE)),
        ("lmcache-mp", True, ServedCosts.from_dict(DEMO_LMCACHE_MP)),
    ]
    cal = ServedCalibration.first_of(found, "the demo's calibration")
    assert cal is not None
    return cal


def _sweep(loads: tuple[float, ...] = (1, 2), passing: float = 1, rate_per_s: float = 0.5) -> SweepResult:
    """Two layouts swept at ``loads`` x a trace's rate: each passes up to ``passing``; a step's TTFT
    is its load / 10 s (p50 = p90)."""
    failing = min((x for x in loads if x > passing), default=None)
    layouts = [
        LayoutSweep(
            name=name,
            base_url="http://h",
            steps=[step(x, x <= passing, ttft=x / 10, shares=shares) for x in loads],
            capacity=Capacity(
                status="bracketed" if failing else "above_ladder",
                load=passing,
                highest_passing=passing,
                lowest_failing=failing,
            ),
        )
        for name, shares in (("none", {"recomputed": 1.0}), ("lmcache-mp", {"recomputed": 0.5, "dram": 0.5}))
    ]
    config = SweepConfig(url=None, model="m", api_key=None, workload="trace", requests=10, prompt_tokens=1000,
                         output_tokens=10, seed=0, compare=["none", "lmcache-mp"], ladder=list(loads),
                         bisect=0, metrics_urls=[], timeout_s=300)  # fmt: skip
    env = Environment(kvstack="0", engines={}, python="3.11", platform="linux", cpu_count=2)
    trace = TraceLoad(source="t", requests=10, span_s=18.0, rate_per_s=rate_per_s, time_scale=1.0, caches="")
    return SweepResult(kind="trace_rate", slo=SLO, config=config, environment=env, layouts=layouts,
                       requests=[], trace=trace)  # fmt: skip


def test_the_ladder_brackets_the_predictions(script: ModuleType) -> None:
    assert script.predict_ladder([4.0, 9.0]) == "1.5,3,6,12,24"  # around their geometric mean, 6
    assert script.predict_ladder([0.3]) == "0.075,0.15,0.3,0.6,1.2"
    assert script.predict_ladder([]) == "" and script.predict_ladder([0.0]) == ""


def test_load_one_is_the_trace_slices_rate(script: ModuleType) -> None:
    rows = [TraceRow(t, 100, 2, [1]) for t in (0.0, 1000.0, 2000.0, 4000.0)]
    assert script.trace_rate(rows, 1.0) == pytest.approx(3 / 4)  # 3 gaps over 4 s
    assert script.trace_rate(rows, 0.5) == pytest.approx(3 / 2)
    assert script.trace_rate(rows[:1], 1.0) == 0.0


def test_the_ttft_is_compared_at_half_and_nine_tenths_of_the_measured_capacity(script: ModuleType) -> None:
    assert script.at_loads(4.0) == [2.0, 3.6]
    assert script.at_loads(1.37) == [0.69, 1.2]  # two significant figures, as the sweep is asked
    assert script.at_loads(None) == [] and script.at_loads(0.0) == []
    cap = Capacity(status="bracketed", load=9, highest_passing=9, lowest_failing=10)
    assert script.bracket_gap(cap) == pytest.approx(0.1)
    assert script.bracket_gap(Capacity(status="above_ladder", load=9, highest_passing=9)) is None


def _simulator(script: ModuleType, traced: bool) -> tuple[Any, list[Any], Any]:
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", context=8192, offload="lmcache-mp")
    costed = capacity_costs(plan, _calibration(), 1000)
    assert costed is not None
    sims, _ = sim_layouts(plan, costed[0])
    rows = [TraceRow(1000.0 * i, 1000 + 100 * i, 8, list(range(10 * i, 10 * i + 8))) for i in range(10)]
    args = argparse.Namespace(block_tokens=128, max_output_tokens=8, time_scale=1.0, requests=10,
                              prompt_tokens=1000, output_tokens=8, seed=0)  # fmt: skip
    reqs = script.sim_requests(args, plan, sims[0].limits.block_tokens, rows if traced else None)
    return plan, reqs, sims


def test_the_workload_as_bench_sends_it(script: ModuleType) -> None:
    _, traced, sims = _simulator(script, traced=True)
    assert [r.arrival_s for r in traced] == [float(i) for i in range(10)]
    assert all(r.output_tokens == 8 and r.prompt_tokens % sims[0].limits.block_tokens == 0 for r in traced)
    assert script.multiplier_of(traced, True) == 1.0  # a trace's load divides its arrivals
    _, synthetic, _ = _simulator(script, traced=False)
    assert len(synthetic) == 10 and {r.prompt_tokens for r in synthetic} == {1000}
    assert len({r.prefix_ids[0] for r in synthetic}) == 10  # random prompts share nothing
    assert script.multiplier_of(synthetic, False) * script.rate_per_s_of(synthetic) == pytest.approx(1.0)


def test_each_layout_simulated_against_measured(script: ModuleType) -> None:
    _, reqs, sims = _simulator(script, traced=True)
    result, at = _sweep(loads=(1, 2, 4), passing=2), _sweep(loads=(1, 1.8), passing=1.8)
    args = argparse.Namespace(slo_ttft=500.0, slo_share=0.9)
    rows = [
        script.compare_layout(
            lay, at.layouts[i], reqs, script.sim_layout_of(sims, lay.name), args, 0.5, 1.0, 8
        )
        for i, lay in enumerate(result.layouts)
    ]
    for row, sim in zip(rows, (sims[0], sims[-1]), strict=True):
        assert row["measured"] == 2 and row["measured_per_s"] == pytest.approx(1.0)
        assert row["measured_gap"] == pytest.approx(0.5)
        want = layout_capacity(SimWorkload(reqs, ""), sim, CapacityAsk(slo_ttft_s=0.5, output_tokens=8))
        assert want.rate_per_s is not None
        assert row["predicted"] == pytest.approx(want.rate_per_s / script.rate_per_s_of(reqs))
        assert row["ratio"] == pytest.approx(row["predicted"] / 2)
        assert row["predicted_slo_only_status"] in ("bracketed", "above_range", "below_range")
        assert [t["load"] for t in row["ttft"]] == [1.0, 1.8]
        for t in row["ttft"]:
            assert t["measured"] == {
                "p50": pytest.approx(100 * t["load"]),
                "p90": pytest.approx(100 * t["load"]),
            }
            ran = run_at(reqs, sim, t["load"])
            assert t["predicted"]["p90"] == pytest.approx(1000 * (ran.ttft_quantile(0.9) or 0))
            assert t["p90_ratio"] == pytest.approx(t["predicted"]["p90"] / t["measured"]["p90"])
    line = script.comparison_line(rows[1], "x trace rate")
    assert line.startswith(
        "  lmcache-mp  capacity (x trace rate): measured 2 [bracketed, bracket 50%], simulated "
    )
    assert "\n    at 0.5 of measured (1): TTFT p50 simulated " in line


def test_the_flow_with_the_engine_runs_replaced(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--calibration sets the ladder; the plan is the real CLI's; the two sweeps are recorded ones."""
    calls: list[tuple[str, ...]] = []
    real = script.kvstack

    def fake(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        if args[0] == "plan":
            planned: subprocess.CompletedProcess[str] = real(*args)
            return planned
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True)
        loads = tuple(float(x) for x in args[args.index("--sweep") + 1].removeprefix("rate:").split(","))
        (out / "results.json").write_text(_sweep(loads, passing=loads[1]).model_dump_json(by_alias=True))
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(script, "kvstack", fake)
    monkeypatch.setattr(script, "PY", sys.executable)
    cal = demo_served_ttft(tmp_path / "served-ttft.json", "the demo's recorded calibration")
    args = script.argparse.Namespace(
        model=str(ROOT / "profiles" / "demo"), trace=str(ROOT / "tests" / "fixtures" / "traces" /
        "conversation_1in40.jsonl"), max_requests=40, block_tokens=64, time_scale=1.0, max_output_tokens=16,
        workload=None, calibration=str(cal), compare="none,lmcache-mp", slo_ttft=2000.0, slo_share=0.9,
        ladder=None, bisect=4, out=str(tmp_path / "o"), engine_args=[], reuse=False,
    )  # fmt: skip
    script.predict(args)
    plan_call, sweep_call, ttft_call = calls
    assert plan_call[:3] == ("plan", "--model", args.model) and "--offload" in plan_call
    assert "--slo-ttft" not in plan_call  # the simulator runs here, on the sweep's workload
    assert len((tmp_path / "o" / "slice.jsonl").read_text().splitlines()) == 40
    ladder = sweep_call[sweep_call.index("--sweep") + 1]
    assert ladder.startswith("rate:") and len(ladder.split(",")) == 5
    assert sweep_call[sweep_call.index("--sweep-bisect") + 1] == "4"
    assert sweep_call[sweep_call.index("--compare") + 1] == "none,lmcache-mp" and "--trace" in sweep_call
    capacity = float(ladder.split(",")[1])
    assert ttft_call[ttft_call.index("--sweep") + 1] == "rate:" + ",".join(
        f"{v:g}" for v in script.at_loads(capacity)
    )
    assert ttft_call[ttft_call.index("--sweep-bisect") + 1] == "0"
    printed = capsys.readouterr().out
    assert "simulator: costs measured on the served engine (the demo's recorded calibration)" in printed
    doc: dict[str, Any] = json.loads((tmp_path / "o" / "predict.json").read_text())
    assert [r["layout"] for r in doc["layouts"]] == ["none", "lmcache-mp"]
    assert doc["unit"] == "x trace rate" and set(doc["load_average"]) == {"before", "after"}
    for row in doc["layouts"]:
        assert row["measured"] == capacity and [t["load"] for t in row["ttft"]] == script.at_loads(capacity)
        assert all(
            t["measured"]["p90"] is not None and t["predicted"]["p90"] is not None for t in row["ttft"]
        )
