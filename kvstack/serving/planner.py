"""The planner's I/O side, above planning (which reads no files): resolve the model and load the
workload they name, check the remote URL, then planning.make_plan."""

from __future__ import annotations

from urllib.parse import urlsplit

from kvstack.errors import NetworkTargetError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.source import ModelSource, resolve_model
from kvstack.planning.plan import PlanRequest, TraceInput, make_plan
from kvstack.planning.schema import Plan
from kvstack.planning.workload import default_workload
from kvstack.redact import redact_url
from kvstack.serving.workload_files import load_workload

# The remote_url schemes the LMCache in-process YAML accepts (lmcache 0.5.6).
REMOTE_SCHEMES = ("redis", "rediss", "redis-sentinel", "lm")


def check_remote_url(url: str) -> str:
    """Validate a remote store URL; returns its redacted form (the password never enters a Plan)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise NetworkTargetError(
            f"--remote {redact_url(url)} is not a valid URL ({exc})", hint="e.g. --remote redis://host:6379"
        ) from exc
    if parts.scheme not in REMOTE_SCHEMES:
        schemes = ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
        raise NetworkTargetError(
            f"--remote must start with one of {schemes}, not {redact_url(url)!r}",
            hint="e.g. --remote redis://host:6379 or rediss://user:password@host:6380",
        )
    if not parts.hostname:
        raise NetworkTargetError(
            f"--remote {redact_url(url)} has no host", hint="e.g. --remote redis://host:6379"
        )
    if port == 0:
        raise NetworkTargetError(
            f"--remote {redact_url(url)} has port 0", hint="e.g. --remote redis://host:6379"
        )
    return redact_url(url.strip())


def plan_for_model(
    request: PlanRequest,
    source: ModelSource,
    workload_name: str | None,
    snapshot: HardwareSnapshot,
    trace: TraceInput | None = None,
) -> Plan:
    """Load the workload profile, then plan (pure from here) for a resolved model; ``trace`` (read by
    kvstack/traces) sizes the tiers from its capacity curve."""
    model = source.geometry
    workload = load_workload(workload_name) if workload_name else default_workload(model.max_context)
    if request.remote_url is not None:
        request = request.model_copy(update={"remote_url": check_remote_url(request.remote_url)})
    plan = make_plan(snapshot, model, source.path, request, workload, trace)
    return plan if source.revision is None else plan.model_copy(update={"model_revision": source.revision})


def plan_from_request(
    request: PlanRequest,
    model_spec: str,
    workload_name: str | None,
    snapshot: HardwareSnapshot,
    revision: str | None = None,
) -> Plan:
    """Resolve the model (local dir, Hugging Face cache or hub, catalog), then plan for it."""
    return plan_for_model(request, resolve_model(model_spec, revision), workload_name, snapshot)
