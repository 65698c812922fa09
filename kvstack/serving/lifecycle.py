"""Run a prepared Launch: preflight, write configs, supervise, validate, keep serving.

One path for one engine and for N replicas behind an optional router: the engines (each with its
helpers) start as one stage of a SupervisorGroup, the router as the next once they are ready. Any
of them dying stops them all, naming which (a dead critical helper restarts its replica instead);
SIGINT/SIGTERM stops them all.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kvstack.canary.checker import CanaryConfig
from kvstack.canary.runner import CanaryRunner
from kvstack.clients import control
from kvstack.clients.control import write_control_token
from kvstack.errors import EngineError, Interrupted, ValidationFailed
from kvstack.remoteurl import RemoteURL
from kvstack.rundir import VALIDATION_JSON
from kvstack.runtime.group import SupervisorGroup
from kvstack.runtime.status import SupervisorStatus
from kvstack.runtime.supervisor import ProcessFailed, Supervisor
from kvstack.serving import wrong_kv
from kvstack.serving.launch_checks import launch_notes, launch_warnings, preflight
from kvstack.serving.launch_files import record, write_launch_files
from kvstack.serving.prepare import Launch
from kvstack.serving.remote_failover import follow_remote
from kvstack.serving.remote_watch import RemoteWatch
from kvstack.serving.request import ServeRequest
from kvstack.serving.restarts import RestartBudget
from kvstack.serving.shared_tier_kv import check_launch, launch_recorded
from kvstack.validation import StepResult, ValidationReport, run_validation, target_from_launch, write_report
from kvstack.validation.diagnosis import scan_log
from kvstack.validation.replicas import STEP_NAME, shared_tier_skip_reason, shared_tier_step

DISK_CHECK_EVERY_S = 30.0
POLL_S = 0.25  # how often a serving engine is checked: death is noticed well within 2 s
ROUTER_READY_TIMEOUT_S = 120.0  # the engines are up by then: the router only checks their /health


@dataclass
class ServeEvents:
    """How the session talks to whoever renders it (the CLI's rich console, or a test)."""

    status: Callable[[SupervisorStatus], None] = lambda s: None
    message: Callable[[str], None] = lambda m: None
    warning: Callable[[str], None] = lambda m: None
    validation_progress: Callable[[str], None] = lambda m: None
    validation: Callable[[ValidationReport], None] = lambda r: None
    ready: Callable[[str], None] = lambda url: None
    notes: list[str] = field(default_factory=list)


class Supervised(Protocol):
    """What serving watches: one Supervisor, or a SupervisorGroup of replicas."""

    def poll_died(self) -> int | None: ...

    def death_error(self, during: str = "serving") -> ProcessFailed: ...

    def disk_warnings(self, min_free_bytes: int | None = None) -> list[str]: ...

    def restartable(self) -> bool: ...

    def restart_what(self) -> str: ...

    def restart(self, ready_timeout_s: float) -> None: ...

    def log_drops(self) -> list[tuple[str, int, str | None, Path]]: ...


def drop_warnings(sup: Supervised, warned: set[str]) -> list[str]:
    """One warning per process whose log could not be written (its output is dropped, not
    blocking it); ``warned`` holds the processes already warned about."""
    out = []
    for name, n, why, log in sup.log_drops():
        if name not in warned:
            warned.add(name)
            out.append(
                f"{name}'s log {log} cannot be written ({why}): its output is drained and dropped "
                f"({n} lines so far), the engine keeps serving; free space under {log.parent}"
            )
    return out


def _shared_tier(
    launch: Launch, report: ValidationReport, alive: Callable[[], None], ev: ServeEvents
) -> StepResult:
    reason = shared_tier_skip_reason(launch.plan, len(launch.replicas))
    cold = report.step("cold")
    if reason is None and (cold is None or cold.verdict != "pass"):
        reason = "the cold step failed"
    if reason is not None:
        return StepResult(name=STEP_NAME, verdict="skip", reason=reason)
    req = launch.request
    first, second = (
        target_from_launch(p.spec, launch.plan, api_key=req.api_key) for p in launch.replicas[:2]
    )
    return shared_tier_step(
        first, second, report.engine, report.prompt_tokens, ev.validation_progress, between=alive
    )


def validate(launch: Launch, group: SupervisorGroup, events: ServeEvents) -> ValidationReport:
    """The validation pass against the first engine; with replicas, then the cross-replica step."""
    req, first = launch.request, launch.replicas[0]

    def alive() -> None:
        if group.poll_died() is not None:
            raise group.death_error(during="validation")

    target = target_from_launch(
        first.spec,
        launch.plan,
        api_key=req.api_key,
        remote_url=first.options.remote_url,
        log_file=group.stages[0][0].log_path(),
        prompt_tokens=req.prompt_tokens,
        min_speedup=req.min_speedup,
        min_tier_speedup=req.min_tier_speedup,
    )
    report = run_validation(target, on_progress=events.validation_progress, between=alive)
    if len(launch.replicas) > 1:
        step = _shared_tier(launch, report, alive, events)
        report.steps.append(step)
        report.decide()
    alive()  # a death during the last request must not read as a verdict
    write_report(report, launch.run_dir / VALIDATION_JSON)
    events.validation(report)
    return report


def failed_summary(report: ValidationReport) -> str:
    failed = ", ".join(s.name for s in report.steps if s.verdict == "fail") or "none"
    summary = f"failed steps: {failed}"
    if report.diagnoses:
        summary += "; the engine log shows " + ", ".join(d.name for d in report.diagnoses)
    return summary


def serve_until_stopped(
    sup: Supervised,
    events: ServeEvents,
    remote: RemoteURL | None = None,
    ready_timeout_s: float = 600.0,
    budget: RestartBudget | None = None,
    canary: CanaryRunner | None = None,
) -> None:
    """Watch the engine (death), the disk tier (free space) and the remote store (reachable).

    A dead critical helper (LMCache's cache server) restarts its unit, at most ``budget`` allows
    (3 within 10 minutes): an engine whose cache server died hangs every request and never
    re-registers its KV caches with a new one. A hung one (runtime/liveness.py), or a hung engine,
    likewise.
    """
    budget = budget or RestartBudget()
    warned: set[str] = set()
    with RemoteWatch(remote) if remote is not None else contextlib.nullcontext() as watch:
        next_disk_check = 0.0
        while True:
            if sup.poll_died() is not None:
                error = sup.death_error(during="serving")
                if not sup.restartable():
                    raise error
                if budget.exhausted():
                    error.message = (
                        f"{error.message}\n(gave up: {budget.describe()}; the budget is per window)"
                    )
                    raise error
                n = budget.spend()
                events.warning(
                    f"{error.message.splitlines()[0]}: restarting {sup.restart_what()} "
                    f"(restart {n}/{budget.max_restarts} within {budget.window_s / 60:g} min; the disk tier "
                    f"keeps its KV; log: {error.log_path})"
                )
                sup.restart(ready_timeout_s)
                events.message(f"restarted: serving again ({budget.total} restarts in this run)")
                continue
            now = time.monotonic()
            for warning in drop_warnings(sup, warned):
                events.warning(warning)
            if now >= next_disk_check:
                for warning in sup.disk_warnings():
                    events.warning(warning)
                next_disk_check = now + DISK_CHECK_EVERY_S
            if watch is not None:
                follow_remote(watch, sup, events.warning, events.message, ready_timeout_s)
            if canary is not None:
                for record in canary.wrong_kv():
                    wrong_kv.act(record, canary, sup, ready_timeout_s, events.warning, events.message)
            time.sleep(POLL_S)


def watched_remote(launch: Launch) -> RemoteURL | None:
    """The remote store's URL (credentials included) when the plan has a remote tier."""
    return launch.replicas[0].options.remote if launch.plan.tier("remote") is not None else None


def judge(report: ValidationReport | None, request: ServeRequest, events: ServeEvents, where: str) -> None:
    """A failed validation ends ``--exit-after-validate`` runs (exit 1); otherwise it is a warning."""
    if report is None or report.overall == "PASS":
        return
    if request.exit_after_validate:
        raise ValidationFailed("validation FAILED: " + failed_summary(report), hint=where)
    events.warning("validation FAILED: " + failed_summary(report) + " (still serving)")


@contextmanager
def launched(launch: Launch, events: ServeEvents | None = None) -> Iterator[SupervisorGroup]:
    """Preflight, write every replica's files, start the engines and wait for all, then the router;
    everything stops on exit."""
    ev = events or ServeEvents()
    req = launch.request
    preflight(launch)
    mixed = check_launch(launch)  # a shared tier whose writers store other KV refuses this one
    # After the preflight: a launch refused for a missing model or a busy port says only why.
    for warning in [*launch_warnings(launch), *mixed]:
        ev.warning(warning)
    for note in launch_notes(launch):
        ev.message(note)
    record(launch)
    for p in launch.replicas:
        write_launch_files(p.spec)
        if p.options.control_token:
            write_control_token(p.run_dir, p.options.control_token)
    token = launch.replicas[0].options.control_token
    if launch.router is not None and token:
        write_control_token(launch.run_dir, token)  # the router's (the launch's one token)
    engines = [
        Supervisor(
            p.spec,
            p.run_dir,
            on_status=ev.status,
            api_key=req.api_key,
            handle_signals=False,  # the group's
            label=f"replica {i}" if launch.multi else None,
        )
        for i, p in enumerate(launch.replicas)
    ]
    with SupervisorGroup() as group, published(launch), launch_recorded(launch, ev.warning):
        group.launch(engines)
        try:
            group.wait_ready(req.ready_timeout_s)
        except ProcessFailed as exc:
            raise known_startup_failure(exc, kvstack_chose=req.offload == "auto") or exc from exc
        if launch.router is not None:
            router = Supervisor(
                launch.router, launch.run_dir, on_status=ev.status, api_key=req.api_key, handle_signals=False
            )
            group.launch([router])
            group.wait_ready(ROUTER_READY_TIMEOUT_S)
        ev.ready(launch.front_url)
        yield group


def known_startup_failure(exc: ProcessFailed, kvstack_chose: bool = False) -> EngineError | None:
    """A start that died on a known incompatibility, named in one line (validation/diagnosis.py's
    startup patterns) instead of the log's traceback tail. ``kvstack_chose``: the layout was
    kvstack's own choice (--offload auto), so a fix that says to let kvstack choose is no fix."""
    try:
        found = [d for d in scan_log(exc.log_path) if d.startup_fatal]
    except OSError:
        return None
    if not found:
        return None
    d = found[0]
    fix = d.fix or f"read the full log: {exc.log_path}"
    if kvstack_chose and fix.startswith("let kvstack"):
        fix = (
            "serve it with --offload none: kvstack chose this layout itself (--offload auto), and the "
            f"engine refused it (a planning mistake: please report it with {exc.log_path})"
        )
    return EngineError(
        f"{exc.name} could not start: {d.explanation} (line {d.first_line} of {exc.log_path})", hint=fix
    )


@contextmanager
def published(launch: Launch) -> Iterator[None]:
    """This user's kvstack clients send each engine, its cache server and the router the launch's
    control token while the launch runs."""
    tokens = [
        (url, p.options.control_token)
        for p in launch.replicas
        if p.options.control_token
        for url in (p.spec.base_url, p.spec.cache_server_url)
        if url
    ]
    if launch.router is not None and tokens:
        tokens.append((launch.router.base_url, tokens[0][1]))
    for url, token in tokens:
        control.publish(url, token)
    try:
        yield
    finally:
        for url, token in tokens:
            control.withdraw(url, token)


def _serving_message(launch: Launch) -> str:
    if not launch.multi:
        url = launch.replicas[0].spec.base_url
        return f"serving at {url} (Ctrl-C or SIGTERM stops it; logs in {launch.run_dir})"
    urls = ", ".join(p.spec.base_url for p in launch.replicas)
    if launch.router is not None:
        front = f"serving at {launch.front_url} (vllm-router over {len(launch.replicas)} replicas: {urls})"
    else:
        front = f"serving {len(launch.replicas)} replicas at {urls}"
    return f"{front}; Ctrl-C or SIGTERM stops all; logs in {launch.run_dir}"


def run(launch: Launch, events: ServeEvents | None = None) -> int:
    """Launch and supervise; returns the exit code (0 clean stop or PASS). Errors raise."""
    ev = events or ServeEvents()
    req = launch.request
    with launched(launch, ev) as group:
        report = validate(launch, group, ev) if req.validate_after_start else None
        logs = (
            f"logs under {launch.run_dir}" if launch.multi else f"engine log: {group.members[0].log_path()}"
        )
        judge(report, req, ev, f"report: {launch.run_dir / VALIDATION_JSON}; {logs}")
        if req.exit_after_validate:
            return 0
        ev.message(_serving_message(launch))
        with watching(launch, report, ev, group) as canary:
            try:
                serve_until_stopped(group, ev, watched_remote(launch), req.ready_timeout_s, canary=canary)
            except Interrupted:
                ev.message("stopped")
    return 0


def canary_off_reason(launch: Launch) -> str | None:
    """Why this launch runs no canary, or None when it does."""
    req = launch.request
    if not req.canary:
        return "--no-canary"
    if not launch.plan.offloads or not launch.plan.offload_tiers:
        return "no offload tier is served"
    return None


@contextmanager
def watching(
    launch: Launch, report: ValidationReport | None, ev: ServeEvents, group: SupervisorGroup
) -> Iterator[CanaryRunner | None]:
    """The canary beside the serving engines (every replica's engine, each on its own budget),
    stopped on exit, and halted before ``group`` stops them (a signal stops them before this block
    exits)."""
    why = canary_off_reason(launch)
    if why is not None:
        ev.message(f"canary off: {why}")
        yield None
        return
    req, first = launch.request, launch.replicas[0]
    targets = [
        target_from_launch(p.spec, launch.plan, api_key=req.api_key, remote_url=p.options.remote_url)
        for p in launch.replicas
    ]
    runner = CanaryRunner(
        targets,
        CanaryConfig(
            interval_s=req.canary_interval_s, budget=req.canary_budget, probe_tokens=req.prompt_tokens
        ),
        req.on_wrong_kv,
        launch.run_dir,
        noise=report.noise_floor if report is not None else None,
        on_error=ev.warning,
    )
    token = req.metrics_token or first.options.control_token
    runner.start("127.0.0.1" if token else None, req.metrics_port, token)
    group.before_stop(runner.halt)
    where = f"; metrics at {runner.state.metrics_url} (bearer token required)" if runner.metrics else ""
    engines = f"each of the {len(targets)} engines'" if len(targets) > 1 else "the engine's"
    ev.message(
        f"canary on: a probe asked again every {req.canary_interval_s:g} s at most, within "
        f"{req.canary_budget:.2%} of {engines} prefill; on wrong KV: {req.on_wrong_kv}{where}"
    )
    try:
        yield runner
    finally:
        runner.stop()
        state = runner.snapshot()
        ev.message(f"{state.summary()}; {state.share_line()}")
