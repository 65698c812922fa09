"""bench/sweep/predict.py: the step simulator's prediction beside what a sweep measured, on recorded
step costs (no engine): the workload as each step sent it, the capacity bisected in the sweep's
unit, each step's simulated TTFT, the bound at the knee and where the costs come from."""

from __future__ import annotations

import pytest

from kvstack.bench.replay.prompts import SentRequest
from kvstack.bench.replay.results import Costs
from kvstack.bench.sweep.ladder import LoadKind
from kvstack.bench.sweep.predict import (
    explain_sweep,
    layout_model,
    predict_layout,
    row_requests,
    sent_requests,
)
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    Slo,
    SweepCalibration,
    SweepConfig,
    SweepResult,
    SweepRow,
    TraceLoad,
)
from kvstack.planning.predict.simulator import SimRequest, at_multiplier, capacity, run_at
from kvstack.planning.predict.simulator import Slo as SimSlo
from tests.support.sweep_steps import step
from tests.unit.planning.helpers import plan_for

# A step's fixed 10 ms, 1 ms a prompt token, decode free beyond the step; the server's pool in 16s.
COSTS = Costs(hit_s=0.01, miss_s=0.0, linear_s_per_token=1e-3, decode_fixed_s=0.01, decode_per_seq_s=0.0,
              source="recorded")  # fmt: skip
CALIBRATED = SweepCalibration(costs=COSTS, pool_tokens=65536, block_tokens=16, engine="vllm")
SLO = Slo(ttft_s=0.3, share=0.9)


def row(step: int, i: int, *, start: float = 0.0, prompt: int = 64, rnd: int = 0, group: str = "",
        expected: int = 0, output: int = 1, ok: bool = True) -> SweepRow:  # fmt: skip
    return SweepRow(layout="x", id=f"{step}-{i}", index=i, round=rnd, group=group or f"g{i}",
                    prompt_tokens=prompt, expected_prefix_tokens=expected, ok=ok, start_s=start,
                    output_tokens=output if ok else 0, step=step, load=0.0)  # fmt: skip


def sweep(
    kind: LoadKind, loads: list[float], rows: list[SweepRow], trace: TraceLoad | None = None
) -> SweepResult:
    steps = [step(load, load <= 2).model_copy(update={"step": k, "seed": k}) for k, load in enumerate(loads)]
    lay = LayoutSweep(
        name="x",
        base_url="http://x",
        steps=steps,
        calibration=CALIBRATED,
        capacity=Capacity(status="bracketed", load=2, highest_passing=2, lowest_failing=4),
    )
    config = SweepConfig(url="http://x", model="m", api_key=None, workload="random", requests=8,
                         prompt_tokens=64, output_tokens=1, seed=0, compare=[], ladder=loads, bisect=0,
                         metrics_urls=[], timeout_s=60)  # fmt: skip
    env = Environment(kvstack="0", engines={}, python="3.11", platform="linux", cpu_count=2)
    return SweepResult(kind=kind, slo=SLO, config=config, environment=env, layouts=[lay], requests=rows,
                       trace=trace)  # fmt: skip


def unique_rows(steps: int, *, gap: float = 0.0) -> list[SweepRow]:
    return [row(s, i, start=i * gap) for s in range(steps) for i in range(8)]


def test_a_steps_rows_are_its_requests_rounds_and_shared_prefixes() -> None:
    # A document (group d) warmed in round 0, asked about in round 1: the 64 tokens round 1 expects
    # held are the group's 4 ids in both; the rest of each prompt its own. A failed request asked 1.
    rows = [row(0, 0, start=5.0, group="d"), row(0, 1, start=9.0, prompt=80, rnd=1, group="d", expected=64),
            row(0, 2, start=9.5, prompt=20, rnd=1, group="e", ok=False)]  # fmt: skip
    warm, ask, failed = row_requests(rows, output_tokens=7)
    assert warm == SimRequest(0.0, 64, 1, (0, 1, 2, 3), 16)
    assert ask.round == 1 and ask.arrival_s == 0.0 and ask.prefix_ids[:4] == (0, 1, 2, 3)
    assert len(ask.prefix_ids) == 5 and ask.prefix_ids[4] not in warm.prefix_ids
    assert failed.output_tokens == 7 and failed.arrival_s == 0.5 and not set(failed.prefix_ids) & {0, 1, 2, 3}


def test_a_trace_sweeps_requests_are_its_replays_blocks_and_clock() -> None:
    sent = [SentRequest(0, 0, 0.0, (7, 8), 200, 4, "s", 200), SentRequest(1, 1, 2.5, (7,), 300, 1, "s", 300)]
    first, second = sent_requests(sent, block_tokens=128)
    assert first == SimRequest(0.0, 200, 4, (7, 8), 128)
    assert second.arrival_s == 2.5 and second.prefix_ids[0] == 7 and len(second.prefix_ids) == 3  # padded


