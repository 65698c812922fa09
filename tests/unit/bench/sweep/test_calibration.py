"""bench/sweep/calibration.py: the calibration a sweep runs before a layout's steps where nothing
else gives the engine's costs, and the ServedCalibration a predictor reads back from the result."""

from __future__ import annotations

from dataclasses import replace

from kvstack.bench.replay.results import Costs
from kvstack.bench.sweep.calibration import (
    calibrate_layout,
    needs_calibration,
    sweep_calibration,
    sweep_lengths,
)
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    Slo,
    SweepCalibration,
    SweepConfig,
    SweepResult,
)
from kvstack.planning.predict.served_ttft import ServedCosts
from kvstack.serving.served_layout import ServedLayout
from tests.support.stream_server import ServerKnobs, StreamServer

PLAIN = ServedCosts(0.012, 0.0, 5e-6, 4e-9, {}, "none", decode_fixed_s=0.0019, decode_per_seq_s=6e-5)
OFFLOAD = replace(PLAIN, miss_s=0.01, fetch_s={"dram": 2e-6}, source="lmcache-mp")


def _result(calibrations: dict[str, SweepCalibration | None]) -> SweepResult:
    config = SweepConfig(url=None, model="demo", api_key=None, workload="random", requests=4,
                         prompt_tokens=64, output_tokens=4, seed=0, compare=list(calibrations), ladder=[1.0],
                         bisect=0, metrics_urls=[], timeout_s=60.0)  # fmt: skip
    env = Environment(kvstack="0", engines={}, python="3", platform="linux", cpu_count=2)
    layouts = [
        LayoutSweep(name=n, base_url="", capacity=Capacity(status="not_measured"), calibration=c)
        for n, c in calibrations.items()
    ]
    return SweepResult(kind="concurrency", slo=Slo(ttft_s=1.0), config=config, environment=env,
                       layouts=layouts, requests=[])  # fmt: skip


def test_each_layouts_calibration_comes_back_in_its_role() -> None:
    result = SweepResult.model_validate_json(
        _result(
            {
                "none": SweepCalibration(costs=Costs.of(PLAIN), offload=False, seconds=1.2),
                "lmcache-mp": SweepCalibration(costs=Costs.of(OFFLOAD), offload=True, seconds=1.4),
                "failed": SweepCalibration(offload=False, note="failed: the engine died"),
                "planned": None,
            }
        ).model_dump_json(by_alias=True)
    )
    none = sweep_calibration(result, "none")
    assert none is not None and (none.plain, none.offload, none.plain_layout) == (PLAIN, None, "none")
    assert (none.decode_fixed_s, none.decode_per_seq_s) == (0.0019, 6e-5)
    lm = sweep_calibration(result, "lmcache-mp")
    assert lm is not None and (lm.plain, lm.offload) == (PLAIN, OFFLOAD)
    assert (lm.plain_layout, lm.offload_layout) == ("none", "lmcache-mp")
    assert lm.offload_costs(0.0, {}) == OFFLOAD and "before its steps" in lm.source
    assert sweep_calibration(result, "failed") is None and sweep_calibration(result, "planned") is None
    assert sweep_calibration(result, "absent") is None
    # An offload layout swept alone: its own costs stand for the plain ones too.
    only = _result({"lmcache-mp": SweepCalibration(costs=Costs.of(OFFLOAD), offload=True)})
    alone = sweep_calibration(only, "lmcache-mp")
    assert alone is not None and alone.plain == alone.offload == OFFLOAD


def test_the_misses_reach_twice_the_sweeps_longest_prompt() -> None:
    assert sweep_lengths(16352, 64) == [512, 1024]
    assert sweep_lengths(16352, 900) == [512, 1024, 2048]
    assert sweep_lengths(16352, 3000) == [512, 1024, 2048, 4096, 8192]
    assert sweep_lengths(16352, 9000) == [512, 1024, 2048, 4096, 8192]
    assert sweep_lengths(3000, 3000) == [512, 1024, 2048]  # within the context
    assert sweep_lengths(300, 64) == [300]


def test_a_layout_without_a_prefill_figure_is_calibrated_against_its_engine() -> None:
    from tests.unit.planning.helpers import plan_for

    assert needs_calibration(ServedLayout("server", "http://127.0.0.1:1"))
    assert not needs_calibration(
        ServedLayout("none", "http://127.0.0.1:1", plan=plan_for("h100-sxm", "llama-3.1-8b", context=8192))
    )
    knobs = ServerKnobs(base_ttft_s=0.002, prefill_s_per_token=2e-5, itl_s=0.002)
    with StreamServer(knobs) as srv:
        got = calibrate_layout(
            ServedLayout("server", srv.url, (srv.url + "/metrics",)), "demo-model", None, 64
        )
        sent = [r["tokens"] for r in srv.requests]
    assert got.costs is not None and got.offload is None and "tiers are unknown" in got.note
    assert got.costs.linear_s_per_token + got.costs.quadratic_s_per_token2 > 0 and got.seconds > 0
    assert got.costs.decode_fixed_s is not None and got.costs.decode_fixed_s >= 0.002
    # Misses of 512 and 1,024 tokens (twice), each sent again; decode at 1, 2, 4 and 8 (twice); a warm-up.
    assert sorted(set(sent)) == [64, 512, 1024] and len(sent) == 1 + 2 * 15 + 2 * 2 * 2


def test_a_calibration_that_fails_is_recorded_and_the_sweep_goes_on() -> None:
    with StreamServer(ServerKnobs(status=500)) as srv:
        got = calibrate_layout(
            ServedLayout("server", srv.url, (srv.url + "/metrics",)), "demo-model", None, 64
        )
    assert got.costs is None and got.note.startswith("failed: ") and got.seconds >= 0
