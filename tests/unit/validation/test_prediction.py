"""Measured vs predicted TTFT in the validation report (kvstack/validation/prediction.py)."""

from __future__ import annotations

import pytest

from kvstack.planning.schema import FetchPath, TtftModel
from kvstack.validation.prediction import apply_predictions
from kvstack.validation.report import StepResult, ValidationReport
from tests.support.validation_report import demo_report

MODEL = TtftModel(
    context_tokens=4096,
    bytes_per_token=1024.0,
    fetch={
        "cpu": FetchPath(bw_bytes_per_s=5e9, source="assumed"),
        "disk": FetchPath(bw_bytes_per_s=1e9, latency_s=1e-4),
    },
)


def report(cpu_s: float, disk_s: float) -> ValidationReport:
    return demo_report(
        [
            StepResult(name="cold", verdict="pass", ttft_s=0.235),
            StepResult(name="warm", verdict="pass", ttft_s=0.050),
            StepResult(name="tier:cpu", verdict="pass", ttft_s=cpu_s),
            StepResult(name="tier:disk", verdict="pass", ttft_s=disk_s),
            StepResult(name="diagnosis", verdict="pass"),
        ]
    )


def test_each_tier_step_gets_its_prediction_and_a_slow_one_a_warning() -> None:
    r = report(cpu_s=0.058, disk_s=0.5)
    apply_predictions(r, MODEL)
    cpu, disk, cold = r.step("tier:cpu"), r.step("tier:disk"), r.step("cold")
    assert cpu is not None and disk is not None and cold is not None
    assert cpu.predicted_ttft_s == pytest.approx(0.050 + 2048 * 1024 / 5e9)
    assert disk.predicted_ttft_s == pytest.approx(0.050 + 1e-4 + 2048 * 1024 / 1e9)
    assert "KV at 5.0 GB/s (assumed)" in cpu.prediction
    assert cpu.warnings == []
    assert len(disk.warnings) == 1 and "slower than predicted" in disk.warnings[0]
    assert disk.verdict == "pass"  # a warning, not a failure
    assert cold.predicted_ttft_s is None  # no prefill figure in this model
    assert '"predicted_ttft_s"' in r.to_json()


def test_no_prediction_without_a_model_or_a_passing_warm_step() -> None:
    r = report(cpu_s=0.058, disk_s=0.5)
    apply_predictions(r, None)
    assert all(s.predicted_ttft_s is None for s in r.steps)
    r = report(cpu_s=0.058, disk_s=0.5)
    warm = r.step("warm")
    assert warm is not None
    warm.verdict = "fail"
    apply_predictions(r, MODEL)
    assert all(s.predicted_ttft_s is None and not s.warnings for s in r.steps)
