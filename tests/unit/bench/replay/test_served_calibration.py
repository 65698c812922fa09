"""The served-TTFT calibration read from a bench --trace result or a served-ttft.json
(plan --calibration, serve --calibration)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvstack.bench.replay.served_calibration import SERVED_TTFT_JSON, served_calibration_from
from kvstack.bench.report import RESULTS_JSON
from kvstack.errors import InputError
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from tests.support.bench_results import write_trace_result

PLAIN = ServedCosts(0.0411, 0.010, 1.03e-4, 3.4e-8, {}, "calibrated after the replay")
OFFLOAD = ServedCosts(0.0466, 0.010, 1.17e-4, 3.1e-8, {"dram": 3.8e-6}, "calibrated after the replay")


def _layout(name: str, tiers: list[str], costs: ServedCosts | None) -> dict[str, Any]:
    return {
        "layout": name,
        "hierarchy": {"levels": [{"tier": t} for t in tiers]},
        "ttft": {"calibration": costs.to_dict() if costs is not None else {}},
    }


def _bench(tmp_path: Path, compared: list[dict[str, Any]]) -> Path:
    return write_trace_result(tmp_path, compared)


def test_a_bench_trace_compare_gives_both_layouts_costs(tmp_path: Path) -> None:
    out = _bench(
        tmp_path,
        [
            _layout("none", ["engine_cache"], PLAIN),
            _layout("lmcache-mp", ["engine_cache", "dram", "disk"], OFFLOAD),
        ],
    )
    for path in (out, out / RESULTS_JSON):
        cal = served_calibration_from(path)
        assert (cal.plain, cal.offload) == (PLAIN, OFFLOAD)
        assert (cal.plain_layout, cal.offload_layout) == ("none", "lmcache-mp")
        assert cal.source.startswith("kvstack bench --trace ") and "2025-11-24" in cal.source


def test_a_plain_layout_alone_is_enough(tmp_path: Path) -> None:
    cal = served_calibration_from(_bench(tmp_path, [_layout("none", ["engine_cache"], PLAIN)]))
    assert cal.plain == PLAIN and cal.offload is None


def test_a_served_ttft_json_round_trips(tmp_path: Path) -> None:
    cal = ServedCalibration(PLAIN, OFFLOAD, "none", "lmcache-mp", "kvstack tune run 1")
    (tmp_path / SERVED_TTFT_JSON).write_text(json.dumps(cal.to_dict()))
    assert served_calibration_from(tmp_path) == cal
    assert served_calibration_from(tmp_path / SERVED_TTFT_JSON) == cal


@pytest.mark.parametrize(
    ("compared", "needle"),
    [
        ([_layout("lmcache-mp", ["engine_cache", "dram"], OFFLOAD)], "no calibrated layout without offload"),
        ([_layout("none", ["engine_cache"], None)], "no calibrated layout without offload"),
    ],
)
def test_without_plain_costs_it_says_how_to_get_them(
    tmp_path: Path, compared: list[dict[str, Any]], needle: str
) -> None:
    with pytest.raises(InputError, match=needle) as err:
        served_calibration_from(_bench(tmp_path, compared))
    assert err.value.hint is not None and "--compare none,lmcache-mp" in err.value.hint


def test_damaged_files_are_one_line_errors(tmp_path: Path) -> None:
    bad = {**PLAIN.to_dict(), "linear_s_per_token": "fast"}
    out = _bench(tmp_path, [{**_layout("none", ["engine_cache"], None), "ttft": {"calibration": bad}}])
    with pytest.raises(InputError, match=r"layouts\.0\.ttft\.calibration\.linear_s_per_token cannot be read"):
        served_calibration_from(out)
    other = tmp_path / "other.json"
    other.write_text('{"plan": 1}')
    with pytest.raises(InputError, match="has no 'layouts' object"):
        served_calibration_from(other)
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(InputError, match=r"x\.json is not JSON"):
        served_calibration_from(tmp_path / "x.json")


def test_a_bench_trace_result_written_before_decode_was_measured_still_loads() -> None:
    from kvstack.bench.replay.results import layouts_of
    from kvstack.bench.schema import BenchResult

    fixture = Path(__file__).resolve().parents[3] / "fixtures" / "results" / "bench-trace-1a1c99d.json"
    (layout,) = layouts_of(BenchResult.model_validate_json(fixture.read_text()))
    costs = layout.calibration()
    assert costs is not None and costs.decode_fixed_s is None and "decode_fixed_s" not in costs.model_dump()
    served = costs.served()
    assert served.hit_s > 0 and served.decode_fixed_s is None and served.decode_per_seq_s is None


def test_decode_figures_come_back_from_a_served_ttft_json(tmp_path: Path) -> None:
    from dataclasses import replace

    plain = replace(PLAIN, decode_fixed_s=0.0019, decode_per_seq_s=6.5e-5)
    (tmp_path / SERVED_TTFT_JSON).write_text(json.dumps(ServedCalibration(plain).to_dict()))
    cal = served_calibration_from(tmp_path)
    assert (cal.decode_fixed_s, cal.decode_per_seq_s) == (0.0019, 6.5e-5)
