"""Everything ``serve`` decides before anything starts: snapshot, Plan, LaunchSpec.

Nothing here starts a process or writes a file, so ``--dry-run`` is this function plus printing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvstack.engines.base import LaunchSpec, ServeOptions
from kvstack.engines.facts import gather_facts
from kvstack.engines.render import render
from kvstack.errors import PlanInfeasible
from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from kvstack.model_source import ModelSource, resolve_model
from kvstack.planning.plan import PlanRequest
from kvstack.planning.resolve import plan_for_model
from kvstack.planning.retention import parse_retain
from kvstack.planning.schema import Plan
from kvstack.runtime.preflight import check_port_range
from kvstack.serving.request import ServeRequest, engine_python
from kvstack.units import parse_tokens


@dataclass(frozen=True)
class PreparedServe:
    request: ServeRequest
    snapshot: HardwareSnapshot
    plan: Plan
    options: ServeOptions
    spec: LaunchSpec

    @property
    def run_dir(self) -> Path:
        return Path(self.options.run_dir)

    def dry_run_document(self) -> dict[str, Any]:
        """What would run, secrets masked: {"plan", "argv", "env", "files", ...}."""
        return {"plan": self.plan.model_dump(mode="json"), **self.spec.public()}


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def hardware_snapshot(request: ServeRequest) -> HardwareSnapshot:
    if request.hardware is not None:
        return load_snapshot(request.hardware)
    from kvstack.hardware.probe import probe  # probes run only when no snapshot is given

    return probe(paths=[_existing_ancestor(request.resolved_cache_root())], fio_seconds=request.fio_seconds)


def plan_request(request: ServeRequest, snapshot: HardwareSnapshot) -> PlanRequest:
    retain_factor, retain_bytes = parse_retain(request.retain) if request.retain is not None else (None, None)
    return PlanRequest(
        retain_factor=retain_factor,
        retain_bytes=retain_bytes,
        disk_tier=not request.no_disk,
        engine=request.engine,
        context=parse_tokens(request.context) if request.context is not None else None,
        users=request.users,
        tp=request.tp,
        kv_dtype=request.kv_dtype,
        remote_url=request.remote,
        offload=request.offload,
        cache_root=str(request.resolved_cache_root()),
    )


def plan_for(request: ServeRequest, snapshot: HardwareSnapshot, source: ModelSource | None = None) -> Plan:
    """The Plan ``serve`` launches; an infeasible one raises PlanInfeasible."""
    model = source if source is not None else resolve_model(request.model_spec(), request.revision)
    plan = plan_for_model(plan_request(request, snapshot), model, request.workload, snapshot)
    if not plan.feasible:
        raise PlanInfeasible(
            "the plan is infeasible: " + "; ".join(plan.errors),
            hint="see `kvstack plan` with the same options for the numbers",
        )
    return plan


def serve_options(request: ServeRequest, **overrides: Any) -> ServeOptions:
    """The options of one launch; ``overrides`` (port, run_dir, lmcache ports) for a replica."""
    fields: dict[str, Any] = {
        "host": request.host,
        "port": request.port,
        "api_key": request.api_key,
        "cache_root": str(request.resolved_cache_root()),
        "python": engine_python(),
        "extra_args": list(request.extra_args),
        "remote_url": request.remote,
    }
    fields.update(overrides)
    if "run_dir" not in fields:
        fields["run_dir"] = str(request.resolved_run_dir())
    return ServeOptions(**fields)


def prepare(request: ServeRequest, snapshot: HardwareSnapshot | None = None) -> PreparedServe:
    check_port_range(request.port)
    # Before the probe (seconds of fio): a model that is not there fails at once.
    source = resolve_model(request.model_spec(), request.revision)
    snap = snapshot if snapshot is not None else hardware_snapshot(request)
    plan = plan_for(request, snap, source)
    options = serve_options(request)
    facts = gather_facts(plan.model_path, snap.memory, revision=plan.model_revision)
    spec = render(plan, options, snap.software, facts)
    return PreparedServe(request=request, snapshot=snap, plan=plan, options=options, spec=spec)
