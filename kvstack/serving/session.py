"""Run a prepared launch: preflight, write configs, supervise, validate, keep serving."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kvstack import hub
from kvstack.engines.base import LaunchSpec
from kvstack.errors import Interrupted, ValidationFailed
from kvstack.fsutil import atomic_write, check_private_dir, ensure_private_dir
from kvstack.runtime.preflight import preflight_launch
from kvstack.runtime.status import SupervisorStatus
from kvstack.runtime.supervisor import ProcessFailed, Supervisor
from kvstack.serving.prepare import PreparedServe
from kvstack.serving.remote_watch import RemoteWatch
from kvstack.serving.request import ServeRequest
from kvstack.validation import ValidationReport, run_validation, target_from_launch, write_report

DISK_CHECK_EVERY_S = 30.0
POLL_S = 0.25  # how often a serving engine is checked: death is noticed well within 2 s
MAX_UNIT_RESTARTS = 3


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

    def restart(self, ready_timeout_s: float) -> None: ...


def disk_need_bytes(prepared: PreparedServe) -> int:
    disk = prepared.plan.tier("disk")
    return disk.size_bytes if disk is not None else 0


def write_launch_files(spec: LaunchSpec) -> None:
    """Private cache dirs (0700), emptied state dirs, config files (0600) written atomically."""
    for directory in spec.private_dirs:
        ensure_private_dir(Path(directory))
    for directory in spec.fresh_dirs:
        # Stale files here (e.g. PROMETHEUS_MULTIPROC_DIR) would be summed into this run's counters.
        shutil.rmtree(directory, ignore_errors=True)
        ensure_private_dir(Path(directory))
    for f in spec.files:
        atomic_write(Path(f.path), f.content, mode=f.mode)


def private_dirs(prepared: PreparedServe) -> list[Path]:
    """Directories that hold users' KV or configs: the cache root, every cache dir below it, the run dir."""
    root = Path(prepared.options.cache_root)
    out = [root, prepared.run_dir]
    for directory in map(Path, prepared.spec.private_dirs):
        # The namespace directories between the root and the tier directory count too.
        out += [p for p in (directory, *directory.parents) if p == directory or root in p.parents]
    return list(dict.fromkeys(out))


def require_model_files(prepared: PreparedServe) -> None:
    """A Hugging Face id's weights are in the cache or the hub answers: else the engine fails late.

    Skipped when the engine arguments ask for dummy weights (the engine then needs none).
    """
    model, extra = prepared.plan.model_path, prepared.options.extra_args
    dummy = "--load-format=dummy" in extra or any(
        a == "--load-format" and b == "dummy" for a, b in itertools.pairwise(extra)
    )
    if hub.is_hub_id(model) and not Path(model).is_dir() and not dummy:
        hub.require_weights(model, prepared.plan.model_revision)


def preflight(prepared: PreparedServe) -> None:
    """Every check before a launch, in the order a user would fix them; nothing is written or started.

    The model first, then local paths, then port/dirs/engine (runtime.preflight), then the remote
    store, whose check is a network round trip.
    """
    require_model_files(prepared)
    for directory in private_dirs(prepared):
        check_private_dir(directory, "--run-dir" if directory == prepared.run_dir else "--cache-dir")
    preflight_launch(prepared.spec, prepared.options, disk_need_bytes(prepared))
    if prepared.options.remote_url and prepared.plan.tier("remote") is not None:
        # Lazy: redis-py is needed only when a remote tier is asked for.
        from kvstack.remote.preflight import require_reachable

        require_reachable(prepared.options.remote_url)


def record_run(prepared: PreparedServe) -> None:
    """plan.json and launch.json (secrets masked) in the run dir: what ran, for later reading."""
    run_dir = ensure_private_dir(prepared.run_dir)
    atomic_write(run_dir / "plan.json", prepared.plan.model_dump_json(indent=2) + "\n")
    atomic_write(run_dir / "launch.json", json.dumps(prepared.spec.public(), indent=2) + "\n")


