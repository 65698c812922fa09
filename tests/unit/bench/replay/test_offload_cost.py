"""The offload path's per-request cost read from a bench --trace result (plan --offload-cost-from)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvstack.bench.replay.offload_cost import offload_cost_from
from kvstack.bench.report import RESULTS_JSON
from kvstack.errors import InputError
from tests.support.bench_results import write_trace_result


def _layout(name: str, tiers: list[str], hit_s: float | None, miss_s: float) -> dict[str, Any]:
    calibration = {} if hit_s is None else {"hit_s": hit_s, "miss_s": miss_s}
    return {
        "layout": name,
        "hierarchy": {"levels": [{"tier": t} for t in tiers]},
        "ttft": {"calibration": calibration},
    }


def _write(tmp_path: Path, compared: list[dict[str, Any]]) -> Path:
    return write_trace_result(tmp_path, compared)


def test_the_cost_is_the_offload_layouts_fixed_cost_over_the_plain_ones(tmp_path: Path) -> None:
    out = _write(
        tmp_path,
        [
            _layout("none", ["engine_cache"], 0.011, 0.002),
            _layout("lmcache-mp", ["engine_cache", "dram", "disk"], 0.029, 0.004),
        ],
    )
    seconds, source = offload_cost_from(out)
    assert seconds == pytest.approx(0.020)
    assert "33.0 ms on lmcache-mp vs 13.0 ms on none" in source and "2025-11-24" in source
    # results.json itself is accepted as well as its directory.
    assert offload_cost_from(out / RESULTS_JSON)[0] == pytest.approx(0.020)


def test_a_cheaper_offload_path_costs_nothing_not_less(tmp_path: Path) -> None:
    out = _write(
        tmp_path,
        [
            _layout("none", ["engine_cache"], 0.02, 0.0),
            _layout("lmcache-mp", ["engine_cache", "dram"], 0.01, 0.0),
        ],
    )
    assert offload_cost_from(out)[0] == 0.0


@pytest.mark.parametrize(
    "compared",
    [
        [],  # not a trace replay's layouts at all
        [_layout("lmcache-mp", ["engine_cache", "dram"], 0.029, 0.004)],  # no plain layout to compare with
        [
            _layout("none", ["engine_cache"], 0.011, 0.0),
            _layout("lmcache-mp", ["engine_cache", "dram"], None, 0),
        ],
    ],
)
def test_without_a_calibrated_pair_it_says_how_to_get_one(
    tmp_path: Path, compared: list[dict[str, Any]]
) -> None:
    with pytest.raises(InputError, match="no calibrated pair") as err:
        offload_cost_from(_write(tmp_path, compared))
    assert err.value.hint is not None and "--compare none,lmcache-mp" in err.value.hint


def test_a_file_that_is_not_a_bench_result_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_text('{"layouts": 3}')
    with pytest.raises(InputError, match="is not a kvstack bench result"):
        offload_cost_from(bad)
    with pytest.raises(InputError, match="cannot read"):
        offload_cost_from(tmp_path / "missing.json")
