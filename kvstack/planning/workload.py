"""Workload profiles (profiles/workloads/*.yaml): context, concurrent users, how much reuse to keep warm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvstack.errors import InputError, WorkloadError
from kvstack.planning.retention import parse_retain
from kvstack.planning.schema import Workload
from kvstack.profiles import profiles_dir
from kvstack.units import parse_tokens

_FIELDS = frozenset({"name", "description", "context", "users", "reuse", "retain"})


def workloads_dir() -> Path:
    return profiles_dir() / "workloads"


def workload_names() -> list[str]:
    try:
        return sorted(p.stem for p in workloads_dir().glob("*.yaml"))
    except OSError:
        return []


def _path_for(name: str) -> Path:
    candidate = Path(name).expanduser()
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate
    if candidate.suffix in (".yaml", ".yml") or "/" in name:  # meant as a file: say which is missing
        raise WorkloadError(
            f"workload file {candidate} does not exist",
            hint=f"fix the path, or use a profile name: {', '.join(workload_names()) or '(none found)'}",
        )
    path = workloads_dir() / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        choices = ", ".join(workload_names()) or "(none found)"
        raise WorkloadError(
            f"unknown workload {name!r} (choices: {choices})",
            hint=f"use one of the profiles in {workloads_dir()} or a path to a YAML file",
        )
    return path


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


def load_workload(name: str) -> Workload:
    """A profile by name (``rag-long-doc``) or a path to a YAML file. Bad or unknown -> WorkloadError."""
    path = _path_for(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkloadError(
            f"cannot read workload {path}: {exc.strerror}", hint="check the file's permissions"
        ) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise WorkloadError(
            f"workload {path} is not valid YAML{where}" + (f": {problem}" if problem else ""),
            hint="fix the file; see profiles/workloads/*.yaml for the format",
        ) from exc
    return parse_workload(data, str(path))


def default_workload(context_tokens: int) -> Workload:
    return Workload(name="default", context_tokens=context_tokens, users=1, reuse=1.0, description="")