def test_a_concurrency_sweep_is_bisected_by_whole_clients_on_the_calibration() -> None:
    # c clients: their 64-token prompts in one step, 10 + 64 c ms; within 300 ms up to c = 4.
    result = sweep("concurrency", [1, 2, 4], unique_rows(3))
    (lay,) = explain_sweep(result, {}).layouts
    pred = lay.predicted
    assert pred is not None and (pred.status, pred.load, pred.measured_load) == ("slo", 4, 2)
    assert pred.ratio == pytest.approx(2.0) and "closed loop" in pred.workload
    assert (
        "costs measured on the served engine" in pred.source
        and "64K tokens in 16-token blocks" in pred.source
    )
    for s in lay.steps:
        assert s.predicted is not None
        assert s.predicted.ttft_p50_s == pytest.approx(0.01 + 0.064 * s.load)
    assert [s.predicted.share_within_slo for s in lay.steps if s.predicted] == [1.0, 1.0, 1.0]
    # At the knee (c=4, the lowest failing step) the engine is never idle and prefill takes most of it.
    bound = lay.bound
    assert bound is not None and (bound.at_load, bound.passing_load) == (4, 2)
    assert bound.bound is not None and bound.bound.resource == "prefill"
    assert bound.bound.engine_busy == pytest.approx(1.0)
    assert bound.bound.utilisation == pytest.approx(0.256 / 0.266)
    assert {u.resource for u in bound.passing} >= {"prefill", "decode", "step", "pool"}


def test_a_rate_sweep_multiplies_the_lowest_steps_send_times() -> None:
    result = sweep("rate", [2, 4], unique_rows(2, gap=0.5))
    lay = predict_layout(result, result.layouts[0], None, None)
    assert lay.predicted is not None and lay.predicted.note.startswith("no plan and no calibration")
    from kvstack.bench.sweep.calibration import sweep_calibration

    served = sweep_calibration(result, "x")
    lay = predict_layout(result, result.layouts[0], None, served)
    model = layout_model("x", None, served, CALIBRATED, 64)
    assert not isinstance(model, str)
    base = row_requests([r for r in result.requests if r.step == 0], 1)
    search = capacity(base, model.layout, SimSlo(ttft_s=0.3, share=0.9), tolerance=0.1, lowest=1 / 1024)
    pred = lay.predicted
    assert pred is not None and search.lo is not None
    assert pred.load == pytest.approx(2 * search.lo) and pred.rate_per_s == pred.load
    top = lay.steps[1].predicted
    assert top is not None and top.ttft_p90_s == run_at(base, model.layout, 1.0).ttft_quantile(0.9)


def test_a_trace_sweep_replays_the_slice_at_each_steps_multiple() -> None:
    trace = [SimRequest(2.0 * k, 256, 2, (k,), 256) for k in range(10)]
    load = TraceLoad(
        source="t.jsonl", requests=10, span_s=18.0, rate_per_s=0.5, time_scale=1.0, caches="fresh"
    )
    result = sweep("trace_rate", [1, 4], [], trace=load)
    (lay,) = explain_sweep(result, {}, trace).layouts
    model = layout_model("x", None, None, CALIBRATED, 256)
    assert isinstance(model, str)  # no calibration given: no costs
    from kvstack.bench.sweep.calibration import sweep_calibration

    model = layout_model("x", None, sweep_calibration(result, "x"), CALIBRATED, 256)
    assert not isinstance(model, str)
    search = capacity(trace, model.layout, SimSlo(ttft_s=0.3, share=0.9), start=1.0, tolerance=0.1,
                      lowest=1 / 1024)  # fmt: skip
    pred = lay.predicted
    assert pred is not None and pred.load == search.lo and pred.rate_per_s == pytest.approx(0.5 * pred.load)
    assert "the trace's 10 requests as replayed" in pred.workload
    at4 = lay.steps[1].predicted
    assert at4 is not None and at4.ttft_p50_s == run_at(trace, model.layout, 4.0).ttft_quantile(0.5)
    assert (
        run_at(trace, model.layout, 4.0).requests
        == run_at(at_multiplier(trace, 4.0), model.layout, 1.0).requests
    )


def test_a_plan_with_a_prefill_figure_gives_the_costs_without_a_calibration() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", context=8192)
    model = layout_model("none", plan, None, None, 64)
    assert not isinstance(model, str) and model.source.startswith("the plan's TTFT model")
    assert model.layout.name == "none" and model.layout.limits.block_tokens == 16
    no_pool = layout_model("x", None, None, SweepCalibration(costs=COSTS), 64)
    assert isinstance(no_pool, str)
    from kvstack.planning.predict.served_ttft import ServedCalibration

    served = ServedCalibration(plain=COSTS.served(), plain_layout="x")
    assert "read no engine pool" in str(layout_model("x", None, served, SweepCalibration(costs=COSTS), 64))
