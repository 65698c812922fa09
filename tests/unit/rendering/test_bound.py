"""What bounds a layout, in words, and the sweep's simulated bound, prediction and source lines."""

from __future__ import annotations

from kvstack.bench.sweep.schema import Capacity, CapacityPrediction, KneeBound, LayoutSweep
from kvstack.planning.predict.capacity_schema import ResourceUse
from kvstack.rendering.bench_sweep import bound_line, predicted_line, source_line
from kvstack.rendering.bound import bound_text

DISK = ResourceUse(
    resource="disk", label="disk read", utilisation=0.92, demand=1.748e9, capacity=1.9e9, unit="B/s"
)
PREFILL = ResourceUse(
    resource="prefill",
    label="prefill compute",
    utilisation=0.6,
    demand=7440,
    capacity=12_400,
    unit="tokens/s",
    engine_busy=0.95,
)
POOL = ResourceUse(
    resource="pool", label="KV pool", utilisation=0.5, demand=600_000, capacity=1_200_000, unit="tokens"
)


def _lay(**update: object) -> LayoutSweep:
    lay = LayoutSweep(
        name="lmcache",
        base_url="http://x",
        capacity=Capacity(status="bracketed", load=2, highest_passing=2, lowest_failing=4),
    )
    return lay.model_copy(update=update)


def test_bound_text_in_each_unit() -> None:
    assert bound_text(DISK) == "disk read 92% of 1.9 GB/s"
    assert bound_text(PREFILL) == "prefill compute 60% of 12,400 tokens/s (the engine 95% busy)"
    assert bound_text(POOL) == "KV pool 50% of 1,200,000 tokens"


def test_the_sweeps_bound_line_names_the_knee_and_the_step_below() -> None:
    passing = DISK.model_copy(update={"utilisation": 0.61})
    lay = _lay(bound=KneeBound(at_load=4, passing_load=2, bound=DISK, resources=[DISK], passing=[passing]))
    assert bound_line("lmcache", "trace_rate", lay) == (
        "lmcache: bound at the knee (simulated): disk read 92% of 1.9 GB/s at 4x (61% at 2x, which passed)"
    )
    assert bound_line("lmcache", "trace_rate", _lay()) is None


def test_the_prediction_line_and_its_ratio() -> None:
    pred = CapacityPrediction(status="slo", load=2.5, rate_per_s=2.5, bound=DISK, measured_load=2, ratio=1.25)
    assert predicted_line("lmcache", "rate", _lay(predicted=pred)) == (
        "lmcache: predicted capacity (simulated) 2.5/s, bound: disk read 92% of 1.9 GB/s; "
        "measured 2/s, predicted / measured 1.25"
    )
    above = pred.model_copy(update={"at_least": True})
    assert predicted_line("lmcache", "rate", _lay(predicted=above)).endswith(
        "measured at least 2/s (no step failed)"
    )  # type: ignore[union-attr]
    none = CapacityPrediction(status="no_costs", note="no plan and no calibration")
    assert (
        predicted_line("x", "rate", _lay(predicted=none))
        == "x: predicted capacity (simulated): none (no plan and no calibration)"
    )
    assert source_line("x", _lay(predicted=none)) is None
    wide = pred.model_copy(
        update={"status": "above_range", "load": 8.0, "source": "costs", "workload": "rows"}
    )
    assert predicted_line("lmcache", "concurrency", _lay(predicted=wide)).startswith(  # type: ignore[union-attr]
        "lmcache: predicted capacity (simulated) at least c=8, bound"
    )
    assert source_line("lmcache", _lay(predicted=wide)) == "lmcache: simulated: rows; costs"
