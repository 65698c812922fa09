"""Workload profiles: context, concurrent users, how much reuse to keep warm, checked from their
parsed YAML (serving/workload_files.py reads the files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvstack.errors import InputError, WorkloadError
from kvstack.planning.retention import parse_retain
from kvstack.planning.schema import Workload
from kvstack.units import parse_tokens

_FIELDS = frozenset({"name", "description", "context", "users", "reuse", "retain"})


def parse_workload(data: Any, source: str) -> Workload:
    if not isinstance(data, dict):
        raise WorkloadError(f"workload {source} must be a YAML mapping", hint="see profiles/workloads/*.yaml")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise WorkloadError(
            f"workload {source}: unknown field(s) {', '.join(unknown)}",
            hint=f"known fields: {', '.join(sorted(_FIELDS))}",
        )
    if "context" not in data:
        raise WorkloadError(f"workload {source}: missing 'context'", hint="e.g. context: 32k")
    try:
        context = parse_tokens(data["context"] if isinstance(data["context"], int) else str(data["context"]))
    except InputError as exc:
        raise WorkloadError(f"workload {source}: {exc.message}", hint="e.g. context: 32k") from exc
    users, reuse = data.get("users", 1), data.get("reuse", 1.0)
    if isinstance(users, bool) or not isinstance(users, int) or users < 1:
        raise WorkloadError(
            f"workload {source}: 'users' must be an integer >= 1, not {users!r}", hint="e.g. users: 8"
        )
    if isinstance(reuse, bool) or not isinstance(reuse, int | float) or reuse < 1:
        raise WorkloadError(
            f"workload {source}: 'reuse' must be a number >= 1, not {reuse!r}", hint="e.g. reuse: 2.0"
        )
    retain_factor: float | None = None
    retain_bytes: int | None = None
    if "retain" in data:
        try:
            retain_factor, retain_bytes = parse_retain(data["retain"], "retain")
        except InputError as exc:
            raise WorkloadError(
                f"workload {source}: {exc.message}", hint="e.g. retain: 10, or retain: 2TB"
            ) from exc
    name = data.get("name") or Path(source).stem
    description = data.get("description") or ""
    return Workload(
        name=str(name),
        context_tokens=context,
        users=users,
        reuse=float(reuse),
        retain_factor=retain_factor,
        retain_bytes=retain_bytes,
        description=str(description).strip(),
    )


def default_workload(context_tokens: int) -> Workload:
    return Workload(name="default", context_tokens=context_tokens, users=1, reuse=1.0, description="")
