"""serve's verdict on a validation report, shared by the single-engine and replica sessions."""

from __future__ import annotations

import pytest

from kvstack.errors import ValidationFailed
from kvstack.serving.request import ServeRequest
from kvstack.serving.session import ServeEvents, judge
from kvstack.validate import StepResult, ValidationReport
from kvstack.validation.diagnosis import Diagnosis


def report(overall: str) -> ValidationReport:
    steps = [
        StepResult(name="warm", verdict="fail" if overall == "FAIL" else "pass", reason="only 1.1x"),
        StepResult(name="tier", verdict="skip", reason="no offload tier on a CPU platform"),
    ]
    return ValidationReport(
        base_url="http://127.0.0.1:8000",
        model="demo",
        engine="vllm",
        prompt_tokens=2048,
        prompt_tokens_exact=True,
        min_speedup=1.5,
        repeat=3,
        steps=steps,
        overall=overall,  # type: ignore[arg-type]
    )


def test_pass_and_no_report_say_nothing() -> None:
    said: list[str] = []
    events = ServeEvents(warning=said.append)
    judge(report("PASS"), ServeRequest(exit_after_validate=True), events, "where")
    judge(None, ServeRequest(exit_after_validate=True), events, "where")
    assert said == []


def test_failure_ends_an_exit_after_validate_run_naming_steps_and_diagnoses() -> None:
    failed = report("FAIL")
    failed.diagnoses.append(
        Diagnosis(
            name="lmcache-degraded-mode",
            severity="error",
            explanation="x",
            count=1,
            first_line=3,
            example="d",
        )
    )
    with pytest.raises(ValidationFailed) as info:
        judge(failed, ServeRequest(exit_after_validate=True), ServeEvents(), "report: R")
    assert info.value.message == (
        "validation FAILED: failed steps: warm; the engine log shows lmcache-degraded-mode"
    )
    assert info.value.hint == "report: R" and info.value.exit_code == 1


def test_failure_while_serving_on_is_a_warning() -> None:
    said: list[str] = []
    judge(report("FAIL"), ServeRequest(), ServeEvents(warning=said.append), "where")
    assert said == ["validation FAILED: failed steps: warm (still serving)"]