def _validate(prepared: PreparedServe, sup: Supervisor, events: ServeEvents) -> ValidationReport:
    req = prepared.request
    target = target_from_launch(
        prepared.spec,
        prepared.plan,
        api_key=req.api_key,
        remote_url=prepared.options.remote_url,
        log_file=sup.log_path(),
        prompt_tokens=req.prompt_tokens,
        min_speedup=req.min_speedup,
    )

    def engine_alive() -> None:
        if sup.poll_died() is not None:
            raise sup.death_error(during="validation")

    report = run_validation(target, on_progress=events.validation_progress, between=engine_alive)
    engine_alive()  # a death during the last request must not read as a verdict
    write_report(report, prepared.run_dir / "validation.json")
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
    remote_url: str | None = None,
    ready_timeout_s: float = 600.0,
    max_restarts: int = MAX_UNIT_RESTARTS,
) -> None:
    """Watch the engine (death), the disk tier (free space) and the remote store (reachable).

    A dead critical helper (LMCache's cache server) restarts its unit, at most ``max_restarts``
    times: an engine whose cache server died hangs every request and never re-registers its
    KV caches with a new one.
    """
    restarts = 0
    with RemoteWatch(remote_url) if remote_url else contextlib.nullcontext() as remote:
        next_disk_check = 0.0
        while True:
            if sup.poll_died() is not None:
                error = sup.death_error(during="serving")
                if not sup.restartable():
                    raise error
                if restarts >= max_restarts:
                    error.message = f"{error.message}\n(gave up after {restarts} restarts of the unit)"
                    raise error
                restarts += 1
                events.warning(
                    f"{error.message.splitlines()[0]}: restarting the cache server, then the engine "
                    f"(restart {restarts}/{max_restarts}; the disk tier keeps its KV; log: {error.log_path})"
                )
                sup.restart(ready_timeout_s)
                events.message(f"restarted: serving again (restart {restarts}/{max_restarts})")
                continue
            now = time.monotonic()
            if now >= next_disk_check:
                for warning in sup.disk_warnings():
                    events.warning(warning)
                next_disk_check = now + DISK_CHECK_EVERY_S
            for change in remote.changes() if remote else ():
                events.warning(change)
            time.sleep(POLL_S)


def watched_remote(prepared: PreparedServe) -> str | None:
    """The remote store URL (credentials included) when the plan has a remote tier."""
    return prepared.options.remote_url if prepared.plan.tier("remote") is not None else None


def judge(report: ValidationReport | None, request: ServeRequest, events: ServeEvents, where: str) -> None:
    """A failed validation ends ``--exit-after-validate`` runs (exit 1); otherwise it is a warning."""
    if report is None or report.overall == "PASS":
        return
    if request.exit_after_validate:
        raise ValidationFailed("validation FAILED: " + failed_summary(report), hint=where)
    events.warning("validation FAILED: " + failed_summary(report) + " (still serving)")


@contextmanager
def launched(prepared: PreparedServe, events: ServeEvents | None = None) -> Iterator[Supervisor]:
    """Preflight, write the configs, start and wait for readiness; stop everything on exit."""
    ev = events or ServeEvents()
    req, spec = prepared.request, prepared.spec
    preflight(prepared)
    # After the preflight: a launch refused for a missing model or a busy port says only why.
    for warning in prepared.plan.warnings:
        ev.warning(warning)
    record_run(prepared)
    write_launch_files(spec)
    with Supervisor(spec, prepared.run_dir, on_status=ev.status, api_key=req.api_key) as sup:
        sup.start()
        sup.wait_ready(req.ready_timeout_s)
        ev.ready(spec.base_url)
        yield sup


def run(prepared: PreparedServe, events: ServeEvents | None = None) -> int:
    """Launch and supervise; returns the exit code (0 clean stop or PASS). Errors raise."""
    ev = events or ServeEvents()
    req, spec = prepared.request, prepared.spec
    with launched(prepared, ev) as sup:
        report = _validate(prepared, sup, ev) if req.validate_after_start else None
        judge(
            report, req, ev, f"report: {prepared.run_dir / 'validation.json'}; engine log: {sup.log_path()}"
        )
        if req.exit_after_validate:
            return 0
        ev.message(f"serving at {spec.base_url} (Ctrl-C or SIGTERM stops it; logs in {prepared.run_dir})")
        try:
            serve_until_stopped(sup, ev, watched_remote(prepared), req.ready_timeout_s)
        except Interrupted:
            ev.message("stopped")
    return 0
