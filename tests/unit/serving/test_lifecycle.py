"""serve's verdict on a validation report, shared by the single-engine and replica sessions."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from kvstack.errors import Interrupted, ValidationFailed
from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.supervisor import ProcessFailed, Supervisor
from kvstack.serving.lifecycle import ServeEvents, drop_warnings, judge, serve_until_stopped
from kvstack.serving.request import ServeRequest
from kvstack.serving.restarts import RestartBudget
from kvstack.validation import StepResult, ValidationReport
from kvstack.validation.diagnosis import Diagnosis
from tests.support.validation_report import demo_report
from tests.unit.runtime.test_supervisor import PY, SERVE, free_port, script, spec


def report(overall: str) -> ValidationReport:
    steps = [
        StepResult(name="warm", verdict="fail" if overall == "FAIL" else "pass", reason="only 1.1x"),
        StepResult(name="tier", verdict="skip", reason="no offload tier on a CPU platform"),
    ]
    return demo_report(steps, overall)  # type: ignore[arg-type]


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

    def __init__(self, deaths: int, restartable: bool = True, clock: list[float] | None = None) -> None:
        self.deaths, self._restartable, self.restarts = deaths, restartable, 0
        self.clock = clock  # each restart moves it on by 5 minutes
        self.drops: list[tuple[str, int, str | None, Path]] = []

    def poll_died(self) -> int | None:
        return -9 if self.deaths > 0 else None

    def death_error(self, during: str = "serving") -> ProcessFailed:
        return ProcessFailed(
            "lmcache-server", f"was killed by SIGKILL during {during}", -9, Path("/r/l.log"), [], ""
        )

    def disk_warnings(self, min_free_bytes: int | None = None) -> list[str]:
        if self.restarts >= 2 and self.deaths <= 0:
            raise Interrupted("stop")  # ends serve_until_stopped once the restarts were seen
        return []

    def restartable(self) -> bool:
        return self._restartable

    def restart_what(self) -> str:
        return "the cache server, then the engine"

    def restart(self, ready_timeout_s: float) -> None:
        self.deaths -= 1
        self.restarts += 1
        if self.clock is not None:
            self.clock[0] += 300.0

    def log_drops(self) -> list[tuple[str, int, str | None, Path]]:
        return self.drops


def test_a_dead_cache_server_restarts_the_unit_with_a_bound() -> None:
    warnings: list[str] = []
    events = ServeEvents(warning=warnings.append)
    unit = FlakyUnit(deaths=2)
    with pytest.raises(Interrupted):
        serve_until_stopped(unit, events)
    assert unit.restarts == 2 and len(warnings) == 2
    assert warnings[0].startswith("lmcache-server was killed by SIGKILL during serving: restarting the cache")
    assert "(restart 1/3 within 10 min; the disk tier keeps its KV; log: /r/l.log)" in warnings[0]
    endless = FlakyUnit(deaths=99)  # dies again at once: the fourth death within 10 minutes ends it
    with pytest.raises(ProcessFailed, match="gave up: 3 restarts within 10 minutes"):
        serve_until_stopped(endless, ServeEvents())
    assert endless.restarts == 3
    with pytest.raises(ProcessFailed, match="killed by SIGKILL"):
        serve_until_stopped(FlakyUnit(deaths=1, restartable=False), ServeEvents())


def test_the_restart_budget_is_per_window_not_per_run() -> None:
    """A death every 5 minutes, 12 times: never more than 2 restarts within 10 minutes, so serving
    goes on (a budget per run would have ended it at the fourth)."""
    clock = [0.0]
    unit = FlakyUnit(deaths=12, clock=clock)
    budget = RestartBudget(clock=lambda: clock[0])
    with pytest.raises(Interrupted):
        serve_until_stopped(unit, ServeEvents(), budget=budget)
    assert unit.restarts == 12 and budget.total == 12


def test_a_log_that_cannot_be_written_is_warned_about_once() -> None:
    unit = FlakyUnit(deaths=0)
    unit.drops = [("engine", 7, "OSError: No space left on device", Path("/run/engine.log"))]
    warned: set[str] = set()
    first = drop_warnings(unit, warned)
    assert len(first) == 1 and "engine's log /run/engine.log cannot be written" in first[0]
    assert "(7 lines so far)" in first[0] and "No space left on device" in first[0]
    unit.drops = [("engine", 70, "OSError: No space left on device", Path("/run/engine.log"))]
    assert drop_warnings(unit, warned) == []


def test_a_hung_engine_restarts_its_unit_as_a_hung_cache_server_does(tmp_path: Path) -> None:
    """Real processes: the engine SIGSTOPped while serving is found hung and its unit restarts,
    said as for a hung cache server, within the restart budget."""
    port = free_port()
    serve = script(tmp_path, "serve.py", SERVE)
    server = ProcessSpec(
        name="engine", argv=[PY, serve, str(port), "0"], ready_url=f"http://127.0.0.1:{port}/health"
    )
    warnings: list[str] = []

    def restarted(message: str) -> None:
        raise Interrupted(message)  # ends serve_until_stopped once it restarted the unit

    events = ServeEvents(warning=warnings.append, message=restarted)
    with Supervisor(spec(server, port=port), tmp_path / "run") as sup:
        sup.start()
        sup.wait_ready(20)
        first = sup.procs[0].popen.pid
        os.kill(first, signal.SIGSTOP)
        with pytest.raises(Interrupted, match="restarted: serving again"):
            serve_until_stopped(sup, events, ready_timeout_s=20)
        assert sup.procs[0].popen.pid != first and sup.poll_died() is None
    (warning,) = warnings
    assert warning.startswith(f"engine stopped answering http://127.0.0.1:{port}/health for ")
    assert "(hung, not dead) during serving" in warning
    assert ": restarting the engine (restart 1/3 within 10 min;" in warning


def test_a_known_startup_incompatibility_is_one_line(tmp_path: Path) -> None:
    """An engine that dies of a known incompatibility: its name and the fix, not the traceback tail."""
    from kvstack.runtime.failure import ProcessFailed
    from kvstack.serving.lifecycle import known_startup_failure

    recorded = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "vllm_lmcache_mp_hybrid_groups.log"
    died = ProcessFailed(
        "engine", "exited with code 1 during startup", 1, recorded, ["Traceback ..."], hint="x"
    )
    err = known_startup_failure(died)
    assert err is not None and "\n" not in err.message
    assert err.message.startswith("engine could not start: LMCache's engine-driven transfer")
    assert "--offload none" in (err.hint or "")
    # Where kvstack chose the layout (--offload auto), "let kvstack choose" is no fix.
    chosen = known_startup_failure(died, kvstack_chose=True)
    assert chosen is not None and "let kvstack" not in (chosen.hint or "")
    assert (chosen.hint or "").startswith("serve it with --offload none: kvstack chose this layout itself")
    plain = tmp_path / "engine.log"
    plain.write_text("RuntimeError: something else\n")
    other = ProcessFailed("engine", "exited with code 1 during startup", 1, plain, ["x"], hint="x")
    assert known_startup_failure(other) is None
