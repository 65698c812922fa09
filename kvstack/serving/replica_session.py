"""Run a ReplicaSet: every check first, N engines as one unit, the router once they are ready.

The single-engine session (serving.session) is the model: the same preflight order, files,
validation and serving loop, over a SupervisorGroup instead of one Supervisor. Any replica
(or the router) dying stops them all, naming which; SIGINT/SIGTERM stops them all.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kvstack.errors import Interrupted, NetworkTargetError
from kvstack.fsutil import atomic_write, check_private_dir, ensure_private_dir
from kvstack.runtime.group import SupervisorGroup
from kvstack.runtime.preflight import check_port_free, preflight_launch
from kvstack.runtime.supervisor import Supervisor
from kvstack.serving.replicas import ReplicaSet
from kvstack.serving.router import require_router
from kvstack.serving.session import (
    ServeEvents,
    disk_need_bytes,
    judge,
    private_dirs,
    record_run,
    require_model_files,
    serve_until_stopped,
    watched_remote,
    write_launch_files,
)
from kvstack.validation import StepResult, ValidationReport, run_validation, target_from_launch, write_report
from kvstack.validation.replicas import STEP_NAME, shared_tier_skip_reason, shared_tier_step

ROUTER_READY_TIMEOUT_S = 120.0  # the engines are up by then: the router only checks their /health


def bound_ports(rs: ReplicaSet) -> list[int]:
    """Every port a process of the set binds; a port bound twice is an error, not a race."""
    ports = [port for p in rs.replicas for port in p.spec.ports]
    ports += rs.router.ports if rs.router is not None else []
    twice = sorted(port for port, n in Counter(ports).items() if n > 1)
    if twice:
        raise NetworkTargetError(
            f"port {twice[0]} would be bound by two processes of this launch",
            hint="choose another --port (the layout is in kvstack/serving/ports.py)",
        )
    return ports


def preflight_replicas(rs: ReplicaSet) -> None:
    """serving.session.preflight for N replicas: model, dirs, every port, the router, the engine, Redis."""
    require_model_files(rs.replicas[0])
    check_private_dir(rs.run_dir, "--run-dir")
    for p in rs.replicas:
        for directory in private_dirs(p):
            check_private_dir(directory, "--run-dir" if directory == p.run_dir else "--cache-dir")
    for port in bound_ports(rs):
        check_port_free(rs.request.host, port)
    first = rs.replicas[0]
    if rs.router is not None:
        require_router(first.options.python)
    # The replicas' disk tiers share one directory: it needs room for all of them.
    preflight_launch(first.spec, first.options, disk_need_bytes(first) * len(rs.replicas))
    if first.options.remote_url and rs.plan.tier("remote") is not None:
        from kvstack.remote.preflight import require_reachable

        require_reachable(first.options.remote_url)


def record_replicas(rs: ReplicaSet) -> None:
    """RUN_DIR/plan.json and launch.json (every replica and the router, secrets masked)."""
    run_dir = ensure_private_dir(rs.run_dir)
    doc = rs.dry_run_document()
    atomic_write(run_dir / "plan.json", json.dumps(doc.pop("plan"), indent=2) + "\n")
    atomic_write(run_dir / "launch.json", json.dumps(doc, indent=2) + "\n")
    for p in rs.replicas:
        record_run(p)


@contextmanager
def launched_replicas(rs: ReplicaSet, events: ServeEvents | None = None) -> Iterator[SupervisorGroup]:
    """Preflight, write every replica's files, start them, wait for all, then start the router."""
    ev = events or ServeEvents()
    req = rs.request
    preflight_replicas(rs)
    for warning in rs.plan.warnings:  # after the preflight, as for one engine
        ev.warning(warning)
    record_replicas(rs)
    for p in rs.replicas:
        write_launch_files(p.spec)
    engines = [
        Supervisor(
            p.spec,
            p.run_dir,
            on_status=ev.status,
            api_key=req.api_key,
            handle_signals=False,
            label=f"replica {i}",
        )
        for i, p in enumerate(rs.replicas)
    ]
    with SupervisorGroup() as group:
        group.launch(engines)
        group.wait_ready(req.ready_timeout_s)
        if rs.router is not None:
            router = Supervisor(
                rs.router, rs.run_dir, on_status=ev.status, api_key=req.api_key, handle_signals=False
            )
            group.launch([router])
            group.wait_ready(ROUTER_READY_TIMEOUT_S)
        ev.ready(rs.front_url)
        yield group


def _shared_tier(
    rs: ReplicaSet, report: ValidationReport, alive: Callable[[], None], ev: ServeEvents
) -> StepResult:
    reason = shared_tier_skip_reason(rs.plan, len(rs.replicas))
    cold = report.step("cold")
    if reason is None and (cold is None or cold.verdict != "pass"):
        reason = "the cold step failed"
    if reason is not None:
        return StepResult(name=STEP_NAME, verdict="skip", reason=reason)
    req = rs.request
    first, second = (target_from_launch(p.spec, rs.plan, api_key=req.api_key) for p in rs.replicas[:2])
    return shared_tier_step(
        first, second, report.engine, report.prompt_tokens, ev.validation_progress, between=alive
    )


def validate_replicas(rs: ReplicaSet, group: SupervisorGroup, ev: ServeEvents) -> ValidationReport:
    """The validation pass against replica 0, then the cross-replica step (skipped with a reason)."""
    req, first = rs.request, rs.replicas[0]

    def alive() -> None:
        if group.poll_died() is not None:
            raise group.death_error(during="validation")

    target = target_from_launch(
        first.spec,
        rs.plan,
        api_key=req.api_key,
        remote_url=first.options.remote_url,
        log_file=group.stages[0][0].log_path(),
        prompt_tokens=req.prompt_tokens,
        min_speedup=req.min_speedup,
    )
    report = run_validation(target, on_progress=ev.validation_progress, between=alive)
    step = _shared_tier(rs, report, alive, ev)
    report.steps.append(step)
    if step.verdict == "fail":
        report.overall = "FAIL"
    alive()  # a death during the last request must not read as a verdict
    write_report(report, rs.run_dir / "validation.json")
    ev.validation(report)
    return report


def run_replicas(rs: ReplicaSet, events: ServeEvents | None = None) -> int:
    """serving.session.run for N replicas (and a router): 0 on a clean stop or PASS; errors raise."""
    ev = events or ServeEvents()
    req = rs.request
    with launched_replicas(rs, ev) as group:
        report = validate_replicas(rs, group, ev) if req.validate_after_start else None
        judge(report, req, ev, f"report: {rs.run_dir / 'validation.json'}; logs under {rs.run_dir}")
        if req.exit_after_validate:
            return 0
        urls = ", ".join(p.spec.base_url for p in rs.replicas)
        if rs.router is not None:
            front = f"serving at {rs.front_url} (vllm-router over {len(rs.replicas)} replicas: {urls})"
        else:
            front = f"serving {len(rs.replicas)} replicas at {urls}"
        ev.message(f"{front}; Ctrl-C or SIGTERM stops all; logs in {rs.run_dir}")
        try:
            serve_until_stopped(group, ev, watched_remote(rs.replicas[0]), rs.request.ready_timeout_s)
        except Interrupted:
            ev.message("stopped")
    return 0
