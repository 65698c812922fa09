"""scripts/bench-capacity predict: its pure parts (the ladder around a prediction, load 1 of a trace
sweep, predicted vs measured per layout) and its flow, the engine runs replaced by a recorded sweep
(the plan is the real CLI's, on the demo's recorded calibration)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvstack.bench.sweep.bound import served_prediction
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    Slo,
    SweepConfig,
    SweepResult,
    TraceLoad,
)
from kvstack.planning.predict.bound import CapacityAsk
from kvstack.planning.predict.plan_capacity import plan_capacity
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.traces.mooncake import TraceRow
from tests.support.calibration import DEMO_LMCACHE_MP, DEMO_NONE, demo_served_ttft
from tests.unit.bench.sweep.test_bound import step
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


def _calibration() -> ServedCalibration:
    found = [
        ("none", False, ServedCosts.from_dict(DEMO_NONE)),
        ("lmcache-mp", True, ServedCosts.from_dict(DEMO_LMCACHE_MP)),
    ]
    cal = ServedCalibration.first_of(found, "the demo's calibration")
    assert cal is not None
    return cal


def _sweep(rate_per_s: float = 0.5) -> SweepResult:
    """Two layouts swept at 1 and 2 x a trace's rate: each passes at 1, fails at 2."""
    layouts = [
        LayoutSweep(
            name=name,
            base_url="http://h",
            steps=[step(1, True, shares=shares), step(2, False, shares=shares)],
            capacity=Capacity(status="bracketed", load=1, highest_passing=1, lowest_failing=2),
        )
        for name, shares in (("none", {"recomputed": 1.0}), ("lmcache-mp", {"recomputed": 0.5, "dram": 0.5}))
    ]
    config = SweepConfig(url=None, model="m", api_key=None, workload="trace", requests=10, prompt_tokens=1000,
                         output_tokens=10, seed=0, compare=["none", "lmcache-mp"], ladder=[1, 2], bisect=0,
                         metrics_urls=[], timeout_s=300)  # fmt: skip
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


def test_each_layout_predicted_against_measured(script: ModuleType) -> None:
    cal = _calibration()
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", context=8192, offload="lmcache-mp")
    plan = plan.model_copy(update={"capacity": plan_capacity(plan, CapacityAsk(slo_ttft_s=0.5), cal)})
    assert plan.capacity is not None and plan.capacity.layouts
    result = _sweep(rate_per_s=0.5)
    assert script.layout_plan(plan, "none").cache.tiers == plan.cache.tiers[:1]
    assert script.layout_plan(plan, "lmcache-mp") is plan
    rows = [script.compare_layout(lay, result, plan, cal) for lay in result.layouts]
    none, lmcache = rows
    for row, planned in zip(rows, (plan.capacity.layouts[0], plan.capacity.layouts[-1]), strict=True):
        assert row["measured"] == 1 and row["measured_per_s"] == pytest.approx(0.5)
        assert row["plan_per_s"] == planned.rate_per_s
        assert row["plan"] == pytest.approx(planned.rate_per_s / 0.5)
        assert row["plan_ratio"] == pytest.approx(row["plan"])  # measured 1 x the trace's rate
        assert row["sent_note"].startswith("costs measured on the served engine (the demo's calibration)")
    expected = served_prediction(result.layouts[1], plan, cal, "trace_rate", SLO, 0.5)
    assert lmcache["sent"] == expected.load and lmcache["sent_ratio"] == expected.ratio
    alone = served_prediction(result.layouts[0], plan.with_tiers(plan.cache.tiers[:1]), cal,
                              "trace_rate", SLO, 0.5)  # fmt: skip
    assert none["sent"] == alone.load
    line = script.comparison_line(lmcache)
    assert line.startswith("  lmcache-mp  measured 1x = 0.5/s [bracketed]; plan ")
    assert (
        f"as sent {lmcache['sent']:.3g}x" in line
        and f"predicted/measured {lmcache['sent_ratio']:.2f}" in line
    )


def test_the_flow_with_the_engine_runs_replaced(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--calibration skips (a); (b) is the real plan on the slice; (c)'s sweep is a recorded one."""
    calls: list[tuple[str, ...]] = []
    real = script.kvstack

    def fake(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        if args[0] == "plan":
            return real(*args)
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "results.json").write_text(_sweep().model_dump_json(by_alias=True))
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(script, "kvstack", fake)
    monkeypatch.setattr(script, "PY", sys.executable)
    cal = demo_served_ttft(tmp_path / "served-ttft.json", "the demo's recorded calibration")
    args = script.argparse.Namespace(
        model=str(ROOT / "profiles" / "demo"), trace=str(ROOT / "tests" / "fixtures" / "traces" /
        "conversation_1in40.jsonl"), max_requests=40, block_tokens=64, time_scale=1.0, max_output_tokens=16,
        calibration=str(cal), slo_ttft=2000.0, slo_share=0.9, ladder=None, bisect=1, out=str(tmp_path / "o"),
        engine_args=[],
    )  # fmt: skip
    script.predict(args)
    plan_call, sweep_call = calls
    assert plan_call[:3] == ("plan", "--model", args.model) and "--calibration" in plan_call
    assert plan_call[plan_call.index("--slo-ttft") + 1] == "2000.0" and "--offload" in plan_call
    assert len((tmp_path / "o" / "slice.jsonl").read_text().splitlines()) == 40
    ladder = sweep_call[sweep_call.index("--sweep") + 1]
    assert ladder.startswith("rate:") and len(ladder.split(",")) == 5
    assert sweep_call[sweep_call.index("--compare") + 1] == "none,lmcache-mp" and "--trace" in sweep_call
    printed = capsys.readouterr().out
    assert "plan: costs measured on the served engine (the demo's recorded calibration)" in printed
    assert "  none        measured 1x = 0.5/s [bracketed]; plan " in printed
    rows: list[dict[str, Any]] = json.loads((tmp_path / "o" / "predict.json").read_text())
    assert [r["layout"] for r in rows] == ["none", "lmcache-mp"]
    assert all(r["sent_ratio"] is not None and r["sent_ratio"] > 0 for r in rows)
