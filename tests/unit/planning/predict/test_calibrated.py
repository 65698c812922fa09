"""Calibrated figures for the planner, against hand-computed values."""

from __future__ import annotations

import pytest

from kvstack.hardware.calibrate import Calibration, store_calibration
from kvstack.hardware.calibrate.model import (
    CopyFigures,
    DiskFigures,
    PrefillFigures,
    PrefillPoint,
)
from kvstack.model.catalog import catalog_model
from kvstack.planning.predict.calibrated import prefill_rate_explained, tier_read_bw_explained
from tests.support.calibration import h100_calibration, llama8b_prefill

from ..helpers import PlanFor, snapshot


def prefill_rate_value(
    calibration: Calibration | None, model: str, context: int, *, active_params: int | None = None
) -> float | None:
    found = prefill_rate_explained(calibration, model, context, active_params=active_params)
    return found[0] if found else None


def tier_read_bw_value(calibration: Calibration | None, kind: str, path: str | None = None) -> float | None:
    found = tier_read_bw_explained(calibration, kind, path)
    return found[0] if found else None


def _prefill(points: dict[int, float], scaled: bool = False) -> PrefillFigures:
    return llama8b_prefill(
        [
            PrefillPoint(prompt_tokens=n, seconds=n / r, tokens_per_s=r, achieved_tflops=1.0)
            for n, r in points.items()
        ],
        scaled_down=scaled,
        active_params=8_000_000_000,
    )


def calibration(**update: object) -> Calibration:
    return h100_calibration(**{"prefill": _prefill({1024: 10_000.0, 4096: 5_000.0}), **update})


CAL = calibration()


@pytest.mark.parametrize(
    ("context", "expected", "where"),
    [
        (1024, 10_000.0, "measured at 1K"),
        (4096, 5_000.0, "measured at 4K"),
        # per-token time 1e-4 s at 1K, 2e-4 s at 4K: a third of the way is 1.333e-4 s
        (2048, 7_500.0, "interpolated between 1K and 4K"),
        (512, 10_000.0, "shortest measured"),
        # slope 1e-4 s / 3072 tokens: at 8K, 2e-4 + 4096 x 1e-4 / 3072 = 3.333e-4 s per token
        (8192, 3_000.0, "extrapolated beyond 4K"),
    ],
)
def test_prefill_rate_of_the_measured_model(context: int, expected: float, where: str) -> None:
    found = prefill_rate_explained(CAL, "llama-3.1-8b", context)
    assert found is not None
    rate, source = found
    assert rate == pytest.approx(expected)
    assert source.startswith("calibrated: llama-3.1-8b (bfloat16) prefill") and where in source
    assert "scaled" not in source


def test_an_alias_of_the_measured_model_is_not_scaled() -> None:
    assert prefill_rate_value(CAL, "meta-llama/Llama-3.1-8B-Instruct", 2048) == pytest.approx(7_500.0)


def test_another_model_is_scaled_by_active_params() -> None:
    found = prefill_rate_explained(CAL, "my-70b", 2048, active_params=70_000_000_000)
    assert found is not None
    assert found[0] == pytest.approx(7_500.0 * 8 / 70)
    assert "scaled from llama-3.1-8b by active params 8B / 70B" in found[1]
    # The planner passes the target's active params (llama-3.1-70b's published 70,553,706,496);
    # planning reads no catalog itself, so without them there is no figure.
    active_70b = catalog_model("llama-3.1-70b")[0].active_params
    assert active_70b == 70_553_706_496
    found = prefill_rate_explained(CAL, "llama-3.1-70b", 1024, active_params=active_70b)
    assert found is not None and found[0] == pytest.approx(10_000.0 * 8e9 / active_70b)
    assert prefill_rate_value(CAL, "llama-3.1-70b", 1024) is None


def test_a_scaled_down_measurement_is_always_scaled() -> None:
    cal = calibration(prefill=_prefill({64: 1_000.0}, scaled=True))
    found = prefill_rate_explained(cal, "llama-3.1-8b", 128, active_params=16_000_000_000)
    assert found is not None
    assert found[0] == pytest.approx(500.0)
    assert "only length measured" in found[1] and "a scaled-down llama-3.1-8b" in found[1]


def test_no_figure_means_none() -> None:
    assert prefill_rate_value(None, "llama-3.1-8b", 1024) is None
    assert prefill_rate_value(calibration(prefill=None), "llama-3.1-8b", 1024) is None
    assert prefill_rate_value(CAL, "not-in-the-catalog", 1024) is None  # no active params to scale by
    assert prefill_rate_value(CAL, "llama-3.1-8b", 0) is None


DISKS = [
    DiskFigures(path="/nvme", files=1, file_bytes=1, bounce_bytes_per_s=6e9, plain_bytes_per_s=5e9),
    DiskFigures(path="/nvme/deep", files=1, file_bytes=1, direct_bytes_per_s=3e9),
    DiskFigures(path="/data/", files=1, file_bytes=1, plain_bytes_per_s=1e9),
]


