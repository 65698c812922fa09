"""serve's verdict on a validation report, shared by the single-engine and replica sessions."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import Interrupted, ValidationFailed
from kvstack.runtime.supervisor import ProcessFailed
from kvstack.serving.request import ServeRequest
from kvstack.serving.session import ServeEvents, judge, serve_until_stopped
from kvstack.validation import StepResult, ValidationReport
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


class FlakyUnit:
    """A Supervised whose critical helper dies ``deaths`` times; after that, ``after`` happens."""

    def __init__(self, deaths: int, restartable: bool = True) -> None:
        self.deaths, self._restartable, self.restarts = deaths, restartable, 0

    def poll_died(self) -> int | None:
        return -9 if self.deaths > 0 else None

    def death_error(self, during: str = "serving") -> ProcessFailed:
        return ProcessFailed(
            "lmcache-server", f"was killed by SIGKILL during {during}", -9, Path("/r/l.log"), [], ""
        )

    def disk_warnings(self, min_free_bytes: int | None = None) -> list[str]:
        if self.restarts >= 2:
            raise Interrupted("stop")  # ends serve_until_stopped once the restarts were seen
        return []

    def restartable(self) -> bool:
        return self._restartable

    def restart(self, ready_timeout_s: float) -> None:
        self.deaths -= 1
        self.restarts += 1


def test_a_dead_cache_server_restarts_the_unit_with_a_bound() -> None:
    warnings: list[str] = []
    events = ServeEvents(warning=warnings.append)
    unit = FlakyUnit(deaths=2)
    with pytest.raises(Interrupted):
        serve_until_stopped(unit, events, max_restarts=3)
    assert unit.restarts == 2 and len(warnings) == 2
    assert warnings[0].startswith("lmcache-server was killed by SIGKILL during serving: restarting the cache")
    assert "(restart 1/3; the disk tier keeps its KV; log: /r/l.log)" in warnings[0]
    endless = FlakyUnit(deaths=99)
    with pytest.raises(ProcessFailed, match="gave up after 3 restarts"):
        serve_until_stopped(endless, ServeEvents(), max_restarts=3)
    with pytest.raises(ProcessFailed, match="killed by SIGKILL"):
        serve_until_stopped(FlakyUnit(deaths=1, restartable=False), ServeEvents())