@pytest.mark.parametrize(
    ("path", "expected", "how"),
    [
        ("/nvme", 6e9, "pinned bounce buffer"),
        ("/nvme/kv/cache", 6e9, "/nvme -> cuda:0"),
        ("/nvme/deep/x", 3e9, "O_DIRECT"),  # the deepest measured directory that holds it
        ("/data", 1e9, "pageable"),
        ("/nvme/../data/kv", 1e9, "/data/ -> cuda:0"),
        ("/other", None, None),
        (None, None, None),  # several paths measured: which one is unknown
    ],
)
def test_disk_read_bw_by_path(path: str | None, expected: float | None, how: str | None) -> None:
    cal = calibration(disks=DISKS)
    found = tier_read_bw_explained(cal, "disk", path)
    if expected is None:
        assert found is None
        return
    assert found is not None and found[0] == expected
    assert how is not None and how in found[1]


def test_single_disk_and_cpu_and_other_kinds() -> None:
    cal = calibration(
        disks=DISKS[:1],
        host_copy=CopyFigures(
            transfer_bytes=32 << 20,
            runs=3,
            method="m",
            h2d_pinned_bytes_per_s=5e10,
            h2d_pageable_bytes_per_s=2e10,
        ),
    )
    assert tier_read_bw_value(cal, "disk") == 6e9
    found = tier_read_bw_explained(cal, "cpu")
    assert found is not None and found[0] == 5e10 and "pinned, 50.0 GB/s" in found[1]
    pageable_only = CopyFigures(transfer_bytes=1, runs=1, method="m", h2d_pageable_bytes_per_s=2e10)
    found = tier_read_bw_explained(calibration(host_copy=pageable_only), "cpu")
    assert found is not None and found[0] == 2e10 and "pageable (no pinned figure)" in found[1]
    assert tier_read_bw_value(cal, "remote", "/nvme") is None
    assert tier_read_bw_value(calibration(), "cpu") is None
    assert tier_read_bw_value(None, "disk", "/nvme") is None


def test_a_stored_calibration_reaches_the_planners_prefill_model(plan_for: PlanFor) -> None:
    """The record's top-level effective_tflops is the key planning/layout.py reads."""
    snap = snapshot("h100-sxm")
    store_calibration(snap, calibration(effective_tflops=600.0, prefill=None))
    calibrated, estimate = plan_for(snap, "llama-3.1-8b"), plan_for("h100-sxm", "llama-3.1-8b")
    assert (calibrated.prefill_source, estimate.prefill_source) == ("calibrated", "estimate")
    assert "calibrated 600 TFLOP/s per GPU" in calibrated.reasons["breakeven"]
    # 600 TFLOP/s replaces 989 x 0.4 = 395.6: 600 / 395.6 times faster (the plan rounds its rate)
    fast, slow = calibrated.prefill_tokens_per_s, estimate.prefill_tokens_per_s
    assert fast is not None and slow is not None
    assert fast / slow == pytest.approx(600 / 395.6, rel=1e-4)


def test_a_calibrated_per_model_prefill_rate_and_tier_bandwidths_drive_the_plan(plan_for: PlanFor) -> None:
    """The measured prefill rate of the same model wins over effective TFLOP/s and the data sheet: at
    the plan's context the prefill model runs exactly at the measured rate (x TP). The measured
    host->device copy and disk reads replace the link table and fio's figure for the tiers."""
    snap = snapshot("h100-sxm")
    disk = DiskFigures(path="/data", files=1, file_bytes=1, bounce_bytes_per_s=2.5e9)
    copy = CopyFigures(transfer_bytes=1, runs=1, method="m", h2d_pinned_bytes_per_s=4.0e10)
    store_calibration(snap, calibration(effective_tflops=600.0, host_copy=copy, disks=[disk]))
    plan = plan_for(snap, "llama-3.1-8b", context=4096)
    assert plan.prefill_source == "calibrated"
    assert plan.reasons["breakeven"].startswith(
        "prefill calibrated: llama-3.1-8b (bfloat16) prefill measured at 4K"
    )
    assert plan.prefill_tokens_per_s == pytest.approx(5_000.0, rel=1e-3)  # the measured 4K rate, TP 1
    plan = plan_for(snap, "llama-3.1-8b", users=8)  # 8 x 128K sessions: DRAM and disk tiers
    cpu, disk_tier = plan.tier("cpu"), plan.tier("disk")
    assert cpu is not None and cpu.read_bw_bytes_per_s == 4.0e10
    assert disk_tier is not None and disk_tier.read_bw_bytes_per_s == 2.5e9
    assert (
        "calibrated: /data -> cuda:0, buffered reads through a pinned bounce buffer"
        in plan.reasons["disk_read_bw"]
    )
